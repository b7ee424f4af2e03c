"""The RNG higher-order ops of compiled graphs, on fl tensors.

Activation checkpointing inside a compiled model (``torch.utils.checkpoint``
around dropout) gives AOTAutograd graphs with
``run_and_save_rng_state(op, *args)`` in the forward (run the random op,
keep the generator state it started from) and
``run_with_rng_state(state, op, *args)`` in the backward (recompute it from
that state, then put the generator back).  PyTorch implements them per
dispatch key (CPU, CUDA, XPU, HPU); an XPUTensor reaches a higher-order op
as a tensor subclass, and with no implementation for it the op returned
NotImplemented ("'NotImplementedType' object is not subscriptable").  Here
they use the chip's generator, as the CUDA versions use the CUDA one.  Both
run as eager steps of a compiled graph (new random numbers every call).

The first call of a compiled graph runs under AOTAutograd's
``_AnalyzeCustomOpInputOutputMode``, which answers NotImplemented for a
tensor subclass so that the subclass handles the op; for a higher-order op
torch 2.13 returns that NotImplemented as the op's result instead.  The
mode's turn for these two ops is therefore to call them again without it.
"""
from __future__ import annotations

import torch
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

from ..tensor import XPUTensor
from ..tensor.traceable import any_traced


def _device_of(args, kwargs):
    return next(a for a in (*args, *kwargs.values()) if type(a) is XPUTensor).device


def _run_and_save(op, *args, **kwargs):
    if any_traced(args, kwargs):     # tracing: the op on the stand-ins, as any other op
        return XPUTensor.__torch_dispatch__(run_and_save_rng_state, (XPUTensor,), (op, *args), kwargs)
    return torch.fl.get_rng_state(_device_of(args, kwargs)), op(*args, **kwargs)


def _run_with(rng_state, op, *args, **kwargs):
    if any_traced(args, kwargs):
        return XPUTensor.__torch_dispatch__(run_with_rng_state, (XPUTensor,), (rng_state, op, *args), kwargs)
    dev = _device_of(args, kwargs)
    current = torch.fl.get_rng_state(dev)
    torch.fl.set_rng_state(rng_state.cpu(), dev)
    try:
        return op(*args, **kwargs)
    finally:
        torch.fl.set_rng_state(current, dev)


def _again(hop):
    def handler(mode, *args, **kwargs):    # the mode is popped while its handler runs
        return hop(*args, **kwargs)
    return handler


def install() -> None:
    """Called by the fl backend (the ops appear only in compiled graphs)."""
    from torch._functorch._aot_autograd import runtime_wrappers
    analyze = getattr(runtime_wrappers, "_AnalyzeCustomOpInputOutputMode", None)
    for hop, impl in ((run_and_save_rng_state, _run_and_save), (run_with_rng_state, _run_with)):
        if XPUTensor not in hop.python_key_table:
            hop.py_impl(XPUTensor)(impl)
        if analyze is not None and analyze not in hop.python_key_table:
            hop.py_impl(analyze)(_again(hop))
