"""Real models on the simulated chips, against the same computation on the
CPU; what ran where is asserted from flbridge.stats() and the simulators'
own counters (strict mode: an invalid call would abort the run)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge.demos.models import SmallCNN, TinyGPT, token_batch
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
    # always native on x1 chips: the pools and their gradients, linear layers, ReLU and its
    # gradient, the loss and its gradient, Adam's arithmetic, the batch counter (int64)
    for op in ("aten::max_pool2d_with_indices.default", "aten::max_pool2d_with_indices_backward.default",
               "aten::_adaptive_avg_pool2d_backward.default", "aten::addmm.default", "aten::relu.default",
               "aten::threshold_backward.default", "aten::_log_softmax.default", "aten::nll_loss_forward.default",
               "aten::nll_loss_backward.default", "aten::_log_softmax_backward_data.default", "aten::lerp_.Scalar",
               "aten::addcmul_.default", "aten::addcdiv_.default", "aten::add_.Tensor"):
        assert r.get((op, "native"), 0) > 0, op
    assert k["max_pool2d"] == 4 and k["max_pool2d_backward"] == 4 and k["addmm"] == 4 and k["relu"] >= 8
    assert k["lerp"] == k["addcmul"] == k["addcdiv"] == 7 * 4      # 7 parameters, 4 steps
    # training-mode batch norm: PyTorch's decomposition, its statistics from var_mean on the chip
    assert r[("aten::native_batch_norm.default", "decomposed")] == 4 and k["var_mean"] == 4
    assert r[("aten::native_batch_norm_backward.default", "decomposed")] == 4
    s = flbridge.stats(dev)
    if chip == "xpu:x1-v2":                                    # float32 convolution is native on v2
        assert r[("aten::convolution.default", "native")] == 8 and k["conv2d"] == 8
        # both backward passes run on the chip: conv1's asks for no input gradient
        # (output_mask [False, True, False]), which the kernel receives and skips
        assert r[("aten::convolution_backward.default", "native")] == 8 and k["conv2d_backward"] == 8
        assert ("aten::convolution_backward.default", "cpu") not in r
        assert s["cpu_fallback_ops"] == 0
    else:                                                      # revision 1 convolves float16 only
        assert r[("aten::convolution.default", "cpu")] == 8 and "conv2d" not in k
        assert r[("aten::convolution_backward.default", "cpu")] == 8 and "conv2d_backward" not in k
        assert s["cpu_fallback_ops"] == 16


def test_small_cnn_trains_on_th1_in_nchw(th1):
    cpu, fl, losses = train_side_by_side(th1, steps=2)
    for lc, lf in losses:
        assert abs(lc - lf) < 1e-4, losses
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-4, atol=1e-4, msg=name)
    r = routes(th1)
    k = sim_kernels(th1)
    # TH1 convolves and pools NCHW tensors as they are: no layout copies
    assert r[("aten::convolution.default", "native")] == 4 and k["conv2d"] == 4
    # both convolutions' backward on the chip (conv1's asks for no input gradient: output_mask)
    assert r[("aten::convolution_backward.default", "native")] == 4 and k["conv2d_backward"] == 4
    for op in ("aten::max_pool2d_with_indices_backward.default", "aten::_adaptive_avg_pool2d_backward.default",
               "aten::var_mean.correction", "aten::nll_loss_backward.default", "aten::addcdiv_.default"):
        assert r.get((op, "native"), 0) > 0, op
    # the classifier's 8x64 @ 64x10 is not multiples of 16 for TH1's matrix unit: padded on the chip
    # (its only copies besides the program's own are the padding's)
    assert r[("aten::addmm.default", "native")] == 2 and r[("aten::mm.default", "native")] >= 2
    assert k["fill"] >= 2 and k["copy"] > r.get(("aten::copy_.default", "native"), 0)
    assert flbridge.stats(th1)["cpu_fallback_ops"] == 0


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
    assert_backward_is_native(r)
    assert {route for _, route in r} == {"native"}              # the whole step, the loss's logsumexp too


def assert_backward_is_native(r):
    """The encoder's backward kernels: layer norm, GELU, attention's softmax, the
    packed q/k/v projection's select, the embedding."""
    for op in ("aten::native_layer_norm_backward.default", "aten::gelu_backward.default",
               "aten::_softmax_backward_data.default", "aten::select_backward.default",
               "aten::embedding_dense_backward.default"):
        assert r.get((op, "native"), 0) >= 1, op


def test_encoder_block_on_th1_pads_sizes_not_multiple_of_16(th1):
    run_encoder(th1, seq=5)           # 2*5 = 10 rows, 5x5 attention scores: not multiples of 16
    r = routes(th1)
    k = sim_kernels(th1)
    # the spec's constraints.pad: the bridge zero-pads M, N, K on the device and slices the result
    assert r[("aten::addmm.default", "native")] >= 1 and r[("aten::bmm.default", "native")] >= 2
    assert not any(op in ("aten::addmm.default", "aten::mm.default", "aten::bmm.default") and route != "native"
                   for op, route in r)
    assert k["fill"] >= 1 and k["copy"] >= 2                     # the padding, done by the chip's own kernels
    assert r[("aten::native_layer_norm.default", "native")] == 2
    assert flbridge.stats(th1)["cpu_fallback_ops"] == 0


def test_encoder_block_on_x1_forward_and_backward(x1):
    run_encoder(x1, seq=7)
    r = routes(x1)
    k = sim_kernels(x1)
    assert r[("aten::bmm.default", "native")] >= 2 and r[("aten::embedding.default", "native")] == 1
    assert r[("aten::native_layer_norm.default", "native")] == 2
    assert k["bmm"] >= 2 and k["gelu"] == 1 and k["layer_norm"] == 2
    assert r[("aten::_safe_softmax.default", "vendor_fallback")] == 1      # x1's generic softmax
    assert k["custom_safe_softmax"] == 1
    assert_backward_is_native(r)
    assert flbridge.stats(x1)["cpu_fallback_ops"] == 0


def train_gpt(device, steps=2, seq=16):
    cpu = TinyGPT()
    fl = copy.deepcopy(cpu).to(device)
    oc = torch.optim.AdamW(cpu.parameters(), lr=1e-3, foreach=True)
    of = torch.optim.AdamW(fl.parameters(), lr=1e-3, foreach=True)
    for step in range(steps):
        x, y = token_batch(2, seq, seed=step)
        for m, o, xx, yy in ((cpu, oc, x, y), (fl, of, x.to(device), y.to(device))):
            o.zero_grad()
            m(xx, yy)[1].backward()
            o.step()
    return cpu, fl


def test_tiny_gpt_trains_on_th1(th1):
    cpu, fl = train_gpt(th1, seq=12)  # 2 x 12 tokens: M = 24, attention 12x12: padded on the chip
    # (Adam normalizes each update: a gradient near zero on both sides can move its weight by
    # up to lr = 1e-3 either way, so parameters agree to 1e-4 rather than to float precision)
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-4, atol=1e-4, msg=name)
    s = flbridge.stats(th1)
    r = routes(th1)
    # everything on the chip: cat (a tensor list), split (views), arange (into an empty out=)
    assert {op for op, route in r if route != "native"} == set()
    assert s["fallback_ops"] == 0 and s["native_ops"] > 600
    for op in ("aten::cat.default", "aten::arange.start_out", "aten::mm.default", "aten::bmm.default"):
        assert r.get((op, "native"), 0) >= 1, op
    for op in ("aten::embedding_dense_backward.default", "aten::native_layer_norm_backward.default",
               "aten::_softmax_backward_data.default", "aten::masked_fill.Scalar", "aten::bitwise_not.default",
               "aten::nll_loss_forward.default", "aten::_log_softmax_backward_data.default", "aten::lerp_.Scalar",
               "aten::addcdiv_.default", "aten::gelu_backward.default"):
        assert r.get((op, "native"), 0) >= 1, op


def test_tiny_gpt_float16_inference_on_x1(x1):
    cpu = TinyGPT().half().eval()
    fl = copy.deepcopy(cpu).to(x1)
    x, y = token_batch(2, 12)
    with torch.no_grad():
        lc, ll = cpu(x, y)
        fc, fcl = fl(x.to(x1), y.to(x1))
    torch.testing.assert_close(fc.cpu(), lc, rtol=2e-2, atol=2e-2)
    assert abs(fcl.item() - ll.item()) < 2e-2
    r = routes(x1)
    assert r[("aten::_softmax.default", "vendor_fallback")] == 2        # x1's generic softmax, per block
    assert {op for op, route in r if route == "cpu"} == set()
    assert r[("aten::arange.start_out", "native")] == 1
    for op in ("aten::masked_fill.Scalar", "aten::bitwise_not.default", "aten::_log_softmax.default",
               "aten::nll_loss_forward.default", "aten::gelu.default", "aten::bmm.default"):
        assert r.get((op, "native"), 0) >= 1, op
