"""The ops generate()'s logits processors and stopping criteria use each
token, decomposed into the chips' kernels (flbridge.routing.randomops):
full max/min, sort (top-p), and indexing with None entries (x[:, ids]).
Each equals PyTorch on the CPU exactly (they move and compare values)."""
import pytest
import torch

import flbridge
from tests.conftest import routes


@pytest.fixture(params=["xpu:th1", "xpu:x1"])
def chip(request, flchips):
    flbridge.reset_stats(request.param)
    return flchips[request.param].device


def _no_cpu(dev):
    bad = {k: v for k, v in routes(dev).items() if k[1] == "cpu"}
    assert not bad, f"ran on the CPU: {bad}"


def test_full_max_min_equal_the_cpu(chip):
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    x[2, 3] = 9.0
    for t in (x, x.t(), x.to(torch.int64)):
        d = t.to(chip)
        assert torch.equal(d.max().cpu(), t.max()) and torch.equal(d.min().cpu(), t.min())
    n = x.clone()
    n[1, 1] = float("nan")
    assert n.to(chip).max().cpu().isnan()
    _no_cpu(chip)
    with pytest.raises(RuntimeError, match="numel\\(\\) == 0"):     # PyTorch's error
        torch.empty(0, device=chip).max()


@pytest.mark.parametrize("descending", [False, True])
def test_sort_equals_a_stable_cpu_sort(chip, descending):
    y = torch.randint(0, 5, (6, 9), generator=torch.Generator().manual_seed(1)).float()   # many ties
    y[1, 2] = float("nan")
    for dim in (0, 1, -1):
        ref = torch.sort(y, dim=dim, descending=descending, stable=True)
        got = torch.sort(y.to(chip), dim=dim, descending=descending)
        torch.testing.assert_close(got.values.cpu(), ref.values, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(got.indices.cpu(), ref.indices)
    _no_cpu(chip)


def test_indexing_with_none_entries_equals_the_cpu(chip):
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(2))
    i, j = torch.tensor([2, 0, -1]), torch.tensor([[1, 3], [0, 2]])
    cases = [lambda t, i, j: t[:, i], lambda t, i, j: t[:, :, i], lambda t, i, j: t[:, i, j[0, :1]],
             lambda t, i, j: t[i, :, j[0, :1]], lambda t, i, j: t[:, j], lambda t, i, j: t[:, i, None]]
    for f in cases:
        ref = f(x, i, j)
        for ii, jj in ((i, j), (i.to(chip), j.to(chip))):      # CPU index tensors are uploaded
            assert torch.equal(f(x.to(chip), ii, jj).cpu(), ref)
    _no_cpu(chip)
    with pytest.raises(IndexError, match="out of bounds"):       # PyTorch's error for a bad index
        x.to(chip)[:, torch.tensor([7], device=chip)]
