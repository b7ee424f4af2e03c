"""The simulators' blocked GEMM and convolution (native_sim/common/simblas.c)
against torch, through the chips' matrix and convolution kernels.

The shapes are picked to reach every path of the blocked code: edge tiles in
M and N, several K blocks (K > 384), operands read in place or packed
(contiguous, transposed, sliced, broadcast), outputs written in place or
through a workspace (narrow dtypes, strided, overlapping an input), and the
convolution's im2col blocks starting in the middle of a kernel cell.
"""
import random

import pytest
import torch
import torch.nn.functional as F

# what each dtype's result may differ from a float64 reference rounded once:
# float32 accumulation error, or one unit in the last place of the output
RTOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def close(got, ref64, dtype, K):
    atol = RTOL[dtype] * max(1.0, K ** 0.5) * 0.1
    torch.testing.assert_close(got.double(), ref64.to(dtype).double(), rtol=RTOL[dtype], atol=atol)


def operand(chip, t, layout):
    """Uploads t and describes it as `layout`: 'c' contiguous, 't' a transposed
    view of the transpose, 's' a slice of a wider buffer, 'b' a broadcast row."""
    rows, cols = t.shape
    if layout == "c":
        return chip.put(t)[1], t
    if layout == "t":
        return chip.desc(chip.upload(t.t().contiguous()), (rows, cols), (1, rows), t.dtype), t
    if layout == "s":
        wide = torch.randn(rows, cols + 3).to(t.dtype)
        return chip.desc(chip.upload(wide), (rows, cols), (cols + 3, 1), t.dtype, offset_elems=2), wide[:, 2:cols + 2]
    if layout == "b":
        row = t[:1]
        return chip.desc(chip.upload(row.contiguous()), (rows, cols), (0, 1), t.dtype), row.expand(rows, cols)
    raise ValueError(layout)


def mm(chip, M, K, N, dtype=torch.float32, la="c", lb="c", out_layout="c"):
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    ad, a = operand(chip, a, la)
    bd, b = operand(chip, b, lb)
    if out_layout == "c":
        o, od = chip.empty((M, N), dtype)
        get = lambda: chip.get(o, (M, N), dtype)  # noqa: E731
    else:  # transposed output: columns one row apart
        o, od = chip.empty((M, N), dtype, strides=(1, M))
        get = lambda: chip.get(o, (M, N), dtype, strides=(1, M))  # noqa: E731
    st = chip.lib.x1_mm(ad, bd, od) if chip.kind == "x1" else chip.lib.th1Matmul(ad, bd, od)
    assert st == chip.ok, chip.last_error()
    close(get(), a.double() @ b.double(), dtype, K)


# ------------------------------------------------------------------- GEMM

SHAPES = [(1, 1, 1), (1, 70, 1), (70, 1, 70), (2, 3, 4), (13, 17, 33), (14, 32, 32), (15, 33, 31),
          (28, 64, 65), (29, 7, 64), (31, 300, 47), (3, 200, 5), (41, 385, 96), (20, 30, 300),
          (300, 20, 40), (9, 800, 40)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_mm_shapes(x1, dtype):
    for M, K, N in SHAPES:
        mm(x1, M, K, N, dtype)


@pytest.mark.parametrize("la,lb", [("t", "c"), ("c", "t"), ("t", "t"), ("s", "s"), ("b", "c"), ("c", "b")])
def test_mm_strided_operands(x1, la, lb):
    for M, K, N in [(13, 17, 33), (29, 400, 70), (5, 9, 300)]:
        mm(x1, M, K, N, torch.float32, la, lb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_mm_strided_output(x1, dtype):
    for M, K, N in [(13, 17, 33), (29, 400, 70)]:
        mm(x1, M, K, N, dtype, "t", "s", out_layout="t")


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, -1.5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_addmm_bias_alpha_beta(x1, beta, alpha, dtype):
    M, K, N = 19, 390, 37
    m1, m2 = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    full, row = torch.randn(M, N).to(dtype), torch.randn(N).to(dtype)
    if beta == 0.0:  # beta = 0: the bias is not read at all, NaN included
        full, row = torch.full((M, N), float("nan")).to(dtype), torch.full((N,), float("nan")).to(dtype)
    for bias, bd in [(full, x1.put(full)[1]), (row.expand(M, N), x1.expanded(x1.upload(row), (N,), (M, N), dtype))]:
        o, od = x1.empty((M, N), dtype)
        st = x1.lib.x1_addmm(bd, x1.put(m1)[1], x1.put(m2)[1], beta, alpha, od)
        assert st == x1.ok, x1.last_error()
        ref = alpha * (m1.double() @ m2.double())
        if beta:
            ref = ref + beta * bias.double()
        close(x1.get(o, (M, N), dtype), ref, dtype, K)


def test_addmm_in_place_and_overlapping_bias(x1):
    M, K, N = 21, 40, 33
    m1, m2, bias = torch.randn(M, K), torch.randn(K, N), torch.randn(M + 1, N)
    ref = m1.double() @ m2.double()
    # out is the bias itself (addmm_): every bias element read before it is overwritten
    b = x1.upload(bias[:M].contiguous())
    d = x1.desc(b, (M, N))
    assert x1.lib.x1_addmm(d, x1.put(m1)[1], x1.put(m2)[1], 1.0, 1.0, d) == x1.ok
    close(x1.get(b, (M, N)), ref + bias[:M].double(), torch.float32, K)
    # the output one row below the bias in the same buffer: writing output row
    # i overwrites bias row i + 1
    b = x1.upload(bias)
    st = x1.lib.x1_addmm(x1.desc(b, (M, N)), x1.put(m1)[1], x1.put(m2)[1], 1.0, 1.0,
                         x1.desc(b, (M, N), offset_elems=N))
    assert st == x1.ok, x1.last_error()
    close(x1.get(b, (M + 1, N))[1:], ref + bias[:M].double(), torch.float32, K)


def test_mm_output_overlapping_an_input(x1):
    n = 37
    a, b = torch.randn(n, n), torch.randn(n, n)
    ad, bd = x1.put(a), x1.put(b)
    assert x1.lib.x1_mm(ad[1], bd[1], ad[1]) == x1.ok  # a = a @ b
    close(x1.get(ad[0], (n, n)), a.double() @ b.double(), torch.float32, n)
    assert x1.lib.x1_mm(ad[1], x1.desc(bd[0], (n, n), (1, n)), bd[1]) == x1.ok  # b = a' @ b.T
    close(x1.get(bd[0], (n, n)), (a.double() @ b.double()) @ b.double().t(), torch.float32, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_linear_few_rows_against_transposed_weight(x1, dtype):
    # x @ W.T + b for batch sizes where the product runs transposed (few rows)
    # or as dot products (one row), and where it does not
    K, N = 70, 130
    W, bias = torch.randn(N, K).to(dtype), torch.randn(N).to(dtype)
    wd = x1.desc(x1.upload(W), (K, N), (1, K), dtype)
    for M in (1, 2, 5, 31, 33):
        x = torch.randn(M, K).to(dtype)
        o, od = x1.empty((M, N), dtype)
        bd = x1.expanded(x1.upload(bias), (N,), (M, N), dtype)
        assert x1.lib.x1_addmm(bd, x1.put(x)[1], wd, 0.5, 2.0, od) == x1.ok, x1.last_error()
        close(x1.get(o, (M, N), dtype), 2.0 * (x.double() @ W.double().t()) + 0.5 * bias.double(), dtype, K)


def test_matrix_vector_products(x1):
    for M, K, N, lb in [(37, 300, 1, "c"), (37, 300, 3, "t"), (1, 5, 2, "t"), (8, 33, 4, "t")]:
        mm(x1, M, K, N, torch.float32, "c", lb)
        mm(x1, M, K, N, torch.float32, "s", lb, out_layout="t")


def test_mm_empty_k_gives_zeros(x1):
    o, od = x1.empty((3, 4))
    st = x1.lib.x1_mm(x1.put(torch.randn(3, 0))[1], x1.put(torch.randn(0, 4))[1], od)
    assert st == x1.ok, x1.last_error()
    assert torch.equal(x1.get(o, (3, 4)), torch.zeros(3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bmm_strided_and_broadcast_batches(x1, dtype):
    B, M, K, N = 5, 17, 70, 40
    a, b = torch.randn(B, K, M).to(dtype), torch.randn(K, N).to(dtype)
    ad = x1.desc(x1.upload(a), (B, M, K), (K * M, 1, M), dtype)  # each entry transposed
    bd = x1.desc(x1.upload(b), (B, K, N), (0, N, 1), dtype)      # one matrix for every entry
    o, od = x1.empty((B, M, N), dtype)
    assert x1.lib.x1_bmm(ad, bd, od) == x1.ok, x1.last_error()
    close(x1.get(o, (B, M, N), dtype), a.double().transpose(1, 2) @ b.double(), dtype, K)


@pytest.mark.parametrize("M,K,N", [(16, 16, 16), (48, 208, 32), (32, 400, 272)])
def test_th1_bfloat16_and_float32(th1, M, K, N):
    for dtype in (torch.float32, torch.bfloat16):
        mm(th1, M, K, N, dtype)
        mm(th1, M, K, N, dtype, "t", "t")


# ------------------------------------------------------------ convolution

def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def conv(x1, N, C, H, W, O, k, stride, padding, groups, dtype=torch.float32, bias=True, out_strides=None):
    x = torch.randn(N, C, H, W).to(dtype)
    w = (torch.randn(O, C // groups, k, k) * 0.3).to(dtype)
    b = torch.randn(O).to(dtype) if bias else None
    ref = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride, padding, 1, groups)
    _, _, OH, OW = ref.shape
    shape = (N, OH, OW, O)
    o, od = x1.empty(shape, dtype, strides=out_strides)
    st = x1.lib.x1_conv2d(x1.put(nhwc(x))[1], x1.put(nhwc(w))[1], x1.put(b)[1] if bias else x1.ffi.NULL,
                          [stride] * 2, [padding] * 2, [1, 1], groups, od)
    assert st == x1.ok, x1.last_error()
    got = x1.get(o, shape, dtype, strides=out_strides).permute(0, 3, 1, 2)
    close(got, ref, dtype, C // groups * k * k)


CONVS = [  # N, C, H, W, O, k, stride, padding, groups
    (2, 16, 9, 11, 32, 3, 1, 1, 1),
    (1, 24, 7, 6, 20, 5, 1, 2, 1),   # K = 600: two blocks, the second from channel 12 of a cell
    (1, 48, 5, 5, 17, 3, 2, 1, 1),   # K = 432: two blocks, the second from channel 24
    (2, 8, 10, 9, 12, 3, 2, 0, 2),
    (1, 12, 13, 7, 8, 5, 4, 2, 4),
    (3, 5, 6, 6, 7, 1, 1, 0, 1),
    (1, 3, 16, 16, 40, 5, 1, 2, 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_conv2d_shapes(x1, dtype):
    for i, cfg in enumerate(CONVS):
        conv(x1, *cfg, dtype=dtype, bias=i % 2 == 0)


def test_conv2d_output_with_row_gaps(x1):
    # pixels of one output row are evenly spaced, but rows are not: one GEMM per row
    N, OH, OW, O = 2, 8, 8, 6
    strides = (OH * (OW + 2) * O, (OW + 2) * O, O, 1)
    conv(x1, N, 4, 8, 8, O, 3, 1, 1, 1, out_strides=strides)


def test_conv2d_output_overwriting_its_input(x1):
    x, w, b = torch.randn(1, 8, 6, 6), torch.randn(8, 8, 3, 3) * 0.3, torch.randn(8)
    xa, xd = x1.put(nhwc(x))
    st = x1.lib.x1_conv2d(xd, x1.put(nhwc(w))[1], x1.put(b)[1], [1, 1], [1, 1], [1, 1], 1, xd)
    assert st == x1.ok, x1.last_error()
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    close(x1.get(xa, (1, 6, 6, 8)).permute(0, 3, 1, 2), ref, torch.float32, 72)


# ----------------------------------------------------------- slow sweeps

@pytest.mark.slow
def test_mm_random_sweep(x1):
    rng = random.Random(0)
    for _ in range(300):
        M, K, N = (rng.randint(1, 70) for _ in range(3))
        if rng.random() < 0.2:
            K = rng.randint(380, 800)
        mm(x1, M, K, N, rng.choice([torch.float32, torch.float16]), rng.choice("cts"), rng.choice("cts"),
           rng.choice(["c", "t"]))


@pytest.mark.slow
def test_conv2d_random_sweep(x1):
    rng = random.Random(1)
    for _ in range(120):
        groups = rng.choice([1, 2, 4])
        C, O = groups * rng.randint(1, 12), groups * rng.randint(1, 10)
        k, stride, padding = rng.choice([1, 2, 3, 5]), rng.choice([1, 2, 4]), rng.choice([0, 1, 2])
        H, W = rng.randint(k, 14), rng.randint(k, 14)
        conv(x1, rng.randint(1, 3), C, H, W, O, k, stride, padding, groups,
             rng.choice([torch.float32, torch.float16]), bias=rng.random() < 0.5)
