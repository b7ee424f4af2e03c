"""Preparing a call: once per argument key, what a vendor kernel needs.

For a :class:`~flbridge.routing.native.NativeKernel` and one call's arguments,
:func:`prepare` runs the checks the spec implies (:mod:`flbridge.routing.eligibility`)
and PyTorch's meta kernel for the results' shapes, then lays the C arguments
out as a flat list of *slots*: most are fixed values (integers, lists, mapped
codes, defaults), the rest say where each call's tensor descriptors come from
(the tensor itself, a device constant for a number, the adapter for a
layout, cast or padding).  The result, a :class:`Prepared`, is cached per
argument key (:func:`call_key`), so a call only fills in its tensors.
"""
from __future__ import annotations

import torch

from ..specs import dtype_name, normalize
from ..tensor import XPUTensor, itemsize
from ..binding import callplan as B
from .argkeys import result_metas
from .eligibility import padding, why_not
from .reasons import Reason
from .rng import generator_key, rng_words

# C-argument slot codes of a prepared call
(S_DESC, S_NULL, S_NUMBER, S_CPU_SCALAR, S_ADAPT, S_OUT, S_OUT_ADAPT, S_FIXED, S_FLOAT, S_INT, S_FRESH,
 S_CONSTANT, S_PAD_IN, S_PAD_OUT, S_DESCLIST, S_SEED, S_OFFSET) = range(17)


class Prepared:
    """One argument key's call: result geometry, which arguments to make
    resident, and the C arguments as slots (code, a, b)."""
    __slots__ = ("outs", "ref", "out_shape", "read", "read_lists", "slots", "empty", "single", "rng")

    def __init__(self, outs, ref, out_shape, read, slots, empty, single, read_lists=(), rng=None):
        self.read_lists = read_lists  # arg indices of tensor lists the kernel reads
        # random ops: (generator arg index or None, words the call consumes,
        # C positions of the seed and the offset); None for every other op
        self.rng = rng
        self.outs = outs            # per result: (alias arg index, None) or (None, (shape, strides, dtype, nbytes))
        self.ref = ref              # compute dtype
        self.out_shape = out_shape
        self.read = read            # arg indices of fl tensors the kernel reads
        self.slots = slots
        self.empty = empty          # every written tensor is empty: nothing to compute
        self.single = single        # one result: return it bare


def call_key(vals, valued_floats):
    """The argument key: tensors by geometry, dtype and chip; numbers with
    their type and value, except float scalars that only flow into the
    call (a learning rate or Adam's bias corrections change every step and
    must not make every step a cache miss)."""
    out = []
    for i, v in enumerate(vals):
        c = v.__class__
        if c is XPUTensor:
            # _tensor_key(v), inlined: every native call keys its arguments here
            k = v.__dict__.get("_k")
            if k is None:
                k = v.__dict__["_k"] = (v.shape, v.stride(), v.dtype, v._st.chip)
            out.append(k)
        elif c is float:
            out.append((float, v) if i in valued_floats else float)
        elif c is int or c is bool:
            out.append((c, v))
        elif v is None:
            out.append(None)
        elif isinstance(v, torch.Tensor):
            out.append((v.shape, v.stride(), v.dtype, v.device.type))
        elif c is list or c is tuple:
            out.append(_value_key(v))
        elif c is str or isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            out.append(v)
        elif isinstance(v, torch.Generator):
            out.append(generator_key(v))    # each call hands over a new wrapper of the same generator
        else:
            out.append((c, id(v)))
    return tuple(out)


def _tensor_key(v):
    """An XPUTensor's key: geometry, dtype and chip, kept on the tensor
    (set_geometry() and in-place views drop it)."""
    k = v.__dict__.get("_k")
    if k is None:
        k = v.__dict__["_k"] = (v.shape, v.stride(), v.dtype, v._st.chip)
    return k


def _value_key(v):
    c = v.__class__
    if c is list or c is tuple:
        return tuple(_value_key(x) for x in v)
    if c is XPUTensor:
        return _tensor_key(v)
    if isinstance(v, torch.Tensor):
        return (v.shape, v.stride(), v.dtype, v.device.type)
    if c in (int, float, bool):
        return (c, v)
    return v if isinstance(v, (str, type(None), torch.dtype, torch.device)) else (c, id(v))


def prepare(k, given, meta=False):
    # `given`: the arguments as passed (trailing defaults may be missing);
    # the checks see them complete, the slots of missing ones are fixed
    n = len(given)
    vals = normalize(k.opi, given, {}) if n < len(k.opi.args) else given
    reason = why_not(k, vals, meta=meta)
    if reason is not None:
        return reason
    # an op that returns nothing (the fused optimizers write their lists) needs no meta kernel
    metas = result_metas(k.route.func, k.opi, vals) if k.opi.rets else ()
    for m in metas:
        if m is not None and m[2] not in k.rt.dtype_codes:
            return Reason("dtype", f"the result would be {dtype_name(m[2])}, which "
                                   f"{k.chip.device_type} descriptors cannot hold", dtype=dtype_name(m[2]))
    e, opi, plan = k.entry, k.opi, k.plan
    outs = []
    for ri, ret in enumerate(opi.rets):
        if ret.alias_arg is not None:
            v = vals[ret.alias_arg]
            m = metas[ri]
            # an out= argument of another shape is resized to the result's first
            outs.append((ret.alias_arg, None if m is None or tuple(v.shape) == m[0] else (m[0], m[1])))
        elif metas[ri] is None:
            outs.append((None, None))      # not asked for (output_mask): None, as PyTorch returns
        elif plan.out_params[ri] is None:
            outs.append((None, ((0,), (1,), metas[ri][2], 0)))   # not produced: empty, as on the CPU
        else:
            shape, strides, dtype = metas[ri]
            numel = span = 1
            for d, s in zip(shape, strides):
                numel *= d
                span += (d - 1) * s
            outs.append((None, (shape, strides, dtype, (span if numel else 0) * itemsize(dtype))))
    # geometry of the results, from the metas (an aliased result has its argument's)
    geo = [((tuple(vals[a].shape) if g is None else g[0]), vals[a].dtype) if a is not None
           else (g[0], g[2]) if g is not None else ((), None) for a, g in outs]
    ref = geo[0][1] if geo and geo[0][1] in e.dtypes else None
    from_inputs = ref is None   # a comparison's bool result, say: the inputs set the compute dtype
    read = []
    for idx, name, _ in k.tensor_args:
        v = vals[idx]
        if type(v) is XPUTensor:
            if name not in e.arg_dtypes:
                if ref is None:
                    ref = v.dtype
                elif from_inputs and v.dtype != ref:
                    # PyTorch would compute in the promoted dtype; casting one input to the
                    # other's could round differently
                    return Reason("dtype", f"{name} is {dtype_name(v.dtype)} beside {dtype_name(ref)} "
                                           f"({e.impl} takes one dtype)", "cast both to one dtype")
            if idx not in read:
                read.append(idx)
    if from_inputs and ref is not None:
        for idx, name, _ in k.tensor_args:
            v = vals[idx]
            if v is not None and type(v) is not XPUTensor and _category(v) > _category(ref):
                # a CPU scalar (or number) of a higher kind promotes the computation, as
                # PyTorch does: int64 == tensor(2.5) compares in float, not in int64.  The
                # device inputs are cast to the promoted dtype if the kernel takes it.
                promoted = torch.result_type(torch.empty((1,), dtype=ref, device="meta"), v)
                if promoted not in e.dtypes:
                    return Reason("dtype", f"{name} is a {_kind_name(v)} scalar beside {dtype_name(ref)} "
                                           f"tensors: PyTorch compares in {dtype_name(promoted)}, which "
                                           f"{e.impl} does not take",
                                  "cast the tensors to the scalar's kind, or pass the scalar as a Python number")
                ref = promoted
    out_shape = geo[0][0] if geo else None
    empty = all(g is None or g[3] == 0 for a, g in outs if a is None) and all(
        vals[i].numel() == 0 for i in k.mutated if isinstance(vals[i], torch.Tensor)
        and not any(a == i and g is not None for a, g in outs)) \
        and all(_numel(g[0] if g is not None else vals[a].shape) == 0 for a, g in outs if a is not None) \
        and not any(t.numel() for i in k.mutated if isinstance(vals[i], (list, tuple)) for t in vals[i])
    slots = []
    ffi = k.rt.ffi
    params = k.rt.header.functions[e.impl].params
    pad = padding(k, vals) if k.can_pad else None
    if pad:
        padded = _padded_shapes(k, vals, pad, out_shape)
        if isinstance(padded, Reason):
            return padded
    rng = seed_pos = off_pos = None
    for (kind, a, b), param in zip(plan.steps, params):
        if kind == B.RNG_SEED or kind == B.RNG_OFFSET:
            if kind == B.RNG_SEED:
                seed_pos = len(slots)
            else:
                off_pos = len(slots)
            slots.append((S_SEED if kind == B.RNG_SEED else S_OFFSET, None, None))
            continue
        if kind == B.EXPR:
            v = _expr_value(a, vals)
            if isinstance(v, Reason):
                return v
            slots.append((S_FIXED, int(v), None))
            continue
        if kind == B.BOOL and vals[a] is None:
            return Reason("argument", f"{k.opi.args[a].name} is None ({e.impl} takes true or false)")
        if pad and kind == B.TENSOR and a in padded and padded[a][0] != padded[a][1]:
            slots.append((S_PAD_IN, a, padded[a]))
            continue
        if pad and kind == B.OUTPUT and a == 0 and padded["out"][0] != padded["out"][1]:
            slots.append((S_PAD_OUT, a, padded["out"]))
            continue
        if kind == B.TENSOR:
            slot = _input_slot(k, vals[a], a, ref, out_shape)
            if a >= n and slot[0] == S_NUMBER:          # a default number: the same every call
                slot = (S_CONSTANT, vals[a], slot[2])
            slots.append(slot)
        elif kind == B.OUTPUT:
            lay, contiguous = k.out_layouts.get(a, (None, False))
            if outs[a] == (None, None):
                slots.append((S_NULL, a, None))           # a result not asked for
            elif lay is not None or contiguous:
                slots.append((S_OUT_ADAPT, a, None))
            elif outs[a][0] is None:
                slots.append((S_FRESH, a, outs[a][1]))   # geometry known: no need to ask the tensor
            else:
                slots.append((S_OUT, a, None))
        elif kind in (B.INT, B.FLOAT):
            v = vals[a]
            if v is None:
                slots.append((S_FIXED, 0, None))
            elif v.__class__ is float and a not in k.valued_floats and a < n:
                slots.append((S_FLOAT if kind == B.FLOAT else S_INT, a, None))
            else:
                slots.append((S_FIXED, float(v) if kind == B.FLOAT else int(v), None))
        elif kind == B.BOOL:
            slots.append((S_FIXED, bool(vals[a]), None))
        elif kind == B.INTLIST:
            v = _int_list(vals[a], k.list_len[a], a in k.lengths)
            # read by the kernel only: one C array serves every call
            slots.append((S_FIXED, ffi.NULL if v is None else ffi.new(f"{param.base}[]", v), None))
        elif kind == B.LENGTH:
            if k.opi.args[a].kind == "tensor[]":
                slots.append((S_FIXED, len(vals[a]), None))
                continue
            v = _int_list(vals[a], k.list_len[a], True)
            slots.append((S_FIXED, 0 if v is None else len(v), None))
        elif kind == B.TENSORLIST:
            if not vals[a]:
                slots.append((S_FIXED, ffi.NULL, None))     # an empty list (constraints.may_be_empty)
            else:
                slots.append((S_DESCLIST, a, f"{param.base} *[]"))
        elif kind == B.STRING:
            slots.append((S_FIXED, vals[a].encode(), None))
        elif kind == B.MAPPED:
            slots.append((S_FIXED, b[vals[a]], None))
        else:  # CONST
            slots.append((S_FIXED, ffi.NULL if a is None else a, None))
    lists = tuple(a for a, _ in k.tensor_lists if vals[a])
    if lists and ref is None:
        ref = vals[lists[0]][0].dtype
    if plan.rng_words is not None:
        w = _expr_value(plan.rng_words, vals) if isinstance(plan.rng_words, B.ArgExpr) else plan.rng_words
        if isinstance(w, Reason):
            return w
        # the call consumes what the runtime says for the elements it writes
        # (the first result, or the written self of an in-place fill)
        numel = _numel(geo[0][0]) if geo else 0
        rng = (plan.generator, 0 if meta else rng_words(k.rt, numel, int(w)), seed_pos, off_pos)
    return Prepared(outs, ref, out_shape, tuple(read), tuple(slots), empty, len(opi.rets) == 1, lists, rng)


def _expr_value(x, vals):
    """An expression's value for these arguments, or the Reason the kernel
    cannot take them (an argument it needs is None)."""
    try:
        return x.value(vals)
    except B.Missing as m:
        return Reason("argument", f"{m} is None ({x.text!r} needs a value)")
    except ValueError as err:   # CExprError
        return Reason("argument", f"{x.text!r} cannot be computed for these arguments: {err}")


def _padded_shapes(k, vals, pad, out_shape):
    """{arg index or "out": (shape the data has, shape the kernel sees)}
    for a call whose dims `pad` the bridge zero-pads."""
    e, sizes = k.entry, k.cons.sizes
    out = {}
    for idx, name, _ in k.tensor_args:
        v = vals[idx]
        if not isinstance(v, torch.Tensor):
            continue
        if name in e.layout or name in e.contiguous or name in e.quirks:
            return Reason("constraint", f"{name} needs a layout, copy or quirk and padding together",
                          "make the padded dims multiples of their constraint")
        if name in sizes:
            out[idx] = (tuple(v.shape), tuple(pad.get(dn, s) for dn, s in zip(sizes[name], v.shape)), name)
        elif name in e.broadcast:
            out[idx] = (tuple(out_shape), None, name)   # expanded to the result, padded like it
    real = tuple(out_shape)
    padded_out = tuple(pad.get(dn, s) for dn, s in zip(sizes["out"], real))
    for idx, (shape, target, name) in list(out.items()):
        if target is None:
            out[idx] = (real, padded_out, name)
    out["out"] = (real, padded_out)
    return out


def _category(v) -> int:
    """PyTorch's type-promotion category of a tensor's dtype, a Python number
    or a dtype: bool < integer < floating < complex."""
    dt = v if isinstance(v, torch.dtype) else v.dtype if isinstance(v, torch.Tensor) else None
    if dt is not None:
        return 0 if dt is torch.bool else 3 if dt.is_complex else 2 if dt.is_floating_point else 1
    return 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 3 if isinstance(v, complex) else 2


def _kind_name(v) -> str:
    return ("bool", "integer", "floating-point", "complex")[_category(v)]


def _input_slot(k, v, idx, ref, out_shape):
    e = k.entry
    name = k.opi.args[idx].name
    if v is None:
        return (S_NULL, idx, None)
    if not isinstance(v, torch.Tensor) or v.device.type == "cpu":
        # a Python number or CPU scalar: a 0-dim constant on the device,
        # broadcast (stride 0) where the kernel expands its inputs
        dt = ref or (v.dtype if isinstance(v, torch.Tensor) else torch.get_default_dtype())
        shape = out_shape if name in e.broadcast and out_shape is not None else ()
        if name in k.plain_inputs:
            return (S_CPU_SCALAR if isinstance(v, torch.Tensor) else S_NUMBER, idx, (dt, shape))
        return (S_ADAPT, idx, name)
    shape, dtype = tuple(v.shape), v.dtype
    if name in k.plain_inputs and (out_shape is None or shape == out_shape or name not in e.broadcast) \
            and (ref is None or dtype == ref or name in e.arg_dtypes):
        return (S_DESC, idx, None)
    return (S_ADAPT, idx, name)

# ------------------------------------------------------------- run


def _int_list(v, fixed_len, has_length):
    if v is None:
        return None
    v = [int(x) for x in v]
    if fixed_len and len(v) == 1 and fixed_len > 1:
        v = v * fixed_len
    return v or (None if has_length else v)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
