"""XPUTensor as a traceable wrapper subclass, for torch.compile.

Dynamo and AOTAutograd trace a tensor subclass only if it follows the
``__tensor_flatten__`` / ``__tensor_unflatten__`` protocol; otherwise Dynamo
treats it as an opaque object and compiles flbridge's own Python instead of
the model.  An XPUTensor's bytes live in a flbridge Storage, not in a torch
tensor, so the one "inner tensor" it flattens to is a stand-in: a plain
PrivateUse1 tensor on the same `fl:N` with the same geometry and dtype,
whose data pointer is null.  AOTAutograd fakes it (FakeTensor on `fl:N`), so
its forward and backward graphs are aten graphs on the device, and at run
time hands the stand-ins back to the compiled code, which finds the
XPUTensor (or at least its Storage) through them.

Eager behaviour does not change:

* the stand-in is made lazily, the first time something flattens the tensor
  (Dynamo's guards, AOTAutograd's runtime wrapper), and kept on it until its
  geometry changes (``set_geometry`` / in-place views drop it, as they drop
  the descriptor caches);
* views of one Storage get stand-ins sharing one C++ storage (so the tracer
  sees the aliasing flbridge has), distinct from the wrapper's own storage
  (fakeification memoizes storages: sharing the wrapper's would make the
  outer fake look like a view of its own inner);
* during tracing, XPUTensors wrap fake or functional stand-ins.  They carry
  the :data:`TRACE` sentinel as their Storage: the dispatcher's fast path
  (``_st.chip.routes.get(func)``) then lands in :func:`trace_dispatch` with
  no test on the eager path, and the slow path checks :data:`STATE` first.
"""
from __future__ import annotations

import ctypes
import functools
import weakref

import torch
from torch.utils._python_dispatch import return_and_correct_aliasing

from .xpu_tensor import XPUTensor, dense_strides, new_tensor

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


# ------------------------------------------------------ plain fl tensors

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_K_DL_EXT_DEV = 12      # DLPack's kDLExtDev: ATen maps it to PrivateUse1


_KEEP: list = []        # the DLPack structs behind the templates (never freed)
_TEMPLATES: dict = {}   # (device index, dtype) -> empty plain tensor on fl:N


def _template(index: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty plain (no Python key) tensor on fl:`index`.

    PyTorch has no Python constructor for a PrivateUse1 tensor on a given
    index (``torch._C._acc.create_empty_tensor`` always makes fl:0, and every
    factory reaches flbridge's own kernels); DLPack's kDLExtDev does, so one
    empty uint8 tensor per index is imported that way and viewed as each
    dtype with the meta kernels."""
    t = _TEMPLATES.get((index, dtype))
    if t is None:
        base = _TEMPLATES.get((index, None))
        if base is None:
            shape, strides = (ctypes.c_int64 * 1)(0), (ctypes.c_int64 * 1)(1)
            m = _DLManagedTensor()
            m.dl_tensor.device = _DLDevice(_K_DL_EXT_DEV, index)
            m.dl_tensor.ndim = 1
            m.dl_tensor.dtype = _DLDataType(1, 8, 1)      # uint8
            m.dl_tensor.shape, m.dl_tensor.strides = shape, strides
            # no deleter (NULL, which DLPack allows and ATen checks): a Python callback
            # would be freed at interpreter exit before the templates that point at it
            m.deleter = _DELETER()
            _KEEP.extend((m, shape, strides))
            new_capsule = ctypes.pythonapi.PyCapsule_New
            new_capsule.restype = ctypes.py_object
            new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
            base = torch._C._from_dlpack(new_capsule(ctypes.addressof(m), b"dltensor", None))
            if base.device != torch.device("fl", index):
                raise RuntimeError(f"flbridge: DLPack made a tensor on {base.device}, not fl:{index}")
            _TEMPLATES[(index, None)] = base
        t = _TEMPLATES[(index, dtype)] = torch.ops.aten.view.dtype.redispatch(_META, base, dtype)
    return t


_INNER_STORAGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# the ops' C++ redispatch entries (OpOverload.redispatch adds a Python frame per call)
_alias = torch.ops.aten.alias.default._handle.redispatch_boxed
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle.redispatch_boxed
_as_strided = torch.ops.aten.as_strided.default._handle.redispatch_boxed


# Stand-in storages get addresses of their own, from a range no host or
# device memory uses (non-canonical on x86-64: nothing can dereference one),
# never overlapping: code that finds tensors sharing memory through the
# stand-ins (safetensors, huggingface_hub's save_pretrained) sees one range
# per flbridge Storage.  A null address would make data_ptr() refuse.
_STAND_IN_BASE = 1 << 60
_stand_in_next = [_STAND_IN_BASE]


def stand_in_storage(nbytes: int, device) -> torch.UntypedStorage:
    """A C++ storage of nbytes on fl:N with an address range of its own and no data."""
    nbytes = int(nbytes)   # a SymInt here would turn the next address into a symbolic expression for good
    addr = _stand_in_next[0]
    _stand_in_next[0] += (nbytes + 127) // 64 * 64     # 64-byte aligned, a gap between ranges
    return torch._C._construct_storage_from_data_pointer(addr, device, nbytes)


def _inner_storage(st, device):
    """One C++ storage per flbridge Storage (views' stand-ins share it)."""
    us = _INNER_STORAGES.get(st)
    if us is None or us.nbytes() < st.nbytes:
        us = _INNER_STORAGES[st] = stand_in_storage(st.nbytes, device)
    return us


def plain_tensor(storage, dtype, shape, stride, offset) -> torch.Tensor:
    """A plain fl tensor (no subclass, no Python key) over `storage` with this
    geometry.  Made with the meta kernels called directly (redispatch: no
    autograd view of the template, no Python modes, works while a
    FakeTensorMode is active); the storage is first set with an empty
    geometry, as the storage is fixed-size and the meta set_ would want to
    resize it."""
    p = _alias(_META, _template(storage.device.index, dtype))
    _set_storage(_META, p, storage, 0, (0,), (1,))
    return _as_strided(_META, p, shape, stride, offset)


def make_inner(x: XPUTensor) -> torch.Tensor:
    """x's stand-in: a plain fl tensor with x's geometry, no data.  An empty
    tensor's stand-in has dense strides whatever x's are: AOTAutograd checks
    a tangent's stand-in against the dense strides it traced, and an empty
    tangent from autograd (the gradient of an empty sum: strides (0, 0)) passes
    its check on the XPUTensor (every empty tensor is contiguous), so it would
    restride the stand-in with torch.empty_strided, which on fl makes an
    XPUTensor where AOTAutograd needs a plain tensor."""
    stride = x.stride() if x.numel() else dense_strides(x.shape)
    p = plain_tensor(_inner_storage(x._st, x.device), x.dtype, x.shape, stride, x.storage_offset())
    d = p.__dict__
    d["_x"] = weakref.ref(x)
    d["_st"] = x._st
    return p


def real_of(p: torch.Tensor) -> XPUTensor:
    """The XPUTensor behind a stand-in (remade over the same Storage if the
    tensor itself is gone: AOTAutograd may keep only the stand-in)."""
    d = p.__dict__
    x = d["_x"]()
    if x is None:
        st = d["_st"]
        x = new_tensor(st.chip, tuple(p.shape), p.stride(), p.dtype, storage=st, offset=p.storage_offset())
        d["_x"] = weakref.ref(x)
    return x


def unwrap_arg(a):
    """A compiled graph's run-time argument as flbridge's eager code wants it."""
    if type(a) is torch.Tensor and "_st" in a.__dict__:
        return real_of(a)
    return a


class _LazyInner:
    """XPUTensor._fl: made on first access, then found in the instance dict."""

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        p = obj.__dict__["_fl"] = make_inner(obj)
        return p


# ------------------------------------------------------------- tracing

class _TraceRoutes(dict):
    """Every op's "route" on a traced tensor is trace_dispatch."""

    def get(self, func, default=None):
        return functools.partial(_forward, func)


def _forward(func, args, kwargs):
    return trace_dispatch(func, args, kwargs)


class _TraceChip:
    routes = _TraceRoutes()
    device_type = "trace"


class _TraceStorage:
    """The Storage of an XPUTensor being traced (it has no bytes)."""
    chip = _TraceChip()
    nbytes = 0

    def __repr__(self):
        return "<traced>"


TRACE = _TraceStorage()


class _State:
    seen = False   # a traced XPUTensor was ever made: the slow path checks for them


STATE = _State()


def traced(p: torch.Tensor, outer_size=None, outer_stride=None) -> XPUTensor:
    """An XPUTensor over a fake / functional / proxy stand-in."""
    STATE.seen = True
    t = torch.Tensor._make_wrapper_subclass(
        XPUTensor, outer_size if outer_size is not None else p.size(),
        strides=outer_stride if outer_stride is not None else p.stride(), storage_offset=p.storage_offset(),
        dtype=p.dtype, device=p.device, requires_grad=p.requires_grad)
    d = t.__dict__
    d["_st"] = TRACE
    d["_fl"] = p
    return t


def is_traced(t) -> bool:
    return type(t) is XPUTensor and t._st is TRACE


def any_traced(args, kwargs) -> bool:
    for a in args:
        c = a.__class__
        if c is XPUTensor:
            if a._st is TRACE:
                return True
        elif c is list or c is tuple:
            for b in a:
                if b.__class__ is XPUTensor and b._st is TRACE:
                    return True
    if kwargs:
        return any_traced(tuple(kwargs.values()), None)
    return False


def _unwrap(v):
    c = v.__class__
    if c is XPUTensor:
        return v._fl
    if c is list or c is tuple:
        return c(_unwrap(x) for x in v)
    return v


def _wrap(v):
    if isinstance(v, torch.Tensor):
        return traced(v) if v.device.type == "fl" and type(v) is not XPUTensor else v
    if isinstance(v, (list, tuple)):
        return type(v)(_wrap(x) for x in v)
    return v


def trace_dispatch(func, args, kwargs):
    """An op on traced XPUTensors: the same op on their stand-ins (which the
    tracer records), results wrapped again, aliasing as the schema says."""
    kwargs = kwargs or {}
    out = _wrap(func(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()}))
    if out.__class__ is not XPUTensor and isinstance(out, torch.Tensor):
        # the result left the device (x.to("meta"), which forward-mode AD over a backward
        # makes): a new tensor, not the alias to.dtype_layout's schema allows for
        return out
    return return_and_correct_aliasing(func, args, kwargs, out)


# ------------------------------------------------------ the protocol

_FLAT = (["_fl"], None)
# x.__tensor_flatten__() and type(x).__tensor_flatten__(x) both give _FLAT;
# a C-level callable (no bound method, no Python frame): Dynamo's guards
# call it twice per fl tensor argument per call
_tensor_flatten = functools.partial(dict.get, {None: _FLAT}, None)


def _tensor_unflatten(inner, ctx, outer_size, outer_stride):
    p = inner["_fl"]
    if type(p) is XPUTensor:
        return p                      # run time: the compiled code returned the tensor itself
    if type(p) is torch.Tensor and "_st" in p.__dict__:
        return real_of(p)             # run time: a stand-in of a real tensor
    return traced(p, outer_size, outer_stride)


def _coerce_same_metadata_as_tangent(self, expected_metadata, expected_type=None):
    if expected_type is not None and expected_type is not XPUTensor:
        return None
    return self


def _stable_hash_for_caching(self) -> str:
    return f"flbridge.XPUTensor:{self.device}:{self.dtype}"


def install() -> None:
    """Gives XPUTensor the traceable-subclass protocol."""
    XPUTensor._fl = _LazyInner()
    XPUTensor.__tensor_flatten__ = _tensor_flatten
    XPUTensor.__tensor_unflatten__ = staticmethod(_tensor_unflatten)
    XPUTensor.__coerce_same_metadata_as_tangent__ = _coerce_same_metadata_as_tangent
    XPUTensor._stable_hash_for_caching = _stable_hash_for_caching
    _install_methods()
    _describe_own_outer_storage()


def _describe_own_outer_storage() -> None:
    """Fakeification describes an XPUTensor's outer storage as one of its own.

    Fakeifying a tensor (Dynamo's inputs, AOTAutograd's) memoizes storages:
    a tensor that is not a view but shares a storage already seen is made by
    ``set_`` onto the earlier fake's storage.  For a wrapper subclass that
    ``set_`` runs on the outer fake and fails ("Attempted to set the storage
    of a tensor on device fl:0 to a storage on different device meta").  The
    outer storages of XPUTensors do alias wherever flbridge's Storages do:
    parameters given ``.data = flat[a:b]`` (DeepSpeed ZeRO's flat groups),
    tensors from ``torch.split``.  What aliases what is already in the
    stand-ins (views of one Storage share one stand-in storage), and the
    tracer sees it there; the outer storage only has to be one per tensor,
    as a wrapper subclass's is, so the describer gets an empty one kept on
    the tensor."""
    from torch._subclasses import meta_utils
    cls = meta_utils.MetaTensorDescriber
    if getattr(cls.describe_tensor, "_flbridge", False):
        return
    describe_tensor, describe_storage = cls.describe_tensor, cls.describe_storage
    pending = "_flbridge_outer_storage"

    def describe_tensor_(self, t, *, recurse=True, trace=False):
        if t.__class__ is not XPUTensor:
            return describe_tensor(self, t, recurse=recurse, trace=trace)
        d = t.__dict__
        own = d.get("_described_storage")
        if own is None:
            own = d["_described_storage"] = torch.UntypedStorage(0, device="meta")
        self.__dict__[pending] = own
        try:
            return describe_tensor(self, t, recurse=recurse, trace=trace)
        finally:
            self.__dict__.pop(pending, None)

    def describe_storage_(self, s, *, trace=False):
        own = self.__dict__.pop(pending, None)    # the outer storage of the XPUTensor being described
        return describe_storage(self, s if own is None else own, trace=trace)
    describe_tensor_._flbridge = True
    cls.describe_tensor, cls.describe_storage = describe_tensor_, describe_storage_


def _traced_aware(method, traced_result):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._st is TRACE:
            return traced_result(self, *args, **kwargs)
        return method(self, *args, **kwargs)
    return wrapper


def _install_methods() -> None:
    # methods that read the Storage: a traced tensor answers as a fake does
    XPUTensor.__repr__ = _traced_aware(XPUTensor.__repr__,
                                       lambda self, **kw: f"XPUTensor(traced, {self.__dict__['_fl']!r})")
    XPUTensor.untyped_storage = _traced_aware(XPUTensor.untyped_storage,
                                              lambda self: self.__dict__["_fl"].untyped_storage())
    XPUTensor.data_ptr = _traced_aware(XPUTensor.data_ptr, lambda self: 0)
