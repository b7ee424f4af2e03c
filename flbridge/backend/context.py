"""`flbridge.device(...)`: a chip made current and the default device, with
'xpu' / 'xpu:<name>' strings understood wherever torch takes a device; and
`flbridge.wrap(model)`: parameters on the chip, CPU inputs moved for you."""
from __future__ import annotations

import contextlib

import torch
from torch.utils._device import DeviceContext, _device_constructors

from ..devices import chip_for, current_device, set_current_index


class _XpuMode(DeviceContext):
    """Inside `flbridge.device(...)`: PyTorch's own default-device context
    (`with torch.device(...)`: factories without a device, modules' parameters
    and torch.get_default_device() land on the chip; it nests and unwinds
    like torch's), plus 'xpu', 'xpu:<name>' and 'fl' without an index
    understood wherever torch takes a device."""

    def __init__(self, chip):
        super().__init__(chip.device)
        self.chip = chip

    def _map(self, v):
        if isinstance(v, str):
            if v in ("xpu", "fl"):
                return self.device
            if v.startswith("xpu:"):
                return chip_for(v).device
            return v
        if isinstance(v, torch.device):
            if v.type == "xpu":
                return self.device if v.index is None else chip_for(v.index).device
            if v.type == "fl" and v.index is None:
                return self.device
        return v

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.device:
            # torch.device("xpu:x1") / torch.device("xpu") / torch.device("xpu", 2)
            if len(args) == 1 and not kwargs and isinstance(args[0], str):
                m = self._map(args[0])
                return m if isinstance(m, torch.device) else func(*args)
            if len(args) == 2 and args[0] == "xpu":
                return chip_for(args[1]).device
            return func(*args, **kwargs)
        dev = kwargs.get("device")
        if dev is not None:
            kwargs["device"] = self._map(dev)
        elif func in _device_constructors():
            kwargs["device"] = self.device
        args = tuple(self._map(a) if isinstance(a, (str, torch.device)) else a for a in args)
        return func(*args, **kwargs)


@contextlib.contextmanager
def device(spec_name="xpu"):
    """with flbridge.device("xpu:x1") as dev: ...  (thread-local current chip,
    nestable; the default device as `with torch.device(dev)` sets it)"""
    chip = chip_for(spec_name)
    prev = current_device()
    set_current_index(chip.index)
    torch._C._set_multithreading_enabled(False)
    try:
        with _XpuMode(chip):
            yield chip.device
    finally:
        set_current_index(prev)


def _resolve(device) -> torch.device:
    if device is None:
        return chip_for(current_device()).device
    if isinstance(device, str) and device.startswith("xpu"):
        return chip_for(device).device
    return chip_for(torch.device(device) if not isinstance(device, int) else device).device


def wrap(model: torch.nn.Module, device=None) -> torch.nn.Module:
    """Places model's parameters and buffers on the chip (lazily: bytes move
    when a kernel first needs them) and moves CPU tensor inputs of forward()
    to the chip.  Returns the same module."""
    dev = _resolve(device)
    model.to(dev)

    def move(x):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            return x.to(dev)
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        if isinstance(x, dict):
            return {k: move(v) for k, v in x.items()}
        return x

    def pre_hook(module, args, kwargs):
        return move(args), move(kwargs)

    old = getattr(model, "_flbridge_hook", None)
    if old is not None:
        old.remove()
    model._flbridge_hook = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    model._flbridge_device = dev
    return model
