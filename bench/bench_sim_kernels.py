"""Speed of the simulated chips' non-GEMM kernels against the same torch ops on the CPU.

    python bench/bench_sim_kernels.py [--chip x1|th1] [--budget S] [--case NAME ...] [--libs DIR]

Every case runs one kernel of the simulated chip (operands resident in device
memory, only the call timed) and the equivalent torch operation on CPU tensors
(one thread: the simulator is single-threaded), interleaved in one process so
machine noise hits both.  Each sample times a batch of calls (about a
millisecond) and divides; the table shows medians of the calling thread's CPU
time per call and the ratio sim time / torch time (2.0 means the simulator
takes twice as long).  Results are checked against torch before timing.

The shapes are those of a small transformer encoder (d_model 64, 4 heads,
feed-forward 128, 8 sequences of 32 tokens: 256 token rows), its training step
(Adam over a 256x256 parameter), a language-model head (1000 classes) and a
small CNN (8 images, 16 channels, 32x32; NHWC on x1, NCHW on th1).

`--libs DIR` loads the libraries from another build (e.g. an older checkout's
native_sim/build) to compare before and after.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sim import simhelp  # noqa: E402
from tests.sim.simhelp import Chip, load_private  # noqa: E402

f32 = torch.float32
CASES: dict[str, tuple[str, str, object]] = {}  # key -> (group, title, setup)


def case(key, group, title):
    def reg(setup):
        CASES[key] = (group, title, setup)
        return setup
    return reg


def i64(chip, values):
    return chip.ffi.new("int64_t[]", list(values))


def close(got, want, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def half_dtype(chip):
    return torch.float16 if chip.kind == "x1" else torch.bfloat16


# ----------------------------------------------------------------- helpers

def unary_case(x1name, th1name, torch_fn, shape, *extra):
    def setup(chip):
        x = torch.randn(shape)
        xd = chip.put(x)[1]
        o, od = chip.empty(shape)
        fn = getattr(chip.lib, x1name if chip.kind == "x1" else th1name)
        args = (xd,) + tuple(e(chip) for e in extra) + (od,)
        return (lambda: fn(*args), lambda: torch_fn(x),
                lambda: close(chip.get(o, shape), torch_fn(x)))
    return setup


def binary_case(x1name, th1name, torch_fn, shape, other_shape=None, alpha=None):
    """out = a op b, b broadcast from other_shape (stride 0) when given."""
    def setup(chip):
        a = torch.randn(shape)
        b = torch.randn(other_shape if other_shape is not None else shape)
        ad = chip.put(a)[1]
        if other_shape is None:
            bd = chip.put(b)[1]
        else:
            bd = chip.expanded(chip.upload(b), other_shape, shape, f32)
        o, od = chip.empty(shape)
        fn = getattr(chip.lib, x1name if chip.kind == "x1" else th1name)
        args = (ad, bd) + ((alpha,) if alpha is not None else ()) + (od,)
        ref = lambda: torch_fn(a, b)  # noqa: E731
        return lambda: fn(*args), ref, lambda: close(chip.get(o, shape), ref())
    return setup


# ------------------------------------------------------------ transformer

T, D, H, FF = 256, 64, 4, 128  # token rows, d_model, heads, feed-forward


def _clone_view(chip, x, v):
    """The chip's copy of view `v` of `x` into a dense tensor, beside torch's."""
    sd = chip.desc(chip.upload(x), v.shape, v.stride())
    o, od = chip.empty(v.shape)
    dst = torch.empty(v.shape)
    fn = chip.lib.x1_copy if chip.kind == "x1" else chip.lib.th1Copy
    return lambda: fn(sd, od), lambda: dst.copy_(v), lambda: close(chip.get(o, v.shape), v, 0, 0)


@case("copy_heads", "transformer", "copy: clone of [32,32,16].transpose(0,1) (16k)")
def _copy_heads(chip):
    x = torch.randn(32, 32, 16)
    return _clone_view(chip, x, x.transpose(0, 1))


@case("copy_t2d", "transformer", "copy: clone of [256,64].t() (16k)")
def _copy_t2d(chip):
    x = torch.randn(T, D)
    return _clone_view(chip, x, x.t())


@case("copy_half", "transformer", "copy: [256,64] float32 -> float16/bfloat16")
def _copy_half(chip):
    x = torch.randn(T, D)
    hd = half_dtype(chip)
    xd = chip.put(x)[1]
    o, od = chip.empty((T, D), hd)
    dst = torch.empty(T, D, dtype=hd)
    fn = chip.lib.x1_copy if chip.kind == "x1" else chip.lib.th1Copy
    return (lambda: fn(xd, od), lambda: dst.copy_(x),
            lambda: close(chip.get(o, (T, D), hd), x.to(hd), 0, 0))


CASES["relu"] = ("transformer", "relu [256,128] (32k)",
                 unary_case("x1_relu", "th1Relu", torch.relu, (T, FF)))
CASES["gelu"] = ("transformer", "gelu [256,128]",
                 unary_case("x1_gelu", "th1Gelu", F.gelu, (T, FF),
                            lambda c: c.ffi.new("char[]", b"none") if c.kind == "x1" else 0))


@case("gelu_bwd", "transformer", "gelu backward [256,128]")
def _gelu_bwd(chip):
    g, x = torch.randn(T, FF), torch.randn(T, FF)
    gd, xd = chip.put(g)[1], chip.put(x)[1]
    o, od = chip.empty((T, FF))
    ref = lambda: torch.ops.aten.gelu_backward(g, x)  # noqa: E731
    if chip.kind == "x1":
        mode = chip.ffi.new("char[]", b"none")
        sim = lambda: chip.lib.x1_gelu_backward(gd, xd, mode, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1GeluBackward(gd, xd, 0, od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, (T, FF)), ref())


@case("softmax", "transformer", "_safe_softmax [8,4,32,32] dim -1")
def _softmax(chip):
    x = torch.randn(8, H, 32, 32)
    xd = chip.put(x)[1]
    o, od = chip.empty(x.shape)
    ref = lambda: torch.ops.aten._safe_softmax(x, -1)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.custom_safe_softmax_x1(xd, -1, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1Softmax(xd, -1, getattr(chip.lib, "TH1_SOFTMAX_SAFE", 1), od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, x.shape), ref())


@case("softmax_plain", "transformer", "softmax [8,4,32,32] dim -1")
def _softmax_plain(chip):
    x = torch.randn(8, H, 32, 32)
    xd = chip.put(x)[1]
    o, od = chip.empty(x.shape)
    ref = lambda: torch.softmax(x, -1)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.custom_softmax_x1(xd, -1, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1Softmax(xd, -1, 0, od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, x.shape), ref())


@case("softmax_long", "transformer", "softmax [256,1000] dim -1 (rows longer than a block)")
def _softmax_long(chip):
    x = torch.randn(T, 1000)
    xd = chip.put(x)[1]
    o, od = chip.empty(x.shape)
    ref = lambda: torch.softmax(x, -1)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.custom_softmax_x1(xd, -1, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1Softmax(xd, -1, 0, od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, x.shape), ref())


@case("softmax_bwd", "transformer", "softmax backward [8,4,32,32] dim -1")
def _softmax_bwd(chip):
    y = torch.softmax(torch.randn(8, H, 32, 32), -1)
    g = torch.randn(y.shape)
    yd, gd = chip.put(y)[1], chip.put(g)[1]
    o, od = chip.empty(y.shape)
    ref = lambda: torch.ops.aten._softmax_backward_data(g, y, -1, f32)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.x1_softmax_backward(gd, yd, -1, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1SoftmaxBackward(gd, yd, -1, 0, od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, y.shape), ref())


@case("log_softmax", "transformer", "log_softmax [256,1000] dim -1 (LM head)")
def _log_softmax(chip):
    x = torch.randn(T, 1000)
    xd = chip.put(x)[1]
    o, od = chip.empty(x.shape)
    ref = lambda: torch.log_softmax(x, -1)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.x1_log_softmax(xd, -1, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1Softmax(xd, -1, getattr(chip.lib, "TH1_SOFTMAX_LOG", 2), od)  # noqa: E731
    return sim, ref, lambda: close(chip.get(o, x.shape), ref())


CASES["mul_scalar"] = ("transformer", "mul [256,64] by a 0-d scalar (stride 0)",
                       binary_case("x1_mul", "th1Mul", torch.mul, (T, D), ()))
CASES["add"] = ("transformer", "add [256,64] + [256,64]",
                binary_case("x1_add", "th1Add", torch.add, (T, D), alpha=1.0))
CASES["add_bias"] = ("transformer", "add [256,64] + bias [64] (stride 0)",
                     binary_case("x1_add", "th1Add", torch.add, (T, D), (D,), alpha=1.0))
@case("lt", "transformer", "lt [256,64] -> bool")
def _lt(chip):
    a, b = torch.randn(T, D), torch.randn(T, D)
    ad, bd = chip.put(a)[1], chip.put(b)[1]
    o, od = chip.empty((T, D), torch.bool)
    dst = torch.empty(T, D, dtype=torch.bool)
    fn = chip.lib.x1_lt if chip.kind == "x1" else chip.lib.th1Less
    return (lambda: fn(ad, bd, od), lambda: torch.lt(a, b, out=dst),
            lambda: torch.testing.assert_close(chip.get(o, (T, D), torch.bool), a < b))


@case("layer_norm", "transformer", "layer_norm [256,64] (affine, mean, rstd)")
def _layer_norm(chip):
    x, w, b = torch.randn(T, D), torch.randn(D), torch.randn(D)
    xd, wd, bd = chip.put(x)[1], chip.put(w)[1], chip.put(b)[1]
    o, od = chip.empty((T, D))
    m, md = chip.empty((T, 1))
    r, rd = chip.empty((T, 1))
    ref = lambda: torch.native_layer_norm(x, [D], w, b, 1e-5)  # noqa: E731
    if chip.kind == "x1":
        ns = i64(chip, [D])
        sim = lambda: chip.lib.x1_layer_norm(xd, ns, 1, wd, bd, 1e-5, od, md, rd)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1LayerNorm(xd, 1, wd, bd, 1e-5, od, md, rd)  # noqa: E731

    def check():
        y, mu, rs = ref()
        close(chip.get(o, (T, D)), y)
        close(chip.get(m, (T, 1)), mu)
        close(chip.get(r, (T, 1)), rs)
    return sim, ref, check


@case("layer_norm_bwd", "transformer", "layer_norm backward [256,64] (dx, dw, db)")
def _layer_norm_bwd(chip):
    x, w, b, dy = torch.randn(T, D), torch.randn(D), torch.randn(D), torch.randn(T, D)
    _, mu, rs = torch.native_layer_norm(x, [D], w, b, 1e-5)
    xd, wd, dyd = chip.put(x)[1], chip.put(w)[1], chip.put(dy)[1]
    mud, rsd = chip.put(mu)[1], chip.put(rs)[1]
    dx, dxd = chip.empty((T, D))
    dw, dwd = chip.empty((D,))
    db, dbd = chip.empty((D,))
    ref = lambda: torch.ops.aten.native_layer_norm_backward(  # noqa: E731
        dy, x, [D], mu, rs, w, b, [True, True, True])
    if chip.kind == "x1":
        ns, mask = i64(chip, [D]), i64(chip, [1, 1, 1])
        sim = lambda: chip.lib.x1_layer_norm_backward(  # noqa: E731
            dyd, xd, ns, 1, mud, rsd, wd, mask, dxd, dwd, dbd)
    else:
        sim = lambda: chip.lib.th1LayerNormBackward(dyd, xd, 1, mud, rsd, wd, dxd, dwd, dbd)  # noqa: E731

    def check():
        gx, gw, gb = ref()
        close(chip.get(dx, (T, D)), gx, 1e-4, 1e-4)
        close(chip.get(dw, (D,)), gw, 1e-4, 1e-4)
        close(chip.get(db, (D,)), gb, 1e-4, 1e-4)
    return sim, ref, check


def _reduce_case(kind, dims, keepdim, shape):
    def setup(chip):
        x = torch.randn(shape)
        xd = chip.put(x)[1]
        if kind == "sum":
            ref = lambda: torch.sum(x, dims, keepdim=keepdim)  # noqa: E731
        elif kind == "mean":
            ref = lambda: torch.mean(x, dims, keepdim=keepdim)  # noqa: E731
        else:
            ref = lambda: torch.logsumexp(x, dims, keepdim=keepdim)  # noqa: E731
        oshape = tuple(ref().shape)
        o, od = chip.empty(oshape)
        dd = i64(chip, dims)
        lib = chip.lib
        if chip.kind == "x1":
            fn = {"sum": lib.x1_sum, "mean": lib.x1_mean, "lse": lib.x1_logsumexp}[kind]
        else:
            fn = {"sum": lib.th1ReduceSum, "mean": lib.th1ReduceMean, "lse": lib.th1ReduceLogSumExp}[kind]
        return (lambda: fn(xd, dd, len(dims), keepdim, od), ref,
                lambda: close(chip.get(o, oshape), ref(), 1e-5, 1e-4))
    return setup


CASES["sum_dim0"] = ("transformer", "sum [256,64] over dim 0 (bias gradient)",
                     _reduce_case("sum", [0], False, (T, D)))
CASES["mean_last"] = ("transformer", "mean [256,64] over dim -1, keepdim",
                      _reduce_case("mean", [-1], True, (T, D)))
CASES["logsumexp"] = ("transformer", "logsumexp [256,1000] over dim -1",
                      _reduce_case("lse", [-1], False, (T, 1000)))


@case("var_mean", "transformer", "var_mean [256,64] over dim -1")
def _var_mean(chip):
    x = torch.randn(T, D)
    xd = chip.put(x)[1]
    v, vd = chip.empty((T,))
    m, md = chip.empty((T,))
    dd = i64(chip, [-1])
    ref = lambda: torch.var_mean(x, -1, correction=1)  # noqa: E731
    if chip.kind == "x1":
        sim = lambda: chip.lib.x1_var_mean(xd, dd, 1, 1.0, False, vd, md)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1VarMean(xd, dd, 1, 1.0, 0, vd, md)  # noqa: E731

    def check():
        rv, rm = ref()
        close(chip.get(v, (T,)), rv)
        close(chip.get(m, (T,)), rm)
    return sim, ref, check


@case("masked_fill", "transformer", "masked_fill [8,4,32,32], mask [8,1,1,32] (stride 0)")
def _masked_fill(chip):
    x = torch.randn(8, H, 32, 32)
    mask = torch.rand(8, 1, 1, 32) < 0.2
    xd = chip.put(x)[1]
    md = chip.expanded(chip.upload(mask), mask.shape, x.shape, torch.bool)
    o, od = chip.empty(x.shape)
    fn = chip.lib.x1_masked_fill if chip.kind == "x1" else chip.lib.th1MaskedFill
    ref = lambda: x.masked_fill(mask, float("-inf"))  # noqa: E731
    return (lambda: fn(xd, md, float("-inf"), od), ref,
            lambda: close(chip.get(o, x.shape), ref()))


@case("where", "transformer", "where [256,64] (bool cond, two tensors)")
def _where(chip):
    c, a, b = torch.rand(T, D) < 0.5, torch.randn(T, D), torch.randn(T, D)
    cd, ad, bd = chip.put(c)[1], chip.put(a)[1], chip.put(b)[1]
    o, od = chip.empty((T, D))
    fn = chip.lib.x1_where if chip.kind == "x1" else chip.lib.th1Where
    ref = lambda: torch.where(c, a, b)  # noqa: E731
    return lambda: fn(cd, ad, bd, od), ref, lambda: close(chip.get(o, (T, D)), ref(), 0, 0)


@case("relu_bwd", "transformer", "threshold_backward (ReLU's) [256,128]")
def _relu_bwd(chip):
    g, x = torch.randn(T, FF), torch.randn(T, FF)
    gd, xd = chip.put(g)[1], chip.put(x)[1]
    o, od = chip.empty((T, FF))
    fn = chip.lib.x1_threshold_backward if chip.kind == "x1" else chip.lib.th1ThresholdBackward
    ref = lambda: torch.ops.aten.threshold_backward(g, x, 0)  # noqa: E731
    return lambda: fn(gd, xd, 0.0, od), ref, lambda: close(chip.get(o, (T, FF)), ref(), 0, 0)


@case("embedding", "transformer", "embedding: [1000,64] table, [8,32] indices")
def _embedding(chip):
    w, idx = torch.randn(1000, D), torch.randint(0, 1000, (8, 32))
    wd, idd = chip.put(w)[1], chip.put(idx)[1]
    o, od = chip.empty((8, 32, D))
    fn = chip.lib.x1_embedding if chip.kind == "x1" else chip.lib.th1Embedding
    ref = lambda: F.embedding(idx, w)  # noqa: E731
    return lambda: fn(wd, idd, od), ref, lambda: close(chip.get(o, (8, 32, D)), ref(), 0, 0)


@case("embedding_bwd", "transformer", "embedding backward -> [1000,64]")
def _embedding_bwd(chip):
    g, idx = torch.randn(8, 32, D), torch.randint(0, 1000, (8, 32))
    gd, idd = chip.put(g)[1], chip.put(idx)[1]
    o, od = chip.empty((1000, D))
    fn = chip.lib.x1_embedding_backward if chip.kind == "x1" else chip.lib.th1EmbeddingBackward
    ref = lambda: torch.ops.aten.embedding_dense_backward(g, idx, 1000, -1, False)  # noqa: E731
    return lambda: fn(gd, idd, 1000, -1, False, od), ref, lambda: close(chip.get(o, (1000, D)), ref())


@case("cat", "transformer", "cat 3 x [256,64] along dim -1")
def _cat(chip):
    xs = [torch.randn(T, D) for _ in range(3)]
    ds = [chip.put(x)[1] for x in xs]
    o, od = chip.empty((T, 3 * D))
    dst = torch.empty(T, 3 * D)
    arr = chip.ffi.new(f"{chip.desc_type}[]", ds)
    fn = chip.lib.x1_cat if chip.kind == "x1" else chip.lib.th1Cat
    return (lambda keep=ds: fn(arr, 3, -1, od), lambda: torch.cat(xs, -1, out=dst),  # keep: arr only points
            lambda: close(chip.get(o, (T, 3 * D)), torch.cat(xs, -1), 0, 0))


@case("fill", "transformer", "fill [256,64] with 0")
def _fill(chip):
    o, od = chip.empty((T, D))
    dst = torch.empty(T, D)
    fn = chip.lib.x1_fill if chip.kind == "x1" else chip.lib.th1Fill
    return lambda: fn(od, 0.0), lambda: dst.fill_(0.0), lambda: close(chip.get(o, (T, D)), torch.zeros(T, D), 0, 0)


# ------------------------------------------------------------------ Adam

P = (256, 256)


def _addc_case(div):
    def setup(chip):
        s, a, b = torch.randn(P), torch.randn(P), torch.rand(P) + 0.5
        sd, ad, bd = chip.put(s)[1], chip.put(a)[1], chip.put(b)[1]
        o, od = chip.empty(P)
        dst = torch.empty(P)
        lib = chip.lib
        fn = (lib.x1_addcdiv if div else lib.x1_addcmul) if chip.kind == "x1" else \
             (lib.th1Addcdiv if div else lib.th1Addcmul)
        tf = torch.addcdiv if div else torch.addcmul
        ref = lambda: tf(s, a, b, value=-0.001, out=dst)  # noqa: E731
        return lambda: fn(sd, ad, bd, -0.001, od), ref, lambda: close(chip.get(o, P), ref())
    return setup


CASES["addcmul"] = ("adam", "addcmul [256,256] (value -0.001)", _addc_case(False))
CASES["addcdiv"] = ("adam", "addcdiv [256,256]", _addc_case(True))


@case("lerp", "adam", "lerp [256,256] (weight 0.1)")
def _lerp(chip):
    s, e = torch.randn(P), torch.randn(P)
    sd, ed = chip.put(s)[1], chip.put(e)[1]
    o, od = chip.empty(P)
    dst = torch.empty(P)
    fn = chip.lib.x1_lerp if chip.kind == "x1" else chip.lib.th1Lerp
    ref = lambda: torch.lerp(s, e, 0.1, out=dst)  # noqa: E731
    return lambda: fn(sd, ed, 0.1, od), ref, lambda: close(chip.get(o, P), ref())


CASES["mul_tensors"] = ("adam", "mul [256,256] * [256,256]",
                        binary_case("x1_mul", "th1Mul", torch.mul, P))


@case("fused_adamw", "adam", "fused AdamW step, 4 x [256,256] (weight decay 0.01)")
def _fused_adamw(chip):
    """One _fused_adamw_ over four parameters (the vendor's fused optimizer
    kernel; flbridge routes torch.optim.AdamW(fused=True) to it)."""
    n, hp = 4, dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8)
    lists = [[torch.randn(P) for _ in range(n)],                 # params
             [torch.randn(P) for _ in range(n)],                 # grads
             [torch.randn(P) * 0.1 for _ in range(n)],           # exp_avg
             [torch.rand(P) * 0.01 for _ in range(n)],           # exp_avg_sq
             [torch.tensor(3.0) for _ in range(n)]]              # step (already counted, as PyTorch passes it)
    put = [[chip.put(t) for t in lst] for lst in lists]
    ctype = "x1_tensor_t *[]" if chip.kind == "x1" else "th1TensorDesc_t *[]"
    arrays = [chip.ffi.new(ctype, [d for _, d in lst]) for lst in put]
    null = chip.ffi.NULL
    hargs = (hp["lr"], hp["beta1"], hp["beta2"], hp["weight_decay"], hp["eps"])
    if chip.kind == "x1":
        sim = lambda: chip.lib.x1_fused_adam(*arrays[:4], null, arrays[4], n, *hargs,  # noqa: E731
                                             False, False, True, null, null)
    else:
        sim = lambda: chip.lib.th1FusedAdam(*arrays[:4], null, arrays[4], n, *hargs,  # noqa: E731
                                            4, null, null)   # TH1_ADAM_DECOUPLED
    cpu = [[t.clone() for t in lst] for lst in lists]
    ref = lambda: torch._fused_adamw_(*cpu[:4], [], cpu[4], amsgrad=False, maximize=False, **hp)  # noqa: E731

    def check():     # sim() ran once: one step from the same state on both sides
        ref()
        for k in (0, 2, 3):
            for (addr, _), want in zip(put[k], cpu[k]):
                close(chip.get(addr, P), want, rtol=1e-5, atol=1e-7)
    return sim, ref, check

# ------------------------------------------------------------------- CNN

N_, C_, HW = 8, 16, 32


def _image(chip):
    """A [N, C, H, W] tensor and its descriptor in the chip's layout (NHWC on x1)."""
    x = torch.randn(N_, C_, HW, HW)
    if chip.kind == "x1":
        x = x.contiguous(memory_format=torch.channels_last)
        return x, chip.put(x.permute(0, 2, 3, 1).contiguous())[1]
    return x, chip.put(x)[1]


def _image_out(chip, c, h, w, dtype=f32):
    if chip.kind == "x1":
        o, od = chip.empty((N_, h, w, c), dtype)
        return od, lambda: chip.get(o, (N_, h, w, c), dtype).permute(0, 3, 1, 2)
    o, od = chip.empty((N_, c, h, w), dtype)
    return od, lambda: chip.get(o, (N_, c, h, w), dtype)


def _image_in(chip, t):
    """Descriptor of an [N, C, H, W] tensor in the chip's layout."""
    if chip.kind == "x1":
        return chip.put(t.permute(0, 2, 3, 1).contiguous())[1]
    return chip.put(t.contiguous())[1]


@case("max_pool", "cnn", "max_pool2d 2x2/2 [8,16,32,32] with indices")
def _max_pool(chip):
    x, xd = _image(chip)
    od, get = _image_out(chip, C_, 16, 16)
    idd, get_i = _image_out(chip, C_, 16, 16, torch.int64)
    k, s, p, d = i64(chip, [2, 2]), i64(chip, [2, 2]), i64(chip, [0, 0]), i64(chip, [1, 1])
    ref = lambda: F.max_pool2d(x, 2, 2, return_indices=True)  # noqa: E731
    fn = chip.lib.x1_max_pool2d if chip.kind == "x1" else chip.lib.th1MaxPool2d

    def check():
        y, i = ref()
        close(get(), y, 0, 0)
        torch.testing.assert_close(get_i(), i)
    return lambda: fn(xd, k, s, 2, p, d, False, od, idd), ref, check


@case("max_pool_bwd", "cnn", "max_pool2d backward [8,16,16,16] -> [8,16,32,32]")
def _max_pool_bwd(chip):
    x, _ = _image(chip)
    y, idx = F.max_pool2d(x, 2, 2, return_indices=True)
    g = torch.randn(y.shape)
    if chip.kind == "x1":
        g = g.contiguous(memory_format=torch.channels_last)
    gd, idd = _image_in(chip, g), _image_in(chip, idx)
    od, get = _image_out(chip, C_, HW, HW)
    fn = chip.lib.x1_max_pool2d_backward if chip.kind == "x1" else chip.lib.th1MaxPool2dBackward
    ref = lambda: torch.ops.aten.max_pool2d_with_indices_backward(  # noqa: E731
        g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
    return lambda: fn(gd, idd, od), ref, lambda: close(get(), ref(), 0, 0)


@case("avg_pool", "cnn", "avg_pool2d 2x2/2 [8,16,32,32]")
def _avg_pool(chip):
    x, xd = _image(chip)
    od, get = _image_out(chip, C_, 16, 16)
    k, s, p = i64(chip, [2, 2]), i64(chip, [2, 2]), i64(chip, [0, 0])
    ref = lambda: F.avg_pool2d(x, 2, 2)  # noqa: E731
    fn = chip.lib.x1_avg_pool2d if chip.kind == "x1" else chip.lib.th1AvgPool2d
    return lambda: fn(xd, k, s, 2, p, False, True, 0, od), ref, lambda: close(get(), ref())


@case("avg_pool_bwd", "cnn", "avg_pool2d backward [8,16,16,16] -> [8,16,32,32]")
def _avg_pool_bwd(chip):
    x, _ = _image(chip)
    g = torch.randn(N_, C_, 16, 16)
    if chip.kind == "x1":
        g = g.contiguous(memory_format=torch.channels_last)
    gd = _image_in(chip, g)
    od, get = _image_out(chip, C_, HW, HW)
    k, s, p = i64(chip, [2, 2]), i64(chip, [2, 2]), i64(chip, [0, 0])
    ref = lambda: torch.ops.aten.avg_pool2d_backward(g, x, [2, 2], [2, 2], [0, 0], False, True, None)  # noqa: E731
    fn = chip.lib.x1_avg_pool2d_backward if chip.kind == "x1" else chip.lib.th1AvgPool2dBackward
    return lambda: fn(gd, k, s, 2, p, False, True, 0, od), ref, lambda: close(get(), ref())


@case("adaptive_pool", "cnn", "adaptive_avg_pool2d [8,16,32,32] -> 1x1")
def _adaptive_pool(chip):
    x, xd = _image(chip)
    od, get = _image_out(chip, C_, 1, 1)
    ref = lambda: F.adaptive_avg_pool2d(x, 1)  # noqa: E731
    if chip.kind == "x1":
        size = i64(chip, [1, 1])
        sim = lambda: chip.lib.x1_adaptive_avg_pool2d(xd, size, od)  # noqa: E731
    else:
        sim = lambda: chip.lib.th1AdaptiveAvgPool2d(xd, od)  # noqa: E731
    return sim, ref, lambda: close(get(), ref())


@case("adaptive_pool_bwd", "cnn", "adaptive_avg_pool2d backward 1x1 -> [8,16,32,32]")
def _adaptive_pool_bwd(chip):
    x, _ = _image(chip)
    g = torch.randn(N_, C_, 1, 1)
    if chip.kind == "x1":
        g = g.contiguous(memory_format=torch.channels_last)
    gd = _image_in(chip, g)
    od, get = _image_out(chip, C_, HW, HW)
    ref = lambda: torch.ops.aten._adaptive_avg_pool2d_backward(g, x)  # noqa: E731
    fn = chip.lib.x1_adaptive_avg_pool2d_backward if chip.kind == "x1" else chip.lib.th1AdaptiveAvgPool2dBackward
    return lambda: fn(gd, od), ref, lambda: close(get(), ref())


@case("batch_norm", "cnn", "batch_norm inference [8,16,32,32]")
def _batch_norm(chip):
    x = torch.randn(N_, C_, HW, HW)
    w, b, m, v = torch.randn(C_), torch.randn(C_), torch.randn(C_), torch.rand(C_) + 0.5
    xd = chip.put(x)[1]
    wd, bd, md, vd = (chip.put(t)[1] for t in (w, b, m, v))
    o, od = chip.empty(x.shape)
    ref = lambda: F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5)  # noqa: E731
    fn = chip.lib.x1_batch_norm if chip.kind == "x1" else chip.lib.th1BatchNormInference
    return lambda: fn(xd, wd, bd, md, vd, 1e-5, od), ref, lambda: close(chip.get(o, x.shape), ref())


# ------------------------------------------------------------------ timing

def _calls_per_sample(fn, target_s=1e-3):
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1000, int(target_s / dt)))


def _time(sim, ref, ok, budget_s, clock):
    """Interleaved per-call medians (seconds) of sim and ref."""
    for _ in range(3):  # warm-up
        assert sim() == ok
        ref()
    ks, kt = _calls_per_sample(sim), _calls_per_sample(ref)
    ts, tt = [], []
    end = time.perf_counter() + budget_s
    while len(ts) < 7 or (time.perf_counter() < end and len(ts) < 2000):
        t0 = clock()
        for _ in range(ks):
            sim()
        ts.append((clock() - t0) / ks)
        t0 = clock()
        for _ in range(kt):
            ref()
        tt.append((clock() - t0) / kt)
    return statistics.median(ts), statistics.median(tt), len(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chip", choices=("x1", "th1"), default="x1")
    ap.add_argument("--budget", type=float, default=0.4, help="seconds per case (default 0.4)")
    ap.add_argument("--wall", action="store_true", help="wall-clock times instead of thread CPU time")
    ap.add_argument("--case", nargs="*", choices=sorted(CASES), help="default: all")
    ap.add_argument("--libs", type=Path, help="load the simulator libraries from this directory")
    a = ap.parse_args()
    if a.libs:
        simhelp.LIBS = a.libs
    torch.set_num_threads(1)
    clock = time.perf_counter if a.wall else time.thread_time
    torch.manual_seed(0)
    lib_name = "libx1v2sim.so" if a.chip == "x1" else "libth1sim.so"
    with tempfile.TemporaryDirectory() as tmp:
        chip = Chip(a.chip, *load_private(lib_name, a.chip, Path(tmp)))
        assert (chip.lib.x1_init(0) if a.chip == "x1" else chip.lib.th1Init(0)) == chip.ok
        print(f"{a.chip} simulator vs torch {torch.__version__} CPU (1 thread), float32, "
              f"per-call medians of {'wall-clock' if a.wall else 'thread CPU'} time")
        print(f"{'case':56s} {'sim us':>9s} {'torch us':>9s} {'sim/torch':>9s}  samples")
        group = None
        ratios = []
        for key in a.case or list(CASES):
            g, title, setup = CASES[key]
            if g != group:
                print(f"-- {g}")
                group = g
            sim, ref, check = setup(chip)
            assert sim() == chip.ok, chip.last_error()
            check()
            s, t, n = _time(sim, ref, chip.ok, a.budget, clock)
            ratios.append(s / t)
            print(f"{title:56s} {s * 1e6:9.1f} {t * 1e6:9.1f} {s / t:9.2f}  {n}", flush=True)
            chip.free_all()
        if len(ratios) > 1:
            print(f"geometric mean sim/torch: {statistics.geometric_mean(ratios):.2f}")


if __name__ == "__main__":
    main()
