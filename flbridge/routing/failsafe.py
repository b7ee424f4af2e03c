"""Errors inside backward, without losing the interpreter.

In torch 2.13, a Python exception that leaves an op on a Python-registered
PrivateUse1 device *while the autograd engine runs* aborts the process: the
engine unwinds through a stream guard whose destructor calls back into
Python (the device guard's `type_`) with the exception still pending, and
std::terminate follows.  (Forward errors are unaffected: no stream guard.)

So an op that fails during backward does not raise there.  flbridge keeps
the error, returns placeholder results of the right shapes (NaN-filled, so
nothing mistakes them for gradients) and queues a callback on the engine
that raises the error, with a note, when the backward pass ends: the user
sees the real error at `loss.backward()` / `torch.autograd.grad(...)`, and
the process survives.  Gradients written by that backward are invalid.
"""
from __future__ import annotations

import functools
import threading

import torch

from ..devices import chip_at, usable_chips
from .argkeys import to_meta

_PENDING = threading.local()


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def defer(err: BaseException, func, args, kwargs, device=None):
    """Outside backward: re-raises `err`.  Inside: queues it to be raised
    when the backward pass ends and returns placeholder results for `func`."""
    if not in_backward():
        raise err
    task = torch._C._current_graph_task_id()
    pending = getattr(_PENDING, "errors", None)
    if pending is None:
        pending = _PENDING.errors = {}
    if task not in pending:
        pending[task] = err
        err.add_note(f"flbridge: raised during the backward pass (in {func}); the gradients this backward "
                     f"wrote are not valid (NaN placeholders were used so the pass could finish without "
                     f"aborting the process, see flbridge/routing/failsafe.py)")
        torch.autograd.Variable._execution_engine.queue_callback(functools.partial(_raise, task))
    return _placeholders(func, args, kwargs or {}, device)


def _raise(task) -> None:
    err = _PENDING.errors.pop(task, None)
    if err is not None:
        raise err


def _placeholders(func, args, kwargs, device):
    if device is None:
        device = _fl_device(args, kwargs)
    opi_mutated = _mutated_args(func, args, kwargs)
    try:
        res = func(*to_meta(args), **to_meta(kwargs)) if hasattr(func, "_schema") else None
    except Exception:  # noqa: BLE001 - no meta kernel: nothing sensible to hand back
        res = None
    if opi_mutated is not None:
        return opi_mutated
    return _fill(res, device)


def _mutated_args(func, args, kwargs):
    """An in-place / out= op returns its written argument(s), untouched."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return None
    outs = []
    for r in schema.returns:
        if r.alias_info is None or not r.alias_info.is_write:
            return None
        for i, a in enumerate(schema.arguments):
            if a.alias_info is not None and set(a.alias_info.before_set) & set(r.alias_info.before_set):
                outs.append(args[i] if i < len(args) else kwargs.get(a.name))
                break
    return outs[0] if len(outs) == 1 else tuple(outs)


def _fill(res, device):
    if isinstance(res, torch.Tensor):
        if res.dtype.is_floating_point or res.dtype.is_complex:
            return torch.full(res.shape, float("nan"), dtype=res.dtype, device=device)
        return torch.zeros(res.shape, dtype=res.dtype, device=device)
    if isinstance(res, (list, tuple)):
        return type(res)(_fill(r, device) for r in res)
    return res


def _fl_device(args, kwargs):
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor) and v.device.type == "fl":
            return v.device
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor) and x.device.type == "fl":
                    return x.device
    return torch.device("fl", 0)


def kernel(op):
    """Decorates a Python kernel registered with torch.library for the aten
    overload `op` (allocation, copies, autocast) so its errors during
    backward are deferred too."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - re-raised now or at the end of backward
                if not in_backward():
                    raise
                dev = kwargs.get("device")
                return defer(err, op, args, kwargs, _usable(dev))
        return run
    return wrap


def _usable(dev):
    """A device the placeholder can be made on: the requested fl device if
    it exists, else the first one."""
    try:
        d = torch.device(dev) if dev is not None else None
    except (RuntimeError, TypeError):
        d = None
    if d is not None and d.type == "fl" and chip_at(d.index) is not None:
        return d
    usable = usable_chips()
    return usable[0].device if usable else None
