"""Graph passes on AOTAutograd's aten graphs before they are lowered: no-op
clones dropped, and functional updates of graph inputs (x = op(x); copy_(x_in,
x)) turned back into in-place ops, singly or as one _foreach_ op, so a
replayed step writes parameters and optimizer state where they live."""
from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten


def remove_noop_clones(gm: torch.fx.GraphModule) -> int:
    """Drops `clone` nodes that copy a value into the same layout when
    nothing can tell the copy from the original: AOTAutograd's functional
    graphs spell an identity (dropout in eval mode, contiguous() of a
    contiguous tensor) as a clone, and each would be a device copy per call.
    Kept: clones of graph inputs or that are graph outputs (aliasing across
    the graph boundary is AOTAutograd's business), clones that change the
    layout, and any clone in a graph that mutates something."""
    g = gm.graph
    if any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
           and n.target._schema.is_mutable for n in g.nodes):
        return 0
    out_node = next(n for n in reversed(g.nodes) if n.op == "output")
    outputs = {a for a in out_node.args[0] if isinstance(a, torch.fx.Node)}
    removed = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target is not aten.clone.default or n in outputs:
            continue
        src = n.args[0]
        if not isinstance(src, torch.fx.Node) or src.op == "placeholder":
            continue
        a, b = src.meta.get("val"), n.meta.get("val")
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        if a.shape != b.shape or a.stride() != b.stride() or a.dtype != b.dtype or a.device != b.device:
            continue
        n.replace_all_uses_with(src)
        g.erase_node(n)
        removed += 1
    if removed:
        g.lint()
        gm.recompile()
    return removed


def _inplace_variant(op):
    """aten.add.Tensor -> aten.add_.Tensor (None if there is none with the same arguments)."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    base = op._schema.name.split("::")[1]
    packet = getattr(aten, base + "_", None)
    if packet is None:
        return None
    inplace = getattr(packet, op._overloadname, None)
    if inplace is None:
        return None
    a, b = op._schema.arguments, inplace._schema.arguments
    if len(a) != len(b) or any(x.name != y.name for x, y in zip(a, b)):
        return None
    return inplace


def reinplace_input_updates(gm: torch.fx.GraphModule) -> int:
    """`y = op(x, ...); ...; x.copy_(y)` -> `op_(x, ...)`, for a graph input x
    that nothing reads after op but that final copy.  A functional graph of
    an in-place update (an optimizer step: AOTAutograd writes each mutated
    input back with copy_) then costs one kernel per update, not two; the
    values are the same (op_ writes what op returned, into x)."""
    g = gm.graph
    nodes = list(g.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    done = 0
    for n in nodes:
        if n.op != "call_function" or n.target is not aten.copy_.default:
            continue
        x, y = n.args[0], n.args[1]
        if not (isinstance(x, torch.fx.Node) and x.op == "placeholder" and isinstance(y, torch.fx.Node)):
            continue
        if y.op == "call_function" and y.target is operator.getitem:
            src, i = y.args
            if not isinstance(src, torch.fx.Node) or src.op != "call_function":
                continue
            _try_foreach(g, src, order)
            continue
        if y.op != "call_function" or not y.args or y.args[0] is not x:
            continue
        inplace = _inplace_variant(y.target)
        if inplace is None or not _same_layout(x, y) or set(x.users) != {y, n}:
            continue
        y.target = inplace
        n.replace_all_uses_with(x)
        g.erase_node(n)
        done += 1
    done += sum(1 for n in g.nodes if n.meta.get("_fl_reinplaced"))
    if done:
        g.lint()
        gm.recompile()
    return done


def _try_foreach(g, op_node, order):
    """A _foreach op whose every result is copied back into its own first
    list argument (a placeholder read by nothing else)."""
    if op_node.meta.get("_fl_reinplaced") or not op_node.args or not isinstance(op_node.args[0], (list, tuple)):
        return
    inplace = _inplace_variant(op_node.target)
    if inplace is None:
        return
    xs = op_node.args[0]
    gets = {}
    for u in op_node.users:
        if u.op != "call_function" or u.target is not operator.getitem:
            return
        gets[u.args[1]] = u
    copies = []
    for i, x in enumerate(xs):
        y = gets.get(i)
        if not isinstance(x, torch.fx.Node) or x.op != "placeholder" or y is None or not _same_layout(x, y):
            return
        cp = [u for u in y.users if u.op == "call_function" and u.target is aten.copy_.default
              and u.args[0] is x and u.args[1] is y]
        if len(cp) != 1 or set(x.users) != {op_node, cp[0]} or xs.count(x) != 1:
            return
        copies.append((x, y, cp[0]))
    op_node.target = inplace
    op_node.meta["_fl_reinplaced"] = True
    for x, y, cp in copies:
        cp.replace_all_uses_with(x)
        g.erase_node(cp)
        y.replace_all_uses_with(x)
        g.erase_node(y)


def _same_layout(x, y) -> bool:
    a, b = x.meta.get("val"), y.meta.get("val")
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.stride() == b.stride() and a.dtype == b.dtype and a.device == b.device)
