"""Longer suites, run separately: `python -m pytest -m slow`.

Gradients of PyTorch's OpInfo samples through every chip against the CPU,
and longer training runs."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import flbridge
from flbridge.demos.models import SmallCNN, synthetic_batch
from tests.test_opinfo import BY_NAME, CHIP_DTYPES, _tensors, cpu_of, to_dev

pytestmark = pytest.mark.slow

GRAD_CASES = [(case, chip) for case in sorted(BY_NAME) for chip in sorted(CHIP_DTYPES)
              if BY_NAME[case].supports_autograd and torch.float32 in BY_NAME[case].supported_dtypes("cpu")]


def _leaves(sample):
    return [t for t in [sample.input, *sample.args, *sample.kwargs.values()]
            if isinstance(t, torch.Tensor) and t.requires_grad]


@pytest.mark.parametrize("case,chip", GRAD_CASES,
                         ids=[f"{n}.{v}-{c}" if v else f"{n}-{c}" for (n, v), c in GRAD_CASES])
def test_opinfo_gradients_match_cpu(flchips, case, chip):
    op = BY_NAME[case]
    dev = flbridge.torch_device(chip)
    checked = 0
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=True):
        try:
            ref = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - samples the CPU rejects
            continue
        ref_t = ref[0] if isinstance(ref, (tuple, list)) else ref
        if not isinstance(ref_t, torch.Tensor) or not ref_t.requires_grad or not ref_t.is_floating_point():
            continue
        leaves = _leaves(sample)
        g = torch.randn_like(ref_t)
        want = torch.autograd.grad(ref_t, leaves, g, allow_unused=True)
        fl_leaves = {id(t): t.detach().to(dev).requires_grad_() for t in leaves}

        def swap(x):
            if isinstance(x, torch.Tensor):
                return fl_leaves.get(id(x), None) if id(x) in fl_leaves else x.to(dev)
            if isinstance(x, (list, tuple)):
                return type(x)(swap(v) for v in x)
            return x

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = op(swap(sample.input), *swap(sample.args), **{k: swap(v) for k, v in sample.kwargs.items()})
            out_t = out[0] if isinstance(out, (tuple, list)) else out
            got = torch.autograd.grad(out_t, [fl_leaves[id(t)] for t in leaves], g.to(dev), allow_unused=True)
        for w, gg in zip(want, got):
            if w is None:
                assert gg is None or float(cpu_of(gg).abs().max()) == 0
                continue
            torch.testing.assert_close(cpu_of(gg), w, rtol=1e-4, atol=1e-4, msg=lambda m: f"{op.name}: {m}")
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("chip", ["xpu:x1", "xpu:x1-v2", "xpu:th1"])
def test_long_training_run_tracks_the_cpu(flchips, chip):
    dev = flbridge.torch_device(chip)
    torch.manual_seed(1)
    cpu = SmallCNN()
    fl = copy.deepcopy(cpu).to(dev)
    oc, of = torch.optim.Adam(cpu.parameters(), 3e-3), torch.optim.Adam(fl.parameters(), 3e-3)
    x, y = synthetic_batch(32, seed=1)
    for step in range(40):
        lc = F.cross_entropy(cpu(x), y)
        lf = F.cross_entropy(fl(x.to(dev)), y.to(dev))
        oc.zero_grad(), of.zero_grad()
        lc.backward(), lf.backward()
        oc.step(), of.step()
        assert abs(lc.item() - lf.item()) < 1e-3, (step, lc.item(), lf.item())
    assert lf.item() < 1.0  # it learnt the batch
    for a, b in zip(cpu.parameters(), fl.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-3, atol=1e-3)


# Every OpInfo in PyTorch's op_db, whatever route it takes, against the CPU.
# Expected differences, each checked for its behaviour below:
#   tensor_split with device indices: PyTorch requires them on the CPU (as on CUDA)
#   as_strided.partial_views: reads through an offset into the *source* tensor's
#       storage, which .to() does not copy (as on CUDA)
#   sparse layouts: not supported on fl devices, with a clear error
#   batch norm in eval mode: its saved statistics (results 1 and 2) are empty on
#       the CPU, per channel on a device (PyTorch's decomposition and CUDA alike);
#       only the normalized output is compared
_RANDOM = ("rand", "normal", "bernoulli", "uniform", "multinomial", "cauchy", "exponential", "geometric",
           "log_normal")
# ops whose results depend on random draws in training mode: the chips draw
# from their own generators (as CUDA does), so their values differ from the
# CPU's; shapes and dtypes are still compared
_DRAWS = ("nn.functional.rrelu", "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d")
_SPARSE = ("sparse.", "to_sparse")
_SAVED_STATS = ("_native_batch_norm_legit", "native_batch_norm")


def _sweep_ops():
    out = []
    for op in __import__("torch.testing._internal.common_methods_invocations",
                         fromlist=["op_db"]).op_db:
        if torch.float32 in op.supported_dtypes("cpu") and op.name not in ("tensor_split",):
            if not (op.name == "as_strided" and op.variant_test_name == "partial_views"):
                out.append(op)
    return out


@pytest.mark.parametrize("chip", ["xpu:x1", "xpu:th1"])
def test_every_opinfo_through_fl_matches_the_cpu(flchips, chip):
    dev = flbridge.torch_device(chip)
    failures, checked = [], 0
    for op in _sweep_ops():
        try:
            samples = list(op.sample_inputs("cpu", torch.float32))[:4]
        except Exception:  # noqa: BLE001 - an OpInfo whose samples need CUDA
            continue
        random = op.name.startswith(_RANDOM) or "dropout" in op.name or "empty" in op.name
        for s in samples:
            draws = random or op.name.startswith(_DRAWS) or s.kwargs.get("dropout_p", 0) > 0 or (
                op.name == "nn.functional.multi_head_attention_forward" and s.kwargs.get("training")
                and s.args[9] > 0)   # its dropout_p
            try:
                torch.manual_seed(0)
                want = op(s.input, *s.args, **s.kwargs)
            except Exception:  # noqa: BLE001 - samples the CPU rejects
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = op(to_dev(s.input, dev), *to_dev(s.args, dev), **to_dev(s.kwargs, dev))
                if op.name.startswith(_SPARSE):
                    failures.append(f"{op.name}: expected a clear error for sparse tensors")
                elif op.name in _SAVED_STATS:
                    for g, w in zip(cpu_of(got), want):
                        if g.shape == w.shape or w.numel():   # eval: empty on the CPU, per channel here
                            torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-4, atol=1e-4)
                elif not draws:
                    torch.testing.assert_close(cpu_of(got), want, equal_nan=True, rtol=1e-4, atol=1e-4)
                elif not random:
                    for g, w in zip(_tensors(cpu_of(got)), _tensors(want)):
                        assert g.shape == w.shape and g.dtype == w.dtype, (op.name, g.shape, w.shape)
                checked += 1
            except NotImplementedError as e:
                if not (op.name.startswith(_SPARSE) and "not supported on fl devices" in str(e)):
                    failures.append(f"{op.name}.{op.variant_test_name}: {type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 - collected and reported together
                failures.append(f"{op.name}.{op.variant_test_name}: {type(e).__name__}: {str(e)[:200]}")
            if failures and failures[-1].startswith(op.name):
                break
    assert not failures, "\n".join(failures)
    assert checked > 1500
    s = flbridge.stats(dev)
    assert s["native_ops"] > 100 and s["cpu_fallback_ops"] > 1000


def test_tensor_split_needs_cpu_indices_like_pytorch(x1):
    t = torch.arange(10.0).to(x1)
    with pytest.raises(RuntimeError, match="expected tensor_indices_or_sections to be on cpu, but it's on fl:1"):
        torch.tensor_split(t, torch.tensor([2, 5]).to(x1))
    assert [p.cpu().tolist() for p in torch.tensor_split(t, torch.tensor([2, 5]))] == \
        [[0.0, 1.0], [2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0, 9.0]]


def test_as_strided_past_the_storage_fails_like_pytorch(x1):
    t = torch.arange(10.0).to(x1)
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 40"):
        t.as_strided((2, 2), (1, 2), 10)
