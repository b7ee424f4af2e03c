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

from .registry import LAYOUT_FAMILIES


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


def dense_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


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
    st = fn(v.desc(rt), out.desc(rt))
    if st != rt._ok:
        raise rt.error(st, getattr(fn, "__name__", "convert"))
    return out
