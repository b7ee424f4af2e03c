"""The `fl` PyTorch device: PrivateUse1 registration in pure Python and the
`torch.fl` device module.  (Chip lookup is in flbridge.devices, the
`flbridge.device(...)` context and `flbridge.wrap(...)` in flbridge.context.)

Facts this relies on (torch 2.13): `_setup_privateuseone_for_python_backend`
renames PrivateUse1 and installs a Python device guard (without it, backward
aborts the process); `empty.memory_format` / `empty_strided` kernels on
PrivateUse1 make every factory and `.to("fl")` work; the Python guard reports
one device, so backward must run on the calling thread (multithreaded
backward would look for a per-device queue that does not exist for fl:1+).
"""
from __future__ import annotations

import types

import torch

from . import crossings, dispatch, metaops  # noqa: F401 - dispatch installs XPUTensor.__torch_dispatch__
from .adapter import dense_strides
from .devices import _STATE, _TLS, chip_for, chips, current_device, set_device, torch_device  # noqa: F401
from .errors import FlbridgeError
from .tensor import XPUTensor, new_tensor

# ------------------------------------------------------------- torch.fl

class _DeviceProperties:
    def __init__(self, chip):
        s = chip.spec
        self.name = f"{s.vendor} {s.chip_model}"
        self.device_type = s.device_type
        self.vendor = s.vendor
        self.chip_model = s.chip_model
        self.driver_version = s.driver_version
        info = chip.runtime.mem_info()
        self.total_memory = info[1] if info else (s.capabilities.memory_total_bytes or 0)
        self.memory_bandwidth_gbps = s.capabilities.bandwidth_gbps
        self.dtypes = tuple(s.capabilities.dtypes)
        self.features = tuple(s.capabilities.features)
        self.compute = dict(s.capabilities.compute)
        self.index = chip.index

    def __repr__(self):
        return (f"_FlDeviceProperties(name={self.name!r}, device_type={self.device_type!r}, "
                f"driver_version={self.driver_version!r}, total_memory={self.total_memory // (1 << 20)}MB, "
                f"dtypes={[str(d).replace('torch.', '') for d in self.dtypes]}, features={list(self.features)})")


class _DeviceContext:
    """torch.fl.device(i): makes fl:i the current fl device within the block."""

    def __init__(self, device):
        self.idx = chip_for(device).index if device is not None else None
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        if self.idx is not None:
            _TLS.current = self.idx
        return self

    def __exit__(self, *exc):
        _TLS.current = self.prev
        return False


def _index(device) -> int:
    if device is None:
        return current_device()
    return chip_for(device).index


class FlModule(types.ModuleType):
    """torch.fl"""

    def __init__(self):
        super().__init__("torch.fl", "flbridge's fl devices (one per registered chip)")

    @staticmethod
    def is_available() -> bool:
        return bool(_STATE.chips)

    @staticmethod
    def is_initialized() -> bool:
        return bool(_STATE.registered)

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def _lazy_init() -> None:
        pass

    @staticmethod
    def device_count() -> int:
        return len(_STATE.chips)

    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    device = _DeviceContext

    @staticmethod
    def get_device_name(device=None) -> str:
        c = _STATE.chips[_index(device)]
        return f"{c.spec.vendor} {c.spec.chip_model}"

    @staticmethod
    def get_device_properties(device=None):
        return _DeviceProperties(_STATE.chips[_index(device)])

    @staticmethod
    def get_device_capability(device=None):
        return (1, 0)

    @staticmethod
    def memory_allocated(device=None) -> int:
        return _STATE.chips[_index(device)].allocator.allocated

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return _STATE.chips[_index(device)].allocator.peak

    @staticmethod
    def memory_reserved(device=None) -> int:
        c = _STATE.chips[_index(device)]
        return c.allocator.allocated + c.allocator.cached

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        _STATE.chips[_index(device)].allocator.reset_peak()

    @staticmethod
    def empty_cache() -> None:
        for c in _STATE.chips:
            c.allocator.empty_cache()

    @staticmethod
    def synchronize(device=None) -> None:
        if device is None:
            for c in _STATE.chips:
                c.runtime.synchronize()
        else:
            _STATE.chips[_index(device)].runtime.synchronize()

    @staticmethod
    def manual_seed(seed: int) -> None:
        if _STATE.chips:
            _STATE.chips[current_device()].generator.manual_seed(int(seed))

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        for c in _STATE.chips:
            c.generator.manual_seed(int(seed))

    @staticmethod
    def seed() -> None:
        if _STATE.chips:
            _STATE.chips[current_device()].generator.seed()

    @staticmethod
    def initial_seed() -> int:
        return _STATE.chips[current_device()].generator.initial_seed()

    @staticmethod
    def get_rng_state(device="fl") -> torch.Tensor:
        return _STATE.chips[_index(device)].generator.get_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device="fl") -> None:
        _STATE.chips[_index(device)].generator.set_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list:
        return [c.generator.get_state() for c in _STATE.chips]

    @staticmethod
    def set_rng_state_all(states) -> None:
        for c, s in zip(_STATE.chips, states):
            c.generator.set_state(s)


FL_MODULE = FlModule()


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return bool(_STATE.chips)

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    chip = chip_for(device if device is not None else "fl")
    dtype = dtype or torch.get_default_dtype()
    if memory_format is not None and memory_format not in (torch.contiguous_format, torch.preserve_format):
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    else:
        strides = dense_strides([int(x) for x in size])
    return new_tensor(chip, tuple(size), tuple(strides), dtype)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    chip = chip_for(device if device is not None else "fl")
    return new_tensor(chip, tuple(size), tuple(stride), dtype or torch.get_default_dtype())


def _copy_from(self, dst, non_blocking=False):
    return crossings.copy_(torch.ops.aten.copy_.default, (dst, self), {})


def _copy_from_and_resize(self, dst):
    if tuple(dst.shape) != tuple(self.shape) and type(dst) is XPUTensor:
        metaops.resize_(torch.ops.aten.resize_.default, (dst, list(self.shape)), {})
    elif tuple(dst.shape) != tuple(self.shape):
        dst.resize_(self.shape)
    return crossings.copy_(torch.ops.aten.copy_.default, (dst, self), {})


def register() -> None:
    """Registers PrivateUse1 as `fl` (once per process)."""
    if _STATE.registered:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name == "fl":
        raise FlbridgeError("PrivateUse1 is already registered as 'fl' by someone other than this "
                            "flbridge instance (was flbridge imported twice under different names?)")
    if name != "privateuseone":
        raise FlbridgeError(f"PrivateUse1 is already taken by another library as {name!r}; flbridge "
                            f"needs it for the 'fl' device. Only one PrivateUse1 backend can exist per "
                            f"process: run flbridge in a process that does not import that library.")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend("fl", backend_module=FL_MODULE, hook=_Hooks(), device_guard=_Guard())
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    # torch.tensor(data, device="fl") copies with Python dispatch excluded,
    # which reaches the backend's _copy_from
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    _STATE.library = lib
    from torch.optim import optimizer as _opt
    if XPUTensor not in _opt._foreach_supported_types:
        _opt._foreach_supported_types.append(XPUTensor)
    _STATE.registered = True
