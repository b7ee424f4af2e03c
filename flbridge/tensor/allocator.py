"""Device memory: a caching allocator over the vendor's malloc/free (one per
chip), and the private pools graph captures allocate from."""
from __future__ import annotations

import threading

from ..config import CONFIG
from ..errors import DeviceOOM, OutOfMemoryError
from ..binding import launch


def _size_class(nbytes: int) -> int:
    if nbytes < (1 << 20):
        return (nbytes + 511) & ~511
    return (nbytes + (1 << 17) - 1) & ~((1 << 17) - 1)


class DeviceAllocator:
    """A caching allocator over the runtime's malloc/free.

    Freed blocks are kept per size class and reused; empty_cache() returns
    them to the runtime.  On out-of-memory the cache is released and the
    allocation retried once before OutOfMemoryError is raised."""

    def __init__(self, chip):
        self.chip = chip
        self.rt = chip.runtime
        # re-entrant: a Storage finalizer run by the garbage collector inside a
        # locked region (on this same thread) returns its block through here
        self.lock = threading.RLock()
        self.cache: dict[int, dict[int, None]] = {}   # size class -> free addresses (insertion order)
        self.allocated = 0      # bytes in blocks held by storages
        self.cached = 0         # bytes in free blocks kept for reuse
        self.peak = 0
        self.peak_reserved = 0  # allocated + cached
        self.blocks = 0         # live blocks held by storages
        self.device_allocs = self.device_frees = self.retries = self.ooms = 0
        self.pool_of: dict = {}  # address -> GraphPool, for blocks of graphs' private pools

    def alloc(self, nbytes: int, prefer=None) -> tuple[int, int]:
        """(address, size class) of a block of at least nbytes.  `prefer`: an
        address to take if it is a free cached block of that size class (a
        compiled graph's replay asks for its previous call's blocks: the
        kernels' descriptors then need no re-pointing, and the memory they
        touch is the memory the last call left in the host caches)."""
        sc = _size_class(nbytes)
        cap = launch.STATE.capture
        pool = cap.mem_pool if cap is not None and cap.chip is self.chip else None
        with self.lock:
            blocks = (pool.free if pool is not None else self.cache).get(sc)
            addr = None
            if blocks:
                # the common case: a cached block, one lock
                if prefer is not None and prefer in blocks:
                    del blocks[prefer]
                    addr = prefer
                else:
                    addr = blocks.popitem()[0]      # the block freed last
            elif pool is not None and self.cache.get(sc):
                # a capture with no block of this size in its pool: a free block of the
                # shared cache joins the pool (those of dropped programs among them:
                # new captures would otherwise grow the device memory held)
                addr = self.cache[sc].popitem()[0]
                self.pool_of[addr] = pool
                pool.reserved += sc
            if addr is not None:
                self.cached -= sc
                self.allocated += sc
                self.blocks += 1
                if self.allocated > self.peak:
                    self.peak = self.allocated
                return addr, sc
        addr = self._malloc(sc, nbytes)
        with self.lock:
            if pool is not None:
                self.pool_of[addr] = pool
                pool.reserved += sc
            self.allocated += sc
            self.blocks += 1
            if self.allocated > self.peak:
                self.peak = self.allocated
            if self.allocated + self.cached > self.peak_reserved:
                self.peak_reserved = self.allocated + self.cached
        return addr, sc

    def _malloc(self, sc: int, requested: int) -> int:
        try:
            addr = self.rt.malloc(sc)
        except DeviceOOM:
            self.retries += 1
            released = self.empty_cache()
            try:
                addr = self.rt.malloc(sc)
            except DeviceOOM as e:
                self.ooms += 1
                info = self.rt.mem_info()
                cap = info[1] if info else (self.chip.spec.capabilities.memory_total_bytes or 0)
                raise OutOfMemoryError(self.chip.device_type, self.chip.index, requested, self.allocated,
                                       released, cap, e.vendor_message, pooled=self.cached) from None
        self.device_allocs += 1
        return addr

    def release(self, addr: int, sc: int) -> None:
        with self.lock:
            self.allocated -= sc
            self.blocks -= 1
            pool = self.pool_of.get(addr) if self.pool_of else None
            if pool is not None:
                if not pool.closed:
                    # a graph's private pool keeps its blocks: the graph's
                    # replays write there whoever holds them now
                    pool.free.setdefault(sc, {})[addr] = None
                    self.cached += sc
                    return
                del self.pool_of[addr]
                pool.reserved -= sc
            if CONFIG.caching_allocator:
                blocks = self.cache.get(sc)
                if blocks is None:
                    blocks = self.cache[sc] = {}
                blocks[addr] = None
                self.cached += sc
                return
        self.device_frees += 1
        self.rt.free(addr)

    def empty_cache(self) -> int:
        """Frees every cached block; returns the bytes released.  (Free blocks
        of graphs' private pools stay, and stay counted in `cached`: the
        graphs' replays write there.)"""
        with self.lock:
            blocks = [(a, sc) for sc, lst in self.cache.items() for a in lst]
            self.cache.clear()
            released = sum(sc for _, sc in blocks)
            self.cached -= released
        for a, _ in blocks:
            self.rt.free(a)
        self.device_frees += len(blocks)
        return released

    def close_pool(self, pool) -> None:
        """A private pool no graph uses any more: its free blocks join the
        shared cache; blocks still held by tensors follow when released."""
        with self.lock:
            pool.closed = True
            for sc, addrs in pool.free.items():
                for a in addrs:
                    self.pool_of.pop(a, None)
                    pool.reserved -= sc
                    self.cache.setdefault(sc, {})[a] = None
            pool.free = {}

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.allocated
            self.peak_reserved = self.allocated + self.cached


class GraphPool:
    """Device blocks reserved for captured graphs (torch.fl.graph_pool_handle)."""

    def __init__(self, chip=None):
        self.chip = chip
        self.free: dict = {}     # size class -> {free address: None}
        self.reserved = 0        # bytes the pool holds, free or in use
        self.closed = False
        self.graphs = 0          # graphs using it
