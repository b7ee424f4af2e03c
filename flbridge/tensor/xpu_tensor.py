"""XPUTensor: a tensor on an `fl` device.

A wrapper subclass: PyTorch sees a tensor of device `fl:N` with its own
size, stride, offset and dtype; the bytes live in a shared
:class:`~flbridge.tensor.residency.Storage` (`_st`, with per-tensor caches
`_d`/`_dd` (the vendor descriptor and the address it was made for), `_k`
(the geometry key) and `_hv` (the host view)).  Every aten op on it reaches
``__torch_dispatch__``: flbridge.routing.dispatch.dispatch, installed by
flbridge.routing.install(XPUTensor) when the fl device is registered
(flbridge/backend/registration.py).  Python-level torch functions are not
intercepted (no ``__torch_function__`` cost).
"""
from __future__ import annotations

import copy

import torch

from ..config import CONFIG
from .residency import Storage


# an XPUTensor's own attributes: its Storage and cached descriptors / host views
_PRIVATE = frozenset(("_st", "_d", "_dd", "_k", "_hv", "_fl", "_described_storage"))   # storage, caches, compile stand-ins
# not pickled with a parameter's state: what makes it a parameter, the class it had on the CPU
_NOT_STATE = _PRIVATE | {"_is_param", "_flbridge_host_class"}


class XPUTensor(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    # __torch_dispatch__: set by flbridge.routing.install(XPUTensor) at registration (see the module docstring)

    def __repr__(self, *, tensor_contents=None):
        # PyTorch's own formatting (device, dtype, grad_fn suffixes) on values
        # read from the host, printed as tensor(...) like any device's tensor
        if tensor_contents is None:
            tensor_contents = torch._tensor_str._tensor_str(host_copy(self), len("tensor("))
        s = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        if s.startswith("Parameter(") and s.endswith(")"):  # PyTorch's form for custom tensors
            s = s[len("Parameter("):-1]
        name = type(self).__name__ + "("
        if s.startswith(name):
            s = "tensor(" + s[len(name):]
        if getattr(self, "_is_param", False):
            s = "Parameter containing:\n" + s
        return s

    def data_ptr(self) -> int:
        """The device address of the first element (its bytes made current
        on the device first), as a CUDA tensor's data_ptr() is; 0 for a
        tensor without bytes."""
        st = self._st
        if not st.nbytes:
            return 0
        from .residency import make_resident
        make_resident(st.chip, [st])
        return st.dev + self.storage_offset() * self.element_size()

    def untyped_storage(self):
        # resize_ frees and re-allocates the bytes, as FSDP2 does to
        # unsharded parameters (see flbridge.tensor.untyped_storage)
        from .untyped_storage import storage_of
        return storage_of(self)

    def tolist(self):
        return host_copy(self).tolist()

    def numpy(self, *, force: bool = False):
        if force:
            return host_copy(self).numpy()
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                        f"copy the tensor to host memory first.")

    def __dlpack__(self, *args, **kwargs):
        raise BufferError(f"flbridge: {self.device} tensors cannot be exported through DLPack (PyTorch has no "
                          f"DLPack device type for fl); export a CPU copy: t.cpu().__dlpack__()")

    def __dlpack_device__(self):
        raise BufferError(f"flbridge: {self.device} tensors have no DLPack device (PyTorch has none for fl); "
                          f"use t.cpu()")

    def __reduce_ex__(self, proto):
        # Pickled (and torch.save'd) as a device tensor is, as PyTorch's own
        # _rebuild_tensor_v2 of its storage, whose location torch.save records
        # as "fl:N": torch.load gives it back on fl:N (map_location="cpu"
        # gives a CPU tensor, also in a process without flbridge), with
        # weights_only=True too.  Storages shared by views stay shared.
        from collections import OrderedDict
        from .untyped_storage import storage_of
        if getattr(self, "_is_param", False):
            state = {k: v for k, v in self.__dict__.items() if k not in _NOT_STATE}
            hooks = OrderedDict()   # hooks are not serialized (torch's Parameter.__reduce_ex__)
            if state:
                return (torch._utils._rebuild_parameter_with_state,
                        (self.detach(), self.requires_grad, hooks, state))
            return torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, hooks)
        storage = torch.storage.TypedStorage(wrap_storage=storage_of(self), dtype=self.dtype, _internal=True)
        return (torch._utils._rebuild_tensor_v2,
                (storage, self.storage_offset(), tuple(self.size()), self.stride(),
                 self.requires_grad, OrderedDict()))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the "
                               "deepcopy protocol at the moment.  If you were attempting to deepcopy a "
                               "module, this may be because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for k, v in self.__dict__.items():
            if k not in _PRIVATE:
                setattr(new, k, copy.deepcopy(v, memo))
        memo[id(self)] = new
        return new


def new_tensor(chip, shape, strides, dtype, storage: Storage | None = None, offset: int = 0) -> XPUTensor:
    """An XPUTensor over `storage` (a fresh, empty one if None)."""
    if storage is None:
        numel = 1
        for s in shape:
            numel *= s
        span = (1 + sum((s - 1) * st for s, st in zip(shape, strides))) if numel else 0
        storage = Storage(chip, (span + offset) * itemsize(dtype) if span else 0)
    t = torch.Tensor._make_wrapper_subclass(XPUTensor, shape, strides=strides, storage_offset=offset,
                                            dtype=dtype, device=chip.device)
    t._st = storage
    return t


_ITEMSIZES: dict = {}


def itemsize(dtype: torch.dtype) -> int:
    n = _ITEMSIZES.get(dtype)
    if n is None:
        n = _ITEMSIZES[dtype] = dtype.itemsize
    return n


def dense_strides(shape) -> tuple:
    """The strides of a dense, row-major tensor of this shape."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


def host_view(t: XPUTensor) -> torch.Tensor:
    """A CPU tensor aliasing t's host bytes (made current first).  Kept on t
    while t's geometry and host buffer stay the same (set_geometry() drops
    it): the CPU fallback asks for it on every call."""
    st = t._st
    if not st.host_valid:
        st.ensure_host()
    d = t.__dict__
    hv = d.get("_hv")
    if hv is not None and hv[0] is st.host:
        return hv[1]
    if not st.nbytes:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    v = st.host_flat(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
    if st.nbytes <= CONFIG.host_copy_limit:   # a cached view would keep a released host buffer alive
        d["_hv"] = (st.host, v, st.host.untyped_storage().data_ptr())
    return v


def host_address(t: XPUTensor) -> int:
    """The address of t's host bytes, right after host_view(t) (cached with it)."""
    hv = t.__dict__.get("_hv")
    return hv[2] if hv is not None else t._st.host.untyped_storage().data_ptr()


def host_copy(t: XPUTensor) -> torch.Tensor:
    """A CPU tensor with t's values that does not alias anything of flbridge's."""
    with torch.no_grad():
        return host_view(t).clone()


def chip_of(args, kwargs):
    """The chip of the first fl tensor among an op's arguments (also inside
    lists), or None."""
    for a in (*args, *kwargs.values()):
        if type(a) is XPUTensor:
            return a._st.chip
        if isinstance(a, (list, tuple)):
            for b in a:
                if type(b) is XPUTensor:
                    return b._st.chip
    return None


def covers_storage(t: XPUTensor) -> bool:
    """t is a dense, contiguous tensor spanning its whole storage."""
    st = t._st
    return t.storage_offset() == 0 and t.numel() * t.element_size() == st.nbytes and t.is_contiguous()


def set_geometry(t: XPUTensor, shape, strides, offset) -> None:
    """Rewrites t's size/stride/offset in place (PyTorch's own set_ on the
    wrapper's metadata, run with the meta kernel)."""
    t.__dict__.pop("_dd", None)
    t.__dict__.pop("_k", None)
    t.__dict__.pop("_hv", None)
    t.__dict__.pop("_fl", None)   # torch.compile's stand-in (flbridge.tensor.traceable)
    src = torch.Tensor._make_wrapper_subclass(XPUTensor, shape, strides=strides, storage_offset=offset,
                                              dtype=t.dtype, device=t.device)
    with torch.utils._mode_utils.no_dispatch():
        prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            torch.ops.aten.set_.source_Tensor(t, src)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(prev)


def resize_for_output(t: XPUTensor, shape, strides) -> None:
    """An out= argument of the wrong shape takes the result's (PyTorch's
    resize_output).  The kernel writes every element, so a storage that must
    grow does so without keeping its old bytes: no transfer."""
    numel, span = 1, 1
    for d, s in zip(shape, strides):
        numel *= d
        span += (d - 1) * s
    need = (t.storage_offset() + span) * t.element_size() if numel else 0
    st = t._st
    if need > st.nbytes:
        st.drop_device()
        st.host, st.typed = None, None
        st.host_valid = st.dev_valid = False
        st.nbytes = need
    set_geometry(t, tuple(shape), tuple(strides), t.storage_offset())
