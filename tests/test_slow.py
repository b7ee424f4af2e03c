"""Longer suites, run separately: `python -m pytest -m slow`.

Gradients of PyTorch's OpInfo samples through every chip against the CPU,
and longer training runs."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import flbridge
from flbridge.demo import SmallCNN, synthetic_batch
from tests.test_opinfo import BY_NAME, CHIP_DTYPES, cpu_of

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
