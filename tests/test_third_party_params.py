"""Parameters as third-party programs handle them, on fl as on CUDA:
`param.data = other` (ZeRO / FSDP1 point parameters at slices of a flat
buffer), module conversions that keep each parameter object without
changing what CPU-only code does, and whole models saved with torch.save
coming back on their chip."""
import gc
import io
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from flbridge.tensor import XPUTensor


class TiedLM(nn.Module):
    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx):
        return self.out(torch.tanh(self.mix(self.emb(idx))))


IDX = torch.tensor([[1, 2, 3], [4, 5, 6]])


# ------------------------------------------------------- param.data = ...

def test_param_data_set_to_views_of_a_flat_buffer_aliases_it(th1):
    """ZeRO-1/2: `p.data = flat.narrow(0, offset, n).view(shape)`; the
    parameter must read and write the flat buffer's bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).to(th1)
    ref = [p.detach().cpu().clone() for p in model.parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.data = flat.narrow(0, offset, n).view(p.shape)
        offset += n
    for p, r in zip(model.parameters(), ref):
        assert p._st is flat._st and torch.equal(p.detach().cpu(), r)
    with torch.no_grad():
        flat.mul_(2)                                   # a write to the buffer shows in every parameter
    for p, r in zip(model.parameters(), ref):
        assert torch.equal(p.detach().cpu(), r * 2)
    x = torch.randn(5, 3)
    model(x.to(th1)).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # a parameter's step shows in the buffer
    w0 = model[0].weight
    assert torch.equal(flat[:w0.numel()].cpu().view(4, 3), w0.detach().cpu())
    assert w0.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
    assert w0.data_ptr() == flat.data_ptr()


def test_param_data_free_and_restore_like_fsdp(x1):
    """FSDP1 frees a parameter with `p.data = torch.empty(0)` and points it
    back at its unsharded view later."""
    p = nn.Parameter(torch.arange(6.0).to(x1))
    keep = p.data
    p.data = torch.empty(0, device=x1)
    assert p.numel() == 0 and p.device == x1
    p.data = keep.view(2, 3)
    assert p.shape == (2, 3) and torch.equal(p.detach().cpu(), torch.arange(6.0).view(2, 3))
    p.data = p.data.half()                            # a dtype change through .data
    assert p.dtype == torch.float16 and p.requires_grad
    assert torch.equal(p.detach().cpu(), torch.arange(6.0).view(2, 3).half())


def test_param_data_across_devices_keeps_the_parameter(x1):
    """`cpu_param.data = fl_tensor` and back, as `cpu_param.data = cuda_tensor`."""
    lin = nn.Linear(3, 2)
    w = lin.weight
    w.marker = "mine"
    calls = []
    w.register_hook(lambda g: calls.append("hook"))
    w.data = w.data.to(x1)
    assert lin.weight is w and w.device == x1 and isinstance(w, nn.Parameter) and w.requires_grad
    assert w.marker == "mine"
    lin.bias.data = lin.bias.data.to(x1)
    lin(torch.randn(4, 3).to(x1)).sum().backward()
    assert calls == ["hook"] and w.grad.device == x1
    w.data = w.data.cpu()
    assert w.device.type == "cpu" and type(w) is nn.Parameter and w.marker == "mine"
    assert not hasattr(w, "_st")
    t = torch.zeros(3).to(x1)
    t.data = torch.ones(3)                             # a plain fl tensor too
    assert t.device.type == "cpu" and torch.equal(t, torch.ones(3))


# ------------------------------------- conversions keep parameter objects

def test_importing_flbridge_leaves_cpu_conversions_to_pytorch():
    """No process-wide swap-on-conversion: what fails with it (weakrefs to
    parameters, old-style weight_norm, a live graph) works on the CPU."""
    assert torch.__future__.get_swap_module_params_on_conversion() is False
    m = nn.Linear(3, 3)
    fins = [weakref.finalize(p, lambda: None) for p in m.parameters()]   # DeepSpeed does this
    m.to(torch.float64)
    assert m.weight.dtype == torch.float64 and all(f.alive for f in fins)
    with pytest.warns(FutureWarning):
        wn = nn.utils.weight_norm(nn.Linear(3, 3))
    wn.double()
    wn.to(torch.float32)
    assert wn.weight_g.dtype == torch.float32
    m2 = nn.Linear(3, 3)
    y = m2(torch.randn(2, 3))                           # a graph still holds the parameters
    m2.double()
    assert m2.weight.dtype == torch.float64
    y.sum().backward()                                  # PyTorch's own behaviour: the graph was recorded in float32
    assert m2.weight.grad is not None


@pytest.mark.parametrize("how", ["to", "cpu_back", "half", "chip_to_chip", "load_state_dict"])
def test_a_model_used_under_autocast_can_be_moved_and_converted(flchips, how):
    """flbridge's autocast cache holds weakrefs to parameters: moving or
    converting the model afterwards must work (and keep tied weights)."""
    torch.manual_seed(0)
    m = TiedLM().to("fl:1")
    params = {id(p) for p in m.parameters()}
    with torch.autocast("fl", dtype=torch.float16):
        m(IDX.to("fl:1")).float().sum().backward()
    if how == "to":
        m.to("fl:2")
    elif how == "cpu_back":
        m.cpu().to("fl:1")
    elif how == "half":
        m.half()
    elif how == "chip_to_chip":
        m.to("fl:0").to("fl:1")
    else:
        m.load_state_dict(TiedLM().state_dict())
    assert m.emb.weight is m.out.weight and {id(p) for p in m.parameters()} == params


def test_conversions_keep_weakrefs_hooks_attributes_and_subclasses(x1):
    class MyParam(nn.Parameter):
        pass

    m = nn.Linear(3, 2)
    m.weight = MyParam(m.weight.detach())
    w = m.weight
    w.tag = 7
    fin = weakref.finalize(w, lambda: None)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.device.type))
    m.to(x1)
    assert m.weight is w and w.device == x1 and isinstance(w, nn.Parameter) and w.tag == 7 and fin.alive
    m(torch.randn(4, 3).to(x1)).sum().backward()
    assert seen == ["fl"] and w.grad.device == x1
    m.cpu()
    assert m.weight is w and type(w) is MyParam and w.grad.device.type == "cpu" and w.tag == 7
    del w, m
    gc.collect()
    assert not fin.alive


def test_moving_between_forward_and_backward_says_so(x1):
    m = nn.Linear(3, 2)
    y = m(torch.randn(4, 3))
    m.to(x1)
    with pytest.raises(RuntimeError, match="moved to another device"):
        y.sum().backward()


def test_tied_model_trains_after_round_trips_like_the_cpu(x1):
    torch.manual_seed(0)
    cpu = TiedLM()
    fl = TiedLM()
    fl.load_state_dict(cpu.state_dict())
    fl.to(x1).cpu().to(x1)
    opt_c, opt_f = (torch.optim.Adam(m.parameters(), lr=0.05) for m in (cpu, fl))
    tgt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        for m, opt, dev in ((cpu, opt_c, "cpu"), (fl, opt_f, x1)):
            opt.zero_grad()
            F.cross_entropy(m(IDX.to(dev)).flatten(0, 1), tgt.to(dev).flatten()).backward()
            opt.step()
    assert fl.emb.weight is fl.out.weight
    # float32 Adam over 3 steps on a 11x8 problem: parameters agree to ~1e-6
    torch.testing.assert_close(fl.emb.weight.detach().cpu(), cpu.emb.weight.detach(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------- torch.save / load

def test_whole_model_and_optimizer_saved_and_loaded_come_back_on_fl(flchips, tmp_path):
    torch.manual_seed(0)
    m = TiedLM().to("fl:2")
    m.mix.weight.note = "kept"
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    m(IDX.to("fl:2")).sum().backward()
    opt.step()
    torch.save({"model": m, "opt": opt.state_dict()}, tmp_path / "ck.pt")
    ck = torch.load(tmp_path / "ck.pt", weights_only=False)
    m2, st = ck["model"], ck["opt"]
    assert m2.emb.weight is m2.out.weight and m2.emb.weight.device == torch.device("fl", 2)
    assert isinstance(m2.mix.weight, nn.Parameter) and m2.mix.weight.note == "kept"
    assert all(v.device == torch.device("fl", 2) for s in st["state"].values() for v in s.values()
               if isinstance(v, torch.Tensor) and v.dim())
    opt2 = torch.optim.AdamW(m2.parameters(), lr=0.01)
    opt2.load_state_dict(st)
    torch.testing.assert_close(m2(IDX.to("fl:2")).cpu(), m(IDX.to("fl:2")).cpu())   # the next forward runs on fl
    m2(IDX.to("fl:2")).sum().backward()
    opt2.step()
    on_cpu = torch.load(tmp_path / "ck.pt", weights_only=False, map_location="cpu")["model"]
    assert on_cpu.emb.weight.device.type == "cpu" and on_cpu.emb.weight is on_cpu.out.weight
    torch.testing.assert_close(on_cpu.emb.weight.detach(), m.emb.weight.detach().cpu())


def test_state_dict_saved_on_fl_loads_on_fl_with_weights_only(x1):
    m = nn.Linear(3, 2).to(x1)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    sd = torch.load(io.BytesIO(buf.getvalue()))
    assert all(type(v) is XPUTensor and v.device == x1 for v in sd.values())
    assert torch.equal(sd["weight"].cpu(), m.weight.detach().cpu())
