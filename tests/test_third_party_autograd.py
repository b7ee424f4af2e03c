"""Autograd idioms of third-party programs on fl, as on CUDA: activation
checkpointing recomputes the same dropout masks (torch.utils.checkpoint
saves and restores the device RNG through torch.fl), and any exception
raised during backward (a user's hook, a custom Function, an fl op) reaches
the caller of backward() instead of aborting the process."""
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import flbridge
from flbridge.devices import chip_for

P = 0.5


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(F.dropout(self.lin(x), P, training=True))


def _cpu_reference(block, x, mask):
    """Gradients of the block's loss on the CPU with a given dropout mask."""
    ref = _Block()
    ref.load_state_dict({k: v.cpu() for k, v in block.state_dict().items()})
    xr = x.detach().cpu().requires_grad_()
    y = torch.tanh(ref.lin(xr) * mask / (1 - P))
    (y ** 2).sum().backward()
    return y.detach(), xr.grad, ref.lin.weight.grad


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_the_same_dropout_mask(anychip, use_reentrant):
    torch.manual_seed(0)
    block = _Block().to(anychip)
    x = torch.randn(4, 8).to(anychip).requires_grad_()
    torch.fl.manual_seed_all(5)
    with torch.no_grad():
        mask = (F.dropout(torch.ones(4, 8).to(anychip), P, training=True) != 0).float().cpu()
    torch.fl.manual_seed_all(5)
    y = checkpoint(block, x, use_reentrant=use_reentrant)
    (y ** 2).sum().backward()
    yr, gx, gw = _cpu_reference(block, x, mask)
    # float32, 8-term dot products: a few ulps of the values
    torch.testing.assert_close(y.detach().cpu(), yr, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.cpu(), gx, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(block.lin.weight.grad.cpu(), gw, rtol=1e-5, atol=1e-6)


def test_checkpoint_sequential_and_fork_rng_on_fl(th1):
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(6, 6), nn.Dropout(P), nn.Linear(6, 6), nn.Dropout(P)).to(th1)
    x = torch.randn(3, 6).to(th1).requires_grad_()
    torch.fl.manual_seed_all(3)
    seq(x).sum().backward()
    ref = [p.grad.cpu().clone() for p in seq.parameters()] + [x.grad.cpu().clone()]
    seq.zero_grad()
    x.grad = None
    torch.fl.manual_seed_all(3)
    checkpoint_sequential(seq, 2, x, use_reentrant=False).sum().backward()
    for r, g in zip(ref, [p.grad.cpu() for p in seq.parameters()] + [x.grad.cpu()]):
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-7)
    # the device RNG helpers checkpoint uses
    from torch.utils.checkpoint import get_device_states, set_device_states
    ids, states = get_device_states(x)
    a = torch.rand(3, device=th1).cpu()
    set_device_states(ids, states, device_type="fl")
    assert torch.equal(torch.rand(3, device=th1).cpu(), a)
    with torch.random.fork_rng(devices=[th1.index], device_type="fl"):
        torch.rand(5, device=th1)
    assert not torch.equal(torch.rand(3, device=th1).cpu(), a)   # fork_rng restored the advanced state


# -------------------------------------------- exceptions during backward

def _raiser(*_):
    raise ValueError("from a hook")


class _Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 1

    @staticmethod
    def backward(ctx, g):
        raise KeyError("from a custom Function")


@pytest.mark.parametrize("where", ["tensor_hook", "post_accumulate_grad_hook", "node_hook", "node_prehook",
                                   "module_full_backward_hook", "custom_function", "multi_grad_hook"])
def test_an_exception_in_backward_reaches_the_caller(th1, where):
    """torch 2.13 aborts the process when an exception leaves a Python
    callback in backward while a Python device's stream guard unwinds; the
    error must reach backward()'s caller, which then goes on working."""
    lin = nn.Linear(3, 3).to(th1)
    x = torch.randn(2, 3).to(th1).requires_grad_()
    handles = []
    if where == "module_full_backward_hook":
        handles.append(lin.register_full_backward_hook(_raiser))
    y = lin(x)
    if where == "tensor_hook":
        handles.append(y.register_hook(_raiser))
    elif where == "post_accumulate_grad_hook":
        handles.append(lin.weight.register_post_accumulate_grad_hook(_raiser))
    elif where == "node_hook":
        handles.append(y.grad_fn.register_hook(_raiser))
    elif where == "node_prehook":
        handles.append(y.grad_fn.register_prehook(_raiser))
    elif where == "custom_function":
        y = _Boom.apply(y)
    elif where == "multi_grad_hook":
        handles.append(torch.autograd.graph.register_multi_grad_hook((x, lin.weight), _raiser))
    err = KeyError if where == "custom_function" else ValueError
    with pytest.raises(err, match="from a"):
        (y * y).sum().backward()
    for h in handles:
        h.remove()
    lin.zero_grad()
    x.grad = None
    lin(x).sum().backward()                       # the process and autograd go on working
    torch.testing.assert_close(x.grad.cpu(), lin.weight.detach().cpu().sum(0).expand(2, 3))


def test_an_exception_in_autograd_grad_and_in_a_nested_backward(th1):
    x = torch.randn(3).to(th1).requires_grad_()
    y = (x * 2)
    y.register_hook(_raiser)
    with pytest.raises(ValueError, match="from a hook"):
        torch.autograd.grad(y.sum(), x)

    def inner(a):   # reentrant checkpoint runs a backward inside backward
        b = a * 3
        if b.requires_grad:   # the recomputation, inside the outer backward
            b.register_hook(_raiser)
        return b

    with pytest.raises(ValueError, match="from a hook"):
        checkpoint(inner, x, use_reentrant=True).sum().backward()
    assert torch.equal(torch.autograd.grad((x * 3).sum(), x)[0].cpu(), torch.full((3,), 3.0))


def test_an_op_error_during_backward_is_raised_at_backward(th1, monkeypatch):
    """An fl op that cannot run during backward (no kernel, fallback off)
    raises its own error at backward(); no gradient is written."""
    from flbridge import config
    x = (torch.rand(4, 5) + 0.5).to(th1).requires_grad_()
    y = torch.lgamma(x).sum()                                # backward needs digamma: no kernel on th1
    monkeypatch.setattr(config.CONFIG, "fallback", False)
    chip_for(th1).routes.clear()
    with pytest.raises(flbridge.UnsupportedOpError, match="aten::digamma.default"):
        y.backward()
    assert x.grad is None
    monkeypatch.setattr(config.CONFIG, "fallback", True)
    chip_for(th1).routes.clear()
    torch.lgamma(x).sum().backward()                         # the next pass is fine
    torch.testing.assert_close(x.grad.cpu(), torch.digamma(x.detach().cpu()))


@pytest.mark.slow   # a child Python process: several seconds
def test_record_stream_failure_in_a_gradient_hook_does_not_abort(th1):
    """DeepSpeed's overlap_comm calls record_stream inside gradient hooks;
    a failing call there used to end the process.  Run in a child so an
    abort shows as a return code, not a lost test session."""
    code = textwrap.dedent(f"""
        import torch, flbridge
        flbridge.init()
        p = torch.nn.Parameter(torch.ones(3).to("fl:{th1.index}"))
        def hook(param):
            param.grad.record_stream("not a stream")
        h = p.register_post_accumulate_grad_hook(hook)
        try:
            (p * 2).sum().backward()
        except RuntimeError as e:
            print("raised", type(e).__name__)
        h.remove()
        (p * 2).sum().backward()
        print("alive")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "raised RuntimeError" in r.stdout and "alive" in r.stdout
