"""Metadata ops on fl tensors: views, aliases, in-place views, set_ and
resize_.  No bytes move: a view is a new wrapper over the same Storage with
the geometry PyTorch's meta kernel gives (cached per argument key)."""
from __future__ import annotations

import torch

from ..devices import checkpoint
from ..tensor import Storage, XPUTensor, dense_strides, itemsize, set_geometry
from .argkeys import arg_key, remember, to_meta
from ..tensor.untyped_storage import owner_storage
from .route import route

aten = torch.ops.aten



_VIEW_GEOMETRY: dict = {}
_make = torch.Tensor._make_wrapper_subclass
_inference_mode_on = torch.is_inference_mode_enabled


def _outside_inference_mode(kernel, func, args, kwargs):
    """A view of a normal tensor made in inference mode is a normal tensor
    sharing its base's version counter (autograd's view handling sets it
    after this kernel): the wrapper must not be made as an inference tensor."""
    with torch.inference_mode(False):
        return kernel(func, args, kwargs)


def view_geometry(func, base, args, kwargs):
    """(many, geometries) of func's result(s) on `base`, from PyTorch's meta
    kernel, bounds-checked against the storage; cached per argument key."""
    key = (func, base.shape, base.stride(), base.storage_offset(), base.dtype, base._st.nbytes,
           _args_key(args), tuple(sorted((k, arg_key(v)) for k, v in kwargs.items())) if kwargs else None)
    try:
        got = _VIEW_GEOMETRY.get(key)
    except TypeError:   # an unhashable argument (nested lists): key it the slow, thorough way
        key = (func, base.shape, base.stride(), base.storage_offset(), base.dtype, base._st.nbytes,
               tuple(arg_key(a) for a in args[1:]), tuple(sorted((k, arg_key(v)) for k, v in kwargs.items())))
        got = _VIEW_GEOMETRY.get(key)
    if got is None:
        nbytes = base._st.nbytes
        mstorage = torch.UntypedStorage(nbytes, device="meta")
        m = torch.empty(0, dtype=base.dtype, device="meta").set_(mstorage, base.storage_offset(),
                                                                 tuple(base.shape), base.stride())
        res = func(m, *[to_meta(a) for a in args[1:]], **{k: to_meta(v) for k, v in kwargs.items()})
        many = isinstance(res, (list, tuple))
        geos = []
        for r in (res if many else (res,)):
            shape, stride, offset, dtype = tuple(r.shape), r.stride(), r.storage_offset(), r.dtype
            numel, span = 1, 1
            for d, sd in zip(shape, stride):
                numel *= d
                span += (d - 1) * sd
            need = (offset + span) * itemsize(dtype) if numel else 0
            if need > nbytes:
                raise RuntimeError(f"setStorage: sizes {list(shape)}, strides {list(stride)}, storage offset "
                                   f"{offset}, and itemsize {itemsize(dtype)} requiring a storage size of {need} "
                                   f"are out of bounds for storage of size {nbytes}")
            geos.append((shape, stride, offset, dtype))
        got = remember(_VIEW_GEOMETRY, key, (many, tuple(geos)), 8192)
    return got


def _args_key(args):
    """Key of a view op's arguments after the tensor: ints, int lists, dims
    (a view op's scalars are integers or flags whose bool/int spelling does
    not change the result, so their values alone key them)."""
    if len(args) == 2:
        a = args[1]
        c = a.__class__
        if c is list:
            return tuple(a)
        if c is int or c is tuple:
            return a
    out = []
    for a in args[1:]:
        c = a.__class__
        if c is int or c is bool or c is float or c is tuple:
            out.append(a)
        elif c is list:
            out.append(tuple(a))
        else:
            out.append(arg_key(a))
    return tuple(out)


def view(func, args, kwargs):
    base = args[0]
    if type(base) is not XPUTensor:
        return route(func, args, kwargs)
    if _inference_mode_on() and not base.is_inference():
        return _outside_inference_mode(view, func, args, kwargs)
    many, geos = view_geometry(func, base, args, kwargs)
    st = base._st
    dev = base.device
    if not many:
        shape, stride, offset, dtype = geos[0]
        t = _make(XPUTensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=dev)
        t._st = st
        torch._functionalize_unsafe_set(t, base)   # one C++ storage too: untyped_storage() is shared
        return t
    outs = []
    for shape, stride, offset, dtype in geos:
        t = _make(XPUTensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=dev)
        t._st = st
        torch._functionalize_unsafe_set(t, base)
        outs.append(t)
    return outs


def alias(func, args, kwargs):
    """detach / alias: same geometry, same storage."""
    base = args[0]
    if _inference_mode_on() and not base.is_inference():
        return _outside_inference_mode(alias, func, args, kwargs)
    t = _make(XPUTensor, base.shape, strides=base.stride(), storage_offset=base.storage_offset(),
              dtype=base.dtype, device=base.device)
    t._st = base._st
    torch._functionalize_unsafe_set(t, base)
    return t


def inplace_view(func, args, kwargs):
    """t_(), transpose_(), as_strided_(), ...: rewrite the wrapper's own
    metadata with the meta kernel."""
    d = args[0].__dict__
    d.pop("_dd", None)
    d.pop("_k", None)
    d.pop("_hv", None)
    d.pop("_fl", None)
    with torch.utils._mode_utils.no_dispatch():
        prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            func(*args, **kwargs)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(prev)
    return args[0]


def set_(func, args, kwargs):
    self = args[0]
    if func is aten.set_.source_Tensor:
        src = args[1] if len(args) > 1 else kwargs["source"]
        if type(src) is not XPUTensor or src._st.chip is not self._st.chip:
            raise RuntimeError(f"set_: source must be on {self.device}, got {src.device}")
        self._st = src._st
        set_geometry(self, tuple(src.shape), src.stride(), src.storage_offset())
        return self
    if func is aten.set_.default:
        self._st = Storage(self._st.chip, 0)
        set_geometry(self, (0,), (1,), 0)
        return self
    source = args[1] if len(args) > 1 else kwargs.get("source")
    if checkpoint.is_device_bound(source):  # torch.load(..., map_location="fl:N") rebuilding a tensor
        offset = args[2] if len(args) > 2 else kwargs.get("storage_offset", 0)
        size = args[3] if len(args) > 3 else kwargs.get("size", (source.nbytes() // self.element_size(),))
        stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
        checkpoint.adopt(self, source, offset, size, stride)
        return self
    st = owner_storage(source)
    if st is not None:   # another fl tensor's untyped_storage() (TypedStorage indexing, x.set_(y.untyped_storage()))
        if st.chip is not self._st.chip:
            raise RuntimeError(f"set_: the storage is on {st.chip.device}, the tensor on {self.device}")
        offset = args[2] if len(args) > 2 else kwargs.get("storage_offset", 0)
        size = args[3] if len(args) > 3 else kwargs.get("size", (st.nbytes // self.element_size(),))
        stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
        self._st = st
        set_geometry(self, tuple(size), tuple(stride) if stride else dense_strides(list(size)), int(offset))
        return self
    raise NotImplementedError(f"flbridge: {func} on an fl tensor (set_ to a storage object) is not "
                              f"supported; use set_(other_fl_tensor)")


def resize_(func, args, kwargs):
    self, size = args[0], [int(s) for s in args[1]]
    memory_format = kwargs.get("memory_format") or (args[2] if len(args) > 2 else None)
    if memory_format is not None and memory_format != torch.contiguous_format:
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    else:
        strides = dense_strides(size)
    numel = 1
    for s in size:
        numel *= s
    need = (self.storage_offset() + (1 + sum((s - 1) * st for s, st in zip(size, strides)) if numel else 0)) \
        * self.element_size()
    st = self._st
    if need > st.nbytes:
        # grow the shared storage in place, keeping its bytes (PyTorch's resize_)
        old = st.nbytes
        st.ensure_host()
        host = torch.empty(need, dtype=torch.uint8, device="cpu")
        if old:
            host[:old].copy_(st.host)
        st.host, st.typed = host, None
        st.drop_device()
        st.nbytes = need
        st.host_valid = True
    set_geometry(self, tuple(size), tuple(strides), self.storage_offset())
    return self


