"""PyTorch's own op test data (OpInfo samples) through flbridge, against the
CPU: every sample of the ops the shipped chips run natively, in their
dtypes, contiguous and not, whatever route each call takes."""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import flbridge

OPS = ["add", "sub", "mul", "div", "nn.functional.relu", "nn.functional.gelu", "sigmoid", "tanh", "exp",
       "neg", "sqrt", "rsqrt", "mm", "bmm", "addmm", "softmax", "nn.functional.layer_norm", "sum", "mean",
       "nn.functional.embedding", "nn.functional.conv2d", "nn.functional.max_pool2d",
       "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "clone", "fill", "zero_",
       "nn.functional.batch_norm"]
BY_NAME = {}
for o in op_db:
    if o.name in OPS and (o.name, o.variant_test_name) not in BY_NAME:
        BY_NAME[(o.name, o.variant_test_name)] = o
CHIP_DTYPES = {"xpu:x1": (torch.float32, torch.float16), "xpu:th1": (torch.float32, torch.bfloat16),
               "xpu:x1-v2": (torch.float32,)}
# (op, chip) pairs with CPU samples in one of the chip's dtypes (CUDA-only
# variants such as batch_norm.without_cudnn have none)
CASES = [(case, chip) for case in sorted(BY_NAME) for chip in sorted(CHIP_DTYPES)
         if any(d in BY_NAME[case].supported_dtypes("cpu") for d in CHIP_DTYPES[chip])]


def to_dev(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
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


@pytest.mark.parametrize("case,chip", CASES, ids=[f"{n}.{v}-{c}" if v else f"{n}-{c}" for (n, v), c in CASES])
def test_opinfo_samples_match_cpu(flchips, case, chip):
    op = BY_NAME[case]
    dev = flbridge.torch_device(chip)
    checked = 0
    for dtype in CHIP_DTYPES[chip]:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            for s in (sample, sample.noncontiguous()):
                try:
                    expected = op(s.input, *s.args, **s.kwargs)
                except Exception:  # noqa: BLE001 - samples the CPU itself rejects are skipped
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", flbridge.FallbackWarning)
                    got = op(to_dev(s.input, dev), *to_dev(s.args, dev), **to_dev(s.kwargs, dev))
                tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
                if op.name in ("mm", "bmm", "addmm", "nn.functional.conv2d") and dtype == torch.float32:
                    tol = dict(rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(cpu_of(got), expected, equal_nan=True, **tol,
                                           msg=lambda m: f"{op.name} {dtype} {s}: {m}")
                checked += 1
    assert checked > 0
    assert flbridge.stats(dev)["native_ops"] + flbridge.stats(dev)["fallback_ops"] > 0
