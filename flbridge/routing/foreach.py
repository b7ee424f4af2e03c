"""_foreach_* ops (the optimizers' multi-tensor ops) run element by
element, each element's op going through the router like any other call."""
from __future__ import annotations

import torch

from ..specs import NO_DEFAULT, info, normalize

aten = torch.ops.aten


def foreach(func, args, kwargs):
    """_foreach_* ops run element by element, each through the router."""
    opi = info(func)
    vals = normalize(opi, args, kwargs)
    lists = [i for i, v in enumerate(vals) if isinstance(v, (list, tuple))]
    n = len(vals[lists[0]])
    results = []
    for k in range(n):
        elem = [vals[i][k] if i in lists else vals[i] for i in range(len(vals))]
        op, npos, kwnames = _per_element(func, elem)
        results.append(op(*elem[:npos], **dict(zip(kwnames, elem[npos:]))))
    return None if not opi.rets else results


_PER_ELEMENT: dict = {}


def _per_element(func, elem):
    """The plain op (overload) a _foreach_ op applies to each element, and how
    to pass it the element's values (positional count, keyword names)."""
    kinds = tuple(isinstance(v, torch.Tensor) for v in elem)
    key = (func, kinds)
    got = _PER_ELEMENT.get(key)
    if got is not None:
        return got
    name = func._schema.name[len("aten::_foreach_"):]
    packet = getattr(aten, name)
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
            got = _PER_ELEMENT[key] = (op, npos, [a.name for a in kw[:len(elem) - npos]])
            return got
    raise NotImplementedError(f"flbridge: no aten::{name} overload takes the elements of {func}")


def _fits(arg, v) -> bool:
    if arg.kind == "tensor":
        return isinstance(v, torch.Tensor)
    if arg.kind == "tensor?":
        return v is None or isinstance(v, torch.Tensor)
    if arg.kind in ("int", "float", "number", "bool"):
        return isinstance(v, (int, float, bool)) or (arg.kind == "number" and isinstance(v, complex))
    return not isinstance(v, torch.Tensor)
