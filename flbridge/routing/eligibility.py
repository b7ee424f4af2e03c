"""May a vendor kernel take these arguments?  The checks the spec implies.

`why_not(kernel, vals)` returns None when the kernel can run on these
(normalized) arguments, else a :class:`~flbridge.routing.reasons.Reason`.  Every
check here stands between the router and an invalid vendor call: the
simulators abort on one in strict mode, as real drivers do.  The result
depends only on each argument's geometry, dtype and device and on scalar
values, so :class:`~flbridge.routing.native.NativeKernel` caches it per argument key.
"""
from __future__ import annotations

import torch

from ..binding import callplan as B
from ..specs import dtype_name
from .reasons import Reason
from .rng import lookup, resolve


def why_not(k, vals, meta: bool = False):
    """None if the kernel can take these arguments, else a Reason."""
    e = k.entry
    chip = k.chip
    for idx, name, default in k.plan.unconsumed:
        v = vals[idx]
        if v is not default and v != default:
            return Reason("argument", f"{name}={_short(v)} ({e.impl} only takes the default {default!r})")
    max_dims = k.rt.max_dims
    for idx, name, _nullable in k.tensor_args:
        v = vals[idx]
        if v is None:
            if idx in k.present:
                return Reason("argument", f"{name} is None ({e.impl} needs it)")
            continue
        if not isinstance(v, torch.Tensor):
            continue  # a Python number: passed as a device constant
        if v.device != chip.device and not (meta and v.device.type == "meta"):   # meta: stands for the chip's
            if v.device.type == "cpu" and v.dim() == 0 and idx not in k.mutated:
                continue
            return Reason("device", f"{name} is on {v.device}")
        allowed = e.arg_dtypes.get(name, e.dtypes)
        if v.dtype not in allowed:
            return Reason("dtype", f"{name} has dtype {dtype_name(v.dtype)} ({e.impl} takes "
                                   f"{', '.join(dtype_name(d) for d in allowed)})",
                          f"cast {name} to torch.{dtype_name(allowed[0])}", dtype_name(v.dtype),
                          [dtype_name(d) for d in allowed])
        if v.dim() > max_dims:
            return Reason("dims", f"{name} has {v.dim()} dims ({chip.device_type} descriptors hold "
                                  f"at most {max_dims})")
    length = first = None
    for idx, name in k.tensor_lists:
        items = vals[idx]
        if not items:
            if idx not in k.plan.may_be_empty:
                return Reason("argument", f"{name} is empty")
            cond = k.plan.may_be_empty[idx]
            if cond is not None:
                r = _holds(cond, vals, f"{name} is empty")
                if r is not None:
                    return r
            continue
        # lists passed together are parallel: one length, and element i of
        # each list the kernel computes on has element i's shape of the first
        if length is None:
            length, first = len(items), (idx, name)
        elif len(items) != length:
            return Reason("argument", f"{name} has {len(items)} tensors and {first[1]} {length} "
                                      f"({e.impl} takes lists of one length)")
        same_shape = name not in e.arg_dtypes and first[0] != idx and first[1] not in e.arg_dtypes
        exact = k.cons.numel.get(name)
        dtype = None
        for i, v in enumerate(items):
            if not isinstance(v, torch.Tensor) or \
                    (v.device != chip.device and not (meta and v.device.type == "meta")):
                return Reason("device", f"{name}[{i}] is {'None' if v is None else f'on {v.device}'}")
            allowed = e.arg_dtypes.get(name, e.dtypes)
            if v.dtype not in allowed or (dtype is not None and v.dtype != dtype):
                return Reason("dtype", f"{name}[{i}] has dtype {dtype_name(v.dtype)} ({e.impl} takes one of "
                                       f"{', '.join(dtype_name(d) for d in allowed)} for all)",
                              f"cast {name} to one dtype", dtype_name(v.dtype), [dtype_name(d) for d in allowed])
            dtype = v.dtype
            if v.dim() > max_dims or v.numel() == 0:
                return Reason("dims", f"{name}[{i}] has {v.dim()} dims and {v.numel()} elements "
                                      f"({e.impl} takes non-empty tensors of at most {max_dims} dims)")
            if exact is not None and v.numel() != exact:
                return Reason("constraint", f"{name}[{i}] has {v.numel()} elements ({e.impl} takes {exact})")
            if same_shape and v.shape != vals[first[0]][i].shape:
                return Reason("argument", f"{name}[{i}] is {list(v.shape)} but {first[1]}[{i}] is "
                                          f"{list(vals[first[0]][i].shape)}")
    if k.cons.numel:
        for idx, name, _ in k.tensor_args:
            n = k.cons.numel.get(name)
            v = vals[idx]
            if n is not None and isinstance(v, torch.Tensor) and v.numel() != n:
                return Reason("constraint", f"{name} has {v.numel()} elements ({e.impl} takes {n})")
    for x in k.plan.require:
        r = _holds(x, vals, "")
        if r is not None:
            return r
    gi = k.plan.generator
    if gi is not None and vals[gi] is not None and resolve(chip, vals[gi]) is None:
        other = lookup(vals[gi])
        return Reason("generator", f"generator= is {'a generator of ' + str(other.device) if other is not None else 'a CPU torch.Generator'} "
                                   f"(the chip's random kernels draw from {chip.device}'s generators)",
                      f"pass torch.fl.Generator({chip.device.index}) to draw on the chip")
    for idx, name, allowed in k.value_checks:
        v = vals[idx]
        items = v if isinstance(v, (list, tuple)) else (v,)
        for x in items:
            if x not in allowed:
                return Reason("constraint", f"constraint {name}={x!r} not in {list(allowed)}",
                              f"use {name} in {list(allowed)}")
    for idx, name, (lo, hi) in k.range_checks:
        v = vals[idx]
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if x is not None and not lo <= x <= hi:
                return Reason("constraint", f"constraint {name}={x!r} not in [{lo}, {hi}]",
                              f"use {name} between {lo} and {hi}")
    cons = k.cons
    if cons.ndim:
        for name, ranks in cons.ndim.items():
            v = vals[k.arg_index[name]]
            if isinstance(v, torch.Tensor) and v.dim() not in ranks:
                return Reason("constraint", f"{name} is {v.dim()}-D ({e.impl} takes {list(ranks)}-D)")
    if cons.sizes:
        r = _check_sizes(k, vals)
        if r is not None:
            return r
    for idx, name, n in k.list_args:
        v = vals[idx]
        if n and v is not None and len(v) not in (1, n) and idx not in k.lengths:
            return Reason("argument", f"{name} has {len(v)} values ({e.impl} takes {n})")
    for idx, name, m in k.mapped:
        if vals[idx] not in m:
            return Reason("constraint", f"{name}={vals[idx]!r} has no code for {e.impl} "
                                        f"(known: {', '.join(map(str, m))})")
    if k.needs_copy and not k.rt.has_copy:
        for name in list(e.layout) + list(e.contiguous):
            v = vals[k.arg_index[name]] if name in k.arg_index else None
            if isinstance(v, torch.Tensor):
                return Reason("layout", f"{name} needs a layout/contiguity copy and {chip.device_type} "
                                        f"has no copy kernel (runtime.copy)")
    for name, layout in e.layout.items():
        v = vals[k.arg_index[name]] if name in k.arg_index else None
        if isinstance(v, torch.Tensor) and v.dim() != len(layout):
            return Reason("layout", f"{name} is {v.dim()}-D but {e.impl} takes it as {layout}")
    return None

def _holds(x, vals, what: str):
    """None if the expression holds for these arguments, else a Reason."""
    try:
        ok = x.value(vals)
    except B.Missing as m:
        return Reason("argument", f"{m} is None ({x.text!r} needs a value)")
    except ValueError as err:
        return Reason("argument", f"{x.text!r} cannot be computed for these arguments: {err}")
    if ok:
        return None
    return Reason("constraint", f"{what + ' and ' if what else ''}{x.text!r} does not hold")


def named_dims(k, vals):
    """{dim name: size} from the tensors named under constraints.sizes, or a
    Reason when their ranks or shared dims disagree."""
    e = k.entry
    dims: dict = {}
    for name, names in k.cons.sizes.items():
        if name == "out":
            continue  # the result: its dims follow from the inputs'
        v = vals[k.arg_index[name]]
        if not isinstance(v, torch.Tensor):
            continue
        shape = tuple(v.shape)
        if len(shape) != len(names):
            return Reason("constraint", f"{name} is {len(shape)}-D ({e.impl} takes {list(names)})")
        for dn, s in zip(names, shape):
            if dims.setdefault(dn, s) != s:
                return Reason("constraint", f"{dn} differs between arguments")
    return dims


def padding(k, vals):
    """{dim: padded size} for the dims the spec lets the bridge zero-pad
    (constraints.pad) that are not multiples yet; {} when none needs it."""
    dims = named_dims(k, vals)
    if isinstance(dims, Reason) or not k.can_pad:
        return {}
    return {dn: -(-dims[dn] // m) * m for dn, m in k.cons.multiple_of.items()
            if dn in k.cons.pad and dn in dims and dims[dn] % m}


def _check_sizes(k, vals):
    cons = k.cons
    dims = named_dims(k, vals)
    if isinstance(dims, Reason):
        return dims
    for dn, m in cons.multiple_of.items():
        if dn in dims and dims[dn] % m and not (k.can_pad and dn in cons.pad):
            fix = (f"declare constraints.pad: [{dn}] so the bridge pads it on the device" if k.rt.has_copy
                   and k.rt.has_fill else f"pad {dn} to a multiple of {m}")
            return Reason("constraint", f"constraint {dn}={dims[dn]} is not a multiple of {m}", fix)
    for dn, m in cons.max.items():
        if dn == "numel":
            for idx, name, _ in k.tensor_args:
                v = vals[idx]
                if isinstance(v, torch.Tensor) and v.numel() > m:
                    return Reason("constraint", f"{name} has {v.numel()} elements (max {m})")
        elif dn in dims and dims[dn] > m:
            return Reason("constraint", f"constraint {dn}={dims[dn]} exceeds the maximum {m}")
    return None

# ------------------------------------------------------------ run


def _short(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"<tensor {list(v.shape)} {dtype_name(v.dtype)}>"
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return repr(v[0])
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."
