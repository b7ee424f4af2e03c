"""Nested tensors and fl devices.

fl tensors are dense and strided; nested tensors are not supported on fl
and the ops that make or take them raise one clear error (NestedNotSupported)
instead of PyTorch internal errors (flbridge.errors).

Nested tensors are refused when they would be made for fl:
``torch.nested.nested_tensor(..., device="fl")`` and ``nt.to("fl")``, strided
or jagged (torch.jagged, a Python subclass over a values tensor, whose SDPA
converts to strided nested tensors, which fl cannot hold).

One use of nested tensors is internal to PyTorch and must work: the
"sparsity fast path" of ``nn.TransformerEncoder`` in eval mode with a
``src_key_padding_mask``, which PyTorch takes on any device, fl included.
It packs the batch into a nested tensor (``torch._nested_tensor_from_mask``),
runs each layer on it (``torch._transformer_encoder_layer_fwd``) and pads
the result with zeros (``to_padded_tensor(0.0)``).  On fl the "nested"
tensor is kept padded, with its mask beside it: each layer runs on the dense
batch with the mask as its key padding mask (which attends to exactly the
tokens the nested tensor holds) and the padded positions are zeroed after
it, so the result is the fast path's, zeros at padded positions included.
"""
from __future__ import annotations

import torch

from ..errors import NestedNotSupported

aten = torch.ops.aten
_MASK = "_flbridge_nested_mask"   # on the padded stand-in: True where a token is present


def _keep_only(t, keep, value=0.0):
    return aten.where.ScalarOther(aten.unsqueeze.default(keep, -1), t, value)


def from_mask(func, args, kwargs):
    """_nested_tensor_from_mask(t, mask, mask_check=True): the padded
    stand-in (mask True = token present)."""
    t = args[0]
    mask = args[1] if len(args) > 1 else kwargs["mask"]
    check = args[2] if len(args) > 2 else kwargs.get("mask_check", True)
    keep = aten._to_copy.default(mask, dtype=torch.bool)
    if check and not aten._nested_tensor_from_mask_left_aligned.default(t, keep):
        raise RuntimeError("Mask must be left aligned without gaps")
    out = _keep_only(t, keep)
    out.__dict__[_MASK] = keep
    return out


def layer_fwd(func, args, kwargs):
    """_transformer_encoder_layer_fwd on the padded stand-in: the dense batch
    with its mask as key padding mask (mask_type 1), padded rows zeroed."""
    from .route import route
    src = args[0]
    keep = src.__dict__.get(_MASK)
    if keep is None:
        return route(func, args, kwargs)
    dense = aten.alias.default(src)
    names = [a.name for a in func._schema.arguments]
    vals = dict(zip(names, args))
    vals.update(kwargs)
    vals["src"] = dense
    vals["mask"] = aten.logical_not.default(keep)
    vals["mask_type"] = 1
    out = _keep_only(route(func, (), vals), keep)
    out.__dict__[_MASK] = keep
    return out


def to_padded(func, args, kwargs):
    """to_padded_tensor(self, padding, output_size=None) of the stand-in."""
    src = args[0]
    keep = src.__dict__.get(_MASK)
    if keep is None:
        raise NestedNotSupported(f"{func} on a dense fl tensor")
    padding = args[1] if len(args) > 1 else kwargs["padding"]
    size = args[2] if len(args) > 2 else kwargs.get("output_size")
    out = _keep_only(src, keep, padding)
    if size is not None and tuple(size) != tuple(out.shape):
        if len(size) != out.dim() or any(s < o for s, o in zip(size, out.shape)):
            raise RuntimeError(f"to_padded_tensor: output_size {list(size)} cannot hold {list(out.shape)}")
        pad = []
        for s, o in zip(reversed(size), reversed(out.shape)):
            pad += [0, s - o]
        out = aten.constant_pad_nd.default(out, pad, padding)
    return out


def unsupported(func, args, kwargs):
    raise NestedNotSupported(f"{func}")


HANDLERS = {aten._nested_tensor_from_mask.default: from_mask,
            aten._transformer_encoder_layer_fwd.default: layer_fwd,
            aten.to_padded_tensor.default: to_padded}


_LIB: list = []


def _strided_nested_op(op, *args, **kwargs):
    raise NestedNotSupported(f"{op} on a nested tensor for an fl device")


def install() -> None:
    """Nested tensors for fl devices are refused when made: strided ones
    (torch.nested.nested_tensor(..., device="fl"), nt.to("fl")) by a
    fallback on their dispatch key, jagged ones over fl values in their
    constructor."""
    if not _LIB:
        lib = torch.library.Library("_", "IMPL")
        lib.fallback(_strided_nested_op, "NestedTensorPrivateUse1")
        _LIB.append(lib)
    from torch.nested._internal.nested_tensor import NestedTensor
    new = NestedTensor.__new__
    if getattr(new, "__flbridge_original__", None) is not None:
        return

    def __new__(cls, values, offsets, *args, **kwargs):
        if isinstance(values, torch.Tensor) and values.device.type == "fl":
            raise NestedNotSupported(f"a jagged nested tensor over values on {values.device}")
        return new(cls, values, offsets, *args, **kwargs)

    __new__.__flbridge_original__ = new
    NestedTensor.__new__ = staticmethod(__new__)


def handler(func):
    """The handler for a nested-tensor op on fl tensors, or None."""
    h = HANDLERS.get(func)
    if h is not None:
        return h
    name = func._schema.name
    if name.startswith("aten::_nested") and name != "aten::_nested_tensor_from_mask_left_aligned":
        return unsupported
    return None
