"""PyTorch features around the model: DataLoader workers and torch.compile."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import flbridge
from tests.conftest import routes


def test_dataloader_with_worker_processes(x1v2):
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(48, 3, 8, 8), torch.randint(0, 4, (48,)))
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 4))
    ref = copy.deepcopy(model)
    model.to(x1v2)
    opt, opt_ref = torch.optim.SGD(model.parameters(), 0.1), torch.optim.SGD(ref.parameters(), 0.1)
    batches = list(DataLoader(ds, batch_size=16, num_workers=2))     # workers build CPU batches
    for x, y in batches:
        for m, o, xx, yy in ((model, opt, x.to(x1v2), y.to(x1v2)), (ref, opt_ref, x, y)):
            o.zero_grad()
            F.cross_entropy(m(xx), yy).backward()
            o.step()
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5)
    assert routes(x1v2)[("aten::convolution.default", "native")] == 3


@pytest.mark.slow   # Dynamo's first compile takes 5 s
def test_torch_compile_runs_each_op_through_flbridge(x1):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(x1)
    x = torch.randn(3, 4).to(x1)
    ref = model(x).cpu()
    flbridge.reset_stats(x1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamo reports its graph breaks at fl tensors
        compiled = torch.compile(model)
        y = compiled(x)
    y.sum().backward()
    torch.testing.assert_close(y.cpu(), ref)
    assert model[0].weight.grad is not None and model[0].weight.grad.device == x1
    r = routes(x1)
    assert r[("aten::addmm.default", "native")] >= 2 and r[("aten::relu.default", "native")] >= 1
    torch._dynamo.reset()
