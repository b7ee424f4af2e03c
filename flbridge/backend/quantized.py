"""Quantized tensors and fl devices: one clear error, at the move.

fl tensors are dense and unquantized (a chip's int8 kernels take plain
int8 tensors).  PyTorch's quantized tensors and the models
torch.ao.quantization converts (packed weights held by C++ objects, which
``Module.to`` never sees) cannot live on fl, so instead of a quantized fl
tensor nothing can use, or a model whose packed weights silently stay on
the CPU, each of these raises :class:`flbridge.errors.QuantizedNotSupported`:

* moving a quantized tensor to fl (``q.to("fl:1")``) or allocating one there;
* an op on fl tensors whose result would be quantized
  (``torch.quantize_per_tensor(fl_tensor, ...)``);
* ``model.to("fl")`` / ``model.fl()`` / ``flbridge.wrap(model)`` of a model
  that holds quantized modules, checked before anything moves.

The exception: ``torch.ao.quantization.quantize_dynamic`` Linear modules with
qint8 weights move (their op takes float fl tensors and runs through the
chip's int8 GEMM, flbridge/routing/qlinear.py).
"""
from __future__ import annotations

import functools

import torch

from ..errors import QuantizedNotSupported

_QUANTIZED_PACKAGES = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.", "torch.nn.quantized.",
                       "torch.ao.nn.quantizable.")




def _runs_on_fl(m) -> bool:
    """A dynamically quantized Linear with a qint8 weight: its op,
    quantized::linear_dynamic, takes a float input on fl and runs there
    (flbridge.routing.qlinear); its packed weight stays where PyTorch keeps
    it and is uploaded on first use."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    return type(m) is DynamicLinear and m._packed_params.dtype == torch.qint8


def _quantized_part(module: torch.nn.Module):
    """The qualified name of the first quantized submodule / tensor, or None."""
    allowed = tuple(f"{name}." if name else "" for name, m in module.named_modules() if _runs_on_fl(m))
    for name, m in module.named_modules():
        if allowed and any(name.startswith(a) or f"{name}." == a for a in allowed):
            continue
        mod = type(m).__module__ + "."
        if mod.startswith(_QUANTIZED_PACKAGES) and ".reference." not in mod:
            return name or type(m).__name__
        for t_name, t in (*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)):
            if t is not None and t.is_quantized:
                return f"{name}.{t_name}" if name else t_name
        for k, v in vars(m).items():
            if isinstance(v, torch.ScriptObject):
                return f"{name}.{k}" if name else k
    return None


def check_move(module: torch.nn.Module, device) -> None:
    """Raises before `module` moves to an fl device if it holds quantized parts."""
    if device is None or torch.device(device).type != "fl":
        return
    part = _quantized_part(module)
    if part is not None:
        raise QuantizedNotSupported(f"moving {type(module).__name__} to {device}: {part!r} is quantized")
    from ..routing import qlinear
    for m in module.modules():
        if _runs_on_fl(m):
            qlinear.keep_on_device(m._packed_params._packed_params)


def _guard_to(to):
    @functools.wraps(to)
    def guarded(self, *args, **kwargs):
        if args or kwargs.get("device") is not None:
            try:
                device = torch._C._nn._parse_to(*args, **kwargs)[0]
            except (TypeError, RuntimeError):
                device = None   # Module.to raises PyTorch's own error for these arguments
            check_move(self, device)
        return to(self, *args, **kwargs)
    guarded.__flbridge_original__ = to
    return guarded


def _guard_to_empty(to_empty):
    @functools.wraps(to_empty)
    def guarded(self, *, device, recurse=True):
        check_move(self, device)
        return to_empty(self, device=device, recurse=recurse)
    guarded.__flbridge_original__ = to_empty
    return guarded


def _guard_fl(fl):
    @functools.wraps(fl)
    def guarded(self, device=None):
        check_move(self, torch.device("fl", device) if isinstance(device, int) else device or "fl")
        return fl(self, device)
    guarded.__flbridge_original__ = fl
    return guarded


def _refuse(what):
    def kernel(*args, **kwargs):
        raise QuantizedNotSupported(what)
    return kernel


def register(lib) -> None:
    """Allocation of quantized tensors on fl (what `q.to("fl")` reaches)
    raises; Module.to / to_empty check models before they move."""
    for name in ("empty_quantized", "_empty_affine_quantized", "_empty_per_channel_affine_quantized"):
        lib.impl(name, _refuse(f"aten::{name} on an fl device (moving or making a quantized tensor there)"),
                 "QuantizedPrivateUse1")
    M = torch.nn.Module
    if getattr(M.to, "__flbridge_original__", None) is None:
        M.to = _guard_to(M.to)
    if getattr(M.to_empty, "__flbridge_original__", None) is None:
        M.to_empty = _guard_to_empty(M.to_empty)
    if hasattr(M, "fl") and getattr(M.fl, "__flbridge_original__", None) is None:
        M.fl = _guard_fl(M.fl)
