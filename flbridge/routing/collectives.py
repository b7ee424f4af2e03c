"""c10d and functional-collective ops that reach ``XPUTensor.__torch_dispatch__``.

They come from groups that are not "flccl" (``init_process_group("gloo")``
with fl tensors), from collectives the flccl group leaves to its base class,
and from functional collectives (``torch.distributed._functional_collectives``,
DTensor, DeviceMesh).  Each is run on the CPU with the fl tensors staged over
their host bytes (:mod:`flbridge.tensor.hoststage`: one download, one lazy upload,
none on a mapping chip), so the group's CPU backend (gloo) does the work.

* ``c10d.*`` ops return the caller's fl tensors and a Work whose future holds
  them (DDP's C++ reducer reads the result from the future).
* ``_c10d_functional.*`` ops complete before returning (their results are
  fl tensors over the CPU results' bytes, no copy); ``wait_tensor`` is then
  the identity.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from ..tensor import HostStage, Storage, XPUTensor, has_fl, new_tensor, tree_map

# c10d ops by what they do to their first argument (the others are inputs)
_READ_WRITE = {"allreduce_", "broadcast_", "reduce_", "allreduce_coalesced_"}
_READ_ONLY = {"send", "barrier", "monitored_barrier_", "check_for_nan"}


def collective(func, args, kwargs):
    if func.namespace == "c10d":
        return _c10d(func, args, kwargs)
    return _functional(func, args, kwargs)


def _c10d(func, args, kwargs):
    name = func._schema.name.split("::", 1)[1]
    stage = HostStage()
    new = list(args)
    # inputs first: an output may share a storage with an input
    for i in range(1, len(args)):
        if has_fl(args[i]):
            new[i] = tree_map(stage.read, args[i])
    if name in _READ_ONLY:
        new[0] = tree_map(stage.read, args[0])
    else:
        rw = name in _READ_WRITE
        new[0] = tree_map(lambda t: stage.write(t, read=rw), args[0])
    out = func(*new, **kwargs)
    if out is None:
        return None
    result = args[0] if isinstance(args[0], list) else [args[0]]
    boxed = out[-1] if isinstance(out, tuple) else out
    # Completed here: a Work made from a future swallows errors in wait(),
    # and a Python Work cannot outlive this call inside C++.  So this path
    # (the safety net for groups other than flccl) is synchronous.
    dist.Work.unbox(boxed).wait()
    stage.finish()
    fut = torch.futures.Future()
    fut.set_result(result)
    w = _create_work_from_future(fut).boxed()
    return (args[0], w) if isinstance(out, tuple) else w


def _functional(func, args, kwargs):
    name = func._schema.name.split("::", 1)[1]
    if name == "wait_tensor":
        return args[0]  # collectives on fl tensors complete before they return
    if name == "_wrap_tensor_autograd":
        from torch.distributed._functional_collectives import AsyncCollectiveTensor
        return AsyncCollectiveTensor(args[0])
    schema = func._schema
    stage = HostStage()
    mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    new_args = list(args)
    new_kwargs = dict(kwargs)
    order = [(i, a.name) for i, a in enumerate(schema.arguments) if a.name not in mutated] + \
            [(i, a.name) for i, a in enumerate(schema.arguments) if a.name in mutated]
    for i, n in order:  # inputs first (see hoststage)
        if i < len(args):
            v, put = args[i], lambda x, i=i: new_args.__setitem__(i, x)
        elif n in kwargs:
            v, put = kwargs[n], lambda x, n=n: new_kwargs.__setitem__(n, x)
        else:
            continue
        if has_fl(v):
            put(tree_map(stage.write if n in mutated else stage.read, v))
    chip = stage.chip
    out = func(*new_args, **new_kwargs)
    tree_map(torch.ops._c10d_functional.wait_tensor.default, out)
    stage.finish()
    # returns that alias a mutated argument are that (fl) argument
    rets = schema.returns
    if len(rets) == 1 and rets[0].alias_info is not None and rets[0].alias_info.is_write:
        src = next(a.name for a in schema.arguments if a.alias_info is not None and
                   a.alias_info.before_set == rets[0].alias_info.before_set)
        idx = [a.name for a in schema.arguments].index(src)
        return args[idx] if idx < len(args) else kwargs[src]
    return tree_map(lambda t: _adopt(chip, t), out)


def _adopt(chip, t):
    """An fl tensor over a fresh CPU result's bytes (no copy)."""
    if chip is None or type(t) is XPUTensor:
        return t
    st = Storage.adopt_host(chip, t)
    return new_tensor(chip, tuple(t.shape), tuple(t.stride()), t.dtype, st, t.storage_offset())
