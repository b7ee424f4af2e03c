"""Real models on the simulated chips, against the same computation on the
CPU; what ran where is asserted from flbridge.stats() and the simulators'
own counters (strict mode: an invalid call would abort the run)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge.demo import SmallCNN
from tests.conftest import routes, sim_kernels


def train_side_by_side(device, steps=4, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cpu = SmallCNN().to(dtype)
    fl = copy.deepcopy(cpu).to(device)
    oc = torch.optim.Adam(cpu.parameters(), lr=1e-2)
    of = torch.optim.Adam(fl.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, 16, 16, generator=g).to(dtype)   # one batch, learnt step by step
    y = torch.randint(0, 10, (8,), generator=g)
    losses = []
    for _ in range(steps):
        pair = []
        for m, o, xx, yy in ((cpu, oc, x, y), (fl, of, x.to(device), y.to(device))):
            o.zero_grad()
            loss = F.cross_entropy(m(xx), yy)
            loss.backward()
            o.step()
            pair.append(loss.item())
        losses.append(pair)
    return cpu, fl, losses


@pytest.mark.parametrize("chip", ["xpu:x1", "xpu:x1-v2"])
def test_small_cnn_trains_like_on_the_cpu(flchips, chip):
    dev = flbridge.torch_device(chip)
    flbridge.reset_stats(dev)
    cpu, fl, losses = train_side_by_side(dev)
    for lc, lf in losses:
        assert abs(lc - lf) < 1e-4, losses
    assert losses[-1][0] < losses[0][0]                       # it does learn
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-4, atol=1e-4, msg=name)
    for (name, a), b in zip(cpu.named_buffers(), fl.buffers()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-4, msg=name)
    r = routes(dev)
    k = sim_kernels(dev)
    # always native on x1 chips: the pools, linear layers, ReLU, Adam's arithmetic
    for op in ("aten::max_pool2d_with_indices.default", "aten::addmm.default", "aten::relu.default"):
        assert r.get((op, "native"), 0) > 0, op
    assert k["max_pool2d"] == 4 and k["addmm"] == 4 and k["relu"] >= 8
    if chip == "xpu:x1-v2":                                    # float32 convolution is native on v2
        assert r[("aten::convolution.default", "native")] == 8 and k["conv2d"] == 8
    else:                                                      # revision 1 convolves float16 only
        assert r[("aten::convolution.default", "cpu")] == 8 and "conv2d" not in k
    assert r[("aten::native_batch_norm.default", "cpu")] == 4  # training-mode batch norm: no kernel
    s = flbridge.stats(dev)
    assert s["native_ops"] > s["cpu_fallback_ops"]


def test_small_cnn_in_float16_convolves_natively_on_x1(x1):
    torch.manual_seed(0)
    cpu = SmallCNN().half().eval()
    fl = copy.deepcopy(cpu).to(x1)
    x = torch.randn(4, 3, 16, 16).half()
    torch.testing.assert_close(fl(x.to(x1)).cpu(), cpu(x), rtol=2e-2, atol=2e-2)
    assert sim_kernels(x1)["conv2d"] == 2
    assert routes(x1)[("aten::native_batch_norm.default", "native")] == 1  # inference batch norm


def test_stride_3_convolution_falls_back(x1v2):
    conv = nn.Conv2d(3, 4, 3, stride=3)
    x = torch.randn(1, 3, 12, 12)
    with pytest.warns(flbridge.FallbackWarning, match="stride=3 not in \\[1, 2, 4\\]"):
        y = copy.deepcopy(conv).to(x1v2)(x.to(x1v2))
    torch.testing.assert_close(y.cpu(), conv(x).detach(), rtol=1e-4, atol=1e-4)
    assert routes(x1v2) == {("aten::convolution.default", "cpu"): 1}
    assert "conv2d" not in sim_kernels(x1v2)


class EncoderBlock(nn.Module):
    """Embedding, multi-head attention (softmax), layer norm, GELU MLP."""

    def __init__(self, vocab=64, d=32, heads=2, ff=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.layer(self.emb(idx)))


def run_encoder(device, seq):
    torch.manual_seed(0)
    cpu = EncoderBlock()
    fl = copy.deepcopy(cpu).to(device)
    idx = torch.randint(0, 64, (2, seq))
    out_c, out_f = cpu(idx), fl(idx.to(device))
    torch.testing.assert_close(out_f.cpu(), out_c, rtol=1e-4, atol=1e-4)
    out_c.logsumexp(-1).mean().backward()
    out_f.logsumexp(-1).mean().backward()
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        assert b.grad is not None and b.grad.device == device, name
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_encoder_block_on_th1_forward_and_backward(th1):
    run_encoder(th1, seq=16)          # batch*seq = 32, d = 32, ff = 64: multiples of 16
    r = routes(th1)
    k = sim_kernels(th1)
    assert r[("aten::addmm.default", "native")] >= 3            # projections and the MLP
    assert r[("aten::native_layer_norm.default", "native")] == 2
    assert r[("aten::_safe_softmax.default", "native")] == 1    # attention's softmax
    assert r[("aten::gelu.default", "native")] == 1
    assert k["layer_norm"] == 2 and k["safe_softmax"] == 1 and k["gelu"] == 1
    # vocab = 64 but the head's input has batch*seq = 32 rows: all multiples of 16 -> native
    assert r.get(("aten::mm.default", "cpu"), 0) == 0


def test_encoder_block_on_th1_falls_back_for_sizes_not_multiple_of_16(th1):
    run_encoder(th1, seq=5)           # 2*5 = 10 rows: M is not a multiple of 16
    r = routes(th1)
    assert r[("aten::addmm.default", "cpu")] >= 1
    assert r.get(("aten::bmm.default", "cpu"), 0) >= 1          # attention scores: 5x5
    fb = [x for x in flbridge.stats(th1)["routes"] if x["op"] == "aten::addmm.default" and x["route"] == "cpu"]
    assert all("not a multiple of 16" in x["detail"] for x in fb)
    assert r[("aten::native_layer_norm.default", "native")] == 2  # the rest stays native


def test_encoder_block_on_x1_forward_and_backward(x1):
    run_encoder(x1, seq=7)
    r = routes(x1)
    k = sim_kernels(x1)
    assert r[("aten::bmm.default", "native")] >= 2 and r[("aten::embedding.default", "native")] == 1
    assert r[("aten::native_layer_norm.default", "native")] == 2
    assert k["bmm"] >= 2 and k["gelu"] == 1 and k["layer_norm"] == 2
