"""`tensor.data = other` for fl tensors, and module conversions that keep
each parameter the same Python object, as PyTorch does for CUDA.

PyTorch moves a module's parameters with ``param.data = converted``
(``Module._apply``), which ZeRO and FSDP1 also use to point a parameter at a
slice of a flat buffer.  For fl tensors that needs two things PyTorch cannot
do itself:

* an fl tensor keeps its bytes in a Python attribute (``_st``, a
  :class:`~flbridge.residency.Storage`), which PyTorch's ``set_data`` does
  not know about: after it, the tensor must take the new tensor's storage
  and drop its cached descriptors;
* a CPU tensor and an fl tensor are not "shallow-copy compatible" (an fl
  tensor is a Python wrapper subclass), so ``set_data`` between them is
  refused and ``Module._apply`` would give each module a new parameter
  (tied weights come apart).  flbridge reports them compatible for
  parameters and rebinds the parameter object to the new tensor: its
  TensorImpl and class are exchanged, its own attributes, hooks and
  requires_grad stay.  Unlike ``torch.utils.swap_tensors`` this works while
  weakrefs to the parameter exist (autocast caches, DeepSpeed's finalizers).

Only conversions that involve an fl tensor take these paths; everything else
runs PyTorch's own code unchanged (no process-wide flag).
"""
from __future__ import annotations

import torch
from torch.nn import Parameter

from .xpu_tensor import XPUTensor

_CACHES = ("_d", "_dd", "_k", "_hv", "_fl")        # per-tensor descriptors, host views, the compile stand-in
_PRIVATE = ("_st",) + _CACHES
_HOST_CLASS = "_flbridge_host_class"             # a Parameter subclass the tensor had before it came to fl
_get_data = torch._C.TensorBase.data.__get__
_set_data = torch._C.TensorBase.data.__set__
_compatible = torch._has_compatible_shallow_copy_type


def set_data(t: torch.Tensor, new: torch.Tensor) -> None:
    """`t.data = new` where t or new is an fl tensor (PyTorch's own
    set_data otherwise)."""
    if not isinstance(new, torch.Tensor):
        _set_data(t, new)   # PyTorch's error
        return
    if type(t) is XPUTensor and type(new) is XPUTensor:
        _set_data(t, new)   # size, stride, offset, dtype, device and the (dataless) C++ storage
        d = t.__dict__
        for k in _CACHES:
            d.pop(k, None)
        d["_st"] = new._st
        return
    if (type(t) is XPUTensor or type(new) is XPUTensor) and _rebindable(t) and _rebindable(new):
        rebind(t, new)
        return
    _set_data(t, new)


def _rebindable(x) -> bool:
    if type(x) is XPUTensor:
        return True
    return (x.layout == torch.strided and not x.is_nested and not x.is_quantized
            and (type(x) is torch.Tensor or isinstance(x, Parameter)))


def rebind(t: torch.Tensor, new: torch.Tensor) -> None:
    """t (the same Python object) takes new's bytes, geometry, dtype, device
    and matching class (fl tensor <-> CPU tensor), keeping its own
    attributes, requires_grad, hooks and, where it still fits, its grad."""
    is_param = isinstance(t, Parameter)
    old_cls = type(t)
    grad = t.grad
    holder = new.detach()
    if t.requires_grad:
        holder.requires_grad_(True)
    hooks = t._backward_hooks
    post_hooks = t._post_accumulate_grad_hooks
    d = t.__dict__
    host_cls = d.pop(_HOST_CLASS, None)
    if type(new) is XPUTensor:
        new_cls = XPUTensor
        if is_param and old_cls is not Parameter and old_cls is not XPUTensor:
            host_cls = old_cls          # a Parameter subclass: given back when the tensor leaves fl
    else:
        new_cls = host_cls or (Parameter if is_param else torch.Tensor)
        host_cls = None
    mine = {k: d.pop(k) for k in _PRIVATE if k in d}
    theirs = {k: v for k, v in holder.__dict__.items() if k in _PRIVATE}
    torch._C._swap_tensor_impl(t, holder)
    t.__class__, holder.__class__ = new_cls, old_cls
    d.update(theirs)
    holder.__dict__.update(mine)        # the old TensorImpl keeps its bytes while a graph holds it
    if new_cls is XPUTensor:
        if is_param:
            d["_is_param"] = True
        if host_cls is not None:
            d[_HOST_CLASS] = host_cls
    else:
        d.pop("_is_param", None)
    if hooks:
        t._backward_hooks = hooks       # the setters register them on the new TensorImpl
    if post_hooks:
        t._post_accumulate_grad_hooks = post_hooks
    if grad is not None and grad.device == t.device and grad.dtype == t.dtype and grad.shape == t.shape:
        t.grad = grad
    _poison_old_graph(holder)


def _poison_old_graph(old: torch.Tensor) -> None:
    """A graph recorded before the move still holds the old TensorImpl: a
    backward through it would accumulate a gradient no one sees, so it fails
    instead, as after torch.utils.swap_tensors."""
    if not (old.requires_grad and old.is_leaf) or old._use_count() <= 1:
        return

    def moved(grad_outputs):
        raise RuntimeError("flbridge: this parameter was moved to another device or dtype (Module.to / "
                           "`.data =`) between the forward pass and backward(); run backward before "
                           "moving the model, or run the forward again after moving it")

    torch.autograd.graph.get_gradient_edge(old).node.register_prehook(moved)


def has_compatible_shallow_copy_type(input, from_) -> bool:  # noqa: A002 - torch's parameter names
    """torch._has_compatible_shallow_copy_type, also True between a
    parameter and an fl tensor (either way), which :func:`set_data` can
    exchange; Module._apply then keeps the parameter object.  (Same
    parameter names as torch's: torch._dynamo substitutes a polyfill for it.)"""
    if (type(input) is XPUTensor) is not (type(from_) is XPUTensor) and isinstance(input, Parameter) \
            and _rebindable(input) and _rebindable(from_):
        return True
    return _compatible(input, from_)


def _data(self):
    return _get_data(self, type(self))


_DATA = property(_data, set_data, doc="The tensor's data (`t.data = other` works with fl tensors too).")


def _conversions_use_data(is_traceable_wrapper_subclass):
    """XPUTensor is a traceable wrapper subclass (torch.compile needs it:
    flbridge.tensor.traceable), which Module._apply and parametrize take as
    "swap the parameter" (torch.utils.swap_tensors, refused while weakrefs
    exist).  For their decision only, an fl tensor is not one: conversions
    take the `.data =` path above, which keeps the parameter object."""
    def decide(t) -> bool:
        return type(t) is not XPUTensor and is_traceable_wrapper_subclass(t)
    decide.__flbridge_original__ = is_traceable_wrapper_subclass
    return decide


def install() -> None:
    torch._has_compatible_shallow_copy_type = has_compatible_shallow_copy_type
    XPUTensor.data = _DATA
    Parameter.data = _DATA
    import torch.nn.utils.parametrize as parametrize
    from torch.nn.modules import module
    for m in (module, parametrize):
        if not hasattr(m.is_traceable_wrapper_subclass, "__flbridge_original__"):
            m.is_traceable_wrapper_subclass = _conversions_use_data(m.is_traceable_wrapper_subclass)
