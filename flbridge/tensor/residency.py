"""Where a tensor's bytes live: host, device, or both.

A :class:`Storage` is shared by every view of a tensor.  It may hold a host
buffer (a private CPU byte tensor) and a device buffer (an address from the
chip's allocator, or a zero-copy mapping of the host buffer), each flagged
valid or stale.  Rules:

* Data crosses the bus only when a kernel on the other side needs it, once per
  write: a read on the host after a device write downloads once, then both
  sides are valid until the next write.
* A write on one side makes the other side stale (a mapping is one memory,
  so both stay valid).
* Uploads needed by one native op go in one batched copy; on a runtime that
  can map host memory, host buffers are mapped instead of copied.
* The host buffer is always flbridge's own, never a user's tensor memory, so
  `t.to("fl")` snapshots its source and mapping it is always safe.
* Host memory at scale: on a chip that copies (no mapping), a storage larger
  than FLBRIDGE_HOST_COPY_LIMIT (default 1 MiB) keeps one copy, as CUDA
  does: its host buffer goes when the device side becomes the current one
  (an upload, or a kernel writing it), and comes back (one download) when
  the host needs the bytes.  Smaller storages keep both (a host read of a
  bias or a scalar then costs no allocation).
"""
from __future__ import annotations

import itertools

import torch

from ..config import CONFIG, log
from ..errors import DeviceError
from ..binding import launch

_SERIAL = itertools.count()


def next_serial() -> int:
    """The next storage creation number (a graph capture tells storages made
    during it from older ones)."""
    return next(_SERIAL)

_U8 = torch.empty(0, dtype=torch.uint8)


def host_bytes(us) -> torch.Tensor:
    """A 1-D uint8 CPU tensor over untyped storage `us` (no copy); half the
    cost of torch.empty(0, dtype=torch.uint8, device="cpu").set_(us)."""
    return _U8.new().set_(us)


class Storage:
    """The bytes behind one or more XPUTensors (views share a Storage)."""

    __slots__ = ("chip", "nbytes", "host", "host_valid", "dev", "dev_size", "dev_valid", "mapped",
                 "typed", "version", "sid", "fixed", "__weakref__")

    def __init__(self, chip, nbytes: int):
        self.sid = next(_SERIAL)  # creation order (a graph capture tells new storages from old)
        self.fixed = False        # a captured graph uses its device address: never move it
        self.chip = chip
        self.nbytes = nbytes
        self.host = None          # 1-D uint8 CPU tensor (flbridge's own buffer)
        self.host_valid = False
        self.dev = 0              # device address (allocation or mapping)
        self.dev_size = 0         # allocator size class (0 for a mapping)
        self.dev_valid = False
        self.mapped = False
        self.typed = None         # dtype -> typed flat view of host
        self.version = 0          # bumped by every write, on either side

    @classmethod
    def adopt_host(cls, chip, cpu: torch.Tensor) -> "Storage":
        """A storage whose host buffer *is* `cpu`'s storage (no copy): used for
        results computed on the CPU, which nothing else references."""
        us = cpu.untyped_storage()
        st = cls(chip, us.nbytes())
        st.host = host_bytes(us)
        st.host_valid = True
        return st

    def __del__(self):
        try:
            self.drop_device()
        except Exception:  # noqa: BLE001 - interpreter teardown or a runtime already shut down
            pass

    def drop_device(self) -> None:
        """Gives the device side back (unmap, or return the block to the cache)."""
        if self.mapped:
            self.chip.runtime.unmap(self.dev)
        elif self.dev:
            self.chip.allocator.release(self.dev, self.dev_size)
        self.dev, self.dev_size, self.mapped, self.dev_valid = 0, 0, False, False

    # ---------------------------------------------------------------- host

    def host_flat(self, dtype: torch.dtype) -> torch.Tensor:
        """The host buffer as a flat tensor of `dtype` (cached)."""
        typed = self.typed
        if typed is None:
            typed = self.typed = {}
        t = typed.get(dtype)
        if t is None:
            t = self.host if dtype == torch.uint8 else self.host.view(dtype)
            typed[dtype] = t
        return t

    def ensure_host(self) -> None:
        """Makes the host bytes current (downloading once if needed)."""
        if self.host_valid:
            return
        chip = self.chip
        if self.host is None:
            self.host = torch.empty(self.nbytes, dtype=torch.uint8, device="cpu")
            self.typed = None
        if self.dev_valid and not self.mapped and self.nbytes:
            if launch.watching():
                launch.transfer(chip, "d2h", self.nbytes, (self,))
            chip.runtime.d2h(self.host.data_ptr(), self.dev, self.nbytes)
            s = chip.stats
            s.d2h_calls += 1
            s.d2h_bytes += self.nbytes
            if "transfer" in CONFIG.log:
                log.info("transfer d2h %s: %d bytes", chip.device_type, self.nbytes)
        self.host_valid = True

    def wrote_host(self) -> None:
        self.version += 1
        self.host_valid = True
        if not self.mapped:
            self.dev_valid = False

    def wrote_device(self) -> None:
        self.version += 1
        self.dev_valid = True
        if not self.mapped:
            self.host_valid = False
            if self.host is not None and self.nbytes > CONFIG.host_copy_limit:
                self.host = self.typed = None      # stale, and large: one copy, on the device

    def alloc_device(self) -> None:
        """A device buffer for a result (contents to be written by a kernel)."""
        if not self.dev and self.nbytes:
            self.dev, self.dev_size = self.chip.allocator.alloc(self.nbytes)


def make_resident(chip, storages, keep_address: bool = False) -> None:
    """Makes every storage's device bytes current, with one batched upload
    (or zero-copy mappings where the runtime can map host memory).
    `keep_address`: a storage that has device memory keeps it (a captured
    graph has its address baked in): upload into it rather than remap."""
    uploads = []
    pending = []
    rt = chip.runtime
    for st in storages:
        if st.dev_valid or not st.nbytes:
            st.dev_valid = True
            continue
        if st.host is not None and st.host_valid and rt.can_map and CONFIG.zero_copy \
                and not ((keep_address or st.fixed) and st.dev):
            if st.dev:
                st.drop_device()  # a stale device block: give it back and map the host bytes instead
            try:
                if launch.watching():
                    launch.transfer(chip, "map", st.nbytes, (st,))
                st.dev = rt.map(st.host.data_ptr(), st.nbytes)
            except DeviceError:
                pass  # the runtime refused (alignment, a fault): copy instead
            else:
                st.mapped = True
                st.dev_valid = True
                chip.stats.map_calls += 1
                chip.stats.mapped_bytes += st.nbytes
                if "transfer" in CONFIG.log:
                    log.info("transfer map %s: %d bytes", chip.device_type, st.nbytes)
                continue
        if not st.dev:
            st.dev, st.dev_size = chip.allocator.alloc(st.nbytes)
        if st.host is not None and st.host_valid:
            uploads.append((st.dev, st.host.data_ptr(), st.nbytes))
        pending.append(st)
    if uploads:
        if launch.watching():
            launch.transfer(chip, "h2d", sum(n for _, _, n in uploads), tuple(pending))
        rt.h2d_batch(uploads)
        s = chip.stats
        s.h2d_calls += 1 if rt.has_batch_copy else len(uploads)
        s.h2d_bytes += sum(n for _, _, n in uploads)
        if "transfer" in CONFIG.log:
            log.info("transfer h2d %s: %d buffers, %d bytes in one call", chip.device_type, len(uploads),
                     sum(n for _, _, n in uploads))
    limit = CONFIG.host_copy_limit
    for st in pending:
        st.dev_valid = True
        if st.nbytes > limit and st.host is not None:
            st.host = st.typed = None          # uploaded: the device copy is the one (module docstring)
            st.host_valid = False
