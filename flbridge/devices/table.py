"""The registered chips and the current fl device (thread-local).

A leaf module: the router, the `torch.fl` module and the contexts all look
chips up here, so none of them needs to import another to find one.  The
bring-up (flbridge.backend.bringup) fills the table once (install()) and
leaves its init() as the lazy-init hook (set_lazy_init()), so the first use
of an fl device initializes as the first CUDA call does, without this module
importing anything above it.
"""
from __future__ import annotations

import threading
import types

import torch

from ..errors import FlbridgeError

_STATE = types.SimpleNamespace(registered=False, initialized=False, chips=[], by_type={}, lazy_init=None)


def default_index() -> int:
    """The current device of a thread that chose none: fl:0, or the first
    usable chip when fl:0's spec is broken (its index stays reserved)."""
    for c in _STATE.chips:
        if getattr(c, "available", True):
            return c.index
    return 0


class _ThreadState(threading.local):
    """Per-thread state.  Setting `current` (the current fl device's index, by
    set_device, torch.fl.device or flbridge.device) runs CURRENT_DEVICE_HOOKS,
    so what follows the current chip (autocast's default dtype, see
    flbridge.amp) stays in step however it changes."""
    _current = None

    @property
    def current(self) -> int:
        c = self._current
        return default_index() if c is None else c

    @current.setter
    def current(self, index: int) -> None:
        self._current = index
        for hook in CURRENT_DEVICE_HOOKS:
            hook(index)


CURRENT_DEVICE_HOOKS: list = []   # fn(index), called in the thread whose current device changed
_TLS = _ThreadState()


def set_lazy_init(init) -> None:
    """`init()` runs at the first use of an fl device before flbridge.init()
    (set once, when the device type is registered)."""
    _STATE.lazy_init = init


def lazy_init() -> None:
    """The first use of an fl device before flbridge.init() initializes,
    as the first CUDA call does."""
    if not _STATE.initialized and _STATE.lazy_init is not None:
        _STATE.lazy_init()


def is_registered() -> bool:
    return _STATE.registered


def mark_registered() -> None:
    _STATE.registered = True


def is_initialized() -> bool:
    return _STATE.initialized


def install(chips: list, by_type: dict) -> None:
    """The chips of this process, once (flbridge.init()): every slot in
    index order (unavailable ones included) and the usable ones by spec name."""
    _STATE.chips = chips
    _STATE.by_type = by_type
    _STATE.initialized = True
    # setting it runs the current-device hooks (autocast's default dtype) now that the chips exist
    _TLS.current = current_device()


def chips() -> list:
    """Every device slot in index order, unavailable ones included."""
    return list(_STATE.chips)


def usable_chips() -> list:
    return [c for c in _STATE.chips if getattr(c, "available", True)]


def device_count() -> int:
    return len(_STATE.chips)


def chip_at(index: int):
    """The usable chip at this index, or None (no error, no lazy init)."""
    if isinstance(index, int) and 0 <= index < len(_STATE.chips):
        c = _STATE.chips[index]
        if getattr(c, "available", True):
            return c
    return None


def current_device() -> int:
    return _TLS.current


def set_device(device) -> None:
    _TLS.current = chip_for(device).index


def set_current_index(index: int) -> None:
    """Makes an index current without checking it (a context restoring the
    index that was current before it)."""
    _TLS.current = index


def chip_for(device) -> "Chip":  # noqa: F821
    """The chip for a torch.device('fl', i), an index, or a spec name ('xpu:x1')."""
    if not _STATE.chips:
        lazy_init()
    if not _STATE.chips:
        raise FlbridgeError("no fl devices: flbridge.init() found no usable device spec (check "
                            "FLBRIDGE_DEVICE_DIR, or run `flbridge doctor`)")
    if isinstance(device, str) and device.startswith("xpu"):
        if device in ("xpu",):
            return chip_for(current_device())
        if device in _STATE.by_type:
            return chip_for(_STATE.by_type[device].index)
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
    chip = _STATE.chips[idx]
    if not getattr(chip, "available", True):
        raise chip.error()   # its spec is broken: say which file and why, before anything uses it
    return chip


def torch_device(spec_name: str) -> torch.device:
    """flbridge.torch_device("xpu:x1") -> torch.device("fl", i)."""
    return chip_for(spec_name).device
