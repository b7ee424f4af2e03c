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
    for op in ("mm", "addmm", "bmm"):
        if any(n.startswith(op) or op == "mm" and n.startswith(("matmul", "linear no")) for n in names):
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


def _fma_bound(y_cpu, bias):
    """The CPU computes fma(raw, s*s_w, bias) with one rounding; the chip
    computes raw * (s*s_w) and adds the bias (addcmul, two roundings).  With
    p = raw * s*s_w and u = 2**-24: |fl(fl(p) + b) - fl(p + b)| <= u|p| + 2u|p + b| (+ u**2 terms)."""
    u = 2.0 ** -24
    p = (y_cpu - bias).abs()
    return (u * (p + 2 * y_cpu.abs())) * (1 + 1e-6) + 1e-38


def _each_linear(q, x):
    """Each Linear's input and CPU output, layer by layer."""
    outs = []
    for layer in q:
        y = layer(x)
        if isinstance(layer, torch.ao.nn.quantized.dynamic.Linear):
            outs.append((layer, x, y))
        x = y
    return outs


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_model_runs_its_linears_on_the_uint8_gemm(x1, per_channel):
    spec = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig} if per_channel else None
    q = _qmodel(spec)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 7, 64, generator=g) * s for s in (0.05, 1.0, 30.0)]
    want = [(x, _each_linear(q, x)) for x in xs]
    q.to(x1)                                   # qint8 dynamic Linear modules move
    _reset(x1)
    for x, layers in want:
        for layer, xin, y_cpu in layers:
            y = layer(xin.to(x1))
            assert y.device == x1 and y.shape == y_cpu.shape
            _, bias = torch.ops.quantized.linear_unpack(layer._packed_params._packed_params)
            if bias is None:
                assert torch.equal(y.cpu(), y_cpu)            # the same arithmetic: bit for bit
            else:
                err = (y.cpu() - y_cpu).abs()
                assert (err <= _fma_bound(y_cpu, bias)).all(), err.max()
    # the whole model (ReLU between, on the chip)
    x = xs[1]
    q_cpu = _qmodel(spec)
    err = (q(x.to(x1)).cpu() - q_cpu(x)).abs().max().item()
    assert err < 1e-5       # fma vs mul+add in the first layer may flip one activation rounding at most rarely
    routes = _routes(x1)
    assert ("quantized::linear_dynamic.default", "decomposed") in routes
    assert ("aten::_int_mm.default", "native") in routes
    assert not [r for r in routes if r[1] == "cpu"], routes


def test_linear_dynamic_without_reduce_range_and_its_zero_point_correction(x1):
    """reduce_range=False quantizes x to [0, 255]: x_q - z spans more than
    int8, so the chip gets x_q - 128 and adds (128 - z) * colsum(W_q)."""
    q = _qmodel()
    packed = q[2]._packed_params._packed_params            # no bias: bit-exact
    g = torch.Generator().manual_seed(2)
    for x in (torch.randn(9, 48, generator=g), torch.rand(9, 48, generator=g) + 0.5,   # z = 0 (all positive)
              -torch.rand(9, 48, generator=g)):                                       # z = 255
        for rr in (False, True):
            want = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=rr)
            got = torch.ops.quantized.linear_dynamic(x.to(x1), packed, reduce_range=rr)
            assert torch.equal(got.cpu(), want)


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
