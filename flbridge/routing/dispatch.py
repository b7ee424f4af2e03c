"""The entry point: every aten op on an `fl` tensor comes through dispatch().

One handler per op overload, chosen once from the op's kind
(:mod:`flbridge.routing.kinds`): ops that need a kernel go to the chip's
:class:`~flbridge.routing.route.OpRoute` (native kernel or fallback chain); views,
aliases and set_/resize_ to :mod:`flbridge.routing.views`; device crossings and
allocation to :mod:`flbridge.routing.special`; _foreach_ ops to
:mod:`flbridge.routing.foreach`.

One op's path: dispatch() -> OpRoute.__call__ (route.py) ->
NativeKernel.run (native.py) -> the vendor's C function (runtime.py / cffi).
"""
from __future__ import annotations

import threading

import torch

from ..tensor import XPUTensor, traceable
from ..binding.launch import WATCH
from . import collectives as c10d_ops
from . import nested
from . import special as crossings
from . import views as metaops
from .foreach import foreach
from .kinds import ALIAS, COLLECTIVE, COMPOSITE, FOREACH, INPLACE_VIEW, ROUTED, SPECIAL, SPECIAL_OPS, VIEW, kind
from .route import route

aten = torch.ops.aten


def dispatch(cls, func, types, args=(), kwargs=None):
    if not _THREAD.__dict__:
        _first_op_in_thread()
    if WATCH.active:
        return _watched(func, args, kwargs or {})
    h = _HANDLERS.get(func)
    if h is route:
        # the common case, inlined: the chip of the first argument, its route
        a = args[0] if args else None
        if type(a) is XPUTensor:
            r = a._st.chip.routes.get(func)
            if r is not None:
                return r(args, kwargs or {})
    elif h is None:
        h = _HANDLERS[func] = _handler(func)
    if _TRACING.seen and traceable.any_traced(args, kwargs):
        return traceable.trace_dispatch(func, args, kwargs)
    return h(func, args, kwargs or {})


_THREAD = threading.local()
# torch.compile tracing: XPUTensors over fake stand-ins (flbridge.tensor.traceable);
# the fast path reaches trace_dispatch through their sentinel Storage
_TRACING = traceable.STATE


def _watched(func, args, kwargs):
    """dispatch() while observers are attached (flbridge.binding.launch.attach):
    each sees the op around its run (autocompare, logging)."""
    if _TRACING.seen and traceable.any_traced(args, kwargs):
        return traceable.trace_dispatch(func, args, kwargs)
    h = _HANDLERS.get(func)
    if h is None:
        h = _HANDLERS[func] = _handler(func)
    run = _OpThunk(h, func, args, kwargs)
    for obs in WATCH.observers:
        run = obs.wrap_op(func, args, kwargs, run)
    return run()


class _OpThunk:
    __slots__ = ("h", "func", "args", "kwargs")

    def __init__(self, h, func, args, kwargs):
        self.h, self.func, self.args, self.kwargs = h, func, args, kwargs

    def __call__(self):
        return self.h(self.func, self.args, self.kwargs)


def _first_op_in_thread() -> None:
    """Backward must run on the calling thread: PyTorch's Python device guard
    reports one device, so autograd has a per-device worker queue only for
    fl:0.  Any thread that runs backward on fl tensors ran fl ops first."""
    _THREAD.seen = True
    torch._C._set_multithreading_enabled(False)


def _composite(func, args, kwargs):
    """A CompositeImplicitAutograd op (reshape, flatten, contiguous, ...).
    Autograd decomposes these before dispatch; they reach here only from
    inside another op's decomposition, where PyTorch's own decomposition is
    the right answer (reshape, say, is a view or a copy depending on the
    strides, which its schema cannot say)."""
    out = func.decompose(*args, **kwargs)
    if out is NotImplemented:
        return route(func, args, kwargs)
    return out


SPECIAL_HANDLERS = {   # SPECIAL_OPS name -> handler(func, args, kwargs)
    "copy_": crossings.copy_,
    "to_copy": crossings.to_copy,
    "item": crossings.item,
    "empty_like": crossings.empty_like,
    "full_like": crossings.full_like,
    "new_fill": crossings.on_device(crossings.new_fill),   # new_zeros(..., device=other) made there
    "identity": crossings.identity,
    "sdp_choice": crossings.sdp_choice,
    "set_": metaops.set_,
    "resize_": metaops.resize_,
    "conj": lambda f, a, k: aten.conj_physical.default(a[0]),
    "neg_view": lambda f, a, k: aten.neg.default(a[0]),
    "nothing": lambda f, a, k: None,
}
assert set(SPECIAL_OPS.values()) <= set(SPECIAL_HANDLERS), set(SPECIAL_OPS.values()) - set(SPECIAL_HANDLERS)

_BY_KIND = {ROUTED: route, VIEW: metaops.view, ALIAS: metaops.alias, INPLACE_VIEW: metaops.inplace_view,
            FOREACH: foreach, COMPOSITE: _composite, COLLECTIVE: c10d_ops.collective}
_HANDLERS: dict = {}


def _handler(func):
    nh = nested.handler(func)
    if nh is not None:
        return nh        # nested-tensor ops: TransformerEncoder's fast path, else a clear error
    k = kind(func)
    if k == SPECIAL:
        return SPECIAL_HANDLERS[SPECIAL_OPS[func]]
    schema_args = func._schema.arguments
    if k == ROUTED and schema_args and schema_args[0].name == "self" and any(a.name == "device" for a in schema_args):
        return crossings.on_device(route)     # rand_like(x, device=...), new_zeros(..., device=...)
    return _BY_KIND[k]


def install(cls) -> None:
    """Makes dispatch() the ``__torch_dispatch__`` of `cls` (XPUTensor), and
    gives it the traceable-subclass protocol torch.compile needs
    (flbridge.tensor.traceable).  Called once, when the fl device is
    registered (flbridge.backend)."""
    cls.__torch_dispatch__ = classmethod(dispatch)
    traceable.install()
