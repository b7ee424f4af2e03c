"""The simulated TH1 runtime, driven directly through its C ABI."""
import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(0)


def close(a, b, dtype=torch.float32):
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(a.float(), b.float(), **tol)


def stats(th1):
    return th1.counters()


def kernel_stats(th1):
    return th1.kernel_counts()


def test_memory_copies_batch_and_stats(th1):
    th1.lib.th1ResetStats()
    ffi = th1.ffi
    ts = [torch.randn(n) for n in (16, 5)]
    dsts = [th1.malloc(t.numel() * 4) for t in ts]
    st = th1.lib.th1MemcpyHtoDBatch(ffi.new("th1DevPtr_t[]", dsts),
                                    ffi.new("void *[]", [ffi.cast("void *", t.data_ptr()) for t in ts]),
                                    ffi.new("size_t[]", [t.numel() * 4 for t in ts]), 2)
    assert st == th1.ok
    other = th1.malloc(64)
    assert th1.lib.th1MemcpyDtoD(other, dsts[0], 64) == th1.ok
    assert torch.equal(th1.download(other, (16,), torch.float32), ts[0])
    s = stats(th1)
    assert (s["callsHtoD"], s["batchCallsHtoD"], s["bytesHtoD"]) == (1, 1, 84)
    assert (s["callsDtoD"], s["bytesDtoD"], s["callsDtoH"], s["bytesDtoH"]) == (1, 64, 1, 64)
    assert s["allocCalls"] == 3 and s["memInUse"] == 3 * 256 and s["memPeak"] >= 3 * 256
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    assert th1.lib.th1MemGetInfo(free, total) == th1.ok
    assert total[0] == 16 << 30 and free[0] == total[0] - s["memInUse"]
    assert th1.lib.th1DeviceSynchronize() == th1.ok


def test_errors_use_th1_codes_and_messages(th1):
    p = th1.ffi.new("th1DevPtr_t *")
    assert th1.lib.th1MemAlloc(p, 0) == th1.lib.TH1_ERROR_INVALID_ARGUMENT
    assert th1.last_error().startswith("th1MemAlloc:")
    assert th1.lib.th1MemFree(0xdead) == th1.lib.TH1_ERROR_ILLEGAL_ADDRESS
    th1.reinit(1024)
    assert th1.lib.th1MemAlloc(p, 4096) == th1.lib.TH1_ERROR_OUT_OF_MEMORY
    th1.lib.th1Shutdown()
    th1.live.clear()
    assert th1.lib.th1MemAlloc(p, 16) == th1.lib.TH1_ERROR_NOT_INITIALIZED
    th1.reinit()


def test_no_host_mapping_on_th1(th1):
    assert not hasattr(th1.lib, "th1MemMap")


def test_element_offset_in_descriptor(th1):
    t = torch.arange(10, dtype=torch.float32)
    a = th1.upload(t)
    o, od = th1.empty((4,))
    x = th1.desc(a, (4,), (1,), torch.float32, offset_elems=3)
    assert th1.lib.th1Relu(x, od) == th1.ok
    assert th1.get(o, (4,)).tolist() == [3.0, 4.0, 5.0, 6.0]
    x.elemOffset = 8  # 4 elements from 8 run past a 10-element buffer
    assert th1.lib.th1Relu(x, od) == th1.lib.TH1_ERROR_ILLEGAL_ADDRESS


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_mul_relu_gelu(th1, dtype):
    a, b = torch.randn(6, 8).to(dtype), torch.randn(8).to(dtype)
    bb = th1.upload(b)
    bd = th1.expanded(bb, (8,), (6, 8), dtype)
    ad = th1.put(a)[1]
    o, od = th1.empty((6, 8), dtype)
    assert th1.lib.th1Add(ad, bd, 0.5, od) == th1.ok
    close(th1.get(o, (6, 8), dtype), torch.add(a.float(), b.float(), alpha=0.5).to(dtype), dtype)
    assert th1.lib.th1Mul(ad, bd, od) == th1.ok
    close(th1.get(o, (6, 8), dtype), (a.float() * b.float()).to(dtype), dtype)
    assert th1.lib.th1Relu(ad, od) == th1.ok
    close(th1.get(o, (6, 8), dtype), torch.relu(a), dtype)
    for mode, approx in ((0, "none"), (1, "tanh")):
        assert th1.lib.th1Gelu(ad, mode, od) == th1.ok
        close(th1.get(o, (6, 8), dtype), F.gelu(a.float(), approximate=approx).to(dtype), dtype)
    assert th1.lib.th1Gelu(ad, 2, od) == th1.lib.TH1_ERROR_INVALID_ARGUMENT


def test_float16_is_not_a_th1_type(th1):
    o, od = th1.empty((4,))
    od.dataType = 99
    assert th1.lib.th1Fill(od, 1.0) == th1.lib.TH1_ERROR_INVALID_ARGUMENT
    i, idd = th1.empty((4,), torch.int32)
    assert th1.lib.th1Relu(idd, idd) == th1.lib.TH1_ERROR_NOT_SUPPORTED


def test_six_dims_max(th1):
    o, od = th1.empty((1,) * 6)
    assert th1.lib.th1Fill(od, 1.0) == th1.ok
    od.nbDims = 7
    assert th1.lib.th1Fill(od, 1.0) == th1.lib.TH1_ERROR_INVALID_ARGUMENT
    assert "TH1 supports 0..6" in th1.last_error()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_2d_3d_and_addmm(th1, dtype):
    a, b = torch.randn(32, 16).to(dtype), torch.randn(16, 48).to(dtype)
    o, od = th1.empty((32, 48), dtype)
    assert th1.lib.th1Matmul(th1.put(a)[1], th1.put(b)[1], od) == th1.ok, th1.last_error()
    close(th1.get(o, (32, 48), dtype), (a.float() @ b.float()).to(dtype), dtype)
    a3, b3 = torch.randn(2, 16, 32).to(dtype), torch.randn(2, 32, 16).to(dtype)
    o3, od3 = th1.empty((2, 16, 16), dtype)
    assert th1.lib.th1Matmul(th1.put(a3)[1], th1.put(b3)[1], od3) == th1.ok
    close(th1.get(o3, (2, 16, 16), dtype), torch.bmm(a3.float(), b3.float()).to(dtype), dtype)
    bias = torch.randn(48).to(dtype)
    bb = th1.upload(bias)
    assert th1.lib.th1Addmm(th1.expanded(bb, (48,), (32, 48), dtype), th1.put(a)[1], th1.put(b)[1],
                            2.0, 0.5, od) == th1.ok
    close(th1.get(o, (32, 48), dtype),
          torch.addmm(bias.float(), a.float(), b.float(), beta=2.0, alpha=0.5).to(dtype), dtype)
    k = kernel_stats(th1)
    assert k["mm"] == 1 and k["bmm"] == 1 and k["addmm"] == 1


@pytest.mark.parametrize("M,K,N", [(15, 16, 16), (16, 17, 16), (16, 16, 8)])
def test_matmul_sizes_must_be_multiples_of_16(th1, M, K, N):
    o, od = th1.empty((M, N))
    st = th1.lib.th1Matmul(th1.put(torch.randn(M, K))[1], th1.put(torch.randn(K, N))[1], od)
    assert st == th1.lib.TH1_ERROR_NOT_SUPPORTED
    assert "multiples of 16" in th1.last_error()
    assert kernel_stats(th1).get("mm", 0) == 0


def test_layer_norm(th1):
    x = torch.randn(3, 5, 16)
    w, b = torch.randn(16), torch.randn(16)
    out, mean, rstd = torch.native_layer_norm(x, [16], w, b, 1e-5)
    o, od = th1.empty(x.shape)
    m, md = th1.empty((3, 5, 1))
    r, rd = th1.empty((3, 5, 1))
    st = th1.lib.th1LayerNorm(th1.put(x)[1], 1, th1.put(w)[1], th1.put(b)[1], 1e-5, od, md, rd)
    assert st == th1.ok, th1.last_error()
    close(th1.get(o, x.shape), out)
    close(th1.get(m, (3, 5, 1)), mean)
    close(th1.get(r, (3, 5, 1)), rstd)


@pytest.mark.parametrize("axis", [0, -1, 1])
def test_softmax(th1, axis):
    x = torch.randn(4, 6, 5)
    o, od = th1.empty(x.shape)
    assert th1.lib.th1Softmax(th1.put(x)[1], axis, 0, od) == th1.ok
    close(th1.get(o, x.shape), torch.softmax(x, axis))


def test_safe_softmax_zeroes_fully_masked_rows(th1):
    x = torch.randn(3, 5)
    x[1] = float("-inf")
    x[2, :2] = float("-inf")
    o, od = th1.empty(x.shape)
    assert th1.lib.th1Softmax(th1.put(x)[1], -1, th1.lib.TH1_SOFTMAX_SAFE, od) == th1.ok
    close(th1.get(o, x.shape), torch.ops.aten._safe_softmax(x, -1))
    assert th1.lib.th1Softmax(th1.put(x)[1], -1, 0, od) == th1.ok
    assert torch.isnan(th1.get(o, x.shape)[1]).all()  # plain softmax: NaN, like torch.softmax
    assert th1.lib.th1Softmax(th1.put(x)[1], -1, 8, od) == th1.lib.TH1_ERROR_INVALID_ARGUMENT


def test_copy_cast_and_fill(th1):
    x = torch.randn(4, 6)
    xa = th1.upload(x)
    o, od = th1.empty((6, 4), torch.bfloat16)
    assert th1.lib.th1Copy(th1.desc(xa, (6, 4), (1, 6)), od) == th1.ok
    assert torch.equal(th1.get(o, (6, 4), torch.bfloat16), x.t().to(torch.bfloat16))
    assert th1.lib.th1Fill(od, 2.0) == th1.ok
    assert torch.equal(th1.get(o, (6, 4), torch.bfloat16), torch.full((6, 4), 2.0, dtype=torch.bfloat16))


def test_fault_injection_and_reset(th1):
    assert th1.lib.th1DebugInjectFaults(b"add:1") == th1.ok
    a = th1.put(torch.randn(4))[1]
    o, od = th1.empty((4,))
    assert th1.lib.th1Add(a, a, 1.0, od) == th1.lib.TH1_ERROR_HARDWARE
    assert "injected" in th1.last_error()
    assert th1.lib.th1Add(a, a, 1.0, od) == th1.ok
    assert stats(th1)["kernelLaunches"] >= 1
    th1.lib.th1ResetStats()
    assert stats(th1)["kernelLaunches"] == 0 and kernel_stats(th1) == {}


# ----------------------------------------------- training: NCHW conv, pools

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 1, 1, 1), (2, 0, 1, 2), (1, 2, 2, 1), (3, 1, 1, 4)])
def test_convolution_forward_and_backward_nchw(th1, dtype, stride, padding, dilation, groups):
    x = torch.randn(2, 8, 9, 7).to(dtype)
    w = (torch.randn(12, 8 // groups, 3, 3) * 0.2).to(dtype)
    b = torch.randn(12).to(dtype)
    y = F.conv2d(x.float(), w.float(), b.float(), stride, padding, dilation, groups)
    o, od = th1.empty(tuple(y.shape), dtype)
    st = th1.lib.th1ConvolutionForward(th1.put(x)[1], th1.put(w)[1], th1.put(b)[1], [stride] * 2, [padding] * 2,
                                       [dilation] * 2, groups, od)
    assert st == th1.ok, th1.last_error()
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(th1.get(o, tuple(y.shape), dtype).float(), y.to(dtype).float(), **tol)
    dy = torch.randn(y.shape).to(dtype)
    ref = aten.convolution_backward(dy.float(), x.float(), w.float(), [12], [stride] * 2, [padding] * 2,
                                    [dilation] * 2, False, [0, 0], groups, [True, True, True])
    gi, gid = th1.empty(tuple(x.shape), dtype)
    gw, gwd = th1.empty(tuple(w.shape), dtype)
    gb, gbd = th1.empty((12,), dtype)
    st = th1.lib.th1ConvolutionBackward(th1.put(dy)[1], th1.put(x)[1], th1.put(w)[1], [stride] * 2, [padding] * 2,
                                        [dilation] * 2, groups, [1, 1, 1], gid, gwd, gbd)
    assert st == th1.ok, th1.last_error()
    torch.testing.assert_close(th1.get(gi, tuple(x.shape), dtype).float(), ref[0], **tol)
    torch.testing.assert_close(th1.get(gw, tuple(w.shape), dtype).float(), ref[1], **tol)
    torch.testing.assert_close(th1.get(gb, (12,), dtype).float(), ref[2], **tol)


def test_convolution_rejects_bad_configurations(th1):
    x, w = th1.put(torch.randn(1, 4, 6, 6))[1], th1.put(torch.randn(4, 4, 3, 3))[1]
    o, od = th1.empty((1, 4, 6, 6))
    assert th1.lib.th1ConvolutionForward(x, w, th1.ffi.NULL, [0, 1], [1, 1], [1, 1], 1, od) == \
        th1.lib.TH1_ERROR_INVALID_ARGUMENT
    assert "stride and dilation must be >= 1" in th1.last_error()
    assert th1.lib.th1ConvolutionForward(x, w, th1.ffi.NULL, [1, 1], [1, 1], [1, 1], 3, od) == \
        th1.lib.TH1_ERROR_INVALID_ARGUMENT
    assert th1.lib.th1ConvolutionForward(x, w, th1.ffi.NULL, [1, 1], [0, 0], [1, 1], 1, od) == \
        th1.lib.TH1_ERROR_INVALID_ARGUMENT                        # output would be 4x4
    assert kernel_stats(th1).get("conv2d", 0) == 0


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, True), (2, 1, 1, 2, False)])
def test_max_pool2d_nchw_with_gradient(th1, k, s, p, d, ceil):
    x = torch.randn(2, 3, 9, 10)
    y, idx = F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    o, od = th1.empty(tuple(y.shape))
    i, idd = th1.empty(tuple(y.shape), torch.int64)
    stride = [s, s] if s else th1.ffi.NULL
    st = th1.lib.th1MaxPool2d(th1.put(x)[1], [k, k], stride, 2 if s else 0, [p, p], [d, d], ceil, od, idd)
    assert st == th1.ok, th1.last_error()
    torch.testing.assert_close(th1.get(o, tuple(y.shape)), y)
    assert torch.equal(th1.get(i, tuple(y.shape), torch.int64), idx)
    dy = torch.randn(y.shape)
    gi, gid = th1.empty(tuple(x.shape))
    assert th1.lib.th1MaxPool2dBackward(th1.put(dy)[1], th1.put(idx)[1], gid) == th1.ok
    ref = aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s] if s else [], [p, p], [d, d], ceil, idx)
    torch.testing.assert_close(th1.get(gi, tuple(x.shape)), ref)


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, None, 0, False, True, None), (3, 2, 1, True, False, None),
                                                (3, 2, 1, False, True, 5)])
def test_avg_pool2d_nchw_with_gradient(th1, k, s, p, ceil, cip, div):
    x = torch.randn(2, 3, 9, 10)
    y = F.avg_pool2d(x, k, s, p, ceil, cip, div)
    stride = [s, s] if s else th1.ffi.NULL
    o, od = th1.empty(tuple(y.shape))
    st = th1.lib.th1AvgPool2d(th1.put(x)[1], [k, k], stride, 2 if s else 0, [p, p], ceil, cip, div or 0, od)
    assert st == th1.ok, th1.last_error()
    torch.testing.assert_close(th1.get(o, tuple(y.shape)), y)
    dy = torch.randn(y.shape)
    gi, gid = th1.empty(tuple(x.shape))
    st = th1.lib.th1AvgPool2dBackward(th1.put(dy)[1], [k, k], stride, 2 if s else 0, [p, p], ceil, cip, div or 0, gid)
    assert st == th1.ok, th1.last_error()
    ref = aten.avg_pool2d_backward(dy, x, [k, k], [s, s] if s else [], [p, p], ceil, cip, div)
    torch.testing.assert_close(th1.get(gi, tuple(x.shape)), ref)
    st = th1.lib.th1AvgPool2dBackward(th1.put(torch.randn(2, 3, 1, 1))[1], [k, k], stride, 2 if s else 0, [p, p],
                                      ceil, cip, div or 0, gid)
    assert st == th1.lib.TH1_ERROR_INVALID_ARGUMENT and "dy must be NCHW" in th1.last_error()


def test_adaptive_avg_pool2d_nchw_with_gradient(th1):
    x = torch.randn(2, 3, 7, 9)
    y = F.adaptive_avg_pool2d(x, (3, 4))
    o, od = th1.empty((2, 3, 3, 4))
    assert th1.lib.th1AdaptiveAvgPool2d(th1.put(x)[1], od) == th1.ok
    torch.testing.assert_close(th1.get(o, (2, 3, 3, 4)), y)
    dy = torch.randn(2, 3, 3, 4)
    gi, gid = th1.empty(tuple(x.shape))
    assert th1.lib.th1AdaptiveAvgPool2dBackward(th1.put(dy)[1], gid) == th1.ok
    torch.testing.assert_close(th1.get(gi, tuple(x.shape)), aten._adaptive_avg_pool2d_backward(dy, x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_and_batch_norm_inference(th1, dtype):
    table = torch.randn(10, 4).to(dtype)
    idx = torch.tensor([[1, 9], [0, 3]])
    o, od = th1.empty((2, 2, 4), dtype)
    assert th1.lib.th1Embedding(th1.put(table)[1], th1.put(idx)[1], od) == th1.ok
    assert torch.equal(th1.get(o, (2, 2, 4), dtype), F.embedding(idx, table))
    assert th1.lib.th1Embedding(th1.put(table)[1], th1.put(torch.tensor([10]))[1], th1.empty((1, 4), dtype)[1]) == \
        th1.lib.TH1_ERROR_DATA
    x = torch.randn(4, 3, 5, 5).to(dtype)
    w, b, m, v = torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5
    ref = F.batch_norm(x.float(), m, v, w, b, False, 0.1, 1e-5).to(dtype)
    o, od = th1.empty(x.shape, dtype)
    st = th1.lib.th1BatchNormInference(th1.put(x)[1], th1.put(w.to(dtype))[1], th1.put(b.to(dtype))[1],
                                       th1.put(m.to(dtype))[1], th1.put(v.to(dtype))[1], 1e-5, od)
    assert st == th1.ok, th1.last_error()
    mf, vf, wf, bf = (t.to(dtype).float() for t in (m, v, w, b))
    close(th1.get(o, x.shape, dtype), F.batch_norm(x.float(), mf, vf, wf, bf, False, 0.1, 1e-5).to(dtype), dtype)
    del ref


def test_softmax_rejects_unknown_flags(th1):
    x = th1.put(torch.randn(3, 4))[1]
    o, od = th1.empty((3, 4))
    assert th1.lib.th1Softmax(x, 1, 4, od) == th1.lib.TH1_ERROR_INVALID_ARGUMENT
    assert th1.lib.th1SoftmaxBackward(x, x, 1, th1.lib.TH1_SOFTMAX_SAFE, od) == th1.lib.TH1_ERROR_INVALID_ARGUMENT
