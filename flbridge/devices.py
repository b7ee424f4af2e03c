"""The registered chips and the current fl device (thread-local).

A leaf module: the router, the `torch.fl` module and the contexts all look
chips up here, so none of them needs to import another to find one.
"""
from __future__ import annotations

import threading
import types

import torch

from .errors import FlbridgeError

_STATE = types.SimpleNamespace(registered=False, chips=[], by_type={}, library=None)
_TLS = threading.local()


def chips() -> list:
    return list(_STATE.chips)


def current_device() -> int:
    return getattr(_TLS, "current", 0)


def set_device(device) -> None:
    _TLS.current = chip_for(device).index


def chip_for(device) -> "Chip":  # noqa: F821
    """The chip for a torch.device('fl', i), an index, or a spec name ('xpu:x1')."""
    if not _STATE.chips:
        raise FlbridgeError("no fl devices: call flbridge.init() first (and check FLBRIDGE_DEVICE_DIR "
                            "if it found no device specs)")
    if isinstance(device, str) and device.startswith("xpu"):
        if device in ("xpu",):
            return _STATE.chips[current_device()]
        if device in _STATE.by_type:
            return _STATE.by_type[device]
        rest = device[4:]
        if rest.isdigit():
            return chip_for(int(rest))
        raise FlbridgeError(f"unknown device {device!r}; registered chips: "
                            + ", ".join(f"{c.device_type} (fl:{c.index})" for c in _STATE.chips))
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "fl":
            raise FlbridgeError(f"{d} is not an fl device")
        idx = current_device() if d.index is None else d.index
    if not 0 <= idx < len(_STATE.chips):
        raise FlbridgeError(f"fl:{idx} does not exist ({len(_STATE.chips)} fl devices: "
                            + ", ".join(f"fl:{c.index}={c.device_type}" for c in _STATE.chips) + ")")
    return _STATE.chips[idx]


def torch_device(spec_name: str) -> torch.device:
    """flbridge.torch_device("xpu:x1") -> torch.device("fl", i)."""
    return chip_for(spec_name).device
