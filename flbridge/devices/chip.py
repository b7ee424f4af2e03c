"""One registered chip: spec + runtime + allocator + stats + route cache."""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ..tensor import DeviceAllocator
from ..binding import launch
from .stats import ChipStats

CONSTANT_CACHE = 64   # scalar constants kept on the device per chip (a kernel call uses at most a few)


class Chip:
    available = True   # see unavailable.UnavailableChip for a slot whose spec failed

    def __init__(self, index: int, spec, runtime):
        self.index = index
        self.spec = spec
        self.runtime = runtime
        runtime.chip = self
        self.device_type = spec.device_type
        self.device = torch.device("fl", index)
        self.allocator = DeviceAllocator(self)
        self.stats = ChipStats()
        self.routes: dict = {}            # OpOverload -> route.OpRoute
        self.warned: set = set()          # (op, kind of reason) already warned about
        self.generator = torch.Generator(device="cpu")  # this chip's RNG (random ops run on the host)
        self.generator.manual_seed(torch.initial_seed())
        # (type, value, dtype) -> (0-dim device tensor, {shape: broadcast descriptor})
        self._constants: OrderedDict = OrderedDict()
        self._const_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<Chip fl:{self.index} {self.device_type}>"

    def constant(self, value, dtype: torch.dtype):
        """A 0-dim tensor holding `value`, resident on the device, for scalars
        passed where a kernel takes a tensor.  Made with the chip's fill
        kernel (no transfer) and kept in a small LRU cache: a training loop
        passes a new scalar every step (Adam's bias corrections), so the
        device memory held for constants stays bounded."""
        return self._constant_entry(value, dtype)[0]

    def constant_desc(self, value, dtype: torch.dtype, shape):
        """Descriptor of constant(value, dtype) broadcast to `shape` (stride
        0), cached with the constant (and dropped with it)."""
        t, descs = self._constant_entry(value, dtype)
        shape = tuple(shape)
        d = descs.get(shape)
        if d is None:
            d = descs[shape] = self.runtime.desc(t._st.dev, shape, (0,) * len(shape), dtype)
        return d

    def _constant_entry(self, value, dtype):
        from ..tensor import new_tensor
        key = (type(value), value, dtype)
        cap = launch.STATE.capture
        with self._const_lock:
            got = self._constants.get(key)
            if got is not None:
                self._constants.move_to_end(key)
                if cap is not None:
                    cap.keep(got[0])   # a captured graph reads it at replay: keep it alive
                return got
        t = new_tensor(self, (), (), dtype)
        st = t._st
        rt = self.runtime
        if rt.has_fill:
            st.alloc_device()
            rt.fill_kernel(rt.desc(st.dev, (), (), dtype), float(value))
            st.wrote_device()
        else:
            st.ensure_host()
            st.host_flat(dtype)[0] = value
            st.wrote_host()
        got = (t, {})
        if cap is not None:
            cap.keep(t)
        with self._const_lock:
            self._constants[key] = got
            while len(self._constants) > CONSTANT_CACHE:
                self._constants.popitem(last=False)
        return got

    def memory_allocated(self) -> int:
        return self.allocator.allocated

    def memory_reserved(self) -> int:
        return self.allocator.allocated + self.allocator.cached

    def stats_dict(self) -> dict:
        d = self.stats.as_dict()
        d["device"] = str(self.device)
        d["device_type"] = self.device_type
        d["memory_allocated"] = self.allocator.allocated
        d["memory_cached"] = self.allocator.cached
        d["max_memory_allocated"] = self.allocator.peak
        d["runtime"] = self.runtime.counters()
        return d
