"""_foreach_* ops (the optimizers' multi-tensor ops) run element by
element, each element's op going through the router like any other call.

Most `_foreach_<op>` apply `aten::<op>` to each element.  The others, as
their CPU/CUDA kernels define them: in-place forms whose plain op has no
in-place variant (`_foreach_maximum_` -> `a.copy_(maximum(a, b))`, used
by Adam(amsgrad=True)), scalar forms of maximum/minimum (`clamp_min` /
`clamp_max`, Adamax), `_foreach_norm` (`linalg_vector_norm`) and a
`Tensor scalars` argument holding one scalar per element
(`_foreach_addcdiv.Tensor`).  An op with no per-element equivalent
(`_foreach_powsum`) runs whole through the router (the CPU fallback)."""
from __future__ import annotations

import torch

from ..specs import NO_DEFAULT, info, normalize

aten = torch.ops.aten

# the scalar form of these is another op (CUDA's foreach kernels use it too)
_SCALAR_FORMS = {"maximum": "clamp_min", "minimum": "clamp_max"}


def foreach(func, args, kwargs):
    """_foreach_* ops run element by element, each through the router."""
    opi = info(func)
    vals = normalize(opi, args, kwargs)
    for i, a in enumerate(opi.args):
        if a.name == "scalars" and isinstance(vals[i], torch.Tensor):
            vals[i] = vals[i].tolist()          # one scalar per element (the .Tensor overloads)
    lists = [i for i, v in enumerate(vals) if isinstance(v, (list, tuple))]
    n = len(vals[lists[0]])
    results = []
    for k in range(n):
        elem = [vals[i][k] if i in lists else vals[i] for i in range(len(vals))]
        run = _per_element(func, elem)
        if run is None:
            from .route import route
            return route(func, args, kwargs)     # no per-element op: the whole op through the router
        results.append(run(elem))
    return None if not opi.rets else results


_PER_ELEMENT: dict = {}


def _per_element(func, elem):
    """A callable applying func's per-element op to one element's values
    (or None if there is none); cached per (op, which values are tensors)."""
    kinds = tuple(isinstance(v, torch.Tensor) for v in elem)
    key = (func, kinds)
    if key in _PER_ELEMENT:
        return _PER_ELEMENT[key]
    got = _PER_ELEMENT[key] = _find(func, elem)
    return got


def _find(func, elem):
    name = func._schema.name[len("aten::_foreach_"):]
    if name == "norm":
        return lambda e: aten.linalg_vector_norm.default(e[0], e[1], dtype=e[2])
    inplace = name.endswith("_")
    base = name[:-1] if inplace else name
    scalar_form = len(elem) > 1 and not isinstance(elem[1], torch.Tensor) and base in _SCALAR_FORMS
    target = _SCALAR_FORMS[base] if scalar_form else base
    if inplace:
        packet = getattr(aten, target + "_", None)
        if packet is not None:
            return _bind(packet, elem)
        packet = getattr(aten, target, None)      # no in-place form: the result written into the element
        plain = _bind(packet, elem) if packet is not None else None
        if plain is None:
            return None
        return lambda e: aten.copy_.default(e[0], plain(e))
    packet = getattr(aten, target, None)
    return _bind(packet, elem) if packet is not None else None


def _bind(packet, elem):
    """The overload of `packet` that takes the element's values (positionally,
    then as its keyword-only arguments), as a callable."""
    for ovl in packet.overloads():
        if "out" in ovl:
            continue
        op = getattr(packet, ovl)
        oi = info(op)
        pos = [a for a in oi.args if not a.kwarg_only]
        kw = [a for a in oi.args if a.kwarg_only]
        npos = min(len(pos), len(elem))
        if any(a.default is NO_DEFAULT for a in pos[npos:]) or len(elem) - npos > len(kw):
            continue
        bound = pos[:npos] + kw[:len(elem) - npos]
        if all(_fits(a, v) for a, v in zip(bound, elem)):
            names = [a.name for a in kw[:len(elem) - npos]]
            return lambda e, op=op, npos=npos, names=names: op(*e[:npos], **dict(zip(names, e[npos:])))
    return None


def _fits(arg, v) -> bool:
    if v is None:
        return arg.optional or arg.kind == "tensor?"
    if arg.kind == "tensor":
        return isinstance(v, torch.Tensor)
    if arg.kind == "tensor?":
        return isinstance(v, torch.Tensor)
    if arg.kind in ("int", "float", "number", "bool"):
        return isinstance(v, (int, float, bool)) or (arg.kind == "number" and isinstance(v, complex))
    return not isinstance(v, torch.Tensor)
