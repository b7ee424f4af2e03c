"""Drives a simulated runtime directly through cffi (ABI mode), independent of
flbridge's router: each test process loads a private copy of the library so
its state never mixes with the one flbridge uses."""
from __future__ import annotations

import shutil
from pathlib import Path

import cffi
import numpy as np
import torch

from flbridge._paths import data_root
from flbridge.binding import load_header

ROOT = data_root()
LIBS = ROOT / "native_sim" / "build"
HEADERS = {"x1": ROOT / "native_sim/x1/x1_runtime.h", "th1": ROOT / "native_sim/th1/th1_runtime.h"}


def load_private(lib_name: str, header: str, tmpdir: Path):
    """dlopen a copy of the library: its own global state, its own counters."""
    h = load_header(HEADERS[header])
    ffi = cffi.FFI()
    ffi.cdef(h.cdef)
    copy = Path(tmpdir) / lib_name
    shutil.copy(LIBS / lib_name, copy)
    return ffi, ffi.dlopen(str(copy))


class Chip:
    """Uniform test access to x1 and th1 (allocation, copies, descriptors)."""

    def __init__(self, kind: str, ffi, lib):
        self.kind, self.ffi, self.lib = kind, ffi, lib
        if kind == "x1":
            self.ok = lib.X1_SUCCESS
            self.codes = {torch.float32: lib.X1_FLOAT32, torch.float16: lib.X1_FLOAT16,
                          torch.int8: lib.X1_INT8, torch.uint8: lib.X1_UINT8,
                          torch.int32: lib.X1_INT32, torch.int64: lib.X1_INT64,
                          torch.bool: lib.X1_BOOL}
            self.desc_type = "x1_tensor_t *"
            self.ptr_type = "x1_devptr_t *"
            self._malloc, self._free = lib.x1_malloc, lib.x1_free
            self._h2d, self._d2h = lib.x1_memcpy_h2d, lib.x1_memcpy_d2h
            self.last_error = lambda: ffi.string(lib.x1_get_last_error()).decode()
        else:
            self.ok = lib.TH1_SUCCESS
            self.codes = {torch.float32: lib.TH1_DATA_FLOAT, torch.bfloat16: lib.TH1_DATA_BFLOAT16,
                          torch.int32: lib.TH1_DATA_INT32, torch.int64: lib.TH1_DATA_INT64,
                          torch.bool: lib.TH1_DATA_BOOL, torch.int8: lib.TH1_DATA_INT8,
                          torch.uint8: lib.TH1_DATA_UINT8}
            self.desc_type = "th1TensorDesc_t *"
            self.ptr_type = "th1DevPtr_t *"
            self._malloc, self._free = lib.th1MemAlloc, lib.th1MemFree
            self._h2d, self._d2h = lib.th1MemcpyHtoD, lib.th1MemcpyDtoH
            self.last_error = lambda: ffi.string(lib.th1GetLastErrorString()).decode()
        self.live: list[int] = []

    # ---- counters
    def counters(self) -> dict:
        """The runtime's counters struct as a dict."""
        ffi, lib = self.ffi, self.lib
        if self.kind == "x1":
            c = ffi.new("x1_counters_t *")
            assert lib.x1_get_counters(c) == self.ok
        else:
            c = ffi.new("th1Stats_t *")
            assert lib.th1GetStats(c) == self.ok
        return {f: getattr(c, f) for f, _ in ffi.typeof(c).item.fields}

    def kernel_counts(self) -> dict:
        """{kernel name: launches}."""
        ffi, lib = self.ffi, self.lib
        if self.kind == "x1":
            arr, n = ffi.new("x1_kernel_counter_t[64]"), ffi.new("int32_t *")
            assert lib.x1_get_kernel_counters(arr, 64, n) == self.ok
        else:
            arr, n = ffi.new("th1KernelStat_t[64]"), ffi.new("int *")
            assert lib.th1GetKernelStats(arr, 64, n) == self.ok
        return {ffi.string(arr[i].name).decode(): arr[i].launches for i in range(n[0])}

    # ---- memory
    def malloc(self, nbytes: int) -> int:
        p = self.ffi.new(self.ptr_type)
        st = self._malloc(p, nbytes)
        assert st == self.ok, self.last_error()
        self.live.append(p[0])
        return p[0]

    def free_all(self):
        for a in self.live:
            self._free(a)
        self.live.clear()

    def upload(self, t: torch.Tensor) -> int:
        """Copies a tensor's whole storage; returns the device address of element 0."""
        t = t.contiguous() if t.storage_offset() or not t.is_contiguous() else t
        flat = t.reshape(-1)  # 0-d tensors have no byte view of their own
        raw = flat.view(torch.uint8) if t.dtype != torch.bool else flat.to(torch.uint8)
        nbytes = max(t.numel() * t.element_size(), 1)
        addr = self.malloc(nbytes)
        if t.numel():
            st = self._h2d(addr, self.ffi.cast("void *", raw.data_ptr()), t.numel() * t.element_size())
            assert st == self.ok, self.last_error()
        return addr

    def download(self, addr: int, shape, dtype) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype)
        n = out.numel() * out.element_size()
        if n:
            st = self._d2h(self.ffi.cast("void *", out.data_ptr()), addr, n)
            assert st == self.ok, self.last_error()
        return out

    # ---- descriptors
    def desc(self, addr: int, shape, strides=None, dtype=torch.float32, offset_elems: int = 0):
        shape = list(shape)
        if strides is None:
            strides = list(torch.empty(shape, device="meta").stride()) if shape else []
        d = self.ffi.new(self.desc_type)
        if self.kind == "x1":
            d.data = addr + offset_elems * torch.empty(0, dtype=dtype).element_size()
            d.ndim = len(shape)
            d.dtype = self.codes[dtype]
            for i, (s, st) in enumerate(zip(shape, strides)):
                d.shape[i], d.strides[i] = s, st
        else:
            d.ptr = addr
            d.elemOffset = offset_elems
            d.nbDims = len(shape)
            d.dataType = self.codes[dtype]
            for i, (s, st) in enumerate(zip(shape, strides)):
                d.dims[i], d.strides[i] = s, st
        return d

    def put(self, t: torch.Tensor):
        """Uploads t (contiguous) and returns (addr, descriptor)."""
        addr = self.upload(t)
        return addr, self.desc(addr, t.shape, None, t.dtype)

    def empty(self, shape, dtype=torch.float32, strides=None):
        """Device buffer for an output; returns (addr, descriptor)."""
        numel = int(np.prod(shape)) if len(shape) else 1
        if strides is not None:
            span = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if numel else 1
        else:
            span = numel
        es = torch.empty(0, dtype=dtype).element_size()
        addr = self.malloc(max(span * es, 1))
        return addr, self.desc(addr, shape, strides, dtype)

    def get(self, addr, shape, dtype=torch.float32, strides=None):
        if strides is None:
            return self.download(addr, shape, dtype)
        numel = int(np.prod(shape)) if len(shape) else 1
        span = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if numel else 0
        flat = self.download(addr, (span,), dtype)
        return torch.as_strided(flat, shape, strides)

    def expanded(self, addr, src_shape, out_shape, dtype):
        """Descriptor of a contiguous tensor broadcast to out_shape (stride 0)."""
        t = torch.empty(src_shape, device="meta").expand(out_shape)
        return self.desc(addr, out_shape, t.stride(), dtype)
