"""Graph passes on AOTAutograd's aten graphs before they are lowered: no-op
clones dropped, and functional updates of graph inputs (x = op(x); copy_(x_in,
x)) turned back into in-place ops, singly or as one _foreach_ op, so a
replayed step writes parameters and optimizer state where they live; and
Dynamo's spelling of _foreach_lerp_ put back into one lerp."""
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
    the graph boundary is AOTAutograd's business), clones of a value that
    shares memory with an input or an output (``x[1:].clone().view(-1)``
    returned: without the copy the output would be a view of the caller's
    x), clones that change the layout, and any clone in a graph that
    mutates something."""
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
        if not isinstance(src, torch.fx.Node) or _escapes(src, outputs):
            continue
        if not _same_layout(src, n):
            continue
        n.replace_all_uses_with(src)
        g.erase_node(n)
        removed += 1
    return _recompiled(gm, removed)


def _escapes(v, outputs) -> bool:
    """v's memory is visible outside the graph: v is, or is a view of, a graph
    input or constant, or v or a view of its base is a graph output."""
    root = v
    while root.op == "call_function" and _aliases(root) and root.args and isinstance(root.args[0], torch.fx.Node):
        root = root.args[0]
    if root.op != "call_function":
        return True                     # a placeholder or a constant (get_attr)
    seen, stack = {root}, [root]
    while stack:
        n = stack.pop()
        if n in outputs:
            return True
        for u in n.users:
            if u not in seen and u.op == "call_function" and _aliases(u) and u.args and u.args[0] is n:
                seen.add(u)
                stack.append(u)
    return False


def _recompiled(gm: torch.fx.GraphModule, changes: int) -> int:
    """After a pass: the graph checked and its code regenerated, if it changed."""
    if changes:
        gm.graph.lint()
        gm.recompile()
    return changes


def fuse_foreach_lerp(gm: torch.fx.GraphModule) -> int:
    """Dynamo traces ``torch._foreach_lerp_(xs, ends, w)`` (AdamW's first
    moment) through its polyfill, as ``d = _foreach_sub(ends, xs)`` and
    ``_foreach_addcmul(xs, d, [full_like(d_i, w), ...])``: three kernels and
    two temporaries per tensor where the chip has one lerp.  This puts the
    lerp back (``_foreach_lerp.Scalar(xs, ends, w)``, the op eager runs)."""
    g = gm.graph
    done = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target is not aten._foreach_addcmul.Scalar or len(n.args) != 3 \
                or n.kwargs.get("value", 1) != 1:
            continue
        xs, ds, ws = n.args
        if not (isinstance(ds, (list, tuple)) and isinstance(ws, (list, tuple)) and len(ds) == len(ws) == len(xs)):
            continue
        if ws and isinstance(ws[0], torch.fx.Node) and ws[0].target is operator.getitem:
            ds, ws = ws, ds          # addcmul(x, w, d) and addcmul(x, d, w) alike
        sub = ds[0].args[0] if isinstance(ds[0], torch.fx.Node) and ds[0].args else None
        if not (isinstance(sub, torch.fx.Node) and sub.target is aten._foreach_sub.List
                and sub.kwargs.get("alpha", 1) == 1 and len(sub.args) == 2 and list(sub.args[1]) == list(xs)
                and len(sub.users) == len(ds)):
            continue
        if not all(isinstance(d, torch.fx.Node) and d.target is operator.getitem and d.args == (sub, i)
                   for i, d in enumerate(ds)):
            continue
        weights = set()
        for d, w in zip(ds, ws):
            if not (isinstance(w, torch.fx.Node) and w.target is aten.full_like.default and len(w.args) == 2
                    and not isinstance(w.args[1], torch.fx.Node) and set(w.users) == {n}
                    and not {k for k in w.kwargs if k not in ("pin_memory", "dtype", "layout", "device")}
                    and _same_layout(w, d) and set(d.users) <= {n, w}):
                break
            weights.add(w.args[1])
        else:
            if len(weights) != 1:
                continue
            n.target = aten._foreach_lerp.Scalar
            n.args = (xs, sub.args[0], weights.pop())
            for w in ws:
                g.erase_node(w)
            for d in ds:
                g.erase_node(d)
            g.erase_node(sub)
            done += 1
    return _recompiled(gm, done)


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
    that nothing reads after op but that final copy (earlier reads are fine:
    they see x before op_ writes it).  A functional graph of an in-place
    update (an optimizer step: AOTAutograd writes each mutated input back
    with copy_) then costs one kernel per update, not two; the values are
    the same (op_ writes what op returned, into x, and whatever read y reads
    x)."""
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
            src, _ = y.args
            if not isinstance(src, torch.fx.Node) or src.op != "call_function":
                continue
            _try_foreach(g, src, order)
            continue
        if y.op != "call_function" or not y.args or y.args[0] is not x:
            continue
        inplace = _inplace_variant(y.target)
        if inplace is None or not _same_layout(x, y) or not _only_read_before(x, y, n, order) \
                or any(a is x for a in y.args[1:]) or any(v is x for v in y.kwargs.values()):
            continue
        y.target = inplace
        n.replace_all_uses_with(x)
        g.erase_node(n)
        done += 1
    done += sum(1 for n in g.nodes if n.meta.get("_fl_reinplaced"))
    return _recompiled(gm, done)


def _try_foreach(g, last, order):
    """A chain of _foreach ops, each taking the one before's results as its
    first list (and nothing else using them), whose first op reads a list of
    graph inputs and whose last op's results are each copied back into its
    own input: every op of the chain becomes in-place on the inputs.
    (AdamW's `exp_avg_sq * beta2 + (1 - beta2) * grad**2` is such a chain
    of two.)"""
    if last.meta.get("_fl_reinplaced"):
        return
    chain = [last]                       # last op first
    while True:
        op = chain[-1]
        if not op.args or not isinstance(op.args[0], (list, tuple)) or _inplace_variant(op.target) is None:
            return
        first = op.args[0]
        if all(isinstance(a, torch.fx.Node) and a.op == "placeholder" for a in first):
            break
        prev = first[0].args[0] if isinstance(first[0], torch.fx.Node) and first[0].args else None
        if not (isinstance(prev, torch.fx.Node) and prev.op == "call_function" and len(prev.users) == len(first)
                and all(isinstance(a, torch.fx.Node) and a.op == "call_function" and a.target is operator.getitem
                        and a.args == (prev, i) and set(a.users) == {op} for i, a in enumerate(first))):
            return
        chain.append(prev)
    xs = chain[-1].args[0]
    gets = {}
    for u in last.users:
        if u.op != "call_function" or u.target is not operator.getitem:
            return
        gets[u.args[1]] = u
    copies = []
    for i, x in enumerate(xs):
        y = gets.get(i)
        if y is None or not _same_layout(x, y) or xs.count(x) != 1:
            return
        cp = [u for u in y.users if u.op == "call_function" and u.target is aten.copy_.default
              and u.args[0] is x and u.args[1] is y]
        if len(cp) != 1 or not _only_read_before(x, chain[-1], cp[0], order):
            return
        copies.append((x, y, cp[0]))
    # each op_ writes x[i] while it reads its other arguments: none of them may
    # hold an x or a result of the chain
    inner = {x for x, _, _ in copies}
    for op in chain:
        inner.update(op.args[0])
    for op in chain:
        for a in (*op.args[1:], *op.kwargs.values()):
            for b in (a if isinstance(a, (list, tuple)) else (a,)):
                if b in inner:
                    return
    for op in reversed(chain[:-1]):          # the in-between results: x itself now
        for k, item in enumerate(op.args[0]):
            if not _same_layout(xs[k], item):
                return
    for op in chain[:-1]:
        items = op.args[0]
        op.args = (list(xs), *op.args[1:])
        for item in items:
            g.erase_node(item)
    for op in chain:
        op.target = _inplace_variant(op.target)
        op.meta["_fl_reinplaced"] = True
    for x, y, cp in copies:
        cp.replace_all_uses_with(x)
        g.erase_node(cp)
        y.replace_all_uses_with(x)
        g.erase_node(y)


def _only_read_before(x, op_node, copy_node, order) -> bool:
    """Every use of x but op_node and the final copy comes before op_node,
    and so does every use of a view of x (so writing op's result into x
    hides nothing a later node reads)."""
    at = order[op_node]

    def before(v, skip):
        for u in v.users:
            if u in skip:
                continue
            if order[u] >= at or (_aliases(u) and not before(u, ())):
                return False
        return True
    return before(x, (op_node, copy_node))


def _aliases(n) -> bool:
    """n's result may share memory with an argument (a view, getitem)."""
    if n.op != "call_function":
        return True
    if n.target is operator.getitem:
        return True
    if isinstance(n.target, torch._ops.OpOverload):
        return any(r.alias_info is not None for r in n.target._schema.returns)
    return True


def _same_layout(x, y) -> bool:
    a, b = x.meta.get("val"), y.meta.get("val")
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.stride() == b.stride() and a.dtype == b.dtype and a.device == b.device)
