"""`torch.accelerator.*` on fl.

torch.accelerator's functions call ``torch._C._accelerator_*``, which reach
the C++ device guard and allocator interfaces; torch 2.13's Python backend
implements neither (current device always 0, "Backend doesn't support
synchronizing all streams", "Allocator for fl is not a DeviceAllocator").
While fl is the current accelerator, flbridge answers those calls from
``torch.fl`` (the same state torch.fl's own functions use); for any other
accelerator torch's own functions run.
"""
from __future__ import annotations

import torch

_ORIGINAL: dict = {}
_MODULE: list = []      # torch.fl, found on first use (torch_fl imports this package)


def _fl():
    if not _MODULE:
        from .torch_fl import FL_MODULE
        _MODULE.append(FL_MODULE)
    return _MODULE[0]


def _is_fl() -> bool:
    acc = _ORIGINAL["_accelerator_getAccelerator"]()
    return acc is not None and acc.type == "fl"


def _index(idx):
    return _fl().current_device() if idx is None or idx < 0 else idx


def _exchange(idx):
    fl = _fl()
    prev = fl.current_device()
    if idx is not None and idx >= 0 and idx != prev:
        fl.set_device(idx)
    return prev


def _set_index(idx) -> None:
    _exchange(idx)


def _set_stream(stream):
    from .streams import Stream
    fl = _fl()
    if not isinstance(stream, Stream):
        stream = Stream(stream.device_index)
    fl.set_stream(stream)


def _device_stats(idx):
    """torch.fl.memory_stats' flat keys, nested as torch.accelerator expects
    ("allocated_bytes.all.current" -> {"allocated_bytes": {"all": {"current": ...}}})."""
    out: dict = {}
    for key, value in _fl().memory_stats(_index(idx)).items():
        node = out
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _capability(idx):
    from ..devices import chip_for
    chip = chip_for(_index(idx))
    return {"supported_dtypes": set(chip.spec.capabilities.dtypes)}


_FL_IMPL = {
    "_accelerator_getDeviceIndex": lambda: _fl().current_device(),
    "_accelerator_setDeviceIndex": _set_index,
    "_accelerator_exchangeDevice": _exchange,
    "_accelerator_maybeExchangeDevice": _exchange,
    "_accelerator_synchronizeDevice": lambda idx: _fl().synchronize(_index(idx)),
    "_accelerator_getStream": lambda idx: _fl().current_stream(_index(idx)),
    "_accelerator_setStream": _set_stream,
    "_accelerator_isAllocatorInitialized": lambda: True,
    "_accelerator_emptyCache": lambda: _fl().empty_cache(),
    "_accelerator_emptyHostCache": lambda: None,   # pinned host memory is not cached by flbridge
    "_accelerator_getDeviceStats": _device_stats,
    "_accelerator_resetAccumulatedStats": lambda idx: _fl().reset_accumulated_memory_stats(_index(idx)),
    "_accelerator_resetPeakStats": lambda idx: _fl().reset_peak_memory_stats(_index(idx)),
    "_accelerator_getMemoryInfo": lambda idx: _fl().mem_get_info(_index(idx)),
    "_accelerator_getDeviceCapability": _capability,
}


def _routed(name, original, impl):
    def call(*args):
        if _is_fl():
            return impl(*args)
        return original(*args)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch._C.{name}, answered by torch.fl while fl is the accelerator (flbridge.backend.accelerator)"
    return call


def install() -> None:
    if _ORIGINAL:
        return
    _ORIGINAL["_accelerator_getAccelerator"] = torch._C._accelerator_getAccelerator
    for name, impl in _FL_IMPL.items():
        original = getattr(torch._C, name)
        _ORIGINAL[name] = original
        setattr(torch._C, name, _routed(name, original, impl))

