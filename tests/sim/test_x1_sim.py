"""The simulated X1 runtime, driven directly through its C ABI."""
import threading

import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(0)
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def close(a, b, dtype=torch.float32, rtol=None):
    torch.testing.assert_close(a.float(), b.float(), atol=ATOL.get(dtype, 1e-5) * 4,
                               rtol=rtol or (1e-5 if dtype == torch.float32 else 2e-3))


def counters(x1):
    return x1.counters()


def kernel_counts(x1):
    return x1.kernel_counts()


# ------------------------------------------------------------------ memory

def test_device_addresses_are_not_host_pointers(x1):
    a = x1.malloc(1024)
    # canonical x86-64 user addresses are below 2**47; device ones are not
    assert a >= 1 << 47
    b = x1.malloc(1024)
    assert b != a


def test_h2d_d2h_d2d_roundtrip_and_counters(x1):
    x1.lib.x1_reset_counters()
    t = torch.arange(256, dtype=torch.float32)
    a = x1.upload(t)
    b = x1.malloc(t.numel() * 4)
    assert x1.lib.x1_memcpy_d2d(b, a, 1024) == x1.ok
    back = x1.download(b, (256,), torch.float32)
    assert torch.equal(back, t)
    c = counters(x1)
    assert (c["h2d_calls"], c["h2d_bytes"]) == (1, 1024)
    assert (c["d2d_calls"], c["d2d_bytes"]) == (1, 1024)
    assert (c["d2h_calls"], c["d2h_bytes"]) == (1, 1024)


def test_batched_h2d_is_one_call(x1):
    x1.lib.x1_reset_counters()
    ts = [torch.randn(n) for n in (3, 100, 17)]
    dsts = [x1.malloc(t.numel() * 4) for t in ts]
    ffi = x1.ffi
    dst = ffi.new("x1_devptr_t[]", dsts)
    src = ffi.new("void *[]", [ffi.cast("void *", t.data_ptr()) for t in ts])
    nb = ffi.new("size_t[]", [t.numel() * 4 for t in ts])
    assert x1.lib.x1_memcpy_h2d_batch(dst, src, nb, 3) == x1.ok
    for d, t in zip(dsts, ts):
        assert torch.equal(x1.download(d, t.shape, torch.float32), t)
    c = counters(x1)
    assert c["h2d_calls"] == 1 and c["h2d_batch_calls"] == 1 and c["h2d_bytes"] == 480


def test_batched_h2d_with_bad_entry_copies_nothing(x1):
    ffi = x1.ffi
    zeros = torch.zeros(4)
    good = x1.malloc(16)
    x1.lib.x1_memcpy_h2d(good, ffi.cast("void *", zeros.data_ptr()), 16)
    ones = torch.ones(4)
    dst = ffi.new("x1_devptr_t[]", [good, 0x1234])
    src = ffi.new("void *[]", [ffi.cast("void *", ones.data_ptr())] * 2)
    nb = ffi.new("size_t[]", [16, 16])
    x1.lib.x1_reset_counters()
    st = x1.lib.x1_memcpy_h2d_batch(dst, src, nb, 2)
    assert st == x1.lib.X1_ERR_INVALID_ADDRESS
    assert "entry 1" in x1.last_error()
    assert torch.equal(x1.download(good, (4,), torch.float32), torch.zeros(4))
    assert counters(x1)["h2d_calls"] == 0


def test_free_then_use_is_an_invalid_address(x1):
    a = x1.upload(torch.ones(4))
    x1.live.remove(a)
    assert x1.lib.x1_free(a) == x1.ok
    out = torch.empty(4)
    st = x1.lib.x1_memcpy_d2h(x1.ffi.cast("void *", out.data_ptr()), a, 16)
    assert st == x1.lib.X1_ERR_INVALID_ADDRESS
    assert "not in any live allocation" in x1.last_error()
    assert x1.lib.x1_free(a) == x1.lib.X1_ERR_INVALID_ADDRESS  # double free


def test_copy_past_end_of_allocation_is_rejected(x1):
    a = x1.malloc(16)
    src = torch.zeros(8)
    st = x1.lib.x1_memcpy_h2d(a, x1.ffi.cast("void *", src.data_ptr()), 32)
    assert st == x1.lib.X1_ERR_INVALID_ADDRESS
    assert "past the end" in x1.last_error()


def test_kernel_descriptor_reaching_past_allocation_is_rejected(x1):
    a, _ = x1.put(torch.ones(4))
    o, od = x1.empty((8,))
    st = x1.lib.x1_relu(x1.desc(a, (8,)), od)
    assert st == x1.lib.X1_ERR_INVALID_ADDRESS


def test_zero_byte_malloc_is_invalid(x1):
    p = x1.ffi.new("x1_devptr_t *")
    assert x1.lib.x1_malloc(p, 0) == x1.lib.X1_ERR_INVALID_VALUE


def test_capacity_from_init_and_oom_changes_nothing(x1):
    x1.reinit(1 << 20)
    total = x1.ffi.new("uint64_t *")
    free = x1.ffi.new("uint64_t *")
    assert x1.lib.x1_mem_get_info(free, total) == x1.ok
    assert total[0] == 1 << 20
    keep = x1.upload(torch.arange(1000, dtype=torch.float32))
    before = counters(x1)
    p = x1.ffi.new("x1_devptr_t *")
    assert x1.lib.x1_malloc(p, 1 << 20) == x1.lib.X1_ERR_OUT_OF_MEMORY
    msg = x1.last_error()
    assert "out of device memory" in msg and "requested 1048576" in msg
    after = counters(x1)
    assert after["live_bytes"] == before["live_bytes"] and after["alloc_calls"] == before["alloc_calls"]
    assert torch.equal(x1.download(keep, (1000,), torch.float32), torch.arange(1000, dtype=torch.float32))


def test_capacity_from_environment_overrides_init(x1, monkeypatch):
    monkeypatch.setenv("X1SIM_CAPACITY", "64K")
    x1.reinit(1 << 30)
    total = x1.ffi.new("uint64_t *")
    x1.lib.x1_mem_get_info(x1.ffi.NULL, total)
    assert total[0] == 64 * 1024
    monkeypatch.setenv("X1SIM_CAPACITY", "lots")
    x1.lib.x1_shutdown()
    import os
    saved = os.environ.pop("X1SIM_STRICT", None)
    try:
        assert x1.lib.x1_init(0) == x1.lib.X1_ERR_INVALID_VALUE
    finally:
        if saved is not None:
            os.environ["X1SIM_STRICT"] = saved
    assert "X1SIM_CAPACITY" in x1.last_error()
    monkeypatch.delenv("X1SIM_CAPACITY")
    x1.reinit()


def test_live_and_peak_bytes(x1):
    x1.lib.x1_reset_counters()
    base = counters(x1)["live_bytes"]
    a = x1.malloc(1000)  # charged in 256-byte granules
    b = x1.malloc(256)
    c = counters(x1)
    assert c["live_bytes"] - base == 1024 + 256
    x1.lib.x1_free(a)
    x1.live.remove(a)
    c = counters(x1)
    assert c["live_bytes"] - base == 256 and c["peak_bytes"] - base == 1280
    assert c["alloc_calls"] == 2 and c["free_calls"] == 1
    del b


def test_not_initialized(x1):
    x1.lib.x1_shutdown()
    x1.live.clear()
    p = x1.ffi.new("x1_devptr_t *")
    assert x1.lib.x1_malloc(p, 16) == x1.lib.X1_ERR_NOT_INITIALIZED
    assert "not initialized" in x1.last_error()
    assert x1.lib.x1_synchronize() == x1.lib.X1_ERR_NOT_INITIALIZED
    x1.reinit()
    assert x1.lib.x1_synchronize() == x1.ok


def test_status_strings(x1):
    s = lambda c: x1.ffi.string(x1.lib.x1_status_string(c)).decode()  # noqa: E731
    assert s(x1.lib.X1_SUCCESS) == "X1_SUCCESS"
    assert s(x1.lib.X1_ERR_OUT_OF_MEMORY) == "X1_ERR_OUT_OF_MEMORY"
    assert s(x1.lib.X1_ERR_DATA) == "X1_ERR_DATA"
    assert s(99) == "X1_ERR_UNKNOWN"


def test_last_error_is_thread_local(x1):
    p = x1.ffi.new("x1_devptr_t *")
    x1.lib.x1_malloc(p, 0)
    main_msg = x1.last_error()
    seen = []
    t = threading.Thread(target=lambda: seen.append(x1.last_error()))
    t.start()
    t.join()
    assert "0 bytes" in main_msg and seen == [""]


# ----------------------------------------------------------------- mapping

def test_mem_map_is_zero_copy_both_ways(x1):
    x1.lib.x1_reset_counters()
    host = torch.arange(16, dtype=torch.float32)
    p = x1.ffi.new("x1_devptr_t *")
    assert x1.lib.x1_mem_map(x1.ffi.cast("void *", host.data_ptr()), 64, p) == x1.ok
    dev = p[0]
    o, od = x1.empty((16,))
    assert x1.lib.x1_neg(x1.desc(dev, (16,)), od) == x1.ok
    assert torch.equal(x1.get(o, (16,)), -torch.arange(16, dtype=torch.float32))
    # a kernel writing to mapped memory writes the host tensor
    assert x1.lib.x1_fill(x1.desc(dev, (4,)), 7.0) == x1.ok
    assert host[:4].tolist() == [7.0] * 4
    c = counters(x1)
    assert c["mapped_bytes"] == 64 and c["map_calls"] == 1 and c["h2d_bytes"] == 0
    assert c["live_mapped_bytes"] == 64 and c["live_bytes"] == counters(x1)["live_bytes"]
    assert x1.lib.x1_free(dev) == x1.lib.X1_ERR_INVALID_VALUE  # mappings are unmapped, not freed
    assert x1.lib.x1_mem_unmap(dev) == x1.ok
    assert counters(x1)["live_mapped_bytes"] == 0
    assert x1.lib.x1_mem_unmap(dev) == x1.lib.X1_ERR_INVALID_ADDRESS


def test_mem_map_requires_alignment(x1):
    host = torch.zeros(32, dtype=torch.uint8)
    p = x1.ffi.new("x1_devptr_t *")
    st = x1.lib.x1_mem_map(x1.ffi.cast("void *", host.data_ptr() + 1), 16, p)
    assert st == x1.lib.X1_ERR_INVALID_VALUE and "aligned" in x1.last_error()


# ----------------------------------------------------------------- faults

def test_fault_injection_nth_call(x1):
    assert x1.lib.x1_debug_set_faults(b"relu:2") == x1.ok
    a, ad = x1.put(torch.randn(8))
    o, od = x1.empty((8,))
    assert x1.lib.x1_relu(ad, od) == x1.ok
    assert x1.lib.x1_relu(ad, od) == x1.lib.X1_ERR_DEVICE
    assert "injected" in x1.last_error() and "relu" in x1.last_error()
    assert x1.lib.x1_relu(ad, od) == x1.ok
    assert kernel_counts(x1)["relu"] == 2  # the faulted launch did not run


def test_fault_injection_from_call_on_and_for_copies(x1):
    assert x1.lib.x1_debug_set_faults(b"exp:2+,memcpy_d2h:1") == x1.ok
    a, ad = x1.put(torch.randn(8))
    o, od = x1.empty((8,))
    codes = [x1.lib.x1_exp(ad, od) for _ in range(4)]
    assert codes == [x1.ok] + [x1.lib.X1_ERR_DEVICE] * 3
    out = torch.empty(8)
    assert x1.lib.x1_memcpy_d2h(x1.ffi.cast("void *", out.data_ptr()), o, 32) == x1.lib.X1_ERR_DEVICE
    assert x1.lib.x1_memcpy_d2h(x1.ffi.cast("void *", out.data_ptr()), o, 32) == x1.ok
    assert x1.lib.x1_debug_set_faults(b"") == x1.ok
    assert x1.lib.x1_debug_set_faults(b"exp") == x1.lib.X1_ERR_INVALID_VALUE


def test_fault_injection_from_environment(x1, monkeypatch):
    monkeypatch.setenv("X1SIM_FAULTS", "malloc:2")
    x1.reinit()
    x1.malloc(16)
    p = x1.ffi.new("x1_devptr_t *")
    assert x1.lib.x1_malloc(p, 16) == x1.lib.X1_ERR_DEVICE
    monkeypatch.delenv("X1SIM_FAULTS")
    x1.reinit()


# ---------------------------------------------------------------- counters

def test_kernel_counters_and_reset(x1):
    x1.lib.x1_reset_counters()
    a, ad = x1.put(torch.randn(8))
    o, od = x1.empty((8,))
    for _ in range(3):
        x1.lib.x1_sigmoid(ad, od)
    x1.lib.x1_tanh(ad, od)
    k = kernel_counts(x1)
    assert k["sigmoid"] == 3 and k["tanh"] == 1
    assert counters(x1)["kernel_launches"] == 4
    x1.lib.x1_reset_counters()
    assert kernel_counts(x1) == {} and counters(x1)["kernel_launches"] == 0
    assert counters(x1)["live_bytes"] > 0  # allocations survive a counter reset


def test_allocator_and_counters_are_thread_safe(x1):
    x1.lib.x1_reset_counters()
    base = counters(x1)["live_bytes"]
    errors = []

    def work():
        p = x1.ffi.new("x1_devptr_t *")
        src = torch.ones(64)
        for _ in range(300):
            if x1.lib.x1_malloc(p, 256) != x1.ok:
                errors.append(x1.last_error())
                return
            x1.lib.x1_memcpy_h2d(p[0], x1.ffi.cast("void *", src.data_ptr()), 256)
            x1.lib.x1_free(p[0])

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c = counters(x1)
    assert not errors
    assert c["alloc_calls"] == 2400 and c["free_calls"] == 2400 and c["h2d_calls"] == 2400
    assert c["live_bytes"] == base


# ------------------------------------------------------------ elementwise

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name,ref,alpha", [
    ("add", lambda a, b, al: torch.add(a, b, alpha=al), 2.5),
    ("sub", lambda a, b, al: torch.sub(a, b, alpha=al), 0.5),
    ("mul", lambda a, b, al: a * b, None),
    ("div", lambda a, b, al: a / b, None),
])
def test_binary_with_broadcast(x1, dtype, name, ref, alpha):
    a = torch.randn(3, 4, 5).to(dtype)
    b = (torch.rand(4, 1) + 0.5).to(dtype)
    ad = x1.put(a)[1]
    bb = x1.upload(b)
    bd = x1.expanded(bb, (4, 1), (3, 4, 5), dtype)
    o, od = x1.empty((3, 4, 5), dtype)
    fn = getattr(x1.lib, f"x1_{name}")
    st = fn(ad, bd, alpha, od) if alpha is not None else fn(ad, bd, od)
    assert st == x1.ok, x1.last_error()
    expect = ref(a.float(), b.float(), alpha).to(dtype)
    close(x1.get(o, (3, 4, 5), dtype), expect, dtype)


def test_binary_writes_through_strided_output(x1):
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    o, _ = x1.empty((6, 4))
    od = x1.desc(o, (4, 6), (1, 4))  # transposed output
    assert x1.lib.x1_add(x1.put(a)[1], x1.put(b)[1], 1.0, od) == x1.ok
    close(x1.get(o, (6, 4)).t(), a + b)


def test_binary_in_place_aliasing(x1):
    a = torch.randn(10)
    ad = x1.put(a)[1]
    assert x1.lib.x1_mul(ad, ad, ad) == x1.ok
    close(x1.get(ad.data, (10,)), a * a)


def test_binary_rejects_shape_and_dtype_mismatch(x1):
    a = x1.put(torch.randn(4))[1]
    b = x1.put(torch.randn(5))[1]
    o, od = x1.empty((4,))
    assert x1.lib.x1_add(a, b, 1.0, od) == x1.lib.X1_ERR_INVALID_VALUE
    assert "stride 0" in x1.last_error()
    h = x1.put(torch.randn(4).half())[1]
    assert x1.lib.x1_add(a, h, 1.0, od) == x1.lib.X1_ERR_UNSUPPORTED
    i8 = x1.put(torch.arange(4, dtype=torch.int8))[1]
    o8, o8d = x1.empty((4,), torch.int8)
    assert x1.lib.x1_add(i8, i8, 1.0, o8d) == x1.lib.X1_ERR_UNSUPPORTED  # int8 arithmetic: not on x1
    assert "int8" in x1.last_error()
    i = x1.put(torch.arange(4, dtype=torch.int32))[1]
    oi, oid = x1.empty((4,), torch.int64)
    assert x1.lib.x1_add(i, i, 1.0, oid) == x1.lib.X1_ERR_UNSUPPORTED  # int32 + int32 -> int64: mixed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name,ref", [
    ("relu", torch.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("exp", torch.exp),
    ("neg", torch.neg), ("sqrt", lambda x: torch.sqrt(x.abs())), ("rsqrt", lambda x: torch.rsqrt(x.abs())),
])
def test_unary(x1, dtype, name, ref):
    a = torch.randn(7, 9).to(dtype)
    if name in ("sqrt", "rsqrt"):
        a = a.abs() + 0.1
    o, od = x1.empty((7, 9), dtype)
    assert getattr(x1.lib, f"x1_{name}")(x1.put(a)[1], od) == x1.ok
    close(x1.get(o, (7, 9), dtype), ref(a.float()).to(dtype), dtype)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(x1, approximate):
    a = torch.randn(100)
    o, od = x1.empty((100,))
    assert x1.lib.x1_gelu(x1.put(a)[1], approximate.encode(), od) == x1.ok
    close(x1.get(o, (100,)), F.gelu(a, approximate=approximate))
    assert x1.lib.x1_gelu(x1.put(a)[1], b"erf", od) == x1.lib.X1_ERR_INVALID_VALUE


def test_relu_propagates_nan(x1):
    a = torch.tensor([float("nan"), -1.0, 2.0])
    o, od = x1.empty((3,))
    x1.lib.x1_relu(x1.put(a)[1], od)
    r = x1.get(o, (3,))
    assert torch.isnan(r[0]) and r[1:].tolist() == [0.0, 2.0]


# ----------------------------------------------------------------- matrix

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (5, 7, 3), (33, 64, 17), (64, 300, 70)])
def test_mm(x1, dtype, M, K, N):
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    o, od = x1.empty((M, N), dtype)
    assert x1.lib.x1_mm(x1.put(a)[1], x1.put(b)[1], od) == x1.ok
    close(x1.get(o, (M, N), dtype), (a.float() @ b.float()).to(dtype), dtype, rtol=1e-4 if dtype == torch.float32 else 1e-2)


def test_mm_transposed_operand(x1):
    a, b = torch.randn(8, 5), torch.randn(6, 5)  # b.t() is non-contiguous
    bb = x1.upload(b)
    o, od = x1.empty((8, 6))
    assert x1.lib.x1_mm(x1.put(a)[1], x1.desc(bb, (5, 6), (1, 5)), od) == x1.ok
    close(x1.get(o, (8, 6)), a @ b.t())


def test_bmm(x1):
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    o, od = x1.empty((3, 4, 6))
    assert x1.lib.x1_bmm(x1.put(a)[1], x1.put(b)[1], od) == x1.ok
    close(x1.get(o, (3, 4, 6)), torch.bmm(a, b))
    assert x1.lib.x1_mm(x1.put(a)[1], x1.put(b)[1], od) == x1.lib.X1_ERR_INVALID_VALUE


def test_addmm_with_broadcast_bias(x1):
    bias, m1, m2 = torch.randn(6), torch.randn(4, 5), torch.randn(5, 6)
    bb = x1.upload(bias)
    o, od = x1.empty((4, 6))
    st = x1.lib.x1_addmm(x1.expanded(bb, (6,), (4, 6), torch.float32), x1.put(m1)[1], x1.put(m2)[1],
                         0.5, 2.0, od)
    assert st == x1.ok, x1.last_error()
    close(x1.get(o, (4, 6)), torch.addmm(bias, m1, m2, beta=0.5, alpha=2.0))


def test_mm_shape_mismatch_rejected_before_launch(x1):
    x1.lib.x1_reset_counters()
    o, od = x1.empty((4, 4))
    st = x1.lib.x1_mm(x1.put(torch.randn(4, 3))[1], x1.put(torch.randn(4, 4))[1], od)
    assert st == x1.lib.X1_ERR_INVALID_VALUE and "shape mismatch" in x1.last_error()
    assert kernel_counts(x1).get("mm", 0) == 0


def test_int8_gemm_through_uint8_zero_point(x1):
    a = torch.randint(-128, 128, (16, 32), dtype=torch.int8)
    b = torch.randint(-128, 128, (32, 8), dtype=torch.int8)
    ua, uad = x1.empty((16, 32), torch.uint8)
    ub, ubd = x1.empty((32, 8), torch.uint8)
    assert x1.lib.x1_s8_to_u8(x1.put(a)[1], uad) == x1.ok
    assert x1.lib.x1_s8_to_u8(x1.put(b)[1], ubd) == x1.ok
    assert torch.equal(x1.get(ua, (16, 32), torch.uint8), (a.to(torch.int16) + 128).to(torch.uint8))
    o, od = x1.empty((16, 8), torch.int32)
    assert x1.lib.x1_gemm_u8(uad, ubd, od) == x1.ok
    assert torch.equal(x1.get(o, (16, 8), torch.int32), torch._int_mm(a, b))
    # int8 operands straight in: the chip refuses and says what to do
    assert x1.lib.x1_gemm_u8(x1.put(a)[1], x1.put(b)[1], od) == x1.lib.X1_ERR_UNSUPPORTED
    assert "x1_s8_to_u8" in x1.last_error()


# ------------------------------------------------------------ conv / pool

def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("stride,padding,groups", [(1, 0, 1), (1, 1, 1), (2, 1, 2), (4, 2, 4), (2, 0, 1)])
def test_conv2d_nhwc(x1, dtype, stride, padding, groups):
    x = torch.randn(2, 8, 11, 9)
    w = torch.randn(12, 8 // groups, 3, 3) * 0.2
    b = torch.randn(12)
    ref = F.conv2d(x.to(dtype).float(), w.to(dtype).float(), b.to(dtype).float(), stride, padding, 1, groups)
    N, O, OH, OW = ref.shape
    o, od = x1.empty((N, OH, OW, O), dtype)
    st = x1.lib.x1_conv2d(x1.put(nhwc(x).to(dtype))[1], x1.put(nhwc(w).to(dtype))[1],
                          x1.put(b.to(dtype))[1], [stride] * 2, [padding] * 2, [1, 1], groups, od)
    assert st == x1.ok, x1.last_error()
    got = x1.get(o, (N, OH, OW, O), dtype).permute(0, 3, 1, 2)
    close(got, ref.to(dtype), dtype, rtol=1e-4 if dtype == torch.float32 else 1e-2)


def test_conv2d_writes_nchw_output_through_strides(x1):
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    ref = F.conv2d(x, w, None, 1, 1)
    o, _ = x1.empty(ref.shape)
    od = x1.desc(o, (1, 6, 6, 4), ref.permute(0, 2, 3, 1).stride())  # NCHW buffer seen as NHWC
    st = x1.lib.x1_conv2d(x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], x1.ffi.NULL, [1, 1], [1, 1], [1, 1], 1, od)
    assert st == x1.ok, x1.last_error()
    close(x1.get(o, ref.shape), ref, rtol=1e-4)


@pytest.mark.parametrize("args,msg", [
    (dict(stride=3), "stride=3 not in {1, 2, 4}"),
    (dict(padding=3), "padding=3 not in {0, 1, 2}"),
    (dict(groups=3), "groups=3 not in {1, 2, 4}"),
    (dict(dilation=2), "dilation=2"),
])
def test_conv2d_rejects_configurations_the_npu_lacks(x1, args, msg):
    x, w = torch.randn(1, 12, 8, 8), torch.randn(6, 12 // args.get("groups", 1), 3, 3)
    o, od = x1.empty((1, 8, 8, 6))
    st = x1.lib.x1_conv2d(x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], x1.ffi.NULL,
                          [args.get("stride", 1)] * 2, [args.get("padding", 1)] * 2,
                          [args.get("dilation", 1)] * 2, args.get("groups", 1), od)
    assert st == x1.lib.X1_ERR_UNSUPPORTED
    assert msg in x1.last_error()


def test_conv2d_requires_nhwc_contiguous_input(x1):
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    xa = x1.upload(x)  # NCHW bytes described as NHWC with NCHW strides
    xd = x1.desc(xa, (1, 6, 6, 4), x.permute(0, 2, 3, 1).stride())
    o, od = x1.empty((1, 6, 6, 4))
    st = x1.lib.x1_conv2d(xd, x1.put(nhwc(w))[1], x1.ffi.NULL, [1, 1], [1, 1], [1, 1], 1, od)
    assert st == x1.lib.X1_ERR_UNSUPPORTED and "contiguous in NHWC" in x1.last_error()


def test_revision1_convolves_float16_only(x1r1):
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    o, od = x1r1.empty((1, 6, 6, 4))
    st = x1r1.lib.x1_conv2d(x1r1.put(nhwc(x))[1], x1r1.put(nhwc(w))[1], x1r1.ffi.NULL,
                            [1, 1], [1, 1], [1, 1], 1, od)
    assert st == x1r1.lib.X1_ERR_UNSUPPORTED and "float16 only" in x1r1.last_error()
    o, od = x1r1.empty((1, 6, 6, 4), torch.float16)
    st = x1r1.lib.x1_conv2d(x1r1.put(nhwc(x).half())[1], x1r1.put(nhwc(w).half())[1],
                            x1r1.ffi.NULL, [1, 1], [1, 1], [1, 1], 1, od)
    assert st == x1r1.ok
    close(x1r1.get(o, (1, 6, 6, 4), torch.float16).permute(0, 3, 1, 2),
          F.conv2d(x.half().float(), w.half().float(), None, 1, 1), torch.float16, rtol=1e-2)


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True),
                                          (2, 1, 1, 2, False), (3, 3, 0, 1, True)])
def test_max_pool2d_with_indices(x1, k, s, p, d, ceil):
    x = torch.randn(2, 3, 9, 10)
    x[0, 0, 0, 0] = float("nan")
    ref, ridx = F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    N, C, OH, OW = ref.shape
    o, od = x1.empty((N, OH, OW, C))
    i, idd = x1.empty((N, OH, OW, C), torch.int64)
    stride = [s, s] if s else x1.ffi.NULL
    st = x1.lib.x1_max_pool2d(x1.put(nhwc(x))[1], [k, k], stride, 2 if s else 0, [p, p], [d, d], ceil, od, idd)
    assert st == x1.ok, x1.last_error()
    torch.testing.assert_close(x1.get(o, (N, OH, OW, C)).permute(0, 3, 1, 2), ref, equal_nan=True)
    assert torch.equal(x1.get(i, (N, OH, OW, C), torch.int64).permute(0, 3, 1, 2), ridx)


def test_max_pool2d_rejects_wrong_output_shape(x1):
    o, od = x1.empty((1, 3, 3, 2))
    st = x1.lib.x1_max_pool2d(x1.put(torch.randn(1, 8, 8, 2))[1], [2, 2], x1.ffi.NULL, 0, [0, 0],
                              [1, 1], False, od, x1.ffi.NULL)
    assert st == x1.lib.X1_ERR_INVALID_VALUE and "[1, 4, 4, 2]" in x1.last_error()


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, None, 0, False, True, None), (3, 2, 1, False, True, None),
                                                (3, 2, 1, True, False, None), (3, 2, 1, False, False, 5)])
def test_avg_pool2d(x1, k, s, p, ceil, cip, div):
    x = torch.randn(2, 3, 9, 10)
    ref = F.avg_pool2d(x, k, s, p, ceil, cip, div)
    N, C, OH, OW = ref.shape
    o, od = x1.empty((N, OH, OW, C))
    st = x1.lib.x1_avg_pool2d(x1.put(nhwc(x))[1], [k, k], [s, s] if s else x1.ffi.NULL, 2 if s else 0,
                              [p, p], ceil, cip, div or 0, od)
    assert st == x1.ok, x1.last_error()
    close(x1.get(o, (N, OH, OW, C)).permute(0, 3, 1, 2), ref)


@pytest.mark.parametrize("out_size", [(1, 1), (3, 4), (5, 5)])
def test_adaptive_avg_pool2d(x1, out_size):
    x = torch.randn(2, 3, 7, 9)
    ref = F.adaptive_avg_pool2d(x, out_size)
    o, od = x1.empty((2, *out_size, 3))
    assert x1.lib.x1_adaptive_avg_pool2d(x1.put(nhwc(x))[1], list(out_size), od) == x1.ok
    close(x1.get(o, (2, *out_size, 3)).permute(0, 3, 1, 2), ref)


# ------------------------------------------------------ norm / reduce / misc

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_batch_norm_inference(x1, dtype):
    x = torch.randn(4, 3, 5, 5).to(dtype)
    w, b, m, v = torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5
    ref = F.batch_norm(x.float(), m, v, w, b, False, 0.1, 1e-5).to(dtype)
    o, od = x1.empty(x.shape, dtype)
    st = x1.lib.x1_batch_norm(x1.put(x)[1], x1.put(w)[1], x1.put(b)[1], x1.put(m)[1], x1.put(v)[1], 1e-5, od)
    assert st == x1.ok, x1.last_error()
    close(x1.get(o, x.shape, dtype), ref, dtype)
    st = x1.lib.x1_batch_norm(x1.put(x)[1], x1.ffi.NULL, x1.ffi.NULL, x1.put(m)[1], x1.put(v)[1], 1e-5, od)
    assert st == x1.ok
    close(x1.get(o, x.shape, dtype), F.batch_norm(x.float(), m, v, None, None, False, 0.1, 1e-5).to(dtype), dtype)


def test_layer_norm_with_stats(x1):
    x = torch.randn(4, 6, 10)
    w, b = torch.randn(6, 10), torch.randn(6, 10)
    out, mean, rstd = torch.native_layer_norm(x, [6, 10], w, b, 1e-5)
    o, od = x1.empty(x.shape)
    m, md = x1.empty((4, 1, 1))
    r, rd = x1.empty((4, 1, 1))
    st = x1.lib.x1_layer_norm(x1.put(x)[1], [6, 10], 2, x1.put(w)[1], x1.put(b)[1], 1e-5, od, md, rd)
    assert st == x1.ok, x1.last_error()
    close(x1.get(o, x.shape), out)
    close(x1.get(m, (4, 1, 1)), mean)
    close(x1.get(r, (4, 1, 1)), rstd, rtol=1e-4)
    st = x1.lib.x1_layer_norm(x1.put(x)[1], [6, 9], 2, x1.ffi.NULL, x1.ffi.NULL, 1e-5, od,
                              x1.ffi.NULL, x1.ffi.NULL)
    assert st == x1.lib.X1_ERR_INVALID_VALUE


@pytest.mark.parametrize("dims,keepdim", [([1], False), ([0, 2], True), ([-1], False), ([], False)])
def test_sum_and_mean(x1, dims, keepdim):
    x = torch.randn(3, 4, 5)
    for name, ref in (("sum", torch.sum), ("mean", torch.mean)):
        r = ref(x, dims, keepdim) if dims else ref(x)
        o, od = x1.empty(tuple(r.shape))
        st = getattr(x1.lib, f"x1_{name}")(x1.put(x)[1], dims or x1.ffi.NULL, len(dims), keepdim, od)
        assert st == x1.ok, x1.last_error()
        close(x1.get(o, tuple(r.shape)), r, rtol=1e-5)


def test_sum_rejects_bad_dims(x1):
    o, od = x1.empty((3,))
    assert x1.lib.x1_sum(x1.put(torch.randn(3, 4))[1], [5], 1, False, od) == x1.lib.X1_ERR_INVALID_VALUE
    assert x1.lib.x1_sum(x1.put(torch.randn(3, 4))[1], [1, 1], 2, False, od) == x1.lib.X1_ERR_INVALID_VALUE


@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_embedding(x1, idx_dtype):
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 9], [0, 3], [3, 3]], dtype=idx_dtype)
    o, od = x1.empty((3, 2, 4))
    assert x1.lib.x1_embedding(x1.put(w)[1], x1.put(idx)[1], od) == x1.ok
    assert torch.equal(x1.get(o, (3, 2, 4)), F.embedding(idx.long(), w))


def test_embedding_index_out_of_range_is_a_data_error(x1):
    o, od = x1.empty((2, 4))
    st = x1.lib.x1_embedding(x1.put(torch.randn(10, 4))[1], x1.put(torch.tensor([1, 10]))[1], od)
    assert st == x1.lib.X1_ERR_DATA and "out of range" in x1.last_error()


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float16), (torch.float16, torch.float32), (torch.float32, torch.int32),
    (torch.int64, torch.float32), (torch.int64, torch.int32), (torch.int8, torch.float16),
    (torch.float32, torch.bool), (torch.bool, torch.float32), (torch.int64, torch.int64),
    (torch.uint8, torch.int64),
])
def test_copy_casts_like_torch(x1, src_dtype, dst_dtype):
    src = (torch.randn(4, 5) * 50).to(src_dtype)
    o, od = x1.empty((4, 5), dst_dtype)
    assert x1.lib.x1_copy(x1.put(src)[1], od) == x1.ok
    assert torch.equal(x1.get(o, (4, 5), dst_dtype), src.to(dst_dtype))


def test_copy_strided_to_contiguous_and_back(x1):
    src = torch.randn(4, 6)
    sa = x1.upload(src)
    o, od = x1.empty((6, 4))
    assert x1.lib.x1_copy(x1.desc(sa, (6, 4), (1, 6)), od) == x1.ok
    assert torch.equal(x1.get(o, (6, 4)), src.t().contiguous())
    # int64 values beyond float precision survive
    big = torch.tensor([2**60 + 1, -(2**59) - 3])
    o2, od2 = x1.empty((2,), torch.int64)
    assert x1.lib.x1_copy(x1.put(big)[1], od2) == x1.ok
    assert torch.equal(x1.get(o2, (2,), torch.int64), big)


def test_fill_strided(x1):
    o, _ = x1.empty((4, 4))
    x1.lib.x1_fill(x1.desc(o, (4, 4)), 0.0)
    assert x1.lib.x1_fill(x1.desc(o, (4,), (5,)), 3.5) == x1.ok  # the diagonal
    assert torch.equal(x1.get(o, (4, 4)), torch.eye(4) * 3.5)
    oi, _ = x1.empty((3,), torch.int64)
    assert x1.lib.x1_fill(x1.desc(oi, (3,), dtype=torch.int64), -2.0) == x1.ok
    assert x1.get(oi, (3,), torch.int64).tolist() == [-2, -2, -2]


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_custom_softmax(x1, dim):
    x = torch.randn(5, 7, 3)
    o, od = x1.empty(x.shape)
    assert x1.lib.custom_softmax_x1(x1.put(x)[1], dim, od) == x1.ok
    close(x1.get(o, x.shape), torch.softmax(x, dim))


def test_descriptor_with_too_many_dims_is_rejected(x1):
    o, od = x1.empty((1,))
    od.ndim = 9
    assert x1.lib.x1_fill(od, 0.0) == x1.lib.X1_ERR_INVALID_VALUE
    od.ndim, od.dtype = 1, 42
    assert x1.lib.x1_fill(od, 0.0) == x1.lib.X1_ERR_INVALID_VALUE
    assert "unknown x1 dtype" in x1.last_error()


# ----------------------------------------------------- training (NHWC grads)

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("stride,padding,groups", [(1, 1, 1), (2, 1, 2), (1, 0, 4), (4, 2, 1)])
def test_conv2d_backward_nhwc(x1, dtype, stride, padding, groups):
    x = torch.randn(2, 8, 9, 7).to(dtype)
    w = (torch.randn(12, 8 // groups, 3, 3) * 0.2).to(dtype)
    y = F.conv2d(x.float(), w.float(), None, stride, padding, 1, groups)
    dy = torch.randn(y.shape).to(dtype)
    ref = aten.convolution_backward(dy.float(), x.float(), w.float(), [12], [stride] * 2, [padding] * 2, [1, 1],
                                    False, [0, 0], groups, [True, True, True])
    gi, gid = x1.empty(tuple(nhwc(x).shape), dtype)
    gw, gwd = x1.empty(tuple(nhwc(w).shape), dtype)
    gb, gbd = x1.empty((12,), dtype)
    st = x1.lib.x1_conv2d_backward(x1.put(nhwc(dy))[1], x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], [stride] * 2,
                                   [padding] * 2, [1, 1], groups, [1, 1, 1], gid, gwd, gbd)
    assert st == x1.ok, x1.last_error()
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(x1.get(gi, tuple(nhwc(x).shape), dtype).permute(0, 3, 1, 2).float(), ref[0], **tol)
    torch.testing.assert_close(x1.get(gw, tuple(nhwc(w).shape), dtype).permute(0, 3, 1, 2).float(), ref[1], **tol)
    torch.testing.assert_close(x1.get(gb, (12,), dtype).float(), ref[2], **tol)


def test_conv2d_backward_computes_only_what_the_mask_asks(x1):
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    dy = torch.randn(1, 4, 6, 6)
    ref = aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])
    gw, gwd = x1.empty((4, 3, 3, 4))
    st = x1.lib.x1_conv2d_backward(x1.put(nhwc(dy))[1], x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], [1, 1], [1, 1],
                                   [1, 1], 1, [0, 1, 0], x1.ffi.NULL, gwd, x1.ffi.NULL)
    assert st == x1.ok, x1.last_error()
    torch.testing.assert_close(x1.get(gw, (4, 3, 3, 4)).permute(0, 3, 1, 2), ref[1], rtol=1e-4, atol=1e-4)
    st = x1.lib.x1_conv2d_backward(x1.put(nhwc(dy))[1], x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], [1, 1], [1, 1],
                                   [1, 1], 1, [1, 1, 0], x1.ffi.NULL, gwd, x1.ffi.NULL)
    assert st == x1.lib.X1_ERR_INVALID_VALUE and "grad_input descriptor is NULL" in x1.last_error()


def test_conv2d_backward_has_the_forward_limits(x1, x1r1):
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    args = lambda c, t: (c.put(nhwc(t(torch.randn(1, 4, 2, 2))))[1], c.put(nhwc(t(x)))[1],  # noqa: E731
                         c.put(nhwc(t(w)))[1])
    g, gd = x1.empty((1, 6, 6, 4))
    st = x1.lib.x1_conv2d_backward(*args(x1, lambda t: t), [3, 3], [1, 1], [1, 1], 1, [1, 0, 0], gd,
                                   x1.ffi.NULL, x1.ffi.NULL)
    assert st == x1.lib.X1_ERR_UNSUPPORTED and "stride=3 not in {1, 2, 4}" in x1.last_error()
    g1, gd1 = x1r1.empty((1, 6, 6, 4))
    st = x1r1.lib.x1_conv2d_backward(*args(x1r1, lambda t: t), [1, 1], [1, 1], [1, 1], 1, [1, 0, 0], gd1,
                                     x1r1.ffi.NULL, x1r1.ffi.NULL)
    assert st == x1r1.lib.X1_ERR_UNSUPPORTED and "float16 only" in x1r1.last_error()
    dy = x1.desc(x1.upload(torch.randn(1, 4, 6, 6)), (1, 6, 6, 4), (144, 6, 1, 36))   # NCHW bytes
    st = x1.lib.x1_conv2d_backward(dy, x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], [1, 1], [1, 1], [1, 1], 1,
                                   [1, 0, 0], gd, x1.ffi.NULL, x1.ffi.NULL)
    assert st == x1.lib.X1_ERR_UNSUPPORTED and "contiguous in NHWC" in x1.last_error()


@pytest.mark.parametrize("k,s,p,ceil", [(2, None, 0, False), (3, 2, 1, False), (3, 2, 1, True)])
def test_pool_backward_nhwc(x1, k, s, p, ceil):
    x = torch.randn(2, 3, 9, 10)
    y, idx = F.max_pool2d(x, k, s, p, 1, ceil, return_indices=True)
    dy = torch.randn(y.shape)
    N, C, H, W = x.shape
    gi, gid = x1.empty((N, H, W, C))
    assert x1.lib.x1_max_pool2d_backward(x1.put(nhwc(dy))[1], x1.put(nhwc(idx))[1], gid) == x1.ok
    ref = aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s] if s else [], [p, p], [1, 1], ceil, idx)
    torch.testing.assert_close(x1.get(gi, (N, H, W, C)).permute(0, 3, 1, 2), ref)
    ya = F.avg_pool2d(x, k, s, p, ceil, False)
    dya = torch.randn(ya.shape)
    stride = [s, s] if s else x1.ffi.NULL
    st = x1.lib.x1_avg_pool2d_backward(x1.put(nhwc(dya))[1], [k, k], stride, 2 if s else 0, [p, p], ceil, False, 0,
                                       gid)
    assert st == x1.ok, x1.last_error()
    ref = aten.avg_pool2d_backward(dya, x, [k, k], [s, s] if s else [], [p, p], ceil, False, None)
    torch.testing.assert_close(x1.get(gi, (N, H, W, C)).permute(0, 3, 1, 2), ref)


def test_adaptive_avg_pool2d_backward_nhwc(x1):
    x = torch.randn(2, 3, 7, 9)
    dy = torch.randn(2, 3, 3, 4)
    gi, gid = x1.empty((2, 7, 9, 3))
    assert x1.lib.x1_adaptive_avg_pool2d_backward(x1.put(nhwc(dy))[1], gid) == x1.ok
    torch.testing.assert_close(x1.get(gi, (2, 7, 9, 3)).permute(0, 3, 1, 2),
                               aten._adaptive_avg_pool2d_backward(dy, x))


def test_max_pool2d_backward_checks_indices(x1):
    gi, gid = x1.empty((1, 4, 4, 2))
    bad = torch.tensor([0, 16, 3, 5]).view(1, 2, 1, 2)     # 16 is past a 4x4 plane
    st = x1.lib.x1_max_pool2d_backward(x1.put(torch.randn(1, 2, 1, 2))[1], x1.put(bad)[1], gid)
    assert st == x1.lib.X1_ERR_DATA and "index 16 out of range [0, 16)" in x1.last_error()
