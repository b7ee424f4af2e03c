"""Ordinary PyTorch programs, unchanged, on the fl chips: tied weights,
checkpoints loaded onto a chip, default-device contexts, RNNs, device-only
factories, memory that stays flat, and the torch.cuda habits."""
import copy
import gc
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge.devices import chip_for
from tests.conftest import routes


class TiedLM(nn.Module):
    """An embedding tied to the output projection (GPT-2 style)."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx):
        return self.out(torch.tanh(self.mix(self.emb(idx))))


def _train(model, steps, device):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    idx, tgt = torch.randint(0, 11, (6, 5), generator=g), torch.randint(0, 11, (6, 5), generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(idx.to(device)).flatten(0, 1), tgt.to(device).flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ------------------------------------------------------------ tied weights

@pytest.mark.parametrize("how", ["to", "fl", "wrap"])
def test_tied_weights_stay_tied_and_train_like_the_cpu(x1, how):
    torch.manual_seed(0)
    cpu = TiedLM()
    fl = copy.deepcopy(cpu)
    n = len(list(cpu.parameters()))
    if how == "to":
        fl.to(x1)
    elif how == "fl":
        fl.fl(x1.index)
    else:
        flbridge.wrap(fl, device=x1)
    assert fl.emb.weight is fl.out.weight and len(list(fl.parameters())) == n
    assert fl.emb.weight.device == x1 and isinstance(fl.emb.weight, nn.Parameter)
    ref, got = _train(cpu, 4, "cpu"), _train(fl, 4, x1)
    assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-5, (ref, got)
    torch.testing.assert_close(fl.emb.weight.detach().cpu(), cpu.emb.weight.detach(), rtol=1e-5, atol=1e-5)


def test_tied_weights_survive_cpu_half_state_dict_deepcopy_and_save(x1, tmp_path):
    m = TiedLM().to(x1)
    m.to(torch.float16).to(torch.float32)
    assert m.emb.weight is m.out.weight
    m2 = TiedLM().to(x1)
    m2.load_state_dict(m.state_dict())
    assert m2.emb.weight is m2.out.weight and m2.emb.weight.device == x1
    m3 = copy.deepcopy(m2)
    assert m3.emb.weight is m3.out.weight and m3.emb.weight is not m2.emb.weight
    torch.save(m3, tmp_path / "whole.pt")
    m4 = torch.load(tmp_path / "whole.pt", weights_only=False)
    assert m4.emb.weight is m4.out.weight
    m4.to(x1).cpu()
    assert m4.emb.weight is m4.out.weight and m4.emb.weight.device.type == "cpu"
    torch.testing.assert_close(m4.emb.weight.detach(), m.emb.weight.detach().cpu())


# -------------------------------------------------- checkpoints onto a chip

@pytest.mark.parametrize("location", ["fl:1", "device", "dict", "callable"])
@pytest.mark.parametrize("weights_only", [True, False])
def test_torch_load_straight_onto_a_chip(flchips, tmp_path, location, weights_only):
    torch.manual_seed(0)
    model = TiedLM()
    sd = model.state_dict()
    sd["step"] = torch.tensor(7)
    torch.save(sd, tmp_path / "ck.pt")
    where = {"fl:1": "fl:1", "device": torch.device("fl", 1), "dict": {"cpu": "fl:1"},
             "callable": lambda storage, loc: torch.serialization.default_restore_location(storage, "fl:1")
             }[location]
    got = torch.load(tmp_path / "ck.pt", map_location=where, weights_only=weights_only)
    for k, v in sd.items():
        assert got[k].device == torch.device("fl", 1), k
        assert torch.equal(got[k].cpu(), v), k
    assert got["emb.weight"]._st is got["out.weight"]._st       # shared in the file: shared on the chip
    fresh = TiedLM().to("fl:1")
    fresh.load_state_dict({k: v for k, v in got.items() if k != "step"})
    assert fresh.emb.weight is fresh.out.weight
    torch.testing.assert_close(fresh(torch.tensor([[1, 2]]).to("fl:1")).cpu(), model(torch.tensor([[1, 2]])))


def test_torch_load_onto_a_missing_chip_says_which(flchips, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "ck.pt")
    with pytest.raises(flbridge.FlbridgeError, match="fl:9 does not exist"):
        torch.load(tmp_path / "ck.pt", map_location="fl:9")


# --------------------------------------------------- default-device contexts

def _inside(ctx):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
        with ctx:
            t = torch.randn(3, 4)
            text = str(t)
            vals = t.tolist()
            m = nn.Linear(4, 2)
            y = m(t)
            y.sum().backward()
            dev = torch.get_default_device()
    assert t.device == m.weight.device == y.device == dev == torch.device("fl", 1)
    assert m.weight.grad.device == dev
    assert "device='fl:1'" in text and len(vals) == 3 and t.tolist() == vals
    assert torch.ones(2).device.type == "cpu"                  # the context is over


def test_printing_reading_and_modules_inside_flbridge_device(flchips):
    _inside(flbridge.device("xpu:x1"))


def test_printing_reading_and_modules_inside_torch_device(flchips):
    _inside(torch.device("fl:1"))


def test_set_default_device_fl(flchips):
    torch.set_default_device("fl:1")
    try:
        a = torch.arange(6.0).reshape(2, 3)
        assert "device='fl:1'" in repr(a)
        assert a.device == torch.device("fl", 1) and a.tolist() == [[0, 1, 2], [3, 4, 5]]
        m = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        assert m(a).device == a.device and m[0].weight.device == a.device
    finally:
        torch.set_default_device(None)
    assert torch.ones(1).device.type == "cpu"


# -------------------------------------------------------------------- RNNs

def _grads(m):
    return [p.grad.detach().cpu() for p in m.parameters()]


@pytest.mark.parametrize("cls,kw", [
    (nn.LSTM, dict(num_layers=2, bidirectional=True, batch_first=True)),
    (nn.GRU, dict(num_layers=2, bidirectional=True)),
    (nn.LSTM, dict(bias=False, proj_size=3)),
    (nn.GRU, dict(bias=False, batch_first=True)),
])
def test_rnns_match_the_cpu_forward_and_backward(th1, cls, kw):
    torch.manual_seed(0)
    cpu = cls(5, 7, **kw)
    fl = copy.deepcopy(cpu).to(th1)
    x = torch.randn(4, 3, 5)
    y, _ = cpu(x)
    yf, _ = fl(x.to(th1))
    (y * y).sum().backward()
    (yf * yf).sum().backward()
    torch.testing.assert_close(yf.detach().cpu(), y.detach(), rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(cpu), _grads(fl)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert any(op.startswith("aten::_thnn_fused") and how == "decomposed" for op, how in routes(th1))


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_cells_match_the_cpu(x1, cls, bias):
    torch.manual_seed(0)
    cpu = cls(5, 6, bias=bias)
    fl = copy.deepcopy(cpu).to(x1)
    x = torch.randn(3, 5)
    out, outf = cpu(x), fl(x.to(x1))
    h, hf = (out[0], outf[0]) if isinstance(out, tuple) else (out, outf)
    h.sum().backward()
    hf.sum().backward()
    torch.testing.assert_close(hf.detach().cpu(), h.detach(), rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(cpu), _grads(fl)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_packed_sequences_through_an_lstm(x1v2):
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    torch.manual_seed(0)
    cpu = nn.LSTM(5, 4, batch_first=True, bidirectional=True)
    fl = copy.deepcopy(cpu).to(x1v2)
    x, lengths = torch.randn(3, 6, 5), torch.tensor([6, 4, 2])
    outs = []
    for m, xx in ((cpu, x), (fl, x.to(x1v2))):
        packed = pack_padded_sequence(xx, lengths, batch_first=True)
        assert packed.batch_sizes.device.type == "cpu"
        y, _ = pad_packed_sequence(m(packed)[0], batch_first=True)
        y.pow(2).sum().backward()
        outs.append(y)
    torch.testing.assert_close(outs[1].detach().cpu(), outs[0].detach(), rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(cpu), _grads(fl)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "none", "mean"])
def test_ctc_loss_takes_lengths_on_the_cpu_as_on_cuda(th1, reduction):
    """CTC's input and target lengths may stay on the CPU beside device
    log-probs (as with CUDA); with reduction='mean', PyTorch divides the
    device loss by the CPU target lengths, which fails on CUDA too, so
    there the lengths must be on the device."""
    T, N, C, S = 12, 3, 6, 4
    torch.manual_seed(0)
    logits = torch.randn(T, N, C)
    targets = torch.randint(1, C, (N, S))
    in_len, tg_len = torch.tensor([12, 10, 7]), torch.tensor([4, 2, 3])
    ref_x = logits.clone().requires_grad_()
    ref = F.ctc_loss(ref_x.log_softmax(2), targets, in_len, tg_len, reduction=reduction)
    ref.sum().backward()
    for lengths_on in ("cpu", th1):
        x = logits.to(th1).requires_grad_()
        args = (x.log_softmax(2), targets.to(th1), in_len.to(lengths_on), tg_len.to(lengths_on))
        if reduction == "mean" and lengths_on == "cpu":
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
                F.ctc_loss(*args, reduction=reduction)
            continue
        out = F.ctc_loss(*args, reduction=reduction)
        out.sum().backward()
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad.cpu(), ref_x.grad, rtol=1e-4, atol=1e-6)


def test_data_parallel_over_two_chips_matches_the_cpu(flchips):
    """nn.DataParallel's scatter/gather/broadcast kernels exist only in CUDA
    builds of torch (torch._C._scatter, ...); on fl they run in Python."""
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    fl = copy.deepcopy(cpu).to("fl:0")
    x = torch.randn(10, 6)
    ref = cpu(x)
    ref.pow(2).sum().backward()
    dp = nn.DataParallel(fl, device_ids=[0, 2])
    flbridge.reset_stats("fl:2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # torch's reduce_add asks NCCL first
        y = dp(x.to("fl:0"))
        assert y.device == torch.device("fl:0")
        y.pow(2).sum().backward()
    torch.testing.assert_close(y.detach().cpu(), ref.detach())
    for a, b in zip(_grads(cpu), _grads(fl)):
        torch.testing.assert_close(b, a)
    assert flbridge.stats("fl:2")["native_ops"] > 0       # the second replica ran on the second chip
    assert nn.DataParallel(copy.deepcopy(cpu).to("fl:0")).device_ids == list(range(torch.fl.device_count()))


# ----------------------------------------------------- device-only factories

def _device_factories():
    """Every aten op that takes no tensor but a device and has a backend
    kernel (so PyTorch dispatches it on the device argument alone)."""
    out = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        base, _, ovl = name.partition(".")
        op = getattr(getattr(torch.ops.aten, base[6:]), ovl or "default", None)
        if op is None:
            continue
        s = op._schema
        has = lambda k: torch._C._dispatch_has_kernel_for_dispatch_key(name, k)  # noqa: E731
        if any("Tensor" in str(a.type) for a in s.arguments) or not any(a.name == "device" for a in s.arguments):
            continue
        if not any("Tensor" in str(r.type) for r in s.returns) or has("CompositeImplicitAutograd") \
                or (has("CompositeExplicitAutograd") and not has("CPU")):
            continue
        out.append(name)
    return out


def test_every_device_only_factory_has_an_fl_kernel(flchips):
    from flbridge.backend.registration import HOST_FACTORIES, UNSUPPORTED_FACTORIES
    known = {"aten::empty.memory_format", "aten::empty_strided"} | {f"aten::{n}" for n in HOST_FACTORIES} \
        | {f"aten::{n}" for n in UNSUPPORTED_FACTORIES}
    found = set(_device_factories())
    assert found <= known, found - known
    for name in found:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name


def test_factories_called_with_only_a_device(x1):
    z = torch._efficientzerotensor(2, 3, device=x1)
    assert z.device == x1 and torch.equal(z.cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.tril_indices(4, 3, 1, device=x1).cpu(), torch.tril_indices(4, 3, 1))
    assert torch.equal(torch.triu_indices(3, 3, device=x1).cpu(), torch.triu_indices(3, 3))
    with pytest.raises(NotImplementedError, match="quantized tensors are not supported on fl"):
        torch._empty_affine_quantized([2], device=x1)


def test_sgn_backward_uses_an_efficient_zero_tensor(x1):
    x = torch.randn(5)
    xf = x.to(x1).requires_grad_()
    torch.sgn(xf).sum().backward()
    assert torch.equal(xf.grad.cpu(), torch.zeros(5))
    xc = x.clone().requires_grad_()
    (torch.sgn(xf) * xf).sum().backward()
    (torch.sgn(xc) * xc).sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), xc.grad)


# ------------------------------------------------------------ flat memory

def _adam_loop(device, steps):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4)).to(device)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(16, 8).to(device)
    held = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
        if step in (steps // 10, steps):
            gc.collect()
            held.append((torch.fl.memory_allocated(device), torch.fl.memory_reserved(device)))
    return held


def test_device_memory_stays_flat_over_a_training_loop(th1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (a1, r1), (a2, r2) = _adam_loop(th1, 120)
    assert a2 == a1 and r2 == r1, ((a1, r1), (a2, r2))
    assert len(chip_for(th1)._constants) <= 64


@pytest.mark.slow
def test_device_memory_stays_flat_over_5000_adam_steps(x1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (a1, r1), (a2, r2) = _adam_loop(x1, 5000)
    assert a2 == a1 and r2 == r1, ((a1, r1), (a2, r2))


def test_a_cpu_fallback_leaves_no_reference_cycle(x1):
    a, b = torch.randn(4).to(x1), torch.randn(4).to(x1)
    torch.atan2(a, b)                                          # warm up (route, caches)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for _ in range(20):
            torch.atan2(a, b)                                  # no kernel on any chip: the CPU
        assert gc.collect() == 0, before
    finally:
        gc.enable()


# ---------------------------------------------------- the torch.cuda habits

def test_seeded_dropout_is_reproducible_on_a_chip(x1):
    x = torch.ones(64).to(x1)
    torch.manual_seed(5)
    a = F.dropout(x, 0.5).cpu()
    torch.manual_seed(5)
    b = F.dropout(x, 0.5).cpu()
    torch.fl.manual_seed_all(6)
    c = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    state = torch.fl.get_rng_state(x1)
    d = F.dropout(x, 0.5).cpu()
    torch.fl.set_rng_state(state, x1)
    assert torch.equal(F.dropout(x, 0.5).cpu(), d)
    with torch.random.fork_rng(devices=[x1.index], device_type="fl"):
        F.dropout(x, 0.5)
    # an fl generator: its own (seed, offset) on the chip (not the CPU's numbers, as on CUDA)
    g = torch.fl.Generator(x1)
    g.manual_seed(3)
    e = torch.randn(5, device=x1, generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.randn(5, device=x1, generator=g).cpu(), e)
    torch.fl.set_rng_state(torch.tensor([3] + [0] * 15, dtype=torch.uint8), x1)     # seed 3, offset 0
    assert torch.equal(torch.randn(5, device=x1).cpu(), e)


def test_pin_memory_and_a_pinning_dataloader(x1):
    t = torch.randn(3, 4)
    p = t.pin_memory()
    assert p.is_pinned() and not t.is_pinned() and torch.equal(p, t)
    assert p.data_ptr() != t.data_ptr()
    ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    batches = list(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True))
    assert all(x.is_pinned() for x, _ in batches)
    assert torch.equal(torch.cat([x for x, _ in batches]).to(x1).cpu(), ds.tensors[0])


def test_memory_api_like_torch_cuda(x1):
    torch.fl.empty_cache()
    torch.fl.reset_peak_memory_stats(x1)
    base = torch.fl.memory_allocated(x1)
    t = torch.ones(1024, 1024).to(x1)
    t = t + t                                                  # a device result: a 4 MiB block
    assert torch.fl.memory_allocated(x1) >= base + (4 << 20)
    assert torch.fl.max_memory_allocated(x1) >= torch.fl.memory_allocated(x1)
    free, total = torch.fl.mem_get_info(x1)
    assert total == 4 << 30 and 0 < free < total
    stats = torch.fl.memory_stats(x1)
    assert stats["allocated_bytes.all.current"] == torch.fl.memory_allocated(x1)
    assert stats["reserved_bytes.all.peak"] >= stats["allocated_bytes.all.peak"]
    summary = torch.fl.memory_summary(x1)
    assert "fl:1 (xpu:x1)" in summary and "Allocated memory" in summary
    del t
    gc.collect()
    assert torch.fl.memory_allocated(x1) == base
    assert torch.fl.memory_reserved(x1) >= torch.fl.memory_allocated(x1)
    assert torch.fl.get_device_properties(x1).total_memory == 4 << 30


def test_streams_and_events_like_torch_cuda(x1):
    s = torch.fl.Stream(x1)
    assert s.device == x1 and torch.fl.current_stream(x1) == torch.fl.Stream(x1)
    start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
    with torch.fl.stream(s):
        assert torch.fl.current_stream(x1) is s
        start.record()
        y = torch.randn(64, 64).to(x1) @ torch.randn(64, 64).to(x1)
        end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    s.wait_event(end)
    s.synchronize()
    assert s.query() and y.shape == (64, 64)
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.fl.Event().elapsed_time(end)


def test_data_ptr_is_the_device_address(x1):
    t = torch.arange(8.0).to(x1)
    p = t.data_ptr()
    assert p != 0 and t[2:].data_ptr() == p + 8
    assert torch.empty(0, device=x1).data_ptr() == 0


def test_layer_norm_backward_in_bfloat16_through_the_cpu_fallback(th1):
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    w, b = torch.randn(8, dtype=torch.bfloat16), torch.randn(8, dtype=torch.bfloat16)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    fl = [t.to(th1).requires_grad_() for t in (x, w, b)]
    g = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    ref = torch.autograd.grad(F.layer_norm(leaves[0], (8,), leaves[1], leaves[2]), leaves, g)
    got = torch.autograd.grad(F.layer_norm(fl[0], (8,), fl[1], fl[2]), fl, g.to(th1))
    for a, b_ in zip(ref, got):
        torch.testing.assert_close(b_.cpu(), a, rtol=3e-2, atol=3e-2)
