"""Errors inside backward reach the caller of backward(), and the process lives.

In torch 2.13, a Python exception raised inside the autograd engine while it
runs a node of a Python-registered PrivateUse1 device (a user's tensor, node,
module or post-accumulate-grad hook, a library's gradient hook, an fl op)
aborts the process with "terminate called without an active exception".
The engine throws a C++ error while the Python error indicator is still set;
unwinding runs the node's stream guard destructor, whose noexcept
``PythonDeviceGuard::exchangeStream`` calls the Python device guard's
``type_`` (torch/csrc/acc/Module.cpp); CPython turns a call made with an
error pending into a SystemError, pybind11 throws it out of the noexcept
function, and std::terminate follows.  (gdb: ``Engine::evaluate_function``
-> ``~InlineStreamGuard`` -> ``exchangeStream`` -> ``std::terminate``.)

Two pieces turn that into an ordinary exception at ``backward()``:

* :func:`guard_type` is the device guard's ``type_``.  Any C function it
  calls while an error is pending raises SystemError with that error as its
  ``__cause__``; it keeps the cause (per thread), which clears the
  indicator, and returns normally, so the destructor completes and the
  engine marks the graph task failed.
* The engine PyTorch calls for ``backward()`` / ``autograd.grad()``
  (``Variable._execution_engine``) becomes :class:`Engine`, a subclass of
  torch's own, whose ``run_backward`` raises the kept error in place of the
  SystemError that the now error-less failure produces ("returned NULL
  without setting an exception").

Both are installed by :func:`install` (at ``import flbridge``).  Errors
raised outside backward never meet the stream guard and are untouched.
"""
from __future__ import annotations

import threading

import torch

_TLS = threading.local()
_KEEP_AT_MOST = 16          # errors kept outside any backward() (none expected) stay bounded
_PRIVATE_USE1 = torch._C._autograd.DeviceType.PrivateUse1
_probe = torch._C._current_graph_task_id   # any C function: it fails if an error is pending


def _kept() -> list:
    kept = getattr(_TLS, "errors", None)
    if kept is None:
        kept = _TLS.errors = []
    return kept


def guard_type(self):
    """The Python device guard's `type_`: PrivateUse1, after taking over an
    error left pending by the engine (see the module docstring)."""
    try:
        _probe()
    except SystemError as e:
        kept = _kept()
        kept.append(e.__cause__ if e.__cause__ is not None else e)
        if len(kept) > _KEEP_AT_MOST:
            del kept[0]
    return _PRIVATE_USE1


class Engine(torch._C._ImperativeEngine):
    """torch's autograd engine, raising the error a backward pass was
    stopped by (see the module docstring)."""

    def run_backward(self, *args, **kwargs):
        kept = _kept()
        mark = len(kept)
        try:
            return super().run_backward(*args, **kwargs)
        except SystemError:
            if len(kept) <= mark:
                raise
            err = kept[mark]
        finally:
            del kept[mark:]
        raise err   # outside the handler: the SystemError is not chained to it


def install() -> None:
    from torch.autograd.variable import Variable
    if not isinstance(Variable._execution_engine, Engine):
        Variable._execution_engine = Engine()
