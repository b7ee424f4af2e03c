"""PyTorch's own op test data (OpInfo samples) through flbridge, against the
CPU: every sample of the ops the shipped chips run natively, in their
dtypes, contiguous and not, whatever route each call takes; and, for the
ops whose backward kernels the chips have, the gradients of those samples."""
import math
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import flbridge

OPS = ["add", "sub", "mul", "div", "nn.functional.relu", "nn.functional.gelu", "sigmoid", "tanh", "exp",
       "neg", "sqrt", "rsqrt", "mm", "bmm", "addmm", "softmax", "nn.functional.layer_norm", "sum", "mean",
       "nn.functional.embedding", "nn.functional.conv2d", "nn.functional.max_pool2d",
       "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "clone", "fill", "zero_",
       "nn.functional.batch_norm",
       # training and transformer kernels
       "pow", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "log", "cos",
       "sin", "abs", "reciprocal", "nn.functional.silu", "addcmul", "addcdiv", "lerp", "where", "masked_fill",
       "var_mean", "log_softmax", "nn.functional.nll_loss", "nn.functional.cross_entropy", "logsumexp"]
# ops whose gradient kernels the chips have: their samples' input gradients are compared too
GRAD_OPS = ["nn.functional.relu", "nn.functional.gelu", "sigmoid", "tanh", "softmax", "log_softmax",
            "nn.functional.layer_norm", "nn.functional.embedding", "nn.functional.conv2d",
            "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
            "nn.functional.nll_loss", "nn.functional.cross_entropy", "nn.functional.batch_norm", "select"]
# (op, chip) cases new to this file that take over 2 s: in the slow suite
SLOW_SAMPLES = {("nn.functional.nll_loss", "xpu:th1"), ("nn.functional.nll_loss", "xpu:x1"),
                ("nn.functional.cross_entropy", "xpu:th1"), ("nn.functional.cross_entropy", "xpu:x1")}
# max_pool2d has hundreds of samples: 23-49 s of CPU per chip (the demo CNN keeps it in the default suite)
SLOW_SAMPLES |= {("nn.functional.max_pool2d", chip) for chip in ("xpu:th1", "xpu:x1", "xpu:x1-v2")}
# bmm's large-input variant (1-3.5 s of CPU per chip; plain bmm stays in the default suite)
SLOW_SAMPLES |= {("bmm.triton_optimized", chip) for chip in ("xpu:th1", "xpu:x1", "xpu:x1-v2")}
# x1-v2 runs x1's kernels (its own: float32 convolution, 8 GiB): its samples
# (7 s of the default suite's time) in the slow suite, x1's in the default one
SLOW_SAMPLES |= {(name, "xpu:x1-v2") for name in OPS + GRAD_OPS}
SLOW_GRADS = {("nn.functional.conv2d", "xpu:th1"), ("nn.functional.conv2d", "xpu:x1"),
              ("nn.functional.conv2d", "xpu:x1-v2"), ("nn.functional.nll_loss", "xpu:th1"),
              ("nn.functional.nll_loss", "xpu:x1"), ("nn.functional.cross_entropy", "xpu:th1"),
              ("nn.functional.max_pool2d", "xpu:th1"), ("nn.functional.max_pool2d", "xpu:x1"),
              ("nn.functional.max_pool2d", "xpu:x1-v2")} | {(name, "xpu:x1-v2") for name in GRAD_OPS}
BY_NAME = {}
for o in op_db:
    if (o.name in OPS or o.name in GRAD_OPS) and (o.name, o.variant_test_name) not in BY_NAME:
        BY_NAME[(o.name, o.variant_test_name)] = o
CHIP_DTYPES = {"xpu:x1": (torch.float32, torch.float16), "xpu:th1": (torch.float32, torch.bfloat16),
               "xpu:x1-v2": (torch.float32,)}
# integer and bool dtypes the chips also run these ops in
INT_DTYPES = {"add": (torch.int64,), "sub": (torch.int64,), "mul": (torch.int64, torch.int32),
              "maximum": (torch.int64,), "minimum": (torch.int64,), "neg": (torch.int64,), "abs": (torch.int32,),
              "bitwise_and": (torch.bool, torch.int64), "bitwise_or": (torch.bool, torch.int32),
              "bitwise_xor": (torch.bool, torch.int64), "bitwise_not": (torch.bool, torch.int64),
              "where": (torch.int64, torch.bool), "masked_fill": (torch.int64, torch.bool)}


def dtypes(op, chip):
    return [d for d in CHIP_DTYPES[chip] + INT_DTYPES.get(op.name, ()) if d in op.supported_dtypes("cpu")]


def cases(names, slow):
    # (op, chip) pairs with CPU samples in one of the chip's dtypes (CUDA-only
    # variants such as batch_norm.without_cudnn have none)
    out = [(case, chip) for case in sorted(BY_NAME) if case[0] in names for chip in sorted(CHIP_DTYPES)
           if dtypes(BY_NAME[case], chip)]
    return [pytest.param(case, chip, id=f"{case[0]}.{case[1]}-{chip}" if case[1] else f"{case[0]}-{chip}",
                         marks=[pytest.mark.slow] if (case[0], chip) in slow or (".".join(case), chip) in slow else [])
            for case, chip in out]


def to_dev(x, dev):
    if isinstance(x, torch.Tensor):
        return x.detach().to(dev).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(to_dev(v, dev) for v in x)
    if isinstance(x, dict):
        return {k: to_dev(v, dev) for k, v in x.items()}
    return x


def cpu_of(x):
    if isinstance(x, torch.Tensor):
        return x.cpu() if x.device.type != "cpu" else x
    if isinstance(x, (list, tuple)):
        return type(x)(cpu_of(v) for v in x)
    return x


def tolerance(op, dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=2e-2, atol=2e-2)
    if op.name in ("mm", "bmm", "addmm", "nn.functional.conv2d") and dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4)
    return {}


@pytest.mark.parametrize("case,chip", cases(OPS, SLOW_SAMPLES))
def test_opinfo_samples_match_cpu(flchips, case, chip):
    op = BY_NAME[case]
    dev = flbridge.torch_device(chip)
    checked = 0
    for dtype in dtypes(op, chip):
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            for s in (sample, sample.noncontiguous()):
                try:
                    expected = op(s.input, *s.args, **s.kwargs)
                except Exception:  # noqa: BLE001 - samples the CPU itself rejects are skipped
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", flbridge.FallbackWarning)
                    got = op(to_dev(s.input, dev), *to_dev(s.args, dev), **to_dev(s.kwargs, dev))
                torch.testing.assert_close(cpu_of(got), expected, equal_nan=True, **tolerance(op, dtype),
                                           msg=lambda m: f"{op.name} {dtype} {s}: {m}")
                checked += 1
    assert checked > 0
    assert flbridge.stats(dev)["native_ops"] + flbridge.stats(dev)["fallback_ops"] > 0


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _layer_norm_grad_slack(s, cot) -> float:
    """How far two float32 layer_norm backwards may differ by rounding alone.

    Both compute xhat = (x - mean) * rstd; evaluated with or without FMA (torch
    picks by CPU capability) it is within d = 4 eps |x| rstd of the exact one,
    which a variance near zero makes large (rstd up to 1/sqrt(eps_ln)).  The
    weight's gradient sums cot * xhat over the M normalized rows; the input's is
    rstd * (w cot - mean(w cot) - xhat mean(w cot xhat)), whose last term moves
    by about 2 rstd |w| |cot| d sqrt(N) (|xhat| <= sqrt(N))."""
    x = s.input.detach().double()
    shape = tuple(s.args[0])
    n = len(shape)
    weight = s.args[1] if len(s.args) > 1 and s.args[1] is not None else None
    eps_ln = s.args[3] if len(s.args) > 3 else s.kwargs.get("eps", 1e-5)
    if x.numel() == 0:
        return 0.0
    dims = tuple(range(x.dim() - n, x.dim()))
    rstd = float((x.var(dims, unbiased=False) + eps_ln).rsqrt().max())
    N = max(1, math.prod(shape))
    M = max(1, x.numel() // N)
    d = 4 * torch.finfo(torch.float32).eps * float(x.abs().max()) * rstd
    wmax = float(weight.detach().abs().max()) if weight is not None and weight.numel() else 1.0
    g = float(cot.abs().max()) if cot.numel() else 0.0
    return d * g * max(M, 2 * rstd * wmax * math.sqrt(N))


def sample_gradients(op, s, dev, g):
    """The input gradients of one OpInfo sample for a random output gradient
    (drawn from g), on the CPU and on dev: (expected, got, cotangents), or
    None for a sample the CPU rejects or with nothing to differentiate."""
    args_cpu = (s.input, *s.args)
    leaves = [t for t in _tensors((args_cpu, s.kwargs)) if t.requires_grad]
    try:
        out = op(s.input, *s.args, **s.kwargs)
    except Exception:  # noqa: BLE001 - samples the CPU itself rejects are skipped
        return None
    outs = [o for o in _tensors(out) if o.requires_grad]
    if not leaves or not outs:
        return None
    cots = [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs]
    expected = torch.autograd.grad(outs, leaves, cots, allow_unused=True)
    dev_args, dev_kwargs = to_dev(args_cpu, dev), to_dev(s.kwargs, dev)
    dev_leaves = [t for t in _tensors((dev_args, dev_kwargs)) if t.requires_grad]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
        dout = [o for o in _tensors(op(*dev_args, **dev_kwargs)) if o.requires_grad]
        got = torch.autograd.grad(dout, dev_leaves, [c.to(dev) for c in cots], allow_unused=True)
    return expected, got, cots


@pytest.mark.parametrize("case,chip", cases(GRAD_OPS, SLOW_GRADS))
def test_opinfo_gradients_match_cpu(flchips, case, chip):
    """Backward of every sample with a random output gradient: the inputs'
    gradients on the chip against the CPU's."""
    op = BY_NAME[case]
    dev = flbridge.torch_device(chip)
    g = torch.Generator().manual_seed(0)
    checked = 0
    for dtype in CHIP_DTYPES[chip]:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        for s in op.sample_inputs("cpu", dtype, requires_grad=True):
            grads = sample_gradients(op, s, dev, g)
            if grads is None:
                continue
            expected, got, cots = grads
            tol = tolerance(op, dtype)
            if op.name == "nn.functional.layer_norm" and dtype == torch.float32:
                tol = dict(rtol=1.3e-6, atol=1e-5 + _layer_norm_grad_slack(s, cots[0]))
            for e, r in zip(expected, got):
                assert (e is None) == (r is None)
                if e is not None:
                    torch.testing.assert_close(r.cpu(), e, equal_nan=True, **tol,
                                               msg=lambda m: f"{op.name} {dtype} {s}: {m}")
            checked += 1
    assert checked > 0
