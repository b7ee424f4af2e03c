"""The simulator kernels' layout paths, checked against PyTorch on the CPU.

The kernels read operands in place, a row and a block of at most 512
elements at a time: dense float32 where it lies, anything else (strided,
broadcast with stride 0, float16/bfloat16, bool) converted per block, with
dims merged where every operand is contiguous across them.  These tests
drive each kind of kernel through the layouts that take different paths:
dense, transposed, sliced, broadcast, in place, partly overlapping, rows
longer than a block, odd sizes, empty and 0-d tensors.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

aten = torch.ops.aten
LOW = {"x1": torch.float16, "th1": torch.bfloat16}


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def k(chip, x1_name, th1_name):
    return getattr(chip.lib, x1_name if chip.kind == "x1" else th1_name)


def ok(chip, status):
    assert status == chip.ok, chip.last_error()


def view_desc(chip, v):
    """Uploads v's whole storage and describes v itself (its strides and offset)."""
    base = torch.as_strided(v, (v.untyped_storage().nbytes() // v.element_size(),), (1,), 0)
    addr = chip.upload(base.contiguous())
    return addr, chip.desc(addr, v.shape, v.stride(), v.dtype, v.storage_offset())


def out_view(chip, shape, dtype=torch.float32, layout="dense"):
    """An output of `shape` laid out densely, transposed, or every other element:
    (descriptor, function reading it back)."""
    n = int(np.prod(shape)) if shape else 1
    if layout == "transposed" and len(shape) >= 2:
        perm = list(range(len(shape)))[::-1]
        t = torch.empty([shape[p] for p in perm], dtype=dtype).permute(perm)
        strides = t.stride()
    elif layout == "strided":
        strides = tuple(2 * s for s in torch.empty(shape, device="meta").stride())
    else:
        strides = torch.empty(shape, device="meta").stride()
    addr, d = chip.empty(shape, dtype, strides if n else None)
    return d, lambda: chip.get(addr, shape, dtype, strides if n else None)


def layouts(x):
    """x as the kernels may see it: dense, transposed, sliced, broadcast."""
    return {
        "dense": x,
        "transposed": x.t().contiguous().t() if x.dim() == 2 else x,
        "sliced": torch.empty(x.shape[0], 2 * x.shape[1], dtype=x.dtype)[:, ::2].copy_(x),
    }


SHAPE = (33, 41)  # odd sizes: 1353 elements, more than two blocks


# ------------------------------------------------------------ elementwise

@pytest.mark.parametrize("lay", ["dense", "transposed", "sliced"])
@pytest.mark.parametrize("olay", ["dense", "strided"])
def test_binary_layouts(chip, lay, olay):
    torch.manual_seed(0)
    a, b = torch.randn(SHAPE), torch.randn(SHAPE)
    av = layouts(a)[lay]
    _, ad = view_desc(chip, av)
    _, bd = chip.put(b)
    od, get = out_view(chip, SHAPE, layout=olay)
    ok(chip, k(chip, "x1_sub", "th1Sub")(ad, bd, 0.5, od))
    torch.testing.assert_close(get(), a - 0.5 * b, rtol=0, atol=0)


@pytest.mark.parametrize("bshape", [(), (41,), (33, 1), (1, 1)])
def test_binary_broadcast(chip, bshape):
    torch.manual_seed(1)
    a, b = torch.randn(SHAPE), torch.randn(bshape)
    _, ad = chip.put(a)
    bd = chip.expanded(chip.upload(b), bshape, SHAPE, torch.float32)
    od, get = out_view(chip, SHAPE)
    ok(chip, k(chip, "x1_mul", "th1Mul")(ad, bd, od))
    torch.testing.assert_close(get(), a * b, rtol=0, atol=0)


def test_binary_low_precision_and_compare(chip):
    torch.manual_seed(2)
    low = LOW[chip.kind]
    a, b = torch.randn(SHAPE).to(low), torch.randn(SHAPE).to(low)
    b[0, :5] = a[0, :5]
    av = a.t().contiguous().t()
    _, ad = view_desc(chip, av)
    _, bd = chip.put(b)
    od, get = out_view(chip, SHAPE, low, "transposed")
    ok(chip, k(chip, "x1_add", "th1Add")(ad, bd, 1.0, od))
    torch.testing.assert_close(get(), a + b, rtol=0, atol=0)  # float math, one rounding: exact
    od, get = out_view(chip, SHAPE, torch.bool, "strided")
    ok(chip, k(chip, "x1_le", "th1LessEqual")(ad, bd, od))
    assert torch.equal(get(), a <= b)


def test_binary_integer_broadcast(chip):
    a = torch.randint(-2**62, 2**62, SHAPE, dtype=torch.int64)
    b = torch.tensor([3], dtype=torch.int64)
    _, ad = view_desc(chip, a.t().contiguous().t())
    bd = chip.expanded(chip.upload(b), (1,), SHAPE, torch.int64)
    od, get = out_view(chip, SHAPE, torch.int64, "strided")
    ok(chip, k(chip, "x1_mul", "th1Mul")(ad, bd, od))
    assert torch.equal(get(), a * 3)  # wraps like PyTorch
    a32 = a.to(torch.int32)
    od, get = out_view(chip, SHAPE, torch.bool)
    ok(chip, k(chip, "x1_gt", "th1Greater")(chip.put(a32)[1], chip.put(a32.flip(0))[1], od))
    assert torch.equal(get(), a32 > a32.flip(0))


@pytest.mark.parametrize("shape", [(0,), (0, 5), (), (1,), (1, 1, 1)])
def test_elementwise_empty_and_single(chip, shape):
    a, b = torch.randn(shape), torch.randn(shape)
    od, get = out_view(chip, shape)
    ok(chip, k(chip, "x1_add", "th1Add")(chip.put(a)[1], chip.put(b)[1], 1.0, od))
    torch.testing.assert_close(get(), a + b)
    od, get = out_view(chip, shape)
    ok(chip, k(chip, "x1_exp", "th1Exp")(chip.put(a)[1], od))
    torch.testing.assert_close(get(), a.exp())


def test_in_place_and_overlapping_output(chip):
    """An output that is an input (in place) works element for element; one
    that overlaps an input shifted gives what reading the input first gives."""
    torch.manual_seed(3)
    x, y = torch.randn(2000), torch.randn(2000)
    addr, xd = chip.put(x)
    ok(chip, k(chip, "x1_mul", "th1Mul")(xd, chip.put(y)[1], xd))
    torch.testing.assert_close(chip.get(addr, (2000,)), x * y, rtol=0, atol=0)
    addr, _ = chip.put(x)
    src = chip.desc(addr, (1999,), (1,), torch.float32, 0)
    dst = chip.desc(addr, (1999,), (1,), torch.float32, 1)
    ok(chip, k(chip, "x1_add", "th1Add")(src, chip.put(y[:1999])[1], 1.0, dst))
    got = chip.get(addr, (2000,))
    torch.testing.assert_close(got[1:], x[:1999] + y[:1999], rtol=0, atol=0)
    assert got[0] == x[0]
    addr, _ = chip.put(x)  # relu with the output one element behind its input
    ok(chip, k(chip, "x1_relu", "th1Relu")(chip.desc(addr, (1999,), (1,), torch.float32, 1),
                                            chip.desc(addr, (1999,), (1,), torch.float32, 0)))
    torch.testing.assert_close(chip.get(addr, (2000,))[:1999], x[1:].relu(), rtol=0, atol=0)


def test_unary_exp_family_accuracy(chip):
    """exp is correctly rounded to within one ulp everywhere, and sigmoid / silu
    / their mates follow PyTorch's formulas."""
    x = torch.cat([torch.linspace(-110, 100, 5001), torch.tensor(
        [0.0, -0.0, 1e-30, -1e-30, 88.72, 88.73, -87.3, -103.9, -104.0, float("inf"), float("-inf"),
         float("nan")])])
    od, get = out_view(chip, x.shape)
    ok(chip, k(chip, "x1_exp", "th1Exp")(chip.put(x)[1], od))
    got, want = get(), x.double().exp().float()
    assert torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    ulps = (got[fin].view(torch.int32).long() - want[fin].view(torch.int32).long()).abs()
    assert ulps.max() <= 1
    assert (ulps > 0).float().mean() < 0.01
    for name, ref in (("sigmoid", torch.sigmoid), ("silu", F.silu)):
        xs = torch.randn(3000) * 8
        od, get = out_view(chip, xs.shape, layout="strided")
        ok(chip, k(chip, f"x1_{name}", f"th1{name.capitalize()}")(chip.put(xs)[1], od))
        torch.testing.assert_close(get(), ref(xs))


def test_sqrt_rsqrt_exact(chip):
    """sqrt correctly rounded (as C's sqrtf; torch.sqrt on the CPU is not
    always), rsqrt its reciprocal."""
    x = torch.cat([torch.rand(1037) * 100, torch.tensor([0.0, -1.0, float("inf"), float("nan"), 1e-40])])
    exact = x.double().sqrt().float()
    for name, ref in (("sqrt", lambda t: exact), ("rsqrt", lambda t: 1 / exact)):
        od, get = out_view(chip, x.shape)
        ok(chip, k(chip, f"x1_{name}", f"th1{name.capitalize()}")(chip.put(x)[1], od))
        torch.testing.assert_close(get(), ref(x), rtol=0, atol=0, equal_nan=True)


def test_ternary_broadcast(chip):
    torch.manual_seed(4)
    s, t1, t2 = torch.randn(SHAPE), torch.randn(41), torch.rand(33, 1) + 0.5
    sd = view_desc(chip, s.t().contiguous().t())[1]
    t1d = chip.expanded(chip.upload(t1), (41,), SHAPE, torch.float32)
    t2d = chip.expanded(chip.upload(t2), (33, 1), SHAPE, torch.float32)
    od, get = out_view(chip, SHAPE, layout="strided")
    ok(chip, k(chip, "x1_addcdiv", "th1Addcdiv")(sd, t1d, t2d, -0.3, od))
    torch.testing.assert_close(get(), torch.addcdiv(s, t1.expand(SHAPE), t2.expand(SHAPE), value=-0.3),
                               rtol=0, atol=0)
    od, get = out_view(chip, SHAPE)
    ok(chip, k(chip, "x1_lerp", "th1Lerp")(sd, t1d, 0.7, od))
    # lerp has several float32 formulas (s + w(e-s), e - (1-w)(e-s); with or
    # without FMA), and torch picks by CPU capability: against the exact value,
    # a few roundings of terms no larger than |s| + |e| (and w, 1-w < 1)
    e = t1.expand(SHAPE)
    exact = s.double() + 0.7 * (e.double() - s.double())
    bound = 4 * torch.finfo(torch.float32).eps * (s.abs() + e.abs()).double()
    assert ((get().double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("dtype", [torch.float32, "low", torch.int32, torch.bool])
def test_where_and_masked_fill_broadcast_masks(chip, dtype):
    torch.manual_seed(5)
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    a = (torch.randn(4, 3, 70) * 10).to(dtype)
    b = (torch.randn(4, 3, 70) * 10).to(dtype)
    mask = torch.rand(4, 1, 70) < 0.5
    md = chip.expanded(chip.upload(mask), (4, 1, 70), a.shape, torch.bool)
    od, get = out_view(chip, a.shape, dtype, "strided")
    ok(chip, k(chip, "x1_where", "th1Where")(md, view_desc(chip, a.transpose(0, 2).contiguous().transpose(0, 2))[1],
                                             chip.put(b)[1], od))
    assert torch.equal(get(), torch.where(mask, a, b))
    od, get = out_view(chip, a.shape, dtype)
    ok(chip, k(chip, "x1_masked_fill", "th1MaskedFill")(chip.put(a)[1], md, 1.0, od))
    assert torch.equal(get(), a.masked_fill(mask, 1))


# ------------------------------------------------------------- copy, fill

DTYPES = {"x1": [torch.float32, torch.float16, torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool],
          "th1": [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool]}


def test_copy_every_dtype_pair_through_layouts(chip):
    torch.manual_seed(6)
    base = (torch.randn(24, 37) * 50).clamp(-100, 100)
    copy = k(chip, "x1_copy", "th1Copy")
    for src_dt in DTYPES[chip.kind]:
        src = base.to(src_dt)
        for dst_dt in DTYPES[chip.kind]:
            want = src.to(dst_dt)
            for lay, v in (("transposed", src.t().contiguous().t()), ("sliced", layouts(src)["sliced"])):
                od, get = out_view(chip, (24, 37), dst_dt, "strided" if lay == "sliced" else "dense")
                ok(chip, copy(view_desc(chip, v)[1], od))
                assert torch.equal(get(), want), (src_dt, dst_dt, lay)


def test_copy_half_conversions_exhaustive(chip):
    """Every 16-bit pattern up to float32, and float32 values (ties, denormals,
    overflow, NaN) down, as PyTorch converts them."""
    low = LOW[chip.kind]
    copy = k(chip, "x1_copy", "th1Copy")
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(low)
    od, get = out_view(chip, bits.shape)
    ok(chip, copy(chip.put(bits)[1], od))
    got, want = get(), bits.float()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])
    torch.manual_seed(7)
    f = torch.cat([torch.randint(-2**31, 2**31 - 1, (20000,), dtype=torch.int64).to(torch.int32).view(torch.float32),
                   want[~want.isnan()], want[~want.isnan()] * (1 + 2**-11), torch.tensor([65520.0, 65519.0, 1e-8])])
    od, get = out_view(chip, f.shape, low)
    ok(chip, copy(chip.put(f)[1], od))
    got, want = get().float(), f.to(low).float()
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])


def test_copy_broadcast_source_and_0d(chip):
    copy = k(chip, "x1_copy", "th1Copy")
    s = torch.tensor([1.5, -2.0, 3.25])
    sd = chip.expanded(chip.upload(s), (3,), (5, 3), torch.float32)
    od, get = out_view(chip, (5, 3), LOW[chip.kind], "transposed")
    ok(chip, copy(sd, od))
    assert torch.equal(get(), s.expand(5, 3).to(LOW[chip.kind]))
    od, get = out_view(chip, (), torch.int32)
    ok(chip, copy(chip.put(torch.tensor(-7.9))[1], od))
    assert get().item() == -7


@pytest.mark.parametrize("dtype", [torch.float32, "low", torch.int64, torch.bool, torch.int8])
def test_fill_strided(chip, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    for shape, lay in (((7, 300), "strided"), ((7, 300), "transposed"), ((0, 3), "dense"), ((), "dense")):
        od, get = out_view(chip, shape, dtype, lay)
        ok(chip, k(chip, "x1_fill", "th1Fill")(od, 1.0 if dtype == torch.bool else -3.0))
        assert torch.equal(get(), torch.full(shape, True if dtype == torch.bool else -3.0, dtype=dtype))


def test_cat_strided_inputs(chip):
    torch.manual_seed(8)
    xs = [torch.randn(5, 6, 7), torch.randn(5, 2, 7).transpose(0, 2).contiguous().transpose(0, 2),
          torch.randn(5, 9, 14)[:, :, ::2]]
    descs = [view_desc(chip, x)[1] for x in xs]
    arr = chip.ffi.new(f"{chip.desc_type}[]", descs)
    od, get = out_view(chip, (5, 17, 7), layout="transposed")
    ok(chip, k(chip, "x1_cat", "th1Cat")(arr, 3, 1, od))
    assert torch.equal(get(), torch.cat(xs, 1))


# -------------------------------------------------------------- reductions

@pytest.mark.parametrize("dims", [[0], [3], [1, 2], [0, 3], [], [-1, 0, 1, 2]])
def test_reductions_any_dims_permuted_input(chip, dims):
    torch.manual_seed(9)
    x = torch.randn(6, 5, 4, 130).permute(1, 0, 3, 2)  # [5, 6, 130, 4], nothing contiguous
    xd = view_desc(chip, x)[1]
    rd = dims or list(range(4))
    dd = chip.ffi.new("int64_t[]", dims or [0])
    n = len(dims)
    for name, ref in (("sum", torch.sum), ("mean", torch.mean)):
        want = ref(x, rd, keepdim=True)
        od, get = out_view(chip, tuple(want.shape))
        f = k(chip, f"x1_{name}", "th1ReduceSum" if name == "sum" else "th1ReduceMean")
        ok(chip, f(xd, dd, n, True, od))
        torch.testing.assert_close(get(), want, rtol=1e-5, atol=1e-5)
    want = torch.logsumexp(x, rd)
    od, get = out_view(chip, tuple(want.shape))
    ok(chip, k(chip, "x1_logsumexp", "th1ReduceLogSumExp")(xd, dd, n, False, od))
    torch.testing.assert_close(get(), want, rtol=1e-5, atol=1e-5)
    v_want, m_want = torch.var_mean(x, rd, correction=1)
    vd, vget = out_view(chip, tuple(v_want.shape))
    md, mget = out_view(chip, tuple(m_want.shape))
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_var_mean(xd, dd, n, 1.0, False, vd, md))
    else:
        ok(chip, chip.lib.th1VarMean(xd, dd, n, 1.0, 0, vd, md))
    torch.testing.assert_close(vget(), v_want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mget(), m_want, rtol=1e-5, atol=1e-5)


def test_reductions_low_precision_empty_and_masked(chip):
    low = LOW[chip.kind]
    x = torch.randn(3, 1500).to(low)
    dd = chip.ffi.new("int64_t[]", [1])
    od, get = out_view(chip, (3,), low)
    ok(chip, k(chip, "x1_sum", "th1ReduceSum")(chip.put(x)[1], dd, 1, False, od))
    torch.testing.assert_close(get().float(), x.float().sum(1).to(low).float())
    od, get = out_view(chip, (1500,), low)  # rows longer than a block along a kept dim
    ok(chip, k(chip, "x1_sum", "th1ReduceSum")(chip.put(x)[1], chip.ffi.new("int64_t[]", [0]), 1, False, od))
    torch.testing.assert_close(get().float(), x.float().sum(0).to(low).float())
    e = torch.empty(3, 0)
    od, get = out_view(chip, (3,))
    ok(chip, k(chip, "x1_mean", "th1ReduceMean")(chip.put(e)[1], dd, 1, False, od))
    assert get().isnan().all()
    m = torch.full((2, 5), float("-inf"))
    m[1, 2] = 0.5
    od, get = out_view(chip, (2,))
    ok(chip, k(chip, "x1_logsumexp", "th1ReduceLogSumExp")(chip.put(m)[1], dd, 1, False, od))
    torch.testing.assert_close(get(), torch.logsumexp(m, 1))


# ----------------------------------------------------------- row kernels

def softmax(chip, xd, dim, od, log=False, safe=False):
    if chip.kind == "x1":
        f = chip.lib.x1_log_softmax if log else (chip.lib.custom_safe_softmax_x1 if safe else chip.lib.custom_softmax_x1)
        return f(xd, dim, od)
    return chip.lib.th1Softmax(xd, dim, (2 if log else 0) | (1 if safe else 0), od)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_softmax_any_dim_and_layout(chip, dim):
    torch.manual_seed(10)
    x = (torch.randn(4, 5, 600) * 3).transpose(0, 1)  # [5, 4, 600], strided
    x[1, 2, :] = float("-inf")
    xd = view_desc(chip, x)[1]
    for log in (False, True):
        od, get = out_view(chip, tuple(x.shape), layout="strided")
        ok(chip, softmax(chip, xd, dim, od, log=log, safe=not log))
        want = aten._safe_softmax(x, dim) if not log else torch.log_softmax(x, dim)
        torch.testing.assert_close(get(), want, rtol=1.3e-6, atol=1e-6, equal_nan=True)


def test_softmax_in_place_long_rows_and_backward(chip):
    torch.manual_seed(11)
    x = torch.randn(3, 1700) * 4
    addr, xd = chip.put(x)
    ok(chip, softmax(chip, xd, -1, xd))
    y = chip.get(addr, x.shape)
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1.3e-6, atol=1e-7)
    g = torch.randn(x.shape)
    gaddr, gd = chip.put(g)
    yd = chip.put(y)[1]
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_softmax_backward(gd, yd, -1, gd))  # into grad's own memory
    else:
        ok(chip, chip.lib.th1SoftmaxBackward(gd, yd, -1, 0, gd))
    torch.testing.assert_close(chip.get(gaddr, x.shape), aten._softmax_backward_data(g, y, -1, torch.float32),
                               rtol=1e-5, atol=1e-6)
    ly = torch.log_softmax(x, 0)
    od, get = out_view(chip, tuple(x.shape), layout="transposed")
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_log_softmax_backward(view_desc(chip, g.t().contiguous().t())[1], chip.put(ly)[1], 0, od))
    else:
        ok(chip, chip.lib.th1SoftmaxBackward(view_desc(chip, g.t().contiguous().t())[1], chip.put(ly)[1], 0, 2, od))
    torch.testing.assert_close(get(), aten._log_softmax_backward_data(g, ly, 0, torch.float32), rtol=1e-5, atol=1e-5)


def layer_norm(chip, xd, nshape, wd, bd, od, md, rd):
    if chip.kind == "x1":
        return chip.lib.x1_layer_norm(xd, list(nshape), len(nshape), wd, bd, 1e-5, od, md, rd)
    return chip.lib.th1LayerNorm(xd, len(nshape), wd, bd, 1e-5, od, md, rd)


@pytest.mark.parametrize("lay", ["dense", "permuted"])
def test_layer_norm_rows_and_backward(chip, lay):
    """Normalized dims that are not one run in memory (a permuted input, a
    transposed output) take a dense copy; the results are the same."""
    torch.manual_seed(12)
    x = torch.randn(6, 5, 40) * 3 + 1
    if lay == "permuted":
        x = x.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    w, b = torch.randn(5, 40), torch.randn(5, 40)
    y, mu, rs = torch.native_layer_norm(x, [5, 40], w, b, 1e-5)
    od, get = out_view(chip, (6, 5, 40), layout="transposed" if lay == "permuted" else "dense")
    md, mget = out_view(chip, (6, 1, 1))
    rd, rget = out_view(chip, (6, 1, 1))
    xd = view_desc(chip, x)[1]
    ok(chip, layer_norm(chip, xd, (5, 40), chip.put(w)[1], chip.put(b)[1], od, md, rd))
    torch.testing.assert_close(get(), y)
    torch.testing.assert_close(mget(), mu)
    torch.testing.assert_close(rget(), rs)
    dy = torch.randn(x.shape)
    gx, gw, gb = aten.native_layer_norm_backward(dy, x, [5, 40], mu, rs, w, b, [True, True, True])
    dxd, dxget = out_view(chip, (6, 5, 40), layout="strided")
    dwd, dwget = out_view(chip, (5, 40))
    dbd, dbget = out_view(chip, (5, 40))
    args = (view_desc(chip, dy.transpose(0, 1).contiguous().transpose(0, 1))[1], xd)
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_layer_norm_backward(*args, [5, 40], 2, chip.put(mu)[1], chip.put(rs)[1],
                                                 chip.put(w)[1], [1, 1, 1], dxd, dwd, dbd))
    else:
        ok(chip, chip.lib.th1LayerNormBackward(*args, 2, chip.put(mu)[1], chip.put(rs)[1], chip.put(w)[1],
                                               dxd, dwd, dbd))
    torch.testing.assert_close(dxget(), gx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dwget(), gw, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dbget(), gb, rtol=1e-5, atol=1e-5)


def test_layer_norm_in_place_low_precision(chip):
    low = LOW[chip.kind]
    x = (torch.randn(7, 33) * 2).to(low)
    addr, xd = chip.put(x)
    ok(chip, layer_norm(chip, xd, (33,), chip.ffi.NULL, chip.ffi.NULL, xd, chip.ffi.NULL, chip.ffi.NULL))
    want = torch.native_layer_norm(x.float(), [33], None, None, 1e-5)[0].to(low)
    torch.testing.assert_close(chip.get(addr, x.shape, low), want, rtol=0, atol=0)


# ---------------------------------------------------- embedding, pooling

def test_embedding_strided(chip):
    torch.manual_seed(13)
    w = torch.randn(50, 70).t().contiguous().t()  # table read through strides
    idx = torch.randint(0, 50, (3, 9), dtype=torch.int32)
    od, get = out_view(chip, (3, 9, 70), layout="strided")
    ok(chip, k(chip, "x1_embedding", "th1Embedding")(view_desc(chip, w)[1], chip.put(idx)[1], od))
    assert torch.equal(get(), F.embedding(idx.long(), w))
    g = torch.randn(3, 70, 9).transpose(1, 2)
    od, get = out_view(chip, (50, 70))
    ok(chip, k(chip, "x1_embedding_backward", "th1EmbeddingBackward")(
        view_desc(chip, g)[1], chip.put(idx)[1], 50, int(idx[0, 0]), True, od))
    want = aten.embedding_dense_backward(g, idx.long(), 50, int(idx[0, 0]), True)
    torch.testing.assert_close(get(), want)


def test_pooling_layouts(chip):
    """x1 pools NHWC views, th1 NCHW ones (strided NHWC inside); both against PyTorch."""
    torch.manual_seed(14)
    x = torch.randn(2, 5, 9, 11)
    x[0, 1, 2, 3] = float("nan")
    nhwc = chip.kind == "x1"

    def put(t):
        return chip.put(t.permute(0, 2, 3, 1).contiguous())[1] if nhwc else chip.put(t)[1]

    def empty(shape, dtype=torch.float32):
        n, c, h, w = shape
        addr, d = chip.empty((n, h, w, c) if nhwc else shape, dtype)
        return d, lambda: (chip.get(addr, (n, h, w, c), dtype).permute(0, 3, 1, 2) if nhwc
                           else chip.get(addr, shape, dtype))

    i64 = lambda v: chip.ffi.new("int64_t[]", v)  # noqa: E731
    y, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True, ceil_mode=True)
    od, oget = empty(tuple(y.shape))
    idd, iget = empty(tuple(y.shape), torch.int64)
    ok(chip, k(chip, "x1_max_pool2d", "th1MaxPool2d")(put(x), i64([3, 3]), i64([2, 2]), 2, i64([1, 1]),
                                                      i64([1, 1]), True, od, idd))
    torch.testing.assert_close(oget(), y, equal_nan=True)
    assert torch.equal(iget(), idx)
    g = torch.randn(y.shape)
    dd, dget = empty(tuple(x.shape))
    ok(chip, k(chip, "x1_max_pool2d_backward", "th1MaxPool2dBackward")(put(g), put(idx), dd))
    torch.testing.assert_close(dget(), aten.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1],
                                                                            [1, 1], True, idx))
    xa = torch.randn(2, 5, 9, 11)
    y = F.avg_pool2d(xa, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    od, oget = empty(tuple(y.shape))
    ok(chip, k(chip, "x1_avg_pool2d", "th1AvgPool2d")(put(xa), i64([3, 3]), i64([2, 2]), 2, i64([1, 1]), True,
                                                      False, 0, od))
    torch.testing.assert_close(oget(), y)
    g = torch.randn(y.shape)
    dd, dget = empty(tuple(xa.shape))
    ok(chip, k(chip, "x1_avg_pool2d_backward", "th1AvgPool2dBackward")(put(g), i64([3, 3]), i64([2, 2]), 2,
                                                                       i64([1, 1]), True, False, 0, dd))
    torch.testing.assert_close(dget(), aten.avg_pool2d_backward(g, xa, [3, 3], [2, 2], [1, 1], True, False, None))
    y = F.adaptive_avg_pool2d(xa, (4, 3))
    od, oget = empty(tuple(y.shape))
    if nhwc:
        ok(chip, chip.lib.x1_adaptive_avg_pool2d(put(xa), i64([4, 3]), od))
    else:
        ok(chip, chip.lib.th1AdaptiveAvgPool2d(put(xa), od))
    torch.testing.assert_close(oget(), y)


def test_batch_norm_inference_odd_shape(chip):
    torch.manual_seed(15)
    x = torch.randn(3, 7, 5, 3)
    w, b, m, v = torch.randn(7), torch.randn(7), torch.randn(7), torch.rand(7) + 0.1
    od, get = out_view(chip, tuple(x.shape))
    f = k(chip, "x1_batch_norm", "th1BatchNormInference")
    ok(chip, f(view_desc(chip, x.transpose(1, 3).contiguous().transpose(1, 3))[1], chip.put(w)[1], chip.put(b)[1],
               chip.put(m)[1], chip.put(v)[1], 1e-5, od))
    torch.testing.assert_close(get(), F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5))
