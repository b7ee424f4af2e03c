"""`"fl"` without an index means the current fl device, as `"cuda"` does.

Factories that reach flbridge's own kernels (``torch.zeros(..., device="fl")``,
``rand_like``, ``new_zeros``, ...) follow ``torch.fl.current_device()``.  A
few torch entry points resolve an index-less device in C++ instead, by
asking the device guard for the current device, which torch 2.13's Python
device guard answers with index 0 whatever ``torch.fl.set_device`` chose
(torch/csrc/acc/Module.cpp, ``getDevice``): ``Tensor.to`` (and so
``Module.to``), ``Tensor.new_tensor``, ``torch.tensor``, ``torch.as_tensor``
and ``torch.asarray`` (tests/test_third_party_devices.py lists what was
checked).  The first time a thread makes another fl device current
(``torch.fl.set_device``, ``torch.fl.device(i)``,
``torch.accelerator.set_device_index`` / ``device_index``), those five get a
thin wrapper that turns ``"fl"`` / ``torch.device("fl")`` into the calling
thread's current device before torch sees it.  Programs that stay on fl:0
never get the wrappers.  (A TorchFunctionMode would catch every spelling,
but costs a Python call on every torch call.)
"""
from __future__ import annotations

import functools

import torch

from .table import CURRENT_DEVICE_HOOKS, current_device

_ORIGINAL: dict = {}


def _indexless(v) -> bool:
    c = v.__class__
    if c is str:
        return v == "fl"
    return c is torch.device and v.type == "fl" and v.index is None


def _mapped(args, kwargs):
    """args, kwargs with an index-less fl device made the current one."""
    idx = current_device()
    if idx:
        dev = kwargs.get("device")
        if dev is not None and _indexless(dev):
            kwargs = dict(kwargs, device=torch.device("fl", idx))
        for i, a in enumerate(args):
            c = a.__class__
            if (c is str or c is torch.device) and _indexless(a):
                args = (*args[:i], torch.device("fl", idx), *args[i + 1:])
    return args, kwargs


def _default_is_indexless_fl() -> bool:
    """`with torch.device("fl")` / torch.set_default_device("fl") is in
    effect (its mode adds the index-less device after our wrapper ran)."""
    if not torch._C._is_torch_function_mode_enabled():
        return False
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    for m in reversed(_get_current_function_mode_stack()):
        if isinstance(m, DeviceContext):
            return _indexless(m.device)
    return False


def _wrap(fn, constructor: bool):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if torch.compiler.is_dynamo_compiling():
            # Dynamo traces this file (it is not on its skip list, so the wrapper
            # does not break the graph) and keeps the original call in the graph
            return fn(*args, **kwargs)
        args, kwargs = _mapped(args, kwargs)
        if constructor and kwargs.get("device") is None and current_device() and _default_is_indexless_fl():
            kwargs = dict(kwargs, device=torch.device("fl", current_device()))
        return fn(*args, **kwargs)
    call.__flbridge_original__ = fn
    return call


_TARGETS = ((torch.Tensor, "to"), (torch.Tensor, "new_tensor"), (torch, "tensor"), (torch, "as_tensor"),
            (torch, "asarray"))


def _install_wrappers() -> None:
    import torch.jit._builtins as _jit_builtins
    from torch.utils._device import _device_constructors
    constructors = _device_constructors()   # the set `with torch.device(...)` checks (cached: one object)
    for owner, name in _TARGETS:
        fn = getattr(owner, name)
        if getattr(fn, "__flbridge_original__", None) is None:
            _ORIGINAL[(owner, name)] = fn
            wrapper = _wrap(fn, constructor=owner is torch)
            setattr(owner, name, wrapper)
            if fn in constructors:
                # torch passes the original function to modes, code may look up either
                constructors.add(wrapper)
            op = _jit_builtins._find_builtin(fn)
            if op is not None:
                # TorchScript resolves torch.tensor & co. through this table; it must not
                # try to compile the wrapper (torch.distributed.optim scripts its optimizers)
                _jit_builtins._register_builtin(wrapper, op)


def _on_own_device(fn):
    """``t.new_tensor(data)`` and ``t.new(...)`` without ``device=`` give a
    tensor on t's device.  torch resolves that device from t's dispatch key
    alone (an index-less PrivateUse1 device: fl:0 for t on fl:1), so these
    pass t's own device when t is on fl and another index."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        d = self.device
        if d.type == "fl" and d.index and "device" not in kwargs and not torch.compiler.is_dynamo_compiling():
            if not args and not kwargs and fn.__name__ == "new":
                return self.new_empty((0,))   # torch's new() builds it under a device guard torch 2.13 ignores
            kwargs["device"] = d
        return fn(self, *args, **kwargs)
    call.__flbridge_own_device__ = fn
    return call


def follow(index: int) -> None:
    """A CURRENT_DEVICE_HOOKS entry (runs in the thread whose device changed)."""
    if index and not _ORIGINAL:
        _install_wrappers()


def install() -> None:
    if follow not in CURRENT_DEVICE_HOOKS:
        CURRENT_DEVICE_HOOKS.append(follow)
    for name in ("new", "new_tensor"):
        fn = getattr(torch.Tensor, name)
        if getattr(fn, "__flbridge_own_device__", None) is None:
            setattr(torch.Tensor, name, _on_own_device(fn))
