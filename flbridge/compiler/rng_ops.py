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

They are registered through :func:`flbridge.compiler.hops.register` (which
also takes care of AOTAutograd's first-call analysis mode).
"""
from __future__ import annotations

import torch
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

from ..tensor import XPUTensor
from ..tensor.traceable import any_traced
from .hops import register


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


def install() -> None:
    """Called by the fl backend (the ops appear only in compiled graphs)."""
    for hop, impl in ((run_and_save_rng_state, _run_and_save), (run_with_rng_state, _run_with)):
        register(hop, impl)
