"""Integer inference on a chip whose int8 GEMM wants uint8 (x1: x1_gemm_u8,
zero point 128, listed as aten::_int_mm with dtype_quirks).  int8 mm /
addmm / bmm / linear / matmul and quantize_dynamic's Linear run through it,
with results equal to the CPU's (flbridge/routing/integer.py, qlinear.py)."""
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import flbridge

aten = torch.ops.aten


def _i8(*shape, gen):
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=gen)


def _routes(dev):
    return {(r["op"], r["route"]) for r in flbridge.stats(dev)["routes"]}


def _reset(dev):
    flbridge.reset_stats(dev)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20)


@pytest.mark.parametrize("part", [0, 1])
def test_int8_matrix_products_equal_the_cpu_and_run_on_the_uint8_gemm(x1, gen, part):
    a, b, c = _i8(20, 33, gen=gen), _i8(33, 7, gen=gen), _i8(7, gen=gen)
    A, B3, C3 = _i8(2, 5, 20, 33, gen=gen), _i8(3, 20, 33, gen=gen), _i8(3, 33, 6, gen=gen)
    _reset(x1)
    cases = {
        "mm": lambda d: torch.mm(a.to(d), b.to(d)),
        "addmm": lambda d: torch.addmm(c.to(d), a.to(d), b.to(d)),
        "addmm beta alpha": lambda d: torch.addmm(c.to(d), a.to(d), b.to(d), beta=3, alpha=-5),
        "addmm beta 0": lambda d: torch.addmm(c.to(d), a.to(d), b.to(d), beta=0, alpha=-128),
        "addmm float beta alpha": lambda d: torch.addmm(c.to(d), a.to(d), b.to(d), beta=-2.5, alpha=0.5),
        "linear": lambda d: nn.functional.linear(a.to(d), b.t().to(d), c.to(d)),
        "linear no bias": lambda d: nn.functional.linear(a.to(d), b.t().to(d)),
        "matmul 4-D @ 2-D": lambda d: torch.matmul(A.to(d), b.to(d)),
        "bmm": lambda d: torch.bmm(B3.to(d), C3.to(d)),
        "_int_mm": lambda d: torch._int_mm(a.to(d), b.to(d)),
        "matmul matrix @ vector": lambda d: torch.matmul(a.to(d), b[:, 0].contiguous().to(d)),
        "dot": lambda d: torch.dot(a[0].to(d), b[:, 1].contiguous().to(d)),
    }
    names = sorted(cases)[part::2]
    for name in names:
        f = cases[name]
        want, got = f("cpu"), f(x1)
        assert got.dtype == want.dtype, name
        assert torch.equal(got.cpu(), want), name
    routes = _routes(x1)
    assert ("aten::_int_mm.default", "native") in routes
    assert not [r for r in routes if r[1] == "cpu"], routes
    for op, cases_of_op in (("mm", ("mm", "matmul 4-D", "linear no")), ("addmm", ("addmm", "linear")),
                            ("bmm", ("bmm",)), ("mv", ("matmul matrix",)), ("dot", ("dot",))):
        if any(n.startswith(c) and not (op == "addmm" and n == "linear no bias") for n in names for c in cases_of_op):
            assert (f"aten::{op}.default", "decomposed") in routes, op


def test_int8_products_at_the_extremes(x1):
    # all -128: each product is 2**14; K = 131071 is the largest K whose sum
    # fits int32 (131071 * 2**14 = 2**31 - 2**14), and int8 mm wraps it mod 256
    K = 131071
    a = torch.full((1, K), -128, dtype=torch.int8)
    b = torch.full((K, 2), -128, dtype=torch.int8)
    b[0, 1] = 127
    assert torch.equal(torch._int_mm(a.to(x1), b.to(x1)).cpu(), torch._int_mm(a, b))
    assert torch._int_mm(a, b)[0, 0].item() == 2 ** 31 - 2 ** 14
    assert torch.equal(torch.mm(a.to(x1), b.to(x1)).cpu(), torch.mm(a, b))
    # K = 1 and an empty K
    one = torch.tensor([[-128], [127]], dtype=torch.int8)
    assert torch.equal(torch.mm(one.to(x1), one.t().to(x1)).cpu(), torch.mm(one, one.t()))
    e1, e2 = torch.zeros(3, 0, dtype=torch.int8), torch.zeros(0, 4, dtype=torch.int8)
    assert torch.equal(torch.mm(e1.to(x1), e2.to(x1)).cpu(), torch.mm(e1, e2))


def test_int8_mm_on_a_chip_without_an_int8_gemm_takes_the_cpu(th1, gen):
    a, b = _i8(6, 9, gen=gen), _i8(9, 4, gen=gen)
    _reset(th1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
        assert torch.equal(torch.mm(a.to(th1), b.to(th1)).cpu(), torch.mm(a, b))
    assert ("aten::mm.default", "cpu") in _routes(th1)


def test_int8_addmm_refuses_alpha_outside_int8_as_pytorch_does(x1, gen):
    a, b, c = _i8(4, 3, gen=gen), _i8(3, 2, gen=gen), _i8(2, gen=gen)
    # first a call the route decomposes: the decision holds for this geometry and scalar type
    assert torch.equal(torch.addmm(c.to(x1), a.to(x1), b.to(x1), alpha=2).cpu(), torch.addmm(c, a, b, alpha=2))
    for kw in ({"alpha": 128}, {"beta": -129}, {"alpha": 127.5}):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.addmm(c, a, b, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flbridge.FallbackWarning)
            with pytest.raises(RuntimeError, match="without overflow"):
                torch.addmm(c.to(x1), a.to(x1), b.to(x1), **kw)


# ------------------------------------------------ quantize_dynamic models

def _qmodel(qconfig_spec=None):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32, bias=False), nn.ReLU(), nn.Linear(32, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(m, qconfig_spec or {nn.Linear}, dtype=torch.qint8)


def _gap(x, packed, reduce_range, y_cpu):
    """How far the chip's linear_dynamic may be from the CPU's, derived from
    the two places where the arithmetic differs (and nothing else):

    1. the CPU quantizes x as nearbyint(fma(x, 1/s, z)), one rounding; the
       chip rounds x * (1/s) first (it has no fused multiply-add kernel).
       Only where x * (1/s) lies within 2**-15 of a half-integer (both
       roundings are below 2**-17 there, |values| < 256) can x_q land one
       step away, which moves output j by s * s_w[j] * |W_q[j, k]|;
    2. with a bias the CPU computes fma(raw, s * s_w, bias); the chip
       multiplies, then adds (addcmul): with p = raw * s * s_w and
       u = 2**-24, |fl(fl(p) + b) - fl(p + b)| <= u|p| + 2u|p + b|.

    Returns (number of elements at a tie, bound per output element)."""
    w, bias = torch.ops.quantized.linear_unpack(packed)
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    lo, hi = min(x2.min().item(), 0.0), max(x2.max().item(), 0.0)
    s, _ = torch._choose_qparams_per_tensor(torch.tensor([lo, hi]), reduce_range)
    s32 = torch.tensor(s, dtype=torch.float32)
    p = x2 * (1 / s32)
    near = ((p - torch.round(p)).abs() - 0.5).abs() <= 2.0 ** -15
    s_w = (w.q_per_channel_scales() if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric)
           else torch.tensor(w.q_scale())).to(torch.float32)
    tie = (near.double() @ w.int_repr().double().abs().t()) * (s32.double() * s_w.double())
    bound = tie.reshape(y_cpu.shape) * (1 + 2.0 ** -20)
    if tie.any():
        bound = bound + 2.0 ** -23 * y_cpu.abs()        # the shifted products' own rounding
    if bias is not None:
        u = 2.0 ** -24
        bound = bound + u * ((y_cpu - bias).abs() + 2 * y_cpu.abs()) * (1 + 1e-6) + 1e-38
    return int(near.sum()), bound


def _check(y, y_cpu, x, packed, reduce_range):
    ties, bound = _gap(x, packed, reduce_range, y_cpu)
    assert y.shape == y_cpu.shape and y.dtype == y_cpu.dtype
    if ties == 0 and torch.ops.quantized.linear_unpack(packed)[1] is None:
        assert torch.equal(y.cpu(), y_cpu)                # the same arithmetic: bit for bit
    else:
        err = (y.cpu().double() - y_cpu.double()).abs()
        assert (err <= bound).all(), (err - bound).max()


def _packed(layer):
    return layer._packed_params._packed_params


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_model_runs_its_linears_on_the_uint8_gemm(x1, per_channel):
    spec = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig} if per_channel else None
    q = _qmodel(spec)
    ref = _qmodel(spec)                        # the same weights, kept on the CPU
    seen = []
    for m in q:
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            m.register_forward_hook(lambda m, inp, out: seen.append((m, inp[0].cpu(), out)))
    q.to(x1)                                   # qint8 dynamic Linear modules move
    _reset(x1)
    g = torch.Generator().manual_seed(1)
    for scale in (0.05, 1.0, 30.0):
        seen.clear()
        y = q(torch.randn(2, 7, 64, generator=g).to(x1) * scale)
        assert y.device == x1 and len(seen) == 3
        for (m, xin, out), m_cpu in zip(seen, [ref[0], ref[2], ref[4]]):
            # each Linear against the CPU's on the same input (the one the chip computed)
            _check(out, m_cpu(xin), xin, _packed(m), reduce_range=True)
    routes = _routes(x1)
    assert ("quantized::linear_dynamic.default", "decomposed") in routes
    assert ("aten::_int_mm.default", "native") in routes
    assert not [r for r in routes if r[1] == "cpu"], routes


def test_linear_dynamic_without_reduce_range_and_its_zero_point_correction(x1):
    """reduce_range=False quantizes x to [0, 255]: x_q - z spans more than
    int8, so the chip gets x_q - 128 and adds (128 - z) * colsum(W_q)."""
    q = _qmodel()
    g = torch.Generator().manual_seed(2)
    for packed in (_packed(q[2]), _packed(q[4])):                  # without and with a bias
        K = 48 if packed is _packed(q[2]) else 32
        for x in (torch.randn(9, K, generator=g), torch.rand(9, K, generator=g) + 0.5,   # z = 0 (all positive)
                  -torch.rand(9, K, generator=g)):                                     # z = 255
            for rr in (False, True):
                want = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=rr)
                _check(torch.ops.quantized.linear_dynamic(x.to(x1), packed, reduce_range=rr), want, x, packed, rr)


def test_rounding_ties_land_at_most_one_quantization_step_away(x1):
    """Inputs built so that x * (1/s) is exactly k + 1/2: the CPU's fused
    multiply-add rounds some of them up and some down (the product's
    rounding error decides), the chip rounds the product half to even.  The
    outputs differ, by no more than the derived bound."""
    q = _qmodel()
    packed = _packed(q[2])                                        # 48 -> 32, no bias
    s, _ = torch._choose_qparams_per_tensor(torch.tensor([-1.0, 3.0]), True)
    s32 = torch.tensor(s, dtype=torch.float32)
    inv = 1 / s32
    ties = [v for v in (torch.tensor(k + 0.5) * s32 for k in range(-20, 80)) if (v * inv).item() % 1 == 0.5]
    x = torch.tensor([[-1.0, 3.0] + [t.item() for t in ties[j:j + 46]] for j in (0, 46)])
    assert x.shape == (2, 48)
    want = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=True)
    got = torch.ops.quantized.linear_dynamic(x.to(x1), packed, reduce_range=True)
    assert not torch.equal(got.cpu(), want)                      # the arithmetic differs here, visibly
    ties_found, bound = _gap(x, packed, True, want)
    assert ties_found >= 90
    assert ((got.cpu().double() - want.double()).abs() <= bound).all()


def test_other_quantized_models_still_refuse_to_move(x1):
    m = nn.Sequential(nn.Linear(4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q16 = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.float16)
    with pytest.raises(flbridge.errors.QuantizedNotSupported, match="'0' is quantized"):
        q16.to(x1)


def test_coverage_predicts_a_quantize_dynamic_model_native_without_touching_its_weights(x1):
    from flbridge.routing import qlinear
    q = _qmodel({nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig})
    uploaded = len(qlinear._WEIGHTS)
    report = flbridge.coverage(q, (torch.randn(3, 64),), device=x1, backward=False)
    routes = {(r.op, r.route) for r in report.chips[0].rows}
    assert ("quantized::linear_dynamic.default", "decomposed") in routes
    assert ("aten::_int_mm.default", "native") in routes
    assert not [r for r in routes if r[1] == "cpu"], routes
    assert len(qlinear._WEIGHTS) == uploaded             # fake tensors: nothing uploaded or kept


def test_a_wrong_zero_point_quirk_is_named_with_file_line_and_field(tmp_path):
    from flbridge.binding import load_runtime
    from flbridge.specs import load_spec
    root = Path(__file__).resolve().parents[1]
    text = (root / "device_specs" / "x1.yaml").read_text().replace('"../native_sim', f'"{root}/native_sim')
    p = tmp_path / "chip.yaml"

    def line_of(t, needle):
        return t[:t.index(needle)].count("\n") + 1

    # a quirk on an argument the op does not have, and on one that is not a tensor
    quirk = "      mat2: {pass_as: uint8, convert: x1_s8_to_u8}\n"
    lerp = "  - {name: [aten::lerp.Scalar, aten::lerp_.Scalar], impl: x1_lerp, dtype_support: [float32, float16], "
    assert quirk in text and lerp in text
    bad = text.replace(quirk, "      other: {pass_as: uint8, convert: x1_s8_to_u8}\n").replace(
        lerp, lerp + "dtype_quirks: {weight: {pass_as: uint8, convert: x1_s8_to_u8}}, ")
    p.write_text(bad)
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert f"chip.yaml:{line_of(bad, '      other: {pass_as')}: " in msg and "dtype_quirks.other" in msg
    assert f"chip.yaml:{line_of(bad, lerp)}: " in msg and \
        "dtype_quirks.weight: weight is a number argument of aten::lerp.Scalar; a dtype quirk converts a tensor" in msg
    # a convert function the library does not export
    p.write_text(text.replace(quirk, "      mat2: {pass_as: uint8, convert: x1_s8_to_u9}\n"))
    with pytest.raises(flbridge.FlbridgeError) as ei:
        load_runtime(load_spec(p))
    msg = str(ei.value)
    # (the entry's line: the library is checked after parsing; the field path says where in it)
    assert f"chip.yaml:{line_of(text, '  - name: aten::_int_mm')}: " in msg and "dtype_quirks.mat2.convert" in msg \
        and "did you mean x1_s8_to_u8" in msg


def test_a_moved_model_uploads_its_weights_once_and_decides_its_route_once(x1):
    """The dispatcher hands each call a new Python wrapper of the packed
    weight: the route's cache and the weight cache key on the C++ object."""
    import gc

    from flbridge.routing import qlinear
    q = _qmodel()
    q.to(x1)
    mine = {hash(_packed(m)) for m in q if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)}
    x = torch.randn(5, 64).to(x1)
    routes = flbridge.chips()[x1.index].routes
    op = torch.ops.quantized.linear_dynamic.default
    before = len(routes[op].decomp_ok_cache) if op in routes else 0
    q(x)
    _reset(x1)
    q(x)
    s = flbridge.stats(x1)
    assert s["h2d_bytes"] + s["mapped_bytes"] < 512     # a few constants; the weights (3 KiB and more each) stay
    route = routes[op]
    assert len(route.decomp_ok_cache) - before == 3      # one decision per layer, not one per call
    assert {k for k, _ in qlinear._WEIGHTS} >= mine
    del q, route
    gc.collect()
    assert not {k for k, _ in qlinear._WEIGHTS} & mine   # released with the model


def test_linear_dynamic_with_inf_or_nan_input_gives_the_cpus_answer(x1):
    """No quantization step is defined for them; the chip's path hands the
    call to the CPU kernel, whose (meaningless) answer comes back as it is."""
    q = _qmodel()
    packed = _packed(q[0])
    for bad in (float("inf"), float("nan")):
        x = torch.randn(3, 64, generator=torch.Generator().manual_seed(4))
        x[1, 5] = bad
        want = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=True)
        got = torch.ops.quantized.linear_dynamic(x.to(x1), packed, reduce_range=True)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
