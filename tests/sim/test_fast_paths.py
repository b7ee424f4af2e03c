"""The simulators' fast paths, checked against PyTorch on the CPU.

* convolution: an implicit GEMM over a zero-padded float32 copy of each
  image split by stride phase (every stride, padding, dilation and group
  count goes through it, on x1's NHWC and th1's NCHW descriptors);
* x1's uint8 GEMM: VNNI byte dot products in packed panels, K in groups of
  four (so K not a multiple of 4, K longer than a block, strided operands);
* softmax and its gradient: several short rows at a time (in place,
  masked rows, NaN rows), longer rows one at a time;
* GELU's erf, evaluated in float: within one ulp of erf.
"""
import zlib

import pytest
import torch
import torch.nn.functional as F

from .test_kernel_paths import k, ok, out_view, view_desc

aten = torch.ops.aten


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def ints(chip, values):
    return chip.ffi.new("int64_t[]", list(values))


# ------------------------------------------------------------ convolution

CONV_CASES = [  # N, C, H, W, O, k, stride, padding, dilation, groups
    (2, 16, 9, 11, 32, 3, 1, 1, 1, 1),
    (1, 8, 12, 12, 8, 3, 2, 1, 1, 1),
    (2, 8, 13, 10, 16, 3, 2, 2, 1, 2),
    (1, 4, 17, 17, 8, 5, 4, 2, 1, 4),
    (1, 6, 9, 8, 4, 3, (1, 2), (2, 1), (2, 3), 2),   # th1 only: dilation, mixed strides
    (3, 5, 6, 7, 7, 1, 1, 0, 1, 1),                  # 1x1, odd channels
    (1, 3, 4, 4, 2, 4, 1, 0, 1, 1),                  # the window as big as the image
]


def _conv_args(chip, case, dtype, bias):
    N, C, H, W, O, kk, s, p, d, g = case
    s2, p2, d2 = [(v, v) if isinstance(v, int) else v for v in (s, p, d)]
    torch.manual_seed(zlib.crc32(repr(case).encode()))   # the same data in every process (hash() is salted)
    x = torch.randn(N, C, H, W).to(dtype)
    w = (torch.randn(O, C // g, kk, kk) / (C // g * kk * kk) ** 0.5).to(dtype)
    b = torch.randn(O).to(dtype) if bias else None
    ref = F.conv2d(x.float(), w.float(), None if b is None else b.float(), s2, p2, d2, g)
    return x, w, b, s2, p2, d2, g, ref


def _sum_error_bound(x, w, b, s, p, d, g):
    """How far two float32 evaluations of the same convolution may lie apart.

    Each output is a sum of K = C/g*kh*kw products plus the bias; a float32 sum
    in any order is within gamma_K * sum|terms| of the exact one (Higham,
    gamma_K = K*u/(1-K*u), u = eps/2), so the kernel's and the reference's sums
    differ by at most twice that."""
    K = w[0].numel() + 1
    u = torch.finfo(torch.float32).eps / 2
    gamma = K * u / (1 - K * u)
    mag = F.conv2d(x.float().abs(), w.float().abs(), None if b is None else b.float().abs(), s, p, d, g)
    return 2 * gamma * mag


def _x1_takes(case):   # x1 takes dilation 1 and one stride for both dims (its own limits are tested elsewhere)
    return case[8] == 1 and isinstance(case[6], int)


@pytest.mark.parametrize("kind,case", [(kind, c) for c in CONV_CASES for kind in ("x1", "th1")
                                       if kind == "th1" or _x1_takes(c)],
                         ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v[:5])) + f"k{v[5]}s{v[6]}g{v[9]}")
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_implicit_gemm(request, kind, case, bias):
    chip = request.getfixturevalue(kind)
    dtype = torch.float32
    x, w, b, s, p, d, g, ref = _conv_args(chip, case, dtype, bias)
    bd = chip.put(b)[1] if b is not None else chip.ffi.NULL
    if chip.kind == "x1":
        od, get = out_view(chip, tuple(ref.permute(0, 2, 3, 1).shape))
        ok(chip, chip.lib.x1_conv2d(chip.put(x.permute(0, 2, 3, 1).contiguous())[1],
                                    chip.put(w.permute(0, 2, 3, 1).contiguous())[1], bd, ints(chip, s),
                                    ints(chip, p), ints(chip, d), g, od))
        got = get().permute(0, 3, 1, 2)
    else:
        od, get = out_view(chip, tuple(ref.shape))
        ok(chip, chip.lib.th1ConvolutionForward(chip.put(x)[1], chip.put(w)[1], bd, ints(chip, s), ints(chip, p),
                                                ints(chip, d), g, od))
        got = get()
    bound = _sum_error_bound(x, w, b, s, p, d, g)
    assert ((got - ref).abs() <= bound).all(), ((got - ref).abs() - bound).max()


def test_conv2d_half_precision_rounds_once(chip):
    """float16 (x1) / bfloat16 (th1): computed in float32, rounded once."""
    low = torch.float16 if chip.kind == "x1" else torch.bfloat16
    x, w, b, s, p, d, g, ref = _conv_args(chip, (2, 16, 10, 9, 24, 3, 1, 1, 1, 1), low, True)
    if chip.kind == "x1":
        od, get = out_view(chip, tuple(ref.permute(0, 2, 3, 1).shape), low)
        ok(chip, chip.lib.x1_conv2d(chip.put(x.permute(0, 2, 3, 1).contiguous())[1],
                                    chip.put(w.permute(0, 2, 3, 1).contiguous())[1], chip.put(b)[1],
                                    ints(chip, s), ints(chip, p), ints(chip, d), g, od))
        got = get().permute(0, 3, 1, 2)
    else:
        od, get = out_view(chip, tuple(ref.shape), low)
        ok(chip, chip.lib.th1ConvolutionForward(chip.put(x)[1], chip.put(w)[1], chip.put(b)[1], ints(chip, s),
                                                ints(chip, p), ints(chip, d), g, od))
        got = get()
    # got = round_low(kernel's float32 sum): within half an ulp of the low dtype of
    # that sum, which lies within the float32 summation bound of the reference.
    # Rounding twice (float32, then low) would also pass this; computing in the low
    # dtype (K roundings of eps_low) would not.
    half_ulp = torch.finfo(low).eps / 2 * got.float().abs().clamp_min(torch.finfo(low).tiny)
    bound = half_ulp + _sum_error_bound(x, w, b, s, p, d, g)
    assert ((got.float() - ref).abs() <= bound).all(), ((got.float() - ref).abs() - bound).max()


@pytest.mark.parametrize("N,C,H,W,O,pad,groups", [(2, 64, 7, 9, 32, 1, 1), (1, 48, 6, 6, 64, 0, 1),
                                                   (1, 96, 5, 8, 16, 2, 2), (3, 64, 2, 3, 8, 1, 1),
                                                   (2, 16, 6, 7, 32, 1, 1), (1, 32, 5, 4, 8, 2, 2),
                                                   (1, 3, 4, 5, 5, 0, 1)])
def test_conv2d_winograd_for_half_precision_3x3(chip, N, C, H, W, O, pad, groups):
    """3x3, stride 1, float16 (x1) / bfloat16 (th1): Winograd in float32, then
    the one rounding: F(2x2, 3x3) with 48+ channels per group, F(2, 3) along
    the rows with fewer; odd output sizes leave partial blocks, and the output
    is written through strides."""
    low = torch.float16 if chip.kind == "x1" else torch.bfloat16
    torch.manual_seed(C + O)
    x = torch.randn(N, C, H, W).to(low)
    w = (torch.randn(O, C // groups, 3, 3) / (C // groups * 9) ** 0.5).to(low)
    b = torch.randn(O).to(low)
    ref = F.conv2d(x.float(), w.float(), b.float(), 1, pad, 1, groups)
    one, p2 = ints(chip, (1, 1)), ints(chip, (pad, pad))
    if chip.kind == "x1":
        od, get = out_view(chip, tuple(ref.permute(0, 2, 3, 1).shape), low, "strided")
        ok(chip, chip.lib.x1_conv2d(chip.put(x.permute(0, 2, 3, 1).contiguous())[1],
                                    chip.put(w.permute(0, 2, 3, 1).contiguous())[1], chip.put(b)[1], one, p2, one,
                                    groups, od))
        got = get().permute(0, 3, 1, 2).float()
    else:
        od, get = out_view(chip, tuple(ref.shape), low, "strided")
        ok(chip, chip.lib.th1ConvolutionForward(chip.put(x)[1], chip.put(w)[1], chip.put(b)[1], one, p2, one, groups,
                                                od))
        got = get().float()
    # one rounding of the low dtype (half its ulp, up to an ulp across a tie), on top of the
    # float32 transforms' error, which is bounded by float32's epsilon times the sum of |terms|
    scale = F.conv2d(x.float().abs(), w.float().abs(), b.float().abs(), 1, pad, 1, groups)
    allowed = torch.finfo(low).eps * ref.abs() + 64 * torch.finfo(torch.float32).eps * scale
    assert ((got - ref).abs() <= allowed).all(), ((got - ref).abs() - allowed).max()


def test_conv2d_input_in_its_own_output(x1):
    """An output written over its own input reads the input first."""
    x = torch.randn(1, 4, 6, 6)
    w = torch.randn(4, 4, 3, 3)
    ref = F.conv2d(x, w, None, 1, 1)
    addr, xd = x1.put(x.permute(0, 2, 3, 1).contiguous())
    ok(x1, x1.lib.x1_conv2d(xd, x1.put(w.permute(0, 2, 3, 1).contiguous())[1], x1.ffi.NULL, ints(x1, (1, 1)),
                            ints(x1, (1, 1)), ints(x1, (1, 1)), 1, xd))
    torch.testing.assert_close(x1.get(addr, (1, 6, 6, 4)).permute(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ uint8 GEMM

@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (15, 7, 33), (29, 1030, 17), (64, 2100, 40), (3, 4, 70)])
@pytest.mark.parametrize("layout", ["dense", "transposed"])
def test_gemm_u8_shapes_and_layouts(x1, M, K, N, layout):
    torch.manual_seed(M * K + N)
    a = torch.randint(0, 256, (M, K), dtype=torch.uint8)
    b = torch.randint(0, 256, (K, N), dtype=torch.uint8)
    b[0, :] = 0      # extremes: (0 - 128) * (255 - 128) and friends
    a[0, :] = 255
    want = (a.long() - 128) @ (b.long() - 128)
    if layout == "transposed":   # A column-major, B column-major
        ad = view_desc(x1, a.t().contiguous().t())[1]
        bd = view_desc(x1, b.t().contiguous().t())[1]
    else:
        ad, bd = x1.put(a)[1], x1.put(b)[1]
    od, get = out_view(x1, (M, N), torch.int32, "strided")
    ok(x1, x1.lib.x1_gemm_u8(ad, bd, od))
    assert torch.equal(get().long(), want)


def test_gemm_u8_extreme_values_do_not_saturate(x1):
    """Every product at its largest: 4 byte products per int32 lane, no saturation."""
    K = 4096
    a = torch.full((3, K), 0, dtype=torch.uint8)
    b = torch.full((K, 5), 0, dtype=torch.uint8)
    od, get = out_view(x1, (3, 5), torch.int32)
    ok(x1, x1.lib.x1_gemm_u8(x1.put(a)[1], x1.put(b)[1], od))
    assert torch.equal(get(), torch.full((3, 5), 128 * 128 * K, dtype=torch.int32))


# ---------------------------------------------------------------- softmax

def _softmax(chip, xd, dim, od, flags):
    if chip.kind == "th1":
        return chip.lib.th1Softmax(xd, dim, flags, od)
    if flags == 2:
        return chip.lib.x1_log_softmax(xd, dim, od)
    return (chip.lib.custom_safe_softmax_x1 if flags == 1 else chip.lib.custom_softmax_x1)(xd, dim, od)


@pytest.mark.parametrize("D", [16, 32, 48, 256, 24, 264])
@pytest.mark.parametrize("flags", [0, 1, 2])   # plain, safe, log
def test_softmax_rows_at_a_time(chip, D, flags):
    """Row counts that are and are not multiples of the rows done together,
    with a fully masked row, a NaN row and huge values."""
    torch.manual_seed(D)
    x = torch.randn(7, 3, D) * 4
    x[1, 2] = float("-inf")
    x[4, 0, 3] = float("nan")
    x[5, 1, :5] = 1e30
    x[6, 0, ::3] = float("-inf")
    want = {0: lambda t: torch.softmax(t, -1), 1: lambda t: aten._safe_softmax(t, -1),
            2: lambda t: torch.log_softmax(t, -1)}[flags](x)
    for in_place in (False, True):
        addr, xd = chip.put(x)
        od, get = (xd, lambda: chip.get(addr, x.shape)) if in_place else out_view(chip, x.shape)
        ok(chip, _softmax(chip, xd, -1, od, flags))
        torch.testing.assert_close(get(), want, rtol=1.3e-6, atol=1e-6, equal_nan=True)


def test_softmax_rows_strided_and_overlapping_output(chip):
    """Rows a stride apart in the input, the output transposed (not rows)."""
    torch.manual_seed(1)
    base = torch.randn(12, 64)
    xv = base[::3, 16:48]          # 4 rows of 32, row stride 192
    xd = view_desc(chip, xv)[1]
    od, get = out_view(chip, (4, 32), layout="transposed")
    ok(chip, _softmax(chip, xd, -1, od, 0))
    torch.testing.assert_close(get(), torch.softmax(xv, -1), rtol=1.3e-6, atol=1e-7)


@pytest.mark.parametrize("D", [32, 40])
def test_softmax_backward_rows_at_a_time(chip, D):
    torch.manual_seed(D)
    y = torch.softmax(torch.randn(9, D), -1)
    g = torch.randn(9, D)
    want = aten._softmax_backward_data(g, y, -1, torch.float32)
    fn = chip.lib.x1_softmax_backward if chip.kind == "x1" else (
        lambda a, b, d, o: chip.lib.th1SoftmaxBackward(a, b, d, 0, o))
    od, get = out_view(chip, y.shape)
    ok(chip, fn(chip.put(g)[1], chip.put(y)[1], -1, od))
    torch.testing.assert_close(get(), want, rtol=1e-5, atol=1e-7)
    gaddr, gd = chip.put(g)   # into grad's own memory
    ok(chip, fn(gd, chip.put(y)[1], -1, gd))
    torch.testing.assert_close(chip.get(gaddr, y.shape), want, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------- GELU

def test_gelu_erf_within_an_ulp(chip):
    """GELU is 0.5 x (1 + erf(x / sqrt 2)) in float, with erf within one ulp of
    the correctly rounded value: against the same formula with that erf, the
    result differs by at most what one ulp of erf moves it, plus a rounding."""
    x = torch.cat([torch.linspace(-6, 6, 20001), torch.tensor([0.0, -0.0, 1e-30, -1e-20, 5.66, -5.66, 30.0,
                                                               float("inf"), float("-inf"), float("nan")])])
    od, get = out_view(chip, x.shape)
    gelu = chip.lib.x1_gelu if chip.kind == "x1" else chip.lib.th1Gelu
    ok(chip, gelu(chip.put(x)[1], chip.ffi.new("char[]", b"none") if chip.kind == "x1" else 0, od))
    got = get()
    t = x * 0.70710678118654752
    e = torch.erf(t.double()).float()                  # correctly rounded erf of the float argument
    ref = 0.5 * x * (1.0 + e)
    assert torch.equal(got.isnan(), ref.isnan())
    fin = ref.isfinite()
    assert torch.equal(got[ref.isinf()], ref[ref.isinf()])
    eps, tiny = torch.finfo(torch.float32).eps, torch.finfo(torch.float32).tiny
    allowed = 0.5 * x.abs() * eps * e.abs().clamp_min(tiny) + 2 * eps * ref.abs().clamp_min(tiny)
    assert ((got[fin] - ref[fin]).abs() <= allowed[fin]).all()
    finite = x.isfinite()   # (PyTorch's vectorized GELU gives NaN for both infinities)
    torch.testing.assert_close(got[finite], F.gelu(x)[finite])
