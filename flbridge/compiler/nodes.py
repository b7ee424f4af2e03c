"""What the nodes of an AOTAutograd graph are to the lowering
(:mod:`flbridge.compiler.lowering`): a step that must run eagerly on every
call (and why), a constant fill made once at capture, values with symbolic
or data-dependent sizes."""
from __future__ import annotations

import operator

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

aten = torch.ops.aten


_CROSSING = {aten._to_copy.default, aten.copy_.default, aten.copy.default, aten._copy_from.default,
             aten._copy_from_and_resize.default, aten._local_scalar_dense.default, aten.item.default}


def must_be_eager(n):
    """Why node n must run eagerly on every call (None if it may be captured)."""
    if n.op not in ("call_function", "call_method", "call_module"):
        return None if n.op == "get_attr" else "not an op"
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        if torch.Tag.nondeterministic_seeded in t.tags:
            return "random: new numbers every call"
        if t in _CROSSING:
            devs = {v.device.type for v in fake_tensors(n)}
            if devs - {"fl"} or t in (aten._local_scalar_dense.default, aten.item.default):
                return "moves data between the host and the device"
        if any(v.device.type != "fl" for v in fake_tensors(n)):
            return "works on CPU tensors"
        return None
    if t is operator.getitem:
        return None
    if isinstance(t, torch._ops.HigherOrderOperator):
        return f"higher-order op {t}"
    return None


_FILLS = {aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.full.default,
          aten.zeros.default, aten.ones.default, aten.scalar_tensor.default}


def is_constant_fill(n, outputs) -> bool:
    """n fills a new fl tensor with a value fixed in the graph (its shape
    too: a *_like reads only its argument's metadata), and nothing writes it
    or sees it outside the graph: one tensor made at capture serves every
    call."""
    if n.op != "call_function" or n.target not in _FILLS or n in outputs:
        return False
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor) or v.device.type != "fl":
        return False
    like = n.target in (aten.full_like.default, aten.zeros_like.default, aten.ones_like.default)
    rest = n.args[1:] if like else n.args
    if any(isinstance(a, torch.fx.Node) for a in (*rest, *n.kwargs.values())) \
            or any(isinstance(a, torch.SymInt) or isinstance(a, (list, tuple)) and any(isinstance(b, torch.SymInt)
                   for b in a) for a in (*n.args, *n.kwargs.values())):
        return False
    if like and any(isinstance(d, torch.SymInt) for d in (*n.args[0].meta["val"].shape,)):
        return False
    for u in n.users:
        if u.op != "call_function":
            return False
        if u.target is operator.getitem:
            return False
        if isinstance(u.target, torch._ops.OpOverload):
            if any(_holds(u.args[k] if k < len(u.args) else u.kwargs.get(a.name), n)
                   for k, a in enumerate(u.target._schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write):
                return False
            if any(r.alias_info is not None for r in u.target._schema.returns) and _holds(u.args[:1], n):
                return False     # a view of it might be written or leave the graph
        else:
            return False
    return True


def _holds(a, n) -> bool:
    if a is n:
        return True
    if isinstance(a, (list, tuple)):
        return any(_holds(b, n) for b in a)
    return False


def fake_tensors(n):
    vals = []
    for a in (n, *n.all_input_nodes):
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor):
            vals.append(v)
        elif isinstance(v, (list, tuple)):
            vals.extend(x for x in v if isinstance(x, torch.Tensor))
    return vals


def data_dependent(gm) -> bool:
    """A value of the graph has a size only its data decides (an unbacked symbol)."""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if v is None:
            continue
        try:
            if free_unbacked_symbols(v):
                return True
        except (TypeError, AssertionError, AttributeError):
            continue        # a value with no sizes (a string, a device, an opaque object)
    return False


def symbolic(val) -> bool:
    """A traced tensor whose sizes, strides or offset are symbols."""
    if not isinstance(val, torch.Tensor):
        return False
    return any(isinstance(d, torch.SymInt) for d in (*val.shape, *val.stride(), val.storage_offset()))
