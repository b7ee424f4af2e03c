"""PyTorch's OpInfo samples of the selection, indexing, integer and shaping
ops the chips now run natively (tests/test_opinfo.py's method, its helpers):
every sample in the chip's floating dtypes and in int64 / bool, contiguous
and not, against the CPU; and the input gradients of the differentiable
ones.  Whatever route a sample takes (a 0-d index, a bool mask, a dim=None
argmax fall back), the values must be the CPU's."""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import flbridge
from tests.test_opinfo import CHIP_DTYPES, cpu_of, sample_gradients, to_dev, tolerance

OPS = {("eq", ""), ("ne", ""), ("lt", ""), ("le", ""), ("gt", ""), ("ge", ""), ("logical_and", ""),
       ("logical_or", ""), ("logical_xor", ""), ("logical_not", ""), ("any", ""), ("all", ""),
       ("max", "reduction_with_dim"), ("min", "reduction_with_dim"), ("argmax", ""), ("argmin", ""), ("clamp", ""),
       ("clamp_min", ""), ("clamp_max", ""), ("cumsum", ""), ("isin", ""), ("topk", ""), ("gather", ""),
       ("scatter", ""), ("scatter_add", ""), ("index_select", ""), ("index_add", ""), ("index_put", ""),
       ("__getitem__", ""), ("tril", ""), ("triu", ""), ("nn.functional.pad", "constant"),
       ("nn.functional.interpolate", "nearest"), ("sum", "")}
GRAD = {("max", "reduction_with_dim"), ("min", "reduction_with_dim"), ("clamp", ""), ("cumsum", ""), ("topk", ""),
        ("gather", ""), ("index_select", ""), ("__getitem__", ""), ("tril", ""), ("triu", ""),
        ("nn.functional.pad", "constant"), ("nn.functional.interpolate", "nearest"), ("scatter_add", "")}
# integer and bool dtypes the chips also run these ops in
INTS = {"eq": (torch.int64, torch.bool), "lt": (torch.int64, torch.int32), "ge": (torch.int64,),
        "logical_and": (torch.int64, torch.bool), "logical_not": (torch.bool, torch.int64),
        "any": (torch.bool, torch.int64, torch.uint8), "all": (torch.bool,), "argmax": (torch.int64,),
        "max": (torch.int64,), "clamp": (torch.int64,), "cumsum": (torch.int64, torch.bool), "isin": (torch.int64,),
        "topk": (torch.int64,), "gather": (torch.int64, torch.bool), "index_put": (torch.int64, torch.bool),
        "__getitem__": (torch.int64,), "tril": (torch.bool,), "sum": (torch.int64, torch.bool, torch.int32),
        "nn.functional.pad": (torch.int64,)}
BY_NAME = {(o.name, o.variant_test_name): o for o in op_db if (o.name, o.variant_test_name) in OPS}
# the sweep (141 cases, 0.1-0.8 s each, 45 s in all) runs with the slow suite, as
# tests/test_opinfo.py's long cases do; tests/test_native_selection.py and
# tests/sim/test_selection_kernels.py keep these ops in the default one
pytestmark = pytest.mark.slow


def dtypes(op, chip):
    return [d for d in CHIP_DTYPES[chip] + INTS.get(op.name, ()) if d in op.supported_dtypes("cpu")]


def params(names):
    return [pytest.param(case, chip, id=f"{case[0]}{'.' + case[1] if case[1] else ''}-{chip}")
            for case in sorted(names) for chip in sorted(CHIP_DTYPES) if dtypes(BY_NAME[case], chip)]


@pytest.mark.parametrize("case,chip", params(OPS))
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
                got = cpu_of(got)
                if op.name == "topk":
                    # which of several equal values PyTorch's CPU topk returns first is an artifact
                    # of its selection algorithm (CUDA's differs): the values, and the positions as
                    # positions of those values
                    dim = (list(s.args) + [-1])[1] if len(s.args) > 1 else s.kwargs.get("dim", -1)
                    inp = s.input if s.input.dim() else s.input.reshape(1)
                    torch.testing.assert_close(got[0], expected[0], equal_nan=True, rtol=0, atol=0)
                    torch.testing.assert_close(inp.gather(dim, got[1]).reshape(got[0].shape), got[0], equal_nan=True,
                                               rtol=0, atol=0)
                else:
                    torch.testing.assert_close(got, expected, equal_nan=True, **tolerance(op, dtype),
                                               msg=lambda m: f"{op.name} {dtype} {s}: {m}")
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("case,chip", params(GRAD))
def test_opinfo_gradients_match_cpu(flchips, case, chip):
    op = BY_NAME[case]
    dev = flbridge.torch_device(chip)
    g = torch.Generator().manual_seed(0)
    checked = 0
    for dtype in CHIP_DTYPES[chip]:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        if op.name == "topk" and dtype != torch.float32:
            continue   # half-precision samples tie, and which tied value gets the gradient is an artifact
        for s in op.sample_inputs("cpu", dtype, requires_grad=True):
            grads = sample_gradients(op, s, dev, g)
            if grads is None:
                continue
            expected, got, _ = grads
            for e, r in zip(expected, got):
                assert (e is None) == (r is None)
                if e is not None:
                    torch.testing.assert_close(r.cpu(), e, equal_nan=True, **tolerance(op, dtype),
                                               msg=lambda m: f"{op.name} {dtype} {s}: {m}")
            checked += 1
    assert checked > 0
