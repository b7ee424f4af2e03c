"""Ops with handlers of their own: copies across devices, allocation
(empty_like, new_empty, the *_like fills), reading a scalar back, and a few
housekeeping ops.  Same-chip copies and casts are routed like any op."""
from __future__ import annotations

import torch

from ..devices import chip_for
from ..errors import GraphCaptureError
from ..tensor import Storage, XPUTensor, covers_storage, host_view, new_tensor
from ..binding import launch
from .argkeys import arg_key, remember, to_meta
from .route import route

aten = torch.ops.aten



def copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if type(dst) is XPUTensor and type(src) is XPUTensor and dst._st.chip is src._st.chip:
        return route(func, args, kwargs)
    if type(dst) is XPUTensor:
        if launch.STATE.capture is not None:
            raise _capture_error(f"a copy into {dst.device} from {src.device}")
        src_cpu = host_view(src) if type(src) is XPUTensor else src
        st = dst._st
        if src_cpu.device.type != "cpu":
            src_cpu = src_cpu.cpu()
        if covers_storage(dst) and not st.host_valid and tuple(src_cpu.shape) == tuple(dst.shape):
            # every byte is replaced: no need to fetch the old ones
            if st.host is None:
                st.host = torch.empty(st.nbytes, dtype=torch.uint8, device="cpu")
                st.typed = None
            st.host_valid = True
        if st.nbytes:
            host_view(dst).copy_(src_cpu)
        st.wrote_host()
        return dst
    # dst is a CPU tensor, src on a chip
    dst.copy_(host_view(src))
    return dst


def to_copy(func, args, kwargs):
    self = args[0]
    device = kwargs.get("device")
    if device is not None and not isinstance(device, torch.device):
        device = torch.device(device)
    if device is None or (device.type == "fl" and (device.index is None or device.index == self.device.index)):
        if device is not None and device.index is None:
            kwargs = dict(kwargs, device=self.device)
        return route(func, args, kwargs)
    if launch.STATE.capture is not None:
        raise _capture_error(f"a copy from {self.device} to {device}")
    kw = {k: v for k, v in kwargs.items() if k != "device"}
    with torch.no_grad():
        cpu = aten._to_copy(host_view(self), **kw)
    if device.type == "cpu":
        return cpu
    if device.type == "fl":
        chip = chip_for(device)
        st = Storage.adopt_host(chip, cpu)
        return new_tensor(chip, tuple(cpu.shape), cpu.stride(), cpu.dtype, storage=st, offset=cpu.storage_offset())
    return cpu.to(device)


def item(func, args, kwargs):
    return host_view(args[0]).item()


_LIKE_GEOMETRY: dict = {}   # (op, argument keys) -> (shape, strides, dtype) of the result


def _like_geometry(func, self, args, kwargs):
    """The result's (shape, strides, dtype), from PyTorch's meta kernel on a
    stand-in, once per argument key (the input's strides matter:
    memory_format=preserve_format follows them)."""
    rest = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory")}
    key = (func, tuple(arg_key(a) for a in args), tuple(sorted((k, arg_key(v)) for k, v in rest.items())))
    geo = _LIKE_GEOMETRY.get(key)
    if geo is None:
        m = func(to_meta(self), *[to_meta(a) for a in args[1:]], **{k: to_meta(v) for k, v in rest.items()})
        geo = remember(_LIKE_GEOMETRY, key, (tuple(m.shape), m.stride(), m.dtype), 4096)
    return geo


def empty_like(func, args, kwargs):
    """empty_like / new_empty / new_empty_strided: allocate, no data."""
    self = args[0]
    device = kwargs.get("device")
    shape, strides, dtype = _like_geometry(func, self, args, kwargs)
    chip = self._st.chip
    if device is not None:
        d = torch.device(device)
        if d.type != "fl":      # the CPU, meta, ...: made there, as on CUDA
            return torch.empty_strided(shape, strides, dtype=dtype, device=d)
        chip = chip_for(d)
    return new_tensor(chip, shape, strides, dtype)


def on_device(handler):
    """The handler of an op that takes a tensor and a `device=` (rand_like,
    randn_like, randint_like, new_zeros, new_ones, new_full): a device other
    than the tensor's gets the result, made there from the tensor's metadata
    alone (PyTorch's own kernel on a meta stand-in allocates on that device),
    as on CUDA."""
    def run(func, args, kwargs):
        device = kwargs.get("device")
        if device is not None:
            d = torch.device(device)
            if d.type == "fl":
                d = chip_for(d).device
            if d != args[0].device:
                return func(to_meta(args[0]), *args[1:], **dict(kwargs, device=d))
        return handler(func, args, kwargs)
    return run


def identity(func, args, kwargs):
    return args[0]


def sdp_choice(func, args, kwargs):
    # No fused attention kernel here: take PyTorch's math path, whose matmuls
    # and softmax route to the chip's own kernels.
    return int(torch._C._SDPBackend.math)


_ONES = (aten.ones_like.default, aten.new_ones.default)
_FILL_VALUE_AT = {aten.full_like.default: 1, aten.new_full.default: 2}   # fill_value's position


def _fill_value(func, args, kwargs):
    """The value a zeros/ones/full factory fills with, and its other keywords."""
    at = _FILL_VALUE_AT.get(func)
    if at is None:
        return (1 if func in _ONES else 0), kwargs
    value = args[at] if len(args) > at else kwargs["fill_value"]
    return value, {k: v for k, v in kwargs.items() if k != "fill_value"}


def full_like(func, args, kwargs):
    """zeros_like / ones_like / full_like: allocate on the chip, then fill
    there (the fill is routed like any op, natively when the chip has it)."""
    value, rest = _fill_value(func, args, kwargs)
    return aten.fill_.Scalar(aten.empty_like.default(args[0], **rest), value)


def new_fill(func, args, kwargs):
    """new_zeros / new_ones / new_full on the tensor's own chip: allocate
    there (new_empty), then fill there (torch's decomposition of these ends
    in a factory prim no chip runs)."""
    value, rest = _fill_value(func, args, kwargs)
    return aten.fill_.Scalar(aten.new_empty.default(args[0], args[1], **rest), value)


def _capture_error(what):
    return GraphCaptureError(f"{what} during graph capture: host data cannot be replayed. Copy new data into "
                             f"static device tensors before replay(), and read results after it")
