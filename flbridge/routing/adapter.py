"""The tensor adapter: turns a tensor into what a vendor kernel expects,
on the device, with the chip's own copy and convert kernels.

* broadcast: expand to the output's shape with stride 0 (metadata only);
* dtype: cast to the compute dtype (copy kernel with conversion);
* layout: view NCHW data in the kernel's order (NHWC, OHWI, ...) -- a
  permutation of strides, so an output is written in place through the
  permuted view and an input becomes a real copy only if the kernel also
  needs it contiguous;
* contiguity: copy into a dense buffer;
* dtype quirks: convert into the dtype the kernel takes (int8 -> uint8 with
  a zero-point shift) with the vendor's convert function.

Temporary buffers come from the caching allocator and go back after the call.
"""
from __future__ import annotations

import torch

from ..specs import LAYOUT_FAMILIES
from ..tensor import dense_strides, itemsize
from ..binding import launch
from .argkeys import remember


class Temps:
    """Device buffers borrowed for one kernel call."""
    __slots__ = ("alloc", "blocks")

    def __init__(self, allocator):
        self.alloc = allocator
        self.blocks = []

    def take(self, nbytes: int) -> int:
        addr, sc = self.alloc.alloc(max(nbytes, 1))
        self.blocks.append((addr, sc))
        return addr

    def release(self) -> None:
        for addr, sc in self.blocks:
            self.alloc.release(addr, sc)
        self.blocks.clear()


_PERMS: dict = {}


def layout_perm(layout: str) -> tuple:
    """NHWC -> (0, 2, 3, 1): descriptor dim i is logical dim perm[i]."""
    p = _PERMS.get(layout)
    if p is None:
        family = next(f for f in LAYOUT_FAMILIES if sorted(f) == sorted(layout))
        p = _PERMS[layout] = tuple(family.index(c) for c in layout)
    return p


def broadcast_strides(shape, strides, out_shape) -> tuple:
    """Strides of a tensor expanded to out_shape (0 on broadcast dims)."""
    nd, od = len(shape), len(out_shape)
    res = [0] * od
    for i in range(nd):
        o = od - nd + i
        res[o] = 0 if shape[i] == 1 and out_shape[o] != 1 else strides[i]
    return tuple(res)


def is_contiguous(shape, strides) -> bool:
    expect = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s != 1 and st != expect:
            return False
        expect *= s
    return True


class View:
    """A tensor as a kernel will see it: device address + geometry."""
    __slots__ = ("addr", "shape", "strides", "offset", "dtype")

    def __init__(self, addr, shape, strides, offset, dtype):
        self.addr, self.shape, self.strides, self.offset, self.dtype = addr, shape, strides, offset, dtype

    def desc(self, rt):
        return rt.desc(self.addr, self.shape, self.strides, self.dtype, self.offset)


def copy_to_dense(rt, temps: Temps, v: View, dtype, itemsize: int) -> View:
    """A dense copy of v (in v's dimension order), converted to `dtype`."""
    numel = 1
    for s in v.shape:
        numel *= s
    addr = temps.take(numel * itemsize)
    out = View(addr, v.shape, dense_strides(v.shape), 0, dtype)
    rt.copy_kernel(v.desc(rt), out.desc(rt))
    return out


def convert_quirk(rt, temps: Temps, v: View, fn, dtype, itemsize: int) -> View:
    numel = 1
    for s in v.shape:
        numel *= s
    addr = temps.take(numel * itemsize)
    out = View(addr, v.shape, dense_strides(v.shape), 0, dtype)
    st = launch.kernel(rt.chip, f"{getattr(fn, '__name__', 'convert')} [{rt.device_type}]", fn,
                       (v.desc(rt), out.desc(rt)))
    if st != rt.ok:
        raise rt.error(st, getattr(fn, "__name__", "convert"))
    return out


def tensor_desc(rt, t):
    """t's descriptor.  Kept on the tensor while its device address holds
    (set_geometry() drops it when the geometry changes in place); otherwise
    looked up by address and geometry in the runtime's cache (the caching
    allocator hands the same block to the next result of the same size)."""
    d = t.__dict__
    dev = t._st.dev
    if d.get("_dd") == dev:
        return d["_d"]
    return cached_desc(rt, t, dev, t.storage_offset(), t.shape, t.stride(), t.dtype)


def cached_desc(rt, t, dev, offset, shape, strides, dtype):
    """The runtime's cached descriptor for this address and geometry, also
    kept on t (callers that know t's geometry skip asking the tensor)."""
    key = (dev, offset, shape, strides, dtype)
    desc = rt.desc_cache.get(key)
    if desc is None:
        desc = remember(rt.desc_cache, key, rt.desc(dev, shape, strides, dtype, offset), 8192)
    d = t.__dict__
    d["_d"] = desc
    d["_dd"] = dev
    return desc


# ------------------------------------------------ a kernel's arguments

def input_desc(k, v, name, ref, out_shape, temps):
    e, rt, chip = k.entry, k.rt, k.chip
    if not isinstance(v, torch.Tensor) or v.device.type == "cpu":
        # a Python number or CPU scalar: a 0-dim constant on the device
        value = v.item() if isinstance(v, torch.Tensor) else v
        dt = ref or (v.dtype if isinstance(v, torch.Tensor) else torch.get_default_dtype())
        v = chip.constant(value, dt)
    shape, strides, dtype = tuple(v.shape), v.stride(), v.dtype
    if name in k.plain_inputs and (out_shape is None or shape == out_shape or name not in e.broadcast) \
            and (ref is None or dtype == ref or name in e.arg_dtypes):
        return tensor_desc(rt, v)  # passed as it is
    view = View(v._st.dev, shape, strides, v.storage_offset(), dtype)
    if name in e.broadcast and out_shape is not None and shape != out_shape:
        view.strides = broadcast_strides(shape, strides, out_shape)
        view.shape = out_shape
    if ref is not None and dtype != ref and name not in e.arg_dtypes:
        view = copy_to_dense(rt, temps, view, ref, itemsize(ref))
    lay = e.layout.get(name)
    if lay is not None:
        p = layout_perm(lay)
        view.shape = tuple(view.shape[i] for i in p)
        view.strides = tuple(view.strides[i] for i in p)
    if name in e.contiguous and not is_contiguous(view.shape, view.strides):
        view = copy_to_dense(rt, temps, view, view.dtype, itemsize(view.dtype))
    q = e.quirks.get(name)
    if q is not None:
        view = convert_quirk(rt, temps, view, k.quirk_fns[name], q.pass_as, itemsize(q.pass_as))
    return view.desc(rt)


def padded_input(k, v, shapes, ref, temps):
    """v in a zeroed buffer of the padded shape (the adapter's fill and
    copy kernels, on the device); broadcast to the result first if
    the kernel expands it."""
    rt = k.rt
    real, padded, name = shapes
    dtype = ref if ref is not None and name not in k.entry.arg_dtypes else v.dtype
    src = View(v._st.dev, tuple(v.shape), v.stride(), v.storage_offset(), v.dtype)
    if tuple(v.shape) != real:
        src.strides = broadcast_strides(src.shape, src.strides, real)
        src.shape = real
    buf = View(temps.take(_numel(padded) * itemsize(dtype)), padded, dense_strides(padded), 0, dtype)
    rt.fill_kernel(buf.desc(rt), 0.0)
    rt.copy_kernel(src.desc(rt), View(buf.addr, real, buf.strides, 0, dtype).desc(rt))
    return buf.desc(rt)


def padded_output(k, o, shapes, temps, copybacks):
    """A padded buffer for the kernel to write; its valid part is copied
    into the result after the call."""
    real, padded = shapes
    buf = View(temps.take(_numel(padded) * itemsize(o.dtype)), padded, dense_strides(padded), 0, o.dtype)
    copybacks.append((View(buf.addr, real, buf.strides, 0, o.dtype),
                      View(o._st.dev, tuple(o.shape), o.stride(), o.storage_offset(), o.dtype)))
    return buf.desc(k.rt)


def output_desc(k, o, ri, temps, copybacks):
    rt = k.rt
    lay, contiguous = k.out_layouts.get(ri, (None, False))
    if lay is None and not contiguous:
        return tensor_desc(rt, o)
    view = View(o._st.dev, tuple(o.shape), o.stride(), o.storage_offset(), o.dtype)
    if lay is not None:
        p = layout_perm(lay)
        view.shape = tuple(view.shape[i] for i in p)
        view.strides = tuple(view.strides[i] for i in p)
    if contiguous and not is_contiguous(view.shape, view.strides):
        numel = o.numel()
        tmp = View(temps.take(numel * itemsize(o.dtype)), view.shape, dense_strides(view.shape), 0, o.dtype)
        copybacks.append((tmp, view))
        return tmp.desc(rt)
    return view.desc(rt)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ------------------------------------------------ argument edge cases
# When a kernel refuses a call, the route asks here for equivalent arguments
# it may take (OpRoute.__call__): PyTorch accepts inputs a vendor kernel need
# not handle, whose effect on the result is nil.

def _drop_empty_cat_inputs(args, kwargs, accepts):
    """cat ignores empty inputs, the legacy (0,)-shaped ones of any rank
    included, when every input has one dtype (an empty one of another dtype
    would still promote the result's): the kernel gets the others."""
    tensors = args[0] if args else kwargs.get("tensors")
    if not isinstance(tensors, (list, tuple)) or len(tensors) < 2:
        return None
    kept = [t for t in tensors if t.numel()]
    if len(kept) == len(tensors) or not kept or len({t.dtype for t in tensors}) != 1:
        return None
    legacy = [t for t in tensors if not t.numel() and t.dim() != kept[0].dim()]
    if any(t.shape != (0,) for t in legacy):
        return None    # a wrong rank that is not the legacy form: PyTorch's own error, from the fallback
    if args:
        return (kept, *args[1:]), kwargs
    return args, dict(kwargs, tensors=kept)


def _pad_convolution_input(args, kwargs, accepts):
    """A convolution whose padding the kernel does not take (a 7x7 stem's 3
    on a chip that pads at most 2) runs on the input zero-padded explicitly
    (constant_pad_nd, routed like any op) with padding 0: the same windows
    over the same values, so the same sums.  Only when the kernel takes that
    call, which `accepts` checks on meta stand-ins first: nothing runs for a
    call the kernel refuses for another reason (a dtype, the groups)."""
    if kwargs or len(args) != 9:
        return None
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = args
    if transposed or not any(padding) or x.dim() != len(padding) + 2:
        return None
    zero = [0] * len(padding)
    shape = (*x.shape[:2], *(n + 2 * p for n, p in zip(x.shape[2:], padding)))
    stand_in = torch.empty(shape, dtype=x.dtype, device="meta")
    if not accepts((stand_in, w, b, stride, zero, dilation, transposed, output_padding, groups), kwargs):
        return None
    pad = [q for p in reversed(padding) for q in (p, p)]
    xp = torch.ops.aten.constant_pad_nd.default(x, pad, 0.0)
    return (xp, w, b, stride, zero, dilation, transposed, output_padding, groups), kwargs


ARGUMENT_ADAPTERS = {torch.ops.aten.cat.default: _drop_empty_cat_inputs,
                     torch.ops.aten.convolution.default: _pad_convolution_input}
