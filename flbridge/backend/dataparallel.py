"""``nn.DataParallel`` across fl devices.

DataParallel moves data with ``torch.nn.parallel.comm`` (``scatter``,
``gather``, ``broadcast``, ``broadcast_coalesced``), whose kernels
(``torch._C._scatter``, ``_gather``, ``_broadcast_coalesced``, ...) exist
only in CUDA builds of torch: on this CPU build the attributes are missing
and DataParallel on any accelerator fails with an AttributeError.  Its
other parts (``replicate``, ``parallel_apply`` through ``torch.accelerator``,
``reduce_add`` for the gradients) are Python and device-neutral.

This module gives those four functions a Python body for fl tensors (and,
when torch has no such kernels at all, for every call, which can then only
mean the accelerator: fl): each chunk, copy or gathered part is one
``Tensor.to`` of the result's device, the copies flbridge makes anyway.
The results keep torch's contracts: a chunk already on its device is a
view (``copy=False``), the source device's replicas are the inputs
themselves, ``out=`` variants write into the given tensors.

As with CUDA, DistributedDataParallel (one process per chip, flccl) is the
faster route; DataParallel runs the replicas in threads of one process.
"""
from __future__ import annotations

import functools

import torch

_FUNCTIONS = ("scatter", "gather", "broadcast", "broadcast_coalesced")


def _ours(tensors) -> bool:
    """True when this call is fl's to make."""
    if not hasattr(torch._C, "_scatter"):
        return True       # a build without the CUDA kernels: nothing else could take it
    return any(isinstance(t, torch.Tensor) and t.device.type == "fl" for t in tensors)


def _device(d) -> torch.device:
    if isinstance(d, torch.device):
        return d if d.index is not None or d.type == "cpu" else torch.device(d.type, torch.fl.current_device())
    if isinstance(d, str):
        return _device(torch.device(d))
    if d is None:
        return torch.device("fl", torch.fl.current_device())
    if d == -1:
        return torch.device("cpu")
    return torch.device("fl", int(d))


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    if out is not None:
        if devices is not None or chunk_sizes is not None:
            raise RuntimeError("'devices' and 'chunk_sizes' must not be specified when 'out' is specified")
        parts = tensor.split([o.size(dim) for o in out], dim)
        for o, p in zip(out, parts):
            o.copy_(p)
        return tuple(out)
    devs = [_device(d) for d in devices]
    parts = tensor.chunk(len(devs), dim) if chunk_sizes is None else tensor.split(list(chunk_sizes), dim)
    return tuple(p.to(d, copy=False) for p, d in zip(parts, devs))


def gather(tensors, dim=0, destination=None, *, out=None):
    if out is not None:
        if destination is not None:
            raise RuntimeError("'destination' must not be specified when 'out' is specified")
        return torch.cat([t.to(out.device) for t in tensors], dim, out=out)
    dest = _device(destination)
    return torch.cat([t.to(dest) for t in tensors], dim)


def broadcast(tensor, devices=None, *, out=None):
    if out is not None:
        if devices is not None:
            raise RuntimeError("'devices' must not be specified when 'out' is specified")
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(tensor.to(_device(d), copy=False) for d in devices)


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    devs = [_device(d) for d in devices]
    src = devs[0]
    for t in tensors:
        if t.device != src:
            raise RuntimeError(f"broadcast_coalesced: every tensor must be on the first device {src}, "
                               f"got one on {t.device}")
    # the source device's replicas are the tensors themselves, as in torch
    return [tuple(tensors)] + [tuple(t.detach().to(d, copy=True) for t in tensors) for d in devs[1:]]


def _dispatching(name, ours, original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        first = args[0] if args else kwargs.get("tensor", kwargs.get("tensors"))
        tensors = first if isinstance(first, (list, tuple)) else (first,)
        if _ours(tensors):
            return ours(*args, **kwargs)
        return original(*args, **kwargs)
    call.__flbridge_original__ = original
    return call


def install() -> None:
    from torch.nn.parallel import comm
    for name in _FUNCTIONS:
        fn = getattr(comm, name)
        if getattr(fn, "__flbridge_original__", None) is None:
            setattr(comm, name, _dispatching(name, globals()[name], fn))
