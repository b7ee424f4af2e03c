"""Strict mode: an invalid launch takes the process down, like a driver crash.
Run in subprocesses (the abort cannot be caught)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from .simhelp import HEADERS, LIBS

PRELUDE = """
import cffi, torch
from flbridge.binding.header import load_header
ffi = cffi.FFI(); ffi.cdef(load_header({header!r}).cdef); lib = ffi.dlopen({lib!r})
"""

X1_BAD_CONV = """
assert lib.x1_init(0) == 0
def put(t):
    p = ffi.new("x1_devptr_t *"); lib.x1_malloc(p, t.numel() * 4)
    lib.x1_memcpy_h2d(p[0], ffi.cast("void *", t.data_ptr()), t.numel() * 4)
    d = ffi.new("x1_tensor_t *"); d.data = p[0]; d.ndim = t.dim(); d.dtype = lib.X1_FLOAT32
    for i, (s, st) in enumerate(zip(t.shape, t.stride())): d.shape[i], d.strides[i] = s, st
    return d
x, w, o = put(torch.randn(1, 8, 8, 4)), put(torch.randn(4, 3, 3, 4)), put(torch.randn(1, 2, 2, 4))
print("launching", flush=True)
st = lib.x1_conv2d(x, w, ffi.NULL, [3, 3], [1, 1], [1, 1], 1, o)
print("returned", st, ffi.string(lib.x1_get_last_error()).decode(), flush=True)
"""

X1_OOM_AND_FAULT = """
assert lib.x1_init(1024) == 0
p = ffi.new("x1_devptr_t *")
assert lib.x1_malloc(p, 4096) == lib.X1_ERR_OUT_OF_MEMORY
assert lib.x1_debug_set_faults(b"malloc:1") == 0
assert lib.x1_malloc(p, 16) == lib.X1_ERR_DEVICE
print("survived", flush=True)
"""

TH1_BAD_MATMUL = """
assert lib.th1Init(0) == 0
def put(shape):
    n = 1
    for s in shape: n *= s
    p = ffi.new("th1DevPtr_t *"); lib.th1MemAlloc(p, n * 4)
    d = ffi.new("th1TensorDesc_t *"); d.ptr = p[0]; d.nbDims = len(shape); d.dataType = lib.TH1_DATA_FLOAT
    st = 1
    for i in reversed(range(len(shape))): d.dims[i], d.strides[i] = shape[i], st; st *= shape[i]
    return d
print("launching", flush=True)
st = lib.th1Matmul(put((15, 16)), put((16, 16)), put((15, 16)))
print("returned", st, flush=True)
"""

TH1_COMPARE_INTO_FLOAT = """
assert lib.th1Init(0) == 0
p = ffi.new("th1DevPtr_t *"); lib.th1MemAlloc(p, 64)
d = ffi.new("th1TensorDesc_t *"); d.ptr = p[0]; d.nbDims = 1; d.dataType = lib.TH1_DATA_FLOAT
d.dims[0], d.strides[0] = 16, 1
print("launching", flush=True)
st = lib.th1Equal(d, d, d)
print("returned", st, flush=True)
"""

X1_NLL_BAD_TARGET = """
assert lib.x1_init(0) == 0
def put(t, code):
    n = t.numel() * t.element_size()
    p = ffi.new("x1_devptr_t *"); lib.x1_malloc(p, max(n, 1))
    lib.x1_memcpy_h2d(p[0], ffi.cast("void *", t.data_ptr()), n)
    d = ffi.new("x1_tensor_t *"); d.data = p[0]; d.ndim = t.dim(); d.dtype = code
    for i, (s, st) in enumerate(zip(t.shape, t.stride())): d.shape[i], d.strides[i] = s, st
    return d
x = put(torch.randn(2, 3), lib.X1_FLOAT32)
t = put(torch.tensor([0, 7]), lib.X1_INT64)
o, tw = put(torch.zeros(()), lib.X1_FLOAT32), put(torch.zeros(()), lib.X1_FLOAT32)
st = lib.x1_nll_loss_forward(x, t, ffi.NULL, 1, -100, o, tw)
print("returned", st, ffi.string(lib.x1_get_last_error()).decode(), flush=True)
"""


def run(body, lib, header, strict):
    """Runs body in a fresh interpreter; strict: True, False, or the raw value."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("SIM_STRICT")}
    if strict is not False:
        env["X1SIM_STRICT"] = env["TH1SIM_STRICT"] = "1" if strict is True else strict
    code = textwrap.dedent(PRELUDE.format(header=str(HEADERS[header]), lib=str(LIBS / lib))) + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.slow   # a subprocess that imports torch (2 s); the default suite keeps one abort and one code
def test_invalid_conv_returns_error_without_strict_mode():
    r = run(X1_BAD_CONV, "libx1v2sim.so", "x1", strict=False)
    assert r.returncode == 0, r.stderr
    assert "returned 3 x1_conv2d: stride=3 not in {1, 2, 4}" in r.stdout


@pytest.mark.slow  # each runs interpreters that abort: 1.5-2 s
def test_invalid_conv_aborts_in_strict_mode():
    r = run(X1_BAD_CONV, "libx1v2sim.so", "x1", strict=True)
    assert r.returncode == -signal.SIGABRT
    assert "launching" in r.stdout and "returned" not in r.stdout
    assert "[x1v2-sim strict mode] fatal: x1_conv2d: stride=3 not in {1, 2, 4}" in r.stderr


@pytest.mark.slow   # a subprocess that imports torch (2 s); the default suite keeps one abort and one code
def test_strict_mode_does_not_abort_on_oom_or_device_faults():
    r = run(X1_OOM_AND_FAULT, "libx1sim.so", "x1", strict=True)
    assert r.returncode == 0, r.stderr
    assert "survived" in r.stdout


@pytest.mark.slow   # a subprocess that imports torch (2 s); the default suite keeps one abort and one code
def test_th1_unaligned_matmul_aborts_in_strict_mode():
    r = run(TH1_BAD_MATMUL, "libth1sim.so", "th1", strict=True)
    assert r.returncode == -signal.SIGABRT
    assert "th1Matmul: M=15, N=16, K=16: the TH1 matrix unit needs multiples of 16" in r.stderr
    r = run(TH1_BAD_MATMUL, "libth1sim.so", "th1", strict=False)
    assert r.returncode == 0 and "returned 103" in r.stdout


@pytest.mark.slow   # a subprocess that imports torch (2 s); the default suite keeps one abort and one code
def test_strict_zero_means_off():
    r = run(X1_BAD_CONV, "libx1sim.so", "x1", strict="0")
    assert r.returncode == 0 and "returned 3" in r.stdout


@pytest.mark.slow  # each runs interpreters that abort: 1.5-2 s
def test_new_kernels_abort_on_invalid_calls_in_strict_mode():
    r = run(TH1_COMPARE_INTO_FLOAT, "libth1sim.so", "th1", strict=True)
    assert r.returncode == -signal.SIGABRT and "returned" not in r.stdout
    assert "[th1-sim strict mode] fatal: th1Equal: a comparison writes bool, the output is float32" in r.stderr


@pytest.mark.slow  # each runs interpreters that abort: 1.5-2 s
def test_data_errors_of_new_kernels_return_a_code_in_strict_mode():
    r = run(X1_NLL_BAD_TARGET, "libx1v2sim.so", "x1", strict=True)
    assert r.returncode == 0, r.stderr
    assert "returned 7 x1_nll_loss_forward: target 7 is out of bounds [0, 3)" in r.stdout
