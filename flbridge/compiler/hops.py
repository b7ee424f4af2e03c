"""Higher-order ops of compiled graphs, run on fl tensors.

A compiled graph can hold higher-order ops (``torch.ops.higher_order.*``),
which flbridge runs as eager steps.  PyTorch implements each per dispatch
key and per tensor subclass; an XPUTensor reaches one as a tensor subclass,
and with no implementation registered for it the op returned NotImplemented
("'NotImplementedType' object is not subscriptable").  :func:`register`
gives a higher-order op an implementation for XPUTensor.

The first call of a compiled graph runs under AOTAutograd's
``_AnalyzeCustomOpInputOutputMode``, which answers NotImplemented for a
tensor subclass so that the subclass handles the op; for a higher-order op
torch 2.13 returns that NotImplemented as the op's result instead.  The
mode's turn for a registered op is therefore to call it again without it.

Registered here (:func:`install`): ``auto_functionalized`` and
``auto_functionalized_v2``, what functionalization makes of a custom op that
mutates its inputs (``torch.library.custom_op(..., mutates_args=...)``):
their dense implementation (clone the mutated bases, run the op on the
clones, return them) works on any tensors, so it runs on XPUTensors as it
does on CPU tensors.  The RNG ops are in :mod:`flbridge.compiler.rng_ops`.
"""
from __future__ import annotations

from torch._C import DispatchKey

from ..tensor import XPUTensor
from ..tensor.traceable import _unwrap, _wrap, any_traced


def _again(hop):
    def handler(mode, *args, **kwargs):    # the mode is popped while its handler runs
        return hop(*args, **kwargs)
    return handler


def register(hop, impl) -> None:
    """impl(*args, **kwargs) answers `hop` on XPUTensors (once per process)."""
    from torch._functorch._aot_autograd import runtime_wrappers
    analyze = getattr(runtime_wrappers, "_AnalyzeCustomOpInputOutputMode", None)
    if XPUTensor not in hop.python_key_table:
        hop.py_impl(XPUTensor)(impl)
    if analyze is not None and analyze not in hop.python_key_table:
        hop.py_impl(analyze)(_again(hop))


def _dense(hop):
    """hop's own dense (CompositeExplicitAutograd) implementation, which calls
    ordinary ops on its tensors; on traced tensors, hop on their stand-ins."""
    kernel = hop.py_kernels[DispatchKey.CompositeExplicitAutograd]

    def impl(*args, **kwargs):
        if any_traced(args, kwargs):
            return _wrap(hop(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))
        return kernel(*args, **kwargs)
    return impl


def install() -> None:
    """Called by the fl backend (these ops appear only in compiled graphs)."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
    for hop in (auto_functionalized, auto_functionalized_v2):
        register(hop, _dense(hop))
