"""One registered chip: spec + runtime + allocator + stats + route cache."""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from .residency import DeviceAllocator
from .chipstats import ChipStats


class Chip:
    def __init__(self, index: int, spec, runtime):
        self.index = index
        self.spec = spec
        self.runtime = runtime
        self.device_type = spec.device_type
        self.device = torch.device("fl", index)
        self.allocator = DeviceAllocator(self)
        self.stats = ChipStats()
        self.routes: dict = {}            # OpOverload -> route.OpRoute
        self.warned: set = set()          # (op, reason) already warned about
        self.reported_errors: set = set()
        self.generator = torch.Generator()  # this chip's RNG (random ops run on the host)
        self.generator.manual_seed(torch.initial_seed())
        self._constants: OrderedDict = OrderedDict()
        self._const_lock = threading.RLock()
        self._const_descs: dict = {}
        self._const_keep: dict = {}

    def __repr__(self) -> str:
        return f"<Chip fl:{self.index} {self.device_type}>"

    def constant(self, value, dtype: torch.dtype):
        """A 0-dim tensor holding `value`, resident on the device, for scalars
        passed where a kernel takes a tensor.  Made with the chip's fill
        kernel (no transfer) and cached."""
        from .tensor import new_tensor
        key = (type(value), value, dtype)
        with self._const_lock:
            t = self._constants.get(key)
            if t is not None:
                self._constants.move_to_end(key)
                return t
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
        with self._const_lock:
            self._constants[key] = t
            if len(self._constants) > 256:
                self._constants.popitem(last=False)
        return t

    def constant_desc(self, value, dtype: torch.dtype, shape):
        """Descriptor of constant(value, dtype) broadcast to `shape` (stride 0), cached."""
        key = (type(value), value, dtype, tuple(shape))
        d = self._const_descs.get(key)
        if d is None:
            t = self.constant(value, dtype)
            d = self.runtime.desc(t._st.dev, tuple(shape), (0,) * len(shape), dtype)
            if len(self._const_descs) > 1024:
                self._const_descs.clear()
            self._const_descs[key] = d
            self._const_keep[key] = t  # keeps the constant's storage alive
        return d

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
