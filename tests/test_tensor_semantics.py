"""XPUTensor keeps PyTorch's semantics: views alias, in-place ops and out=
write through every alias, autograd and optimizers behave as on the CPU,
and tensors copy, pickle and save like CPU tensors."""
import copy
import io
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import flbridge
from flbridge.tensor import XPUTensor
from tests.conftest import routes


def same(fl_t, cpu_t):
    assert fl_t.device.type == "fl"
    torch.testing.assert_close(fl_t.cpu(), cpu_t)


# ------------------------------------------------------------------ views

@pytest.mark.parametrize("make_view", [
    lambda t: t.t(), lambda t: t.transpose(0, 1), lambda t: t.view(12), lambda t: t.view(2, 6),
    lambda t: t[1], lambda t: t[:, 1:3], lambda t: t[::2], lambda t: t.permute(1, 0),
    lambda t: t.unsqueeze(0), lambda t: t.as_strided((2, 2), (1, 4), 1), lambda t: t.narrow(1, 1, 2),
    lambda t: t.select(1, 2), lambda t: t.diagonal(), lambda t: t.view(torch.int32),
    lambda t: t.unflatten(1, (2, 2)), lambda t: t.expand(2, 3, 4),
])
def test_views_share_storage_and_match_cpu(x1, make_view):
    cpu = torch.arange(12.0).reshape(3, 4).clone()
    fl = cpu.to(x1)
    v, vc = make_view(fl), make_view(cpu)
    assert v.shape == vc.shape and v.stride() == vc.stride() and v.storage_offset() == vc.storage_offset()
    assert v._st is fl._st
    assert v._is_view() == vc._is_view() and (v._base is fl) == (vc._base is cpu)
    assert v.untyped_storage()._cdata == fl.untyped_storage()._cdata
    same(v, vc)


def test_views_cost_no_transfer(x1):
    t = torch.randn(4, 4).to(x1)
    y = t * 2                      # device-resident result
    flbridge.reset_stats(x1)
    y.t().unsqueeze(0)[0, 1:3].transpose(0, 1).unsqueeze(2).expand(4, 2, 3)
    s = flbridge.stats(x1)
    assert s["h2d_calls"] == s["d2h_calls"] == s["map_calls"] == 0


def test_views_in_inference_mode_follow_the_cpu(x1):
    """In inference mode a view of a normal tensor is a normal tensor sharing
    its version counter; a view of an inference tensor is an inference tensor."""
    w = torch.randn(4, 6).to(x1)
    with torch.inference_mode():
        views = [w.t(), w[1:], w.detach(), w.view(24), *w.split(3, dim=1)]
        made_here = torch.randn(4, 6).to(x1)
        inner = [made_here.t(), made_here.detach()]
    for v in views:
        assert not v.is_inference() and v._version == w._version
    assert all(v.is_inference() for v in inner)
    with torch.no_grad():
        w.add_(1.0)
    assert all(v._version == w._version for v in views)
    torch.testing.assert_close(views[0].cpu(), w.cpu().t())


def test_split_and_unbind_return_views(x1):
    cpu = torch.arange(12.0).reshape(4, 3)
    fl = cpu.to(x1)
    for a, b in zip(fl.split(2), cpu.split(2)):
        assert a._st is fl._st
        same(a, b)
    for a, b in zip(fl.unbind(1), cpu.unbind(1)):
        same(a, b)


@pytest.mark.parametrize("op", ["native", "fallback"])
def test_inplace_on_view_writes_through_to_base_and_aliases(x1, op):
    cpu = torch.arange(12.0).reshape(3, 4)
    fl = cpu.to(x1)
    other = fl.t()                      # another alias of the same storage
    for t in (cpu, fl):
        v = t[1:, ::2]
        if op == "native":
            v.mul_(10)                  # x1_mul on the device
        else:
            v.fmod_(7)                  # no kernel: CPU fallback
            v.add_(1)
    same(fl, cpu)
    same(other, cpu.t())
    r = routes(x1)
    if op == "native":
        assert r[("aten::mul_.Tensor", "native")] == 1
    else:
        assert r[("aten::fmod_.Scalar", "cpu")] == 1


def test_out_variant_writes_into_given_tensor(x1):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out_c = torch.empty(3, 4)
    out_f = torch.empty(3, 4).to(x1)
    view_f = out_f[1]
    r = torch.add(a.to(x1), b.to(x1), out=out_f)
    torch.add(a, b, out=out_c)
    assert r is out_f
    same(out_f, out_c)
    same(view_f, out_c[1])


def test_out_variant_resizes_like_pytorch(x1):
    out = torch.empty(0).to(x1)
    torch.maximum(torch.ones(2, 3).to(x1), torch.zeros(2, 3).to(x1), out=out)
    assert out.shape == (2, 3)
    same(out, torch.ones(2, 3))


def test_fallback_results_aliasing_an_argument_share_its_storage(x1):
    t = torch.arange(8.0).to(x1)
    c = t.cumsum(0)                                   # CPU fallback: host-only result
    a, b = torch.ops.aten.unsafe_split.Tensor(c, 4)   # CPU fallback returning views of c's bytes
    assert a._st is c._st and b._st is c._st
    b.add_(100)                                       # native write through one of them
    assert a.cpu().tolist() == [0.0, 1.0, 3.0, 6.0]
    assert c.cpu().tolist()[4:] == [110.0, 115.0, 121.0, 128.0]


def test_fresh_cpu_results_sharing_bytes_get_one_storage(x1):
    from flbridge.devices import chip_for
    from flbridge.routing.cpu_fallback import _wrap_results
    base = torch.arange(6.0)
    a, b = base[:3], base[3:]                         # two results over one fresh buffer
    wa, wb = _wrap_results(chip_for(x1), (a, b), {}, {})
    assert wa._st is wb._st and wb.storage_offset() == 3
    assert wb.cpu().tolist() == [3.0, 4.0, 5.0]


def test_resize_and_set(x1):
    t = torch.arange(4.0).to(x1)
    v = t[:2]
    t.resize_(3, 3)
    assert t.shape == (3, 3)
    assert t.view(-1)[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]   # old bytes kept
    same(v, torch.tensor([0.0, 1.0]))
    s = torch.empty(0).to(x1)
    s.set_(t)
    assert s.shape == (3, 3) and s._st is t._st
    t_ = torch.ones(2, 3).to(x1)
    t_.t_()
    assert t_.shape == (3, 2) and t_.stride() == (1, 3)
    same(t_ * 2, torch.full((3, 2), 2.0))


# --------------------------------------------------------------- autograd

def test_autograd_matches_cpu_through_views_and_inplace(x1):
    torch.manual_seed(0)
    w = torch.randn(4, 4)
    grads = []
    for dev in ("cpu", x1):
        x = w.clone().to(dev).requires_grad_()
        y = x * 2
        y[1:, :2].mul_(3)             # in-place on a view of a non-leaf
        z = (y.t() @ y).relu().sum()
        z.backward()
        grads.append(x.grad)
    assert grads[1].device == x1
    same(grads[1], grads[0])


def test_inplace_on_leaf_view_that_requires_grad_is_refused(x1):
    x = torch.ones(3).to(x1).requires_grad_()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x[0].mul_(2)


def test_no_grad_detach_requires_grad(x1):
    x = torch.ones(3).to(x1).requires_grad_()
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    d = x.detach()
    assert not d.requires_grad and d._st is x._st
    d.add_(1)                          # detach shares memory: x sees it
    same(x.detach(), torch.full((3,), 2.0))
    z = torch.zeros(2).to(x1)
    z.requires_grad_()
    assert z.requires_grad and z.is_leaf


def test_backward_on_every_chip_including_nonzero_indices(anychip):
    x = torch.randn(5).to(anychip).requires_grad_()
    (x * x).sum().backward()
    same(x.grad, 2 * x.detach().cpu())


def test_backward_in_a_new_thread_on_a_nonzero_index(x1v2):
    import threading
    seen = {}

    def work():
        try:
            x = torch.randn(4).to(x1v2).requires_grad_()
            (x * x).sum().backward()
            seen["grad"] = x.grad.cpu()
            seen["x"] = x.detach().cpu()
        except Exception as e:  # noqa: BLE001 - reported below
            seen["err"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "err" not in seen, seen.get("err")
    torch.testing.assert_close(seen["grad"], 2 * seen["x"])


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
def test_optimizer_step_matches_cpu_and_uses_foreach(x1, opt_cls):
    torch.manual_seed(0)
    cpu_m = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
    fl_m = copy.deepcopy(cpu_m).to(x1)
    kw = dict(lr=0.05, momentum=0.9) if opt_cls is torch.optim.SGD else dict(lr=0.05)
    oc, of = opt_cls(cpu_m.parameters(), **kw), opt_cls(fl_m.parameters(), **kw)
    x = torch.randn(8, 4)
    for _ in range(3):
        for m, o, xx in ((cpu_m, oc, x), (fl_m, of, x.to(x1))):
            o.zero_grad()
            m(xx).square().mean().backward()
            o.step()
    for a, b in zip(cpu_m.parameters(), fl_m.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)
    from torch.optim.optimizer import _default_to_fused_or_foreach
    assert _default_to_fused_or_foreach(list(fl_m.parameters()), False, False)[1]  # foreach chosen
    assert any(op.startswith("aten::") for op, _ in routes(x1))


# ---------------------------------------------------------- copy and save

def test_clone_and_deepcopy_are_independent(x1):
    t = torch.arange(4.0).to(x1)
    c = t.clone()
    d = copy.deepcopy(t)
    t.add_(1)
    same(c, torch.arange(4.0))
    same(d, torch.arange(4.0))
    assert d.device == x1 and d._st is not t._st
    p = nn.Parameter(torch.ones(2).to(x1))
    p2 = copy.deepcopy(p)
    assert isinstance(p2, nn.Parameter) and p2.requires_grad and p2.device == x1
    m = copy.deepcopy(nn.Linear(2, 2).to(x1))
    assert m.weight.device == x1


def test_pickle_gives_an_fl_tensor_back(x1):
    t = torch.arange(6.0).reshape(2, 3).to(x1)
    back = pickle.loads(pickle.dumps(t))
    assert type(back) is XPUTensor and back.device == x1      # as a CUDA tensor comes back on CUDA
    assert torch.equal(back.cpu(), t.cpu())


def test_state_dict_saves_and_loads_in_a_process_without_flbridge(x1, tmp_path):
    """As from CUDA: torch.load gives fl tensors back; map_location="cpu"
    loads the file anywhere, also where flbridge is not installed."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to(x1)
    path = tmp_path / "sd.pt"
    torch.save(m.state_dict(), path)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    loaded = torch.load(io.BytesIO(buf.getvalue()))  # weights_only=True by default
    for k, v in m.state_dict().items():
        assert loaded[k].device == x1
        assert torch.equal(loaded[k].cpu(), v.cpu())
    code = textwrap.dedent(f"""
        import sys, torch
        sd = torch.load({str(path)!r}, map_location="cpu")   # default weights_only=True
        assert "flbridge" not in sys.modules
        print(sorted(sd), sd["0.weight"].device, sd["0.weight"].sum().item())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cpu" in r.stdout and "0.weight" in r.stdout
    assert f"{m[0].weight.sum().item():.4f}"[:6] in r.stdout


def test_load_state_dict_into_fl_model(x1):
    src = nn.Linear(3, 2)
    dst = nn.Linear(3, 2).to(x1)
    dst.load_state_dict(src.state_dict())
    same(dst.weight, src.weight.detach())
    assert dst.weight.device == x1


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_like_factories_given_another_device_make_the_tensor_there(x1, device):
    """device= of a *_like / new_* factory on an fl tensor: made on that
    device, with no chip memory (empty_like had taken any device other than
    the CPU as the tensor's own chip)."""
    t = torch.randn(2, 3).t()
    f = t.to(x1)
    before = torch.fl.memory_allocated(x1)
    for make in (lambda a: torch.empty_like(a, device=device), lambda a: torch.zeros_like(a, device=device),
                 lambda a: torch.ones_like(a, device=device), lambda a: torch.full_like(a, 2.0, device=device),
                 lambda a: torch.rand_like(a, device=device), lambda a: a.new_empty((3, 2), device=device),
                 lambda a: a.new_zeros((3, 2), device=device), lambda a: a.new_full((2,), 1.0, device=device)):
        got, want = make(f), make(t)
        assert type(got) is torch.Tensor and got.device == torch.device(device)
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    assert torch.fl.memory_allocated(x1) == before


def test_like_factories_follow_each_input_layout_as_on_the_cpu(x1):
    # the result's geometry is PyTorch's (meta kernel), cached per input geometry and arguments
    base = torch.randn(2, 3, 4, 5)
    cases = [base, base.to(memory_format=torch.channels_last), base.transpose(1, 3), base[:, 1], base, base[:, 1]]
    for t in cases:
        f = t.to(x1)
        for make in (lambda a: torch.empty_like(a), lambda a: torch.ones_like(a),
                     lambda a: torch.zeros_like(a, memory_format=torch.contiguous_format),
                     lambda a: torch.full_like(a, 2.0, dtype=torch.float16),
                     lambda a: a.new_empty((3, 2)), lambda a: a.new_empty_strided((2, 3), (1, 2))):
            got, want = make(f), make(t)
            assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, f.device)
        assert torch.equal(torch.ones_like(f).cpu(), torch.ones_like(t))
