"""flbridge: run unmodified PyTorch programs on AI chips described by a YAML
spec and a vendor C runtime.

    import torch, flbridge
    flbridge.init()
    x = torch.randn(8, 3, 32, 32).to("fl")
    with flbridge.device("xpu:x1"):
        y = torch.zeros(4, device="xpu")
"""
from __future__ import annotations

import threading
import warnings

import torch

from .errors import (DeviceError, FlbridgeError, HeaderError, OutOfMemoryError, RuntimeLoadError, SpecError,
                     SpecProblem, UnsupportedOpError)

__version__ = "0.1.0"
__all__ = ["init", "chips", "stats", "reset_stats", "torch_device", "device", "wrap", "FlbridgeError",
           "SpecError", "SpecProblem", "HeaderError", "RuntimeLoadError", "DeviceError", "OutOfMemoryError",
           "UnsupportedOpError", "FallbackWarning", "XPUTensor"]

_LOCK = threading.Lock()


def init() -> list:
    """Registers the `fl` device and loads every discovered chip (once per
    process; later calls return the same chips).  Specs come from
    FLBRIDGE_DEVICE_DIR, else the packaged device_specs/."""
    from . import backend as devmod, config  # noqa: F401 - backend installs __torch_dispatch__
    from .chip import Chip
    from .registry import check_unique, discover, load_spec
    from .runtime import init_runtime, load_runtime

    with _LOCK:
        if devmod._STATE.registered:
            torch._C._set_multithreading_enabled(False)
            return devmod.chips()
        config.reload()
        specs = [load_spec(p) for p in discover()]
        check_unique(specs)
        by_lib: dict = {}
        for s in specs:
            by_lib.setdefault(s.runtime_so, []).append(s.device_type)
        for lib, names in by_lib.items():
            if len(names) > 1:
                warnings.warn(f"flbridge: {', '.join(names)} load the same runtime library {lib}; they share "
                              f"its state (device memory, counters) as one device would. Give each chip "
                              f"its own runtime_so if they are separate devices.", stacklevel=2)
        runtimes = [load_runtime(s) for s in specs]
        for rt in runtimes:
            init_runtime(rt)
        devmod.register()
        devmod._STATE.chips = [Chip(i, s, rt) for i, (s, rt) in enumerate(zip(specs, runtimes))]
        devmod._STATE.by_type = {c.device_type: c for c in devmod._STATE.chips}
        # the Python device guard reports one device: run backward on the
        # calling thread (see flbridge/device.py)
        torch._C._set_multithreading_enabled(False)
        if not specs:
            warnings.warn("flbridge: no device specs were loaded; torch.fl.is_available() is False",
                          stacklevel=2)
        return devmod.chips()


def chips() -> list:
    from . import backend as devmod
    return devmod.chips()


def torch_device(spec_name: str) -> torch.device:
    """The torch.device of a chip given its spec name, e.g. torch_device("xpu:x1") -> fl:1."""
    from .backend import torch_device as _td
    return _td(spec_name)


def device(spec_name="xpu"):
    """Context: make a chip current and the default device; 'xpu' and
    'xpu:<name>' strings work wherever torch takes a device."""
    from .context import device as _d
    return _d(spec_name)


def wrap(model, device=None):
    from .context import wrap as _w
    return _w(model, device)


def stats(device=None) -> dict:
    """Transfer and routing counters: for one chip (`"xpu:x1"`, a torch.device
    or an index), or {device_type: dict} for all."""
    from .backend import chip_for, chips as _chips
    if device is None:
        return {c.device_type: c.stats_dict() for c in _chips()}
    return chip_for(device).stats_dict()


def reset_stats(device=None) -> None:
    """Zeroes flbridge's counters and the runtimes' own counters."""
    from .backend import chip_for, chips as _chips
    targets = _chips() if device is None else [chip_for(device)]
    for c in targets:
        c.stats.reset()
        c.runtime.reset_counters()


def __getattr__(name):
    if name == "XPUTensor":
        from .tensor import XPUTensor
        return XPUTensor
    if name == "FallbackWarning":
        from .reasons import FallbackWarning
        return FallbackWarning
    raise AttributeError(f"module 'flbridge' has no attribute {name!r}")
