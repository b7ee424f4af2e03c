"""Cache keys of op arguments and their meta-tensor stand-ins.

Decisions (may this kernel take these arguments?), result shapes and view
geometries depend only on each tensor's geometry, dtype and device and on
the other arguments' values; these helpers turn a call's arguments into a
hashable key and into meta tensors for PyTorch's own shape functions.
"""
from __future__ import annotations

import torch

from ..tensor import XPUTensor
from .memformat import RULES as MEMORY_FORMAT_RULES


def split_args(opi, vals):
    """A full positional value list back into (positional, keyword-only)."""
    pos, kw = [], {}
    for a, v in zip(opi.args, vals):
        if a.kwarg_only:
            kw[a.name] = v
        else:
            pos.append(v)
    return pos, kw


def arg_key(v, chip=None):
    """Cache key of one argument: tensors by geometry, dtype and device
    (whether it is `chip`'s), numbers with their type (2, 2.0 and True hash
    alike but may give different results), other values as they are."""
    if type(v) is XPUTensor:
        return (v.shape, v.stride(), v.dtype, v._st.chip is chip)
    if isinstance(v, torch.Tensor):
        return (v.shape, v.stride(), v.dtype, v.device.type)
    if isinstance(v, (list, tuple)):
        return tuple(arg_key(x, chip) for x in v)
    if isinstance(v, (int, float, bool)):
        return (type(v), v)
    return v if isinstance(v, (str, type(None), torch.dtype, torch.device, torch.layout,
                                torch.memory_format)) else _identity(v)


def shape_key(v):
    """Like arg_key, but numbers by their type alone: for decisions that a
    scalar's value changes only in rare cases, where keying on values would
    miss the cache on every step of a training loop (Adam's step sizes)."""
    if type(v) is XPUTensor:
        return (v.shape, v.stride(), v.dtype, v._st.chip)
    if isinstance(v, torch.Tensor):
        return (v.shape, v.stride(), v.dtype, v.device.type)
    if isinstance(v, (list, tuple)):
        return tuple(shape_key(x) for x in v)
    if isinstance(v, (int, float, bool, complex)):
        return type(v)
    return v if isinstance(v, (str, type(None), torch.dtype, torch.device, torch.layout,
                                torch.memory_format)) else _identity(v)


def _identity(v):
    """Any other argument by identity.  A TorchScript object (quantized
    packed weights) reaches each call in a new Python wrapper of the same
    C++ object: its hash names the object, its id() only the wrapper."""
    if isinstance(v, torch.ScriptObject):
        try:
            return (type(v), hash(v))
        except TypeError:
            pass
    return (type(v), id(v))


def meta_key(args, kwargs):
    """Key of a whole call by geometry, dtypes and scalar types (shape_key)."""
    return (tuple(shape_key(a) for a in args), tuple((k, shape_key(v)) for k, v in sorted(kwargs.items())))


def meta_key_or_none(args, kwargs):
    """meta_key, or None for a call it cannot key (no cached decision)."""
    try:
        return meta_key(args, kwargs)
    except TypeError:
        return None


def remember(cache: dict, key, value, limit: int):
    """cache[key] = value, the whole cache dropped first once it holds more
    than `limit` entries (decision and geometry caches stay bounded)."""
    if len(cache) > limit:
        cache.clear()
    cache[key] = value
    return value


def to_meta(v):
    """v with every tensor replaced by a meta tensor of the same geometry
    (0-dim CPU tensors stay: PyTorch lets them stand beside any device)."""
    if isinstance(v, torch.Tensor):
        if v.device.type == "cpu" and v.dim() == 0:
            return v
        return torch.empty_strided(tuple(v.shape), v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, list):
        return [to_meta(x) for x in v]
    if isinstance(v, tuple):
        return tuple(to_meta(x) for x in v)
    if isinstance(v, dict):
        return {k: to_meta(x) for k, x in v.items()}
    if isinstance(v, torch.device) and v.type == "fl":
        return torch.device("meta")
    return v


def result_metas(func, opi, vals):
    """Shapes, strides and dtypes of func's results for these (normalized)
    arguments, from PyTorch's meta kernels; raises PyTorch's own error for
    invalid arguments.  Callers cache it per argument key."""
    pos, kw = split_args(opi, [to_meta(v) for v in vals])
    res = func(*pos, **kw)
    rule = MEMORY_FORMAT_RULES.get(func)
    if rule is not None:   # a meta kernel that leaves the CPU's memory format out (convolution)
        res = rule(pos, kw, res)
    res = res if isinstance(res, (tuple, list)) else (res,)
    return tuple((tuple(r.shape), tuple(r.stride()), r.dtype) if isinstance(r, torch.Tensor) else None
                 for r in res)
