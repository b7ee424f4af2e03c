"""A compiled Adam or AdamW step as the vendor's fused kernel.

``torch.optim.Adam`` / ``AdamW`` (foreach, ``capturable=True``: PyTorch's
recipe for a compiled optimizer) give AOTAutograd graphs of 17-18
``_foreach`` ops per parameter group, as torch 2.13's ``_multi_tensor_adam``
writes them (after the passes of :mod:`flbridge.compiler.passes` put the
updates back in place)::

    _foreach_add_(steps, 1)
    grads' = _foreach_neg(grads)                     maximize
    _foreach_mul_(params, 1 - lr * wd)               AdamW with weight decay
    grads' = _foreach_add(grads, params, alpha=wd)   Adam with weight decay
    _foreach_lerp_(exp_avgs, grads', 1 - beta1)
    _foreach_mul_(exp_avg_sqs, beta2)
    _foreach_addcmul_(exp_avg_sqs, grads', grads', 1 - beta2)
    bc1 = reciprocal((pow(beta1, steps) - 1) / lr)               # -lr / (1 - beta1^t)
    bc2 = sqrt(-(pow(beta2, steps) - 1))                         # sqrt(1 - beta2^t)
    _foreach_addcdiv_(params, exp_avgs, (sqrt(exp_avg_sqs) / bc2 + eps) / bc1)

That is about 14 vendor calls per parameter and a temporary for each. A chip
whose spec has ``_fused_adam_`` / ``_fused_adamw_`` makes the same update in
one call for the whole list; :func:`fuse_adam_steps` finds the chain and puts
that call in its place when the chip runs it natively for these tensors.
Anything else stays as it is: amsgrad, tensor learning rates or betas, step
counters on the CPU (``capturable=False``), a chain whose values something
else reads, other ops touching the lists in between.

The fused kernel computes the update in another order (bias corrections in
double, as PyTorch's own fused kernels): results agree with the foreach step
to float32 rounding, not bit for bit.
"""
from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten

_FUSED = {True: aten._fused_adamw_.default, False: aten._fused_adam_.default}


def fuse_adam_steps(gm: torch.fx.GraphModule, runs_natively) -> int:
    """Replaces each Adam/AdamW chain by one fused op; returns how many.
    `runs_natively(op, args, kwargs)`: whether the chip runs op natively for
    these arguments (fake tensors)."""
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    done = 0
    for r in list(g.nodes):
        if r.op != "call_function" or r.target is not aten._foreach_addcdiv_.Scalar:
            continue
        m = _match(r, order)
        if m is None:
            continue
        op = _FUSED[m["decoupled"]]
        lists = [m["params"], m["grads"], m["exp_avgs"], m["exp_avg_sqs"], [], m["steps"]]
        kwargs = dict(lr=m["lr"], beta1=m["beta1"], beta2=m["beta2"], weight_decay=m["wd"], eps=m["eps"],
                      amsgrad=False, maximize=m["maximize"])
        fake = [[x.meta.get("val") for x in lst] for lst in lists]
        if any(not isinstance(v, torch.Tensor) for lst in fake for v in lst):
            continue
        try:
            if not runs_natively(op, fake, kwargs):
                continue
        except Exception:  # noqa: BLE001 - a prediction that fails is a no: the graph stays as it is
            continue
        with g.inserting_before(r):
            fused = g.call_function(op, tuple(list(x) for x in lists), kwargs)
        fused.meta["val"] = None
        for n in sorted(m["remove"], key=order.__getitem__, reverse=True):
            for u in list(n.users):         # the getitems of a removed op (only the chain used them)
                g.erase_node(u)
            g.erase_node(n)
        done += 1
    if done:
        g.lint()
        gm.recompile()
    return done


def _match(r, order):
    """The chain ending in r (``_foreach_addcdiv_(params, exp_avgs, denom)``),
    as {params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, eps,
    wd, decoupled, remove}, or None."""
    value = r.args[3] if len(r.args) > 3 else r.kwargs.get("value", 1)
    if len(r.args) < 3 or value != 1 or set(r.kwargs) - {"value"}:
        return None
    params, exp_avgs, denom = r.args[:3]
    chain = []
    q = _producer(denom, aten._foreach_div.List, r, chain)           # (d + eps) / step_size
    p = q and _producer(q.args[0], aten._foreach_add.Scalar, q, chain)   # d + eps
    o = p and _producer(p.args[0], aten._foreach_div.List, p, chain)     # sqrt(v) / bc2_sqrt
    n = o and _producer(o.args[0], aten._foreach_sqrt.default, o, chain)
    bc2 = o and _producer(o.args[1], aten._foreach_sqrt.default, o, chain)
    neg = bc2 and _producer(bc2.args[0], aten._foreach_neg.default, bc2, chain)
    sub2 = neg and _producer(neg.args[0], aten._foreach_sub.Scalar, neg, chain)
    pow2 = sub2 and _producer(sub2.args[0], aten._foreach_pow.ScalarAndTensor, sub2, chain)
    rec = q and _producer(q.args[1], aten._foreach_reciprocal.default, q, chain)
    div = rec and _producer(rec.args[0], aten._foreach_div.Scalar, rec, chain)
    sub1 = div and _producer(div.args[0], aten._foreach_sub.Scalar, div, chain)
    pow1 = sub1 and _producer(sub1.args[0], aten._foreach_pow.ScalarAndTensor, sub1, chain)
    if not pow1 or not pow2 or len(p.args) != 2 or len(div.args) != 2 or sub1.args[1:] != (1,) \
            or sub2.args[1:] != (1,) or _nodes(pow1.args[1]) != _nodes(pow2.args[1]):
        return None
    beta1, beta2, lr, eps = pow1.args[0], pow2.args[0], div.args[1], p.args[1]
    if not all(type(x) in (float, int) for x in (beta1, beta2, lr, eps)) or lr == 0:
        return None
    steps, sqs = _nodes(pow1.args[1]), _nodes(n.args[0])
    params, exp_avgs = _nodes(params), _nodes(exp_avgs)
    if None in (steps, sqs, params, exp_avgs) or not len(params) == len(exp_avgs) == len(sqs) == len(steps):
        return None
    # the in-place updates before r, nearest first: lerp (first moment), mul and addcmul
    # (second), the weight decay
    lerp = mul2 = addcmul = decay = None
    for x in _before(r):
        t = x.target if x.op == "call_function" else None
        if t is aten._foreach_lerp_.Scalar and _nodes(x.args[0]) == exp_avgs and lerp is None:
            lerp = x
        elif t is aten._foreach_addcmul_.Scalar and _nodes(x.args[0]) == sqs and addcmul is None:
            addcmul = x
        elif t is aten._foreach_mul_.Scalar and _nodes(x.args[0]) == sqs and mul2 is None and addcmul is not None:
            mul2 = x
        elif t is aten._foreach_mul_.Scalar and _nodes(x.args[0]) == params and decay is None and lerp is not None:
            decay = x
    if lerp is None or mul2 is None or addcmul is None or order[mul2] > order[addcmul]:
        return None
    grads = _nodes(lerp.args[1])
    av = addcmul.args[3] if len(addcmul.args) > 3 else addcmul.kwargs.get("value", 1)
    if grads is None or _nodes(addcmul.args[1]) != grads or _nodes(addcmul.args[2]) != grads \
            or not _near(lerp.args[2], 1 - beta1) or not _near(mul2.args[1], beta2) or not _near(av, 1 - beta2):
        return None
    removed = set(chain) | {lerp, mul2, addcmul, r}
    wd, decoupled = 0.0, True
    if decay is not None:
        s = decay.args[1]
        if type(s) not in (float, int):
            return None
        wd = (1 - s) / lr
        removed.add(decay)
    readers = {lerp, addcmul}
    l2 = _l2_decay(grads, params, readers)
    if l2 is not None:
        if decay is not None:
            return None
        l2_node, grads, wd = l2
        decoupled = False
        removed.add(l2_node)
        readers = {l2_node}
    maximize = _negated(grads, readers)
    if maximize is not None:
        neg_node, grads = maximize
        removed.add(neg_node)
    # nothing else between the first update and r may touch these lists (the
    # step counters: between their first read and r; their increment comes before)
    first = min(order[x] for x in removed)
    first_pow = min(order[pow1], order[pow2])
    watched = set(params) | set(exp_avgs) | set(sqs) | set(grads)
    for x in _between(r, first, order):
        if x in removed or x.target is operator.getitem and x.args[0] in removed:
            continue
        touched = set(x.all_input_nodes)
        if watched & touched or order[x] > first_pow and set(steps) & touched:
            return None
    if len(grads) != len(params):
        return None
    return dict(params=params, grads=grads, exp_avgs=exp_avgs, exp_avg_sqs=sqs, steps=steps, lr=float(lr),
                beta1=float(beta1), beta2=float(beta2), eps=float(eps), wd=float(wd), decoupled=decoupled,
                maximize=maximize is not None, remove=removed)


def _nodes(lst):
    """A list argument as a tuple of graph nodes (None if it is not one)."""
    if not isinstance(lst, (list, tuple)) or not all(isinstance(x, torch.fx.Node) for x in lst):
        return None
    return tuple(lst)


def _producer(lst, target, consumer, chain):
    """The `target` op whose results make up list `lst`, read by `consumer`
    only (see _made_by); it joins `chain`."""
    src = _made_by(lst, target, {consumer})
    if src is not None:
        chain.append(src)
    return src


def _made_by(lst, target, readers):
    """The `target` op whose results, one getitem each in order, are the
    nodes of list `lst`, if only `readers` read them (and they are all its
    results); else None."""
    items = _nodes(lst)
    if not items or items[0].target is not operator.getitem:
        return None
    src = items[0].args[0]
    if not isinstance(src, torch.fx.Node) or src.op != "call_function" or src.target is not target:
        return None
    if any(x.target is not operator.getitem or x.args != (src, i) or not set(x.users) <= readers
           for i, x in enumerate(items)) or len(src.users) != len(items):
        return None
    return src


def _negated(grads, readers):
    """maximize: ``grads' = _foreach_neg(grads)`` read only by `readers`:
    (the neg, the original grads), or None."""
    src = _made_by(grads, aten._foreach_neg.default, readers)
    inner = _nodes(src.args[0]) if src is not None else None
    return None if inner is None else (src, inner)


def _l2_decay(grads, params, readers):
    """Adam's weight decay, ``grads' = _foreach_add(grads, params, alpha=wd)``
    read only by `readers`: (the add, the original grads, wd), or None."""
    src = _made_by(grads, aten._foreach_add.List, readers)
    if src is None:
        return None
    alpha = src.kwargs.get("alpha", src.args[2] if len(src.args) > 2 else 1)
    if _nodes(src.args[1]) != params or type(alpha) not in (float, int) or set(src.kwargs) - {"alpha"}:
        return None
    inner = _nodes(src.args[0])
    return None if inner is None else (src, inner, alpha)


def _before(r):
    """The nodes before r, nearest first."""
    x = r.prev
    while x.op != "root":
        yield x
        x = x.prev


def _between(r, start, order):
    """The nodes after position `start` and before r, in order."""
    nodes = []
    for x in _before(r):
        if order[x] <= start:
            break
        nodes.append(x)
    return nodes[::-1]


def _near(a, b) -> bool:
    return type(a) in (float, int) and abs(a - b) <= 1e-12 * max(1.0, abs(b))


def chip_runs_natively(op, args, kwargs) -> bool:
    """Whether the chip of these fake fl tensors runs `op` with its own kernel."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..devices import chip_for
    from ..routing import route_of
    from ..routing.argkeys import to_meta
    dev = next(t.device for lst in args for t in lst)
    if dev.type != "fl" or any(t.device != dev for lst in args for t in lst):
        return False        # capturable=False keeps the step counters on the CPU
    with unset_fake_temporarily():
        route, _, _ = route_of(chip_for(dev), op).predict(to_meta(args), kwargs)
    return route == "native"
