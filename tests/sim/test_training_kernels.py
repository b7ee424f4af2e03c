"""The kernels of training and transformer inference on both simulated chips,
driven through their C ABIs and checked against PyTorch on the CPU.

Where x1 and th1 take the same arguments in the same order (most of them),
one test covers both through the name table below; layouts and calling
conventions that differ (NHWC vs NCHW convolution, flags vs separate
functions) have a test per chip.
"""
import pytest
import torch
import torch.nn.functional as F

aten = torch.ops.aten
torch.manual_seed(0)

# the same kernel under each vendor's name
NAMES = {
    "add": ("x1_add", "th1Add"), "sub": ("x1_sub", "th1Sub"), "mul": ("x1_mul", "th1Mul"),
    "div": ("x1_div", "th1Div"), "pow": ("x1_pow", "th1Pow"), "pow_scalar": ("x1_pow_scalar", "th1PowScalar"),
    "maximum": ("x1_maximum", "th1Maximum"), "minimum": ("x1_minimum", "th1Minimum"),
    "eq": ("x1_eq", "th1Equal"), "ne": ("x1_ne", "th1NotEqual"), "lt": ("x1_lt", "th1Less"),
    "le": ("x1_le", "th1LessEqual"), "gt": ("x1_gt", "th1Greater"), "ge": ("x1_ge", "th1GreaterEqual"),
    "bitwise_and": ("x1_bitwise_and", "th1BitwiseAnd"), "bitwise_or": ("x1_bitwise_or", "th1BitwiseOr"),
    "bitwise_xor": ("x1_bitwise_xor", "th1BitwiseXor"), "bitwise_not": ("x1_bitwise_not", "th1BitwiseNot"),
    "neg": ("x1_neg", "th1Neg"), "abs": ("x1_abs", "th1Abs"), "log": ("x1_log", "th1Log"),
    "cos": ("x1_cos", "th1Cos"), "sin": ("x1_sin", "th1Sin"), "reciprocal": ("x1_reciprocal", "th1Reciprocal"),
    "silu": ("x1_silu", "th1Silu"), "sigmoid": ("x1_sigmoid", "th1Sigmoid"), "tanh": ("x1_tanh", "th1Tanh"),
    "exp": ("x1_exp", "th1Exp"), "sqrt": ("x1_sqrt", "th1Sqrt"), "rsqrt": ("x1_rsqrt", "th1Rsqrt"),
    "addcmul": ("x1_addcmul", "th1Addcmul"), "addcdiv": ("x1_addcdiv", "th1Addcdiv"), "lerp": ("x1_lerp", "th1Lerp"),
    "where": ("x1_where", "th1Where"), "masked_fill": ("x1_masked_fill", "th1MaskedFill"),
    "threshold_backward": ("x1_threshold_backward", "th1ThresholdBackward"),
    "sigmoid_backward": ("x1_sigmoid_backward", "th1SigmoidBackward"),
    "tanh_backward": ("x1_tanh_backward", "th1TanhBackward"),
    "sum": ("x1_sum", "th1ReduceSum"), "mean": ("x1_mean", "th1ReduceMean"), "var_mean": ("x1_var_mean", "th1VarMean"),
    "nll_loss": ("x1_nll_loss_forward", "th1NllLossForward"),
    "nll_loss_backward": ("x1_nll_loss_backward", "th1NllLossBackward"),
    "embedding_backward": ("x1_embedding_backward", "th1EmbeddingBackward"),
    "arange": ("x1_arange", "th1Arange"), "cat": ("x1_cat", "th1Cat"),
}
LOW = {"x1": torch.float16, "th1": torch.bfloat16}   # each chip's 16-bit float


def fn(chip, name):
    return getattr(chip.lib, NAMES[name][0 if chip.kind == "x1" else 1])


def err(chip, kind):
    """A status by meaning, in the chip's own codes."""
    x1 = {"invalid": "X1_ERR_INVALID_VALUE", "unsupported": "X1_ERR_UNSUPPORTED", "data": "X1_ERR_DATA"}
    th1 = {"invalid": "TH1_ERROR_INVALID_ARGUMENT", "unsupported": "TH1_ERROR_NOT_SUPPORTED",
           "data": "TH1_ERROR_DATA"}
    return getattr(chip.lib, (x1 if chip.kind == "x1" else th1)[kind])


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def close(got, want, dtype):
    tol = {} if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def run(chip, name, inputs, out_shape, out_dtype, *scalars, before=None):
    """Calls name(inputs..., [before...], scalars..., out) and returns out."""
    descs = [chip.put(t)[1] for t in inputs]
    addr, od = chip.empty(out_shape, out_dtype)
    st = fn(chip, name)(*descs, *(before or ()), *scalars, od)
    assert st == chip.ok, chip.last_error()
    return chip.get(addr, out_shape, out_dtype)


def floats(chip):
    return [torch.float32, LOW[chip.kind]]


# ------------------------------------------------------------- elementwise

@pytest.mark.parametrize("name,ref", [
    ("sub", lambda a, b: torch.sub(a, b, alpha=0.5)), ("div", torch.div), ("pow", torch.pow),
    ("maximum", torch.maximum), ("minimum", torch.minimum),
])
def test_binary_float_ops_match_torch(chip, name, ref):
    for dtype in floats(chip):
        a = torch.randn(5, 6).to(dtype)
        b = (torch.rand(5, 6) + 0.5).to(dtype)
        if name == "pow":
            a = a.abs() + 0.1
        a[0, 0], b[0, 1] = float("nan"), float("nan")   # NaN propagates (maximum/minimum too)
        scalars = (0.5,) if name == "sub" else ()
        got = run(chip, name, [a, b], (5, 6), dtype, *scalars)
        close(got, ref(a.float(), b.float()).to(dtype), dtype)


def test_binary_broadcast_operand_with_stride_0(chip):
    a, b = torch.randn(3, 4), torch.randn(4)
    bb = chip.upload(b)
    o, od = chip.empty((3, 4))
    assert fn(chip, "maximum")(chip.put(a)[1], chip.expanded(bb, (4,), (3, 4), torch.float32), od) == chip.ok
    torch.testing.assert_close(chip.get(o, (3, 4)), torch.maximum(a, b))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_arithmetic_is_exact_and_wraps_like_torch(chip, dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([info.max, info.min, -7, 2**20 + 3, 0], dtype=dtype)
    b = torch.tensor([1, -1, 3, 2**20 - 1, -5], dtype=dtype)
    for name, ref, scalars in (("add", lambda x, y: torch.add(x, y, alpha=3), (3.0,)),
                               ("sub", lambda x, y: torch.sub(x, y, alpha=2), (2.0,)),
                               ("mul", torch.mul, ()), ("maximum", torch.maximum, ()), ("minimum", torch.minimum, ())):
        assert torch.equal(run(chip, name, [a, b], (5,), dtype, *scalars), ref(a, b)), name
    for name in ("neg", "abs"):
        assert torch.equal(run(chip, name, [a], (5,), dtype), getattr(torch, name)(a)), name


def test_integers_are_refused_where_the_result_would_not_be_an_integer(chip):
    a = chip.put(torch.arange(4))[1]
    o, od = chip.empty((4,), torch.int64)
    for name in ("div", "pow"):
        assert fn(chip, name)(a, a, od) == err(chip, "unsupported"), name
        assert "int64" in chip.last_error()
    for name in ("exp", "log", "sqrt"):
        assert fn(chip, name)(a, od) == err(chip, "unsupported"), name
    assert chip.kernel_counts() == {}


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_write_bool(chip, name):
    for dtype in floats(chip) + [torch.int64, torch.int32]:
        a = torch.tensor([1, 2, 3, 4, 5, 6]).to(dtype)
        b = torch.tensor([6, 2, 1, 4, 9, 0]).to(dtype)
        if dtype.is_floating_point:
            a[0] = b[1] = float("nan")
        got = run(chip, name, [a, b], (6,), torch.bool)
        assert torch.equal(got, getattr(torch, name)(a, b)), (name, dtype)


def test_comparison_needs_a_bool_output_and_matching_operands(chip):
    a = chip.put(torch.randn(4))[1]
    o, od = chip.empty((4,))
    assert fn(chip, "eq")(a, a, od) == err(chip, "unsupported")
    assert "bool" in chip.last_error()
    i = chip.put(torch.arange(4))[1]
    ob, obd = chip.empty((4,), torch.bool)
    assert fn(chip, "lt")(a, i, obd) == err(chip, "unsupported")
    assert "mixed dtypes" in chip.last_error()


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64])
def test_bitwise_ops(chip, dtype):
    if dtype == torch.bool:
        a, b = torch.tensor([True, True, False, False]), torch.tensor([True, False, True, False])
    else:
        a, b = torch.tensor([0, -1, 5, 12], dtype=dtype), torch.tensor([3, 7, -8, 10], dtype=dtype)
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        assert torch.equal(run(chip, name, [a, b], (4,), dtype), getattr(torch, name)(a, b)), name
    assert torch.equal(run(chip, "bitwise_not", [a], (4,), dtype), torch.bitwise_not(a))


def test_bitwise_ops_refuse_floats(chip):
    a = chip.put(torch.randn(4))[1]
    o, od = chip.empty((4,))
    assert fn(chip, "bitwise_and")(a, a, od) == err(chip, "unsupported")
    assert fn(chip, "bitwise_not")(a, od) == err(chip, "unsupported")


@pytest.mark.parametrize("name", ["log", "cos", "sin", "abs", "reciprocal", "silu", "sigmoid", "tanh", "exp",
                                  "sqrt", "rsqrt", "neg"])
def test_unary_float_ops_match_torch(chip, name):
    for dtype in floats(chip):
        a = (torch.randn(4, 7) * 3).to(dtype)
        if name in ("log", "sqrt", "rsqrt"):
            a = a.abs() + 0.01
        ref = getattr(torch, name) if name != "silu" else F.silu
        close(run(chip, name, [a], (4, 7), dtype), ref(a.float()).to(dtype), dtype)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, 0.0])
def test_pow_scalar_matches_torch(chip, exponent):
    a = torch.rand(50) * 4 + 0.05
    got = run(chip, "pow_scalar", [a], (50,), torch.float32, exponent)
    torch.testing.assert_close(got, torch.pow(a, exponent), rtol=2e-7, atol=0)
    b = a.to(LOW[chip.kind])
    close(run(chip, "pow_scalar", [b], (50,), b.dtype, exponent), torch.pow(b.float(), exponent).to(b.dtype), b.dtype)


# ------------------------------------------------------ optimizer arithmetic

def test_addcmul_addcdiv_lerp_match_torch(chip):
    for dtype in floats(chip):
        s, t1, t2 = torch.randn(33).to(dtype), torch.randn(33).to(dtype), (torch.rand(33) + 0.1).to(dtype)
        f = [x.float() for x in (s, t1, t2)]
        close(run(chip, "addcmul", [s, t1, t2], (33,), dtype, -0.3), torch.addcmul(*f, value=-0.3).to(dtype), dtype)
        close(run(chip, "addcdiv", [s, t1, t2], (33,), dtype, 0.7), torch.addcdiv(*f, value=0.7).to(dtype), dtype)
        for w in (0.1, 0.9, -0.2):
            close(run(chip, "lerp", [s, t1], (33,), dtype, w), torch.lerp(f[0], f[1], w).to(dtype), dtype)


def test_adam_step_in_place_matches_torch(chip):
    """exp_avg.lerp_, exp_avg_sq.mul_/addcmul_, param.addcdiv_: every kernel
    writes the tensor it reads (out aliases self)."""
    p, g = torch.randn(64), torch.randn(64)
    m, v = torch.zeros(64), torch.zeros(64)
    pa, pd = chip.put(p)
    ma, md = chip.put(m)
    va, vd = chip.put(v)
    gd = chip.put(g)[1]
    assert fn(chip, "lerp")(md, gd, 0.1, md) == chip.ok
    assert fn(chip, "addcmul")(vd, gd, gd, 0.001, vd) == chip.ok
    sq = chip.put(torch.sqrt(v.addcmul(g, g, value=0.001)) + 1e-8)[1]
    assert fn(chip, "addcdiv")(pd, md, sq, -0.01, pd) == chip.ok
    m_ref = m.lerp(g, 0.1)
    v_ref = v.addcmul(g, g, value=0.001)
    torch.testing.assert_close(chip.get(ma, (64,)), m_ref)
    torch.testing.assert_close(chip.get(va, (64,)), v_ref)
    torch.testing.assert_close(chip.get(pa, (64,)), p.addcdiv(m_ref, torch.sqrt(v_ref) + 1e-8, value=-0.01))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_where_and_masked_fill(chip, dtype):
    cond = torch.rand(3, 5) > 0.5
    a, b = (torch.randn(3, 5) * 10).to(dtype), (torch.randn(3, 5) * 10).to(dtype)
    assert torch.equal(run(chip, "where", [cond, a, b], (3, 5), dtype), torch.where(cond, a, b))
    mask = torch.tensor([True, False, True, False, False])
    ma = chip.upload(mask)
    o, od = chip.empty((3, 5), dtype)
    value = 1.0 if dtype == torch.bool else -7.0
    st = fn(chip, "masked_fill")(chip.put(a)[1], chip.expanded(ma, (5,), (3, 5), torch.bool), value, od)
    assert st == chip.ok, chip.last_error()
    assert torch.equal(chip.get(o, (3, 5), dtype), a.masked_fill(mask, value))


def test_where_and_masked_fill_need_a_bool_condition(chip):
    x = chip.put(torch.randn(4))[1]
    o, od = chip.empty((4,))
    assert fn(chip, "where")(x, x, x, od) == err(chip, "unsupported")
    assert fn(chip, "masked_fill")(x, x, 0.0, od) == err(chip, "unsupported")
    assert "bool" in chip.last_error()


# ------------------------------------------------------ activation gradients

def test_activation_gradients_match_aten(chip):
    for dtype in floats(chip):
        g, x = torch.randn(6, 9).to(dtype), (torch.randn(6, 9) * 2).to(dtype)
        x[0, :3] = 0.0   # exactly at the ReLU threshold: zero gradient
        gf, xf = g.float(), x.float()
        close(run(chip, "threshold_backward", [g, x], (6, 9), dtype, 0.0),
              aten.threshold_backward(gf, xf, 0.0).to(dtype), dtype)
        y = torch.sigmoid(xf).to(dtype)
        close(run(chip, "sigmoid_backward", [g, y], (6, 9), dtype), aten.sigmoid_backward(gf, y.float()).to(dtype),
              dtype)
        y = torch.tanh(xf).to(dtype)
        close(run(chip, "tanh_backward", [g, y], (6, 9), dtype), aten.tanh_backward(gf, y.float()).to(dtype), dtype)
        for approx in ("none", "tanh"):
            mode = approx.encode() if chip.kind == "x1" else {"none": 0, "tanh": 1}[approx]
            name = "x1_gelu_backward" if chip.kind == "x1" else "th1GeluBackward"
            o, od = chip.empty((6, 9), dtype)
            assert getattr(chip.lib, name)(chip.put(g)[1], chip.put(x)[1], mode, od) == chip.ok
            close(chip.get(o, (6, 9), dtype), aten.gelu_backward(gf, xf, approximate=approx).to(dtype), dtype)


# -------------------------------------------------------------- reductions

@pytest.mark.parametrize("dims,keepdim", [([1], False), ([0, 2], True), ([-1], True), ([], False)])
def test_sum_mean_and_var_mean(chip, dims, keepdim):
    x = torch.randn(3, 4, 5)
    for dtype in floats(chip):
        xx = x.to(dtype)
        for name, ref in (("sum", torch.sum), ("mean", torch.mean)):
            want = (ref(xx.float(), dims, keepdim) if dims else ref(xx.float())).to(dtype)
            got = run(chip, name, [xx], tuple(want.shape), dtype, before=(dims or chip.ffi.NULL, len(dims), keepdim))
            close(got, want, dtype)
        for correction in (0, 1):
            v, m = torch.var_mean(xx.float(), dims or None, correction=correction, keepdim=keepdim)
            va, vd = chip.empty(tuple(v.shape), dtype)
            ma, md = chip.empty(tuple(m.shape), dtype)
            st = fn(chip, "var_mean")(chip.put(xx)[1], dims or chip.ffi.NULL, len(dims), float(correction), keepdim,
                                      vd, md)
            assert st == chip.ok, chip.last_error()
            close(chip.get(va, tuple(v.shape), dtype), v.to(dtype), dtype)
            close(chip.get(ma, tuple(m.shape), dtype), m.to(dtype), dtype)


def test_reductions_check_the_output_shape_and_dims(chip):
    x = chip.put(torch.randn(3, 4))[1]
    o, od = chip.empty((3,))
    assert fn(chip, "sum")(x, [1], 1, True, od) == err(chip, "invalid")     # keepdim needs [3, 1]
    assert fn(chip, "mean")(x, [2], 1, False, od) == err(chip, "invalid")   # no dim 2
    assert "out of range" in chip.last_error()
    v, vd = chip.empty((4,))
    assert fn(chip, "var_mean")(x, [1], 1, 1.0, False, vd, od) == err(chip, "invalid")


# ------------------------------------------------------------ softmax family

def log_softmax(chip, x_desc, dim, out_desc):
    if chip.kind == "x1":
        return chip.lib.x1_log_softmax(x_desc, dim, out_desc)
    return chip.lib.th1Softmax(x_desc, dim, chip.lib.TH1_SOFTMAX_LOG, out_desc)


def softmax_backward(chip, g, y, dim, out, log):
    if chip.kind == "x1":
        f = chip.lib.x1_log_softmax_backward if log else chip.lib.x1_softmax_backward
        return f(g, y, dim, out)
    return chip.lib.th1SoftmaxBackward(g, y, dim, chip.lib.TH1_SOFTMAX_LOG if log else 0, out)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_and_the_softmax_gradients(chip, dim):
    for dtype in floats(chip):
        x, g = torch.randn(4, 6, 3).to(dtype), torch.randn(4, 6, 3).to(dtype)
        o, od = chip.empty(x.shape, dtype)
        assert log_softmax(chip, chip.put(x)[1], dim, od) == chip.ok
        close(chip.get(o, x.shape, dtype), torch.log_softmax(x.float(), dim).to(dtype), dtype)
        for log in (False, True):
            y = (torch.log_softmax if log else torch.softmax)(x.float(), dim).to(dtype)
            gi, gid = chip.empty(x.shape, dtype)
            assert softmax_backward(chip, chip.put(g)[1], chip.put(y)[1], dim, gid, log) == chip.ok
            ref = (aten._log_softmax_backward_data if log else aten._softmax_backward_data)(
                g.float(), y.float(), dim, torch.float32)
            close(chip.get(gi, x.shape, dtype), ref.to(dtype), dtype)


def test_safe_softmax_zeroes_fully_masked_rows(chip):
    x = torch.randn(3, 5)
    x[1] = float("-inf")
    o, od = chip.empty(x.shape)
    if chip.kind == "x1":
        st = chip.lib.custom_safe_softmax_x1(chip.put(x)[1], -1, od)
    else:
        st = chip.lib.th1Softmax(chip.put(x)[1], -1, chip.lib.TH1_SOFTMAX_SAFE, od)
    assert st == chip.ok
    torch.testing.assert_close(chip.get(o, x.shape), aten._safe_softmax(x, -1))


# --------------------------------------------------------------------- loss

@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_and_backward(chip, reduction, weighted):
    for dtype in floats(chip):
        x = torch.log_softmax(torch.randn(6, 5), 1).to(dtype)
        t = torch.tensor([0, 4, 2, -100, 1, 4])
        w = (torch.rand(5) + 0.5).to(dtype) if weighted else None
        out_ref, tw_ref = aten.nll_loss_forward(x.float(), t, None if w is None else w.float(), reduction, -100)
        oa, od = chip.empty(tuple(out_ref.shape), dtype)
        ta, td = chip.empty((), dtype)
        wd = chip.put(w)[1] if weighted else chip.ffi.NULL
        st = fn(chip, "nll_loss")(chip.put(x)[1], chip.put(t)[1], wd, reduction, -100, od, td)
        assert st == chip.ok, chip.last_error()
        close(chip.get(oa, tuple(out_ref.shape), dtype), out_ref.to(dtype), dtype)
        close(chip.get(ta, (), dtype), tw_ref.to(dtype), dtype)
        g = torch.randn(out_ref.shape).to(dtype)
        ref = aten.nll_loss_backward(g.float(), x.float(), t, None if w is None else w.float(), reduction, -100,
                                     tw_ref)
        gi, gid = chip.empty(x.shape, dtype)
        st = fn(chip, "nll_loss_backward")(chip.put(g)[1], chip.put(x)[1], chip.put(t)[1], wd, reduction, -100,
                                           chip.put(tw_ref.to(dtype))[1], gid)
        assert st == chip.ok, chip.last_error()
        close(chip.get(gi, x.shape, dtype), ref.to(dtype), dtype)


def test_nll_loss_of_one_sample_and_of_nothing(chip):
    x = torch.log_softmax(torch.randn(5), 0)
    o, od = chip.empty(())
    ta, td = chip.empty(())
    assert fn(chip, "nll_loss")(chip.put(x)[1], chip.put(torch.tensor(3))[1], chip.ffi.NULL, 1, -100, od, td) == chip.ok
    torch.testing.assert_close(chip.get(o, ()), -x[3])
    xs = torch.log_softmax(torch.randn(2, 5), 1)
    t = torch.tensor([-100, -100])
    assert fn(chip, "nll_loss")(chip.put(xs)[1], chip.put(t)[1], chip.ffi.NULL, 1, -100, od, td) == chip.ok
    assert torch.isnan(chip.get(o, ()))      # mean over no weight: 0/0, as in PyTorch
    assert chip.get(ta, ()).item() == 0.0


def test_nll_loss_target_out_of_range_is_a_data_error(chip):
    chip.lib.x1_reset_counters() if chip.kind == "x1" else chip.lib.th1ResetStats()
    o, od = chip.empty(())
    ta, td = chip.empty(())
    st = fn(chip, "nll_loss")(chip.put(torch.randn(2, 5))[1], chip.put(torch.tensor([1, 5]))[1], chip.ffi.NULL, 1,
                              -100, od, td)
    assert st == err(chip, "data") and "target 5 is out of bounds [0, 5)" in chip.last_error()
    assert chip.kernel_counts() == {}    # rejected before launch


# ---------------------------------------------------------------- embedding

@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (2, False), (-1, True), (0, True)])
def test_embedding_backward_matches_aten(chip, padding_idx, scale):
    for dtype in floats(chip):
        idx = torch.tensor([[1, 2, 1], [0, 4, 1]])
        g = torch.randn(2, 3, 6).to(dtype)
        ref = aten.embedding_dense_backward(g.float(), idx, 5, padding_idx, scale).to(dtype)
        got = run(chip, "embedding_backward", [g, idx], (5, 6), dtype, 5, padding_idx, scale)
        close(got, ref, dtype)


def test_embedding_backward_checks_indices(chip):
    o, od = chip.empty((5, 6))
    g = chip.put(torch.randn(3, 6))[1]
    st = fn(chip, "embedding_backward")(g, chip.put(torch.tensor([1, 5, 0]))[1], 5, -1, False, od)
    assert st == err(chip, "data") and "index 5 out of range [0, 5)" in chip.last_error()
    st = fn(chip, "embedding_backward")(g, chip.put(torch.tensor([1.0, 2.0, 0.0]))[1], 5, -1, False, od)
    assert st == err(chip, "unsupported")


# ---------------------------------------------------------- layer norm grad

def layer_norm_backward(chip, dy, x, nshape, mean, rstd, w, dx, dw, db):
    if chip.kind == "x1":
        mask = [int(d is not chip.ffi.NULL) for d in (dx, dw, db)]
        return chip.lib.x1_layer_norm_backward(dy, x, list(nshape), len(nshape), mean, rstd, w, mask, dx, dw, db)
    return chip.lib.th1LayerNormBackward(dy, x, len(nshape), mean, rstd, w, dx, dw, db)


@pytest.mark.parametrize("nshape", [(8,), (3, 8)])
def test_layer_norm_backward_matches_aten(chip, nshape):
    for dtype in floats(chip):
        x = (torch.randn(4, 3, 8) * 2 + 1).to(dtype)
        w, b = torch.randn(nshape).to(dtype), torch.randn(nshape).to(dtype)
        dy = torch.randn(4, 3, 8).to(dtype)
        _, mean, rstd = aten.native_layer_norm(x.float(), list(nshape), w.float(), b.float(), 1e-5)
        ref = aten.native_layer_norm_backward(dy.float(), x.float(), list(nshape), mean, rstd, w.float(), b.float(),
                                              [True, True, True])
        dxa, dxd = chip.empty(x.shape, dtype)
        dwa, dwd = chip.empty(nshape, dtype)
        dba, dbd = chip.empty(nshape, dtype)
        st = layer_norm_backward(chip, chip.put(dy)[1], chip.put(x)[1], nshape, chip.put(mean)[1],
                                 chip.put(rstd)[1], chip.put(w)[1], dxd, dwd, dbd)
        assert st == chip.ok, chip.last_error()
        tol = {} if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
        torch.testing.assert_close(chip.get(dxa, x.shape, dtype), ref[0].to(dtype), **tol)
        torch.testing.assert_close(chip.get(dwa, nshape, dtype), ref[1].to(dtype), **tol)
        torch.testing.assert_close(chip.get(dba, nshape, dtype), ref[2].to(dtype), **tol)


def test_layer_norm_backward_without_affine_gives_only_dx(chip):
    x, dy = torch.randn(5, 8), torch.randn(5, 8)
    _, mean, rstd = aten.native_layer_norm(x, [8], None, None, 1e-5)
    ref = aten.native_layer_norm_backward(dy, x, [8], mean, rstd, None, None, [True, False, False])[0]
    dxa, dxd = chip.empty(x.shape)
    nul = chip.ffi.NULL
    st = layer_norm_backward(chip, chip.put(dy)[1], chip.put(x)[1], (8,), chip.put(mean)[1], chip.put(rstd)[1],
                             nul, dxd, nul, nul)
    assert st == chip.ok, chip.last_error()
    torch.testing.assert_close(chip.get(dxa, x.shape), ref)
    dwa, dwd = chip.empty((8,))
    st = layer_norm_backward(chip, chip.put(dy)[1], chip.put(x)[1], (8,), chip.put(mean)[1], chip.put(rstd)[1],
                             nul, dxd, dwd, nul)
    assert st == err(chip, "invalid")
    assert ("need weight" if chip.kind == "x1" else "need gamma") in chip.last_error()


# ------------------------------------------------------------ data movement

@pytest.mark.parametrize("start,end,step,dtype", [(0, 10, 1, torch.int64), (3, -4, -2, torch.int32),
                                                  (-1.0, 2.0, 0.25, torch.float32), (0, 5, 1.5, torch.float32)])
def test_arange_matches_torch(chip, start, end, step, dtype):
    ref = torch.arange(start, end, step, dtype=dtype)
    o, od = chip.empty(tuple(ref.shape), dtype)
    assert fn(chip, "arange")(float(start), float(end), float(step), od) == chip.ok, chip.last_error()
    assert torch.equal(chip.get(o, tuple(ref.shape), dtype), ref)


def test_arange_refuses_a_wrong_length_or_a_zero_step(chip):
    o, od = chip.empty((4,))
    assert fn(chip, "arange")(0.0, 5.0, 1.0, od) == err(chip, "invalid")
    assert "5 elements" in chip.last_error()
    assert fn(chip, "arange")(0.0, 4.0, 0.0, od) == err(chip, "invalid")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_takes_strided_inputs(chip, dim):
    a, c = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    base = torch.randn(4, 3, 2)
    b = base.permute(2, 1, 0)            # strided: the descriptor walks base's memory
    ref = torch.cat([a, b, c], dim)
    bd = chip.desc(chip.upload(base), b.shape, b.stride(), b.dtype)
    o, od = chip.empty(tuple(ref.shape))
    assert fn(chip, "cat")([chip.put(a)[1], bd, chip.put(c)[1]], 3, dim, od) == chip.ok, chip.last_error()
    torch.testing.assert_close(chip.get(o, tuple(ref.shape)), ref)


def test_cat_skips_empty_1d_inputs_and_checks_the_rest(chip):
    a, b = torch.randn(2, 3), torch.randn(1, 3)
    empty = chip.desc(chip.malloc(4), (0,), (1,), torch.float32)
    o, od = chip.empty((3, 3))
    assert fn(chip, "cat")([chip.put(a)[1], empty, chip.put(b)[1]], 3, 0, od) == chip.ok
    torch.testing.assert_close(chip.get(o, (3, 3)), torch.cat([a, b]))
    assert fn(chip, "cat")([chip.put(a)[1], chip.put(b)[1]], 2, 1, od) == err(chip, "invalid")
    assert fn(chip, "cat")([chip.put(a)[1], chip.put(b.to(torch.int64))[1]], 2, 0, od) == err(chip, "unsupported")
    assert fn(chip, "cat")([], 0, 0, od) == err(chip, "invalid")


# ------------------------------------------------------------------ counters

def test_each_new_kernel_counts_its_launches(chip):
    chip.lib.x1_reset_counters() if chip.kind == "x1" else chip.lib.th1ResetStats()
    a = chip.put(torch.rand(8) + 0.5)[1]
    o, od = chip.empty((8,))
    b, bd = chip.empty((8,), torch.bool)
    for _ in range(2):
        assert fn(chip, "lerp")(a, a, 0.5, od) == chip.ok
    assert fn(chip, "lt")(a, a, bd) == chip.ok
    assert fn(chip, "log")(a, od) == chip.ok
    k = chip.kernel_counts()
    assert k == {"lerp": 2, "lt": 1, "log": 1}


# ------------------------------------------------- scalars, slices, logsumexp

def test_div_by_a_host_scalar_is_a_true_division(chip):
    for dtype in floats(chip):
        a = torch.randn(40).to(dtype)
        name = "x1_div_scalar" if chip.kind == "x1" else "th1DivScalar"
        o, od = chip.empty((40,), dtype)
        assert getattr(chip.lib, name)(chip.put(a)[1], 0.37, od) == chip.ok
        got = chip.get(o, (40,), dtype)
        if dtype == torch.float32:
            assert torch.equal(got, a / 0.37)        # not a * (1 / 0.37)
        else:
            close(got, (a.float() / 0.37).to(dtype), dtype)


@pytest.mark.parametrize("dims,keepdim", [([1], False), ([0, 2], True), ([], False)])
def test_logsumexp_matches_torch(chip, dims, keepdim):
    x = torch.randn(3, 4, 5) * 4
    x[0, 1] = float("-inf")                          # a row that is all -inf gives -inf
    x[1, 2, 3] = float("inf")
    name = "x1_logsumexp" if chip.kind == "x1" else "th1ReduceLogSumExp"
    for dtype in floats(chip):
        xx = x.to(dtype)
        want = torch.logsumexp(xx.float(), dims or (0, 1, 2), keepdim).to(dtype)
        o, od = chip.empty(tuple(want.shape), dtype)
        st = getattr(chip.lib, name)(chip.put(xx)[1], dims or chip.ffi.NULL, len(dims), keepdim, od)
        assert st == chip.ok, chip.last_error()
        close(chip.get(o, tuple(want.shape), dtype), want, dtype)


@pytest.mark.parametrize("dim,index", [(0, 2), (1, -1), (-1, 0)])
def test_select_backward_matches_aten(chip, dim, index):
    sizes = [3, 4, 5]
    g = torch.randn([s for i, s in enumerate(sizes) if i != dim % 3])
    ref = aten.select_backward(g, sizes, dim, index)
    name = "x1_select_backward" if chip.kind == "x1" else "th1SelectBackward"
    o, od = chip.empty(tuple(sizes))
    assert getattr(chip.lib, name)(chip.put(g)[1], dim, index, od) == chip.ok, chip.last_error()
    assert torch.equal(chip.get(o, tuple(sizes)), ref)
    assert getattr(chip.lib, name)(chip.put(g)[1], dim, 9, od) == err(chip, "invalid")
    assert "index 9 out of range" in chip.last_error()


def test_scalar_base_pow_matches_torch(chip):
    """pow(Scalar, Tensor): capturable Adam's bias corrections (beta ** step)."""
    name = "x1_scalar_pow" if chip.kind == "x1" else "th1ScalarPow"
    e = torch.tensor([0.0, 1.0, 2.5, -3.0, float("nan"), 7.0, 0.5, 100.0])
    for dtype in floats(chip):
        ee = e.to(dtype)
        for base in (0.9, 0.999, 1.0, 2.0, -2.0, 0.0):
            o, od = chip.empty((8,), dtype)
            assert getattr(chip.lib, name)(base, chip.put(ee)[1], od) == chip.ok, chip.last_error()
            close(chip.get(o, (8,), dtype), torch.pow(base, ee), dtype)
    _, od = chip.empty((8,), torch.int32)
    assert getattr(chip.lib, name)(2.0, chip.put(torch.arange(8, dtype=torch.int32))[1], od) != chip.ok
