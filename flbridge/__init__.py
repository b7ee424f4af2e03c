"""flbridge: run unmodified PyTorch programs on AI chips described by a YAML
spec and a vendor C runtime.

    import torch, flbridge
    flbridge.init()
    x = torch.randn(8, 3, 32, 32).to("fl")
    with flbridge.device("xpu:x1"):
        y = torch.zeros(4, device="xpu")
"""
from __future__ import annotations

import torch

from .backend import device, init, wrap
from .backend import register_device_name as _register_device_name
from .devices import chip_for as _chip_for
from .devices import chips, torch_device
from .errors import (DeviceError, DeviceUnavailableError, FallbackWarning, FlbridgeError, HeaderError, OutOfMemoryError,
                     RuntimeLoadError, SpecError, SpecProblem, SpecWarning, UnsupportedOpError)
from .integrations import install as _install_integrations

__version__ = "0.1.0"
__all__ = ["init", "chips", "stats", "reset_stats", "torch_device", "device", "wrap", "FlbridgeError",
           "SpecError", "SpecProblem", "HeaderError", "RuntimeLoadError", "DeviceError", "OutOfMemoryError",
           "UnsupportedOpError", "FallbackWarning", "XPUTensor", "SpecWarning", "DeviceUnavailableError",
           "profiler", "autocompare", "coverage"]


def stats(device=None) -> dict:
    """Transfer and routing counters: for one chip (`"xpu:x1"`, a torch.device
    or an index), or {device_type: dict} for all."""
    if device is None:
        return {c.device_type: c.stats_dict() for c in chips()}
    return _chip_for(device).stats_dict()


def reset_stats(device=None) -> None:
    """Zeroes flbridge's counters and the runtimes' own counters."""
    targets = chips() if device is None else [_chip_for(device)]
    for c in targets:
        c.stats.reset()
        c.runtime.reset_counters()


def autocompare(ops=None, rtol=None, atol=None, tolerances=None, raise_on_mismatch=False, warn=True):
    """Context: every op that runs on a chip is run again on the CPU and
    compared (flbridge/observe/autocompare.py); its report: .table(), .report(), .to_json()."""
    from .observe.autocompare import autocompare as _a
    return _a(ops=ops, rtol=rtol, atol=atol, tolerances=tolerances, raise_on_mismatch=raise_on_mismatch, warn=warn)


def coverage(model, example_inputs=(), device=None, backward=True, loss_fn=None, optimizer=None,
             example_kwargs=None):
    """Every aten op `model` calls and the route it would take on each chip,
    without running a kernel (flbridge/observe/coverage.py)."""
    from .observe.coverage import coverage as _c
    return _c(model, example_inputs, device=device, backward=backward, loss_fn=loss_fn, optimizer=optimizer,
              example_kwargs=example_kwargs)


def __getattr__(name):
    if name == "XPUTensor":
        from .tensor import XPUTensor
        return XPUTensor
    if name == "profiler":   # loaded on first use (flbridge.profiler.profile())
        from .observe import profiler
        return profiler
    raise AttributeError(f"module 'flbridge' has no attribute {name!r}")


_register_device_name()
_install_integrations()   # DeepSpeed, accelerate, Lightning learn about fl when imported
