"""torch.optim's fused steps (Adam/AdamW/SGD(fused=True) reach
_fused_adam_ / _fused_adamw_ / _fused_sgd_) as one vendor call per step,
against the non-fused optimizer on the CPU.

Both sides get the same gradients (made on the CPU, copied over), so only
the optimizer arithmetic differs: the same float32 formulas evaluated in a
different order.  Each step rounds a parameter once (u |p|, u = 2**-24)
and computes its update from about a dozen rounded operations (moments,
bias corrections, sqrt, eps, division: <= 16 u |update|); the moments
contract (beta < 1), so over T steps the difference stays within
T * (u * max|p| + 16 u * max|update|), the largest update measured on the
CPU run.  The moment buffers are compared the same way.
"""
import copy

import pytest
import torch

import flbridge
from tests.conftest import routes

U = 2.0 ** -24
STEPS = 4

CONFIGS = [
    (torch.optim.Adam, dict(lr=1e-2)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=1e-3, betas=(0.8, 0.9), maximize=True, eps=1e-6)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05, amsgrad=True, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-2)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)),
]


def _params(shapes=((16, 8), (16,), (3, 5, 7), (1,))):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in shapes]


def _grads(params, steps):
    g = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=g) * (0.1 + i) for p in params] for i in range(steps)]


def _no_cpu(dev):
    bad = {k: v for k, v in routes(dev).items() if k[1] == "cpu"}
    assert not bad, f"ran on the CPU: {bad}"


def _run(cls, kw, params, grads, device, fused):
    ps = [p.clone().to(device).requires_grad_() for p in params]
    opt = cls(ps, fused=True, **kw) if fused else cls(ps, foreach=False, **kw)
    updates = []
    for gs in grads:
        before = [p.detach().cpu().clone() for p in ps] if not fused else None
        for p, g in zip(ps, gs):
            p.grad = g.to(device)
        opt.step()
        if before is not None:
            updates.append(max((p.detach().cpu() - b).abs().max().item() for p, b in zip(ps, before)))
    return ps, opt, updates


def _tol(params, updates, steps):
    pmax = max(p.abs().max().item() for p in params)
    return steps * (U * pmax + 16 * U * max(updates))


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=lambda v: v.__name__ if isinstance(v, type) else
                         ",".join(f"{k}={x}" for k, x in v.items()))
def test_fused_step_matches_the_cpu_optimizer_with_no_cpu_op(th1, cls, kw):
    params, grads = _params(), _grads(_params(), STEPS)
    ref, ref_opt, updates = _run(cls, kw, params, grads, "cpu", fused=False)
    got, opt, _ = _run(cls, kw, params, grads, th1, fused=True)
    tol = _tol([p.detach() for p in ref], updates, STEPS)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.detach().cpu(), r.detach(), rtol=0, atol=tol)
    for r, g in zip(ref, got):
        rs, gs = ref_opt.state[r], opt.state[g]
        for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"):
            if name in rs and rs[name] is not None:
                scale = max(rs[name].abs().max().item(), 1.0)
                torch.testing.assert_close(gs[name].cpu(), rs[name], rtol=0, atol=STEPS * 16 * U * scale)
    fused = {k: v for k, v in routes(th1).items() if "_fused_" in k[0]}
    assert fused and all(route == "native" for _, route in fused) and sum(fused.values()) == STEPS
    _no_cpu(th1)


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=lambda v: v.__name__ if isinstance(v, type) else
                         ",".join(f"{k}={x}" for k, x in v.items()))
def test_fused_step_on_strided_parameters_matches_the_cpu_optimizer(th1, cls, kw):
    """Transposed (non-contiguous) parameters with contiguous gradients: the
    vendor kernel's strided loop, where contiguous float32 lists take its
    flat loop (the test above); both follow the CPU."""
    params = [p.t().contiguous().t() if p.dim() == 2 else p for p in _params()]
    assert not params[0].is_contiguous()
    grads = _grads(params, STEPS)
    ref, _, updates = _run(cls, kw, params, grads, "cpu", fused=False)
    got, _, _ = _run(cls, kw, params, grads, th1, fused=True)
    assert got[0].stride() == params[0].stride()
    tol = _tol([p.detach() for p in ref], updates, STEPS)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.detach().cpu(), r.detach(), rtol=0, atol=tol)
    _no_cpu(th1)


def test_fused_adamw_and_sgd_on_x1(x1):
    """x1's spec declares the same ops (float32 and float16)."""
    params, grads = _params(), _grads(_params(), STEPS)
    for cls, kw in ((torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05, amsgrad=True)),
                    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True))):
        ref, _, updates = _run(cls, kw, params, grads, "cpu", fused=False)
        got, _, _ = _run(cls, kw, params, grads, x1, fused=True)
        tol = _tol([p.detach() for p in ref], updates, STEPS)
        for r, g in zip(ref, got):
            torch.testing.assert_close(g.detach().cpu(), r.detach(), rtol=0, atol=tol)
    _no_cpu(x1)


def test_bfloat16_fused_adamw_equals_pytorchs_fused_kernel(th1):
    """bfloat16 parameters: PyTorch's fused kernels compute in float32 and
    round each result once, so the chip's must agree with the CPU's fused
    kernel to one bfloat16 rounding of the parameter (2**-8 relative) per step."""
    params = [p.to(torch.bfloat16) for p in _params()]
    grads = [[g.to(torch.bfloat16) for g in gs] for gs in _grads(params, STEPS)]
    kw = dict(lr=1e-2, weight_decay=0.05)
    ps_cpu = [p.clone().requires_grad_() for p in params]
    ps_fl = [p.clone().to(th1).requires_grad_() for p in params]
    oc = torch.optim.AdamW(ps_cpu, fused=True, **kw)
    of = torch.optim.AdamW(ps_fl, fused=True, **kw)
    for gs in grads:
        for a, b, g in zip(ps_cpu, ps_fl, gs):
            a.grad, b.grad = g.clone(), g.to(th1)
        oc.step()
        of.step()
    for a, b in zip(ps_cpu, ps_fl):
        torch.testing.assert_close(b.detach().cpu().float(), a.detach().float(),
                                   rtol=STEPS * 2.0 ** -8, atol=STEPS * 2.0 ** -8 * kw["lr"])
    _no_cpu(th1)


def test_grad_scaler_with_fused_adamw_unscales_skips_inf_steps_and_stays_on_the_chip(th1):
    """GradScaler hands a fused optimizer grad_scale and found_inf: the
    kernel divides the gradients and skips the step when found_inf is set."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))
    fl_model = copy.deepcopy(model).to(th1)
    kw = dict(lr=1e-2, weight_decay=0.01)
    opt_c = torch.optim.AdamW(model.parameters(), foreach=False, **kw)
    opt_f = torch.optim.AdamW(fl_model.parameters(), fused=True, **kw)
    sc_c = torch.amp.GradScaler("cpu", init_scale=1024.0)
    sc_f = torch.amp.GradScaler("fl", init_scale=1024.0)
    x = torch.randn(8, 16)
    for step in range(3):
        for m, o, s, xx in ((model, opt_c, sc_c, x), (fl_model, opt_f, sc_f, x.to(th1))):
            o.zero_grad()
            s.scale(m(xx).pow(2).mean()).backward()
            if step == 1:                                   # an overflow: the step is skipped
                m[0].weight.grad[0, 0] = float("inf")
                before = [p.detach().cpu().clone() for p in m.parameters()]
            s.step(o)
            s.update()
            if step == 1:
                assert all(torch.equal(b, p.detach().cpu()) for b, p in zip(before, m.parameters()))
    assert sc_f.get_scale() == sc_c.get_scale() == 512.0
    for a, b in zip(model.parameters(), fl_model.parameters()):
        # gradients from the chip's GEMMs differ from the CPU's by float32
        # summation error (16 terms: <= 16 u relative); Adam's first steps
        # move each weight by ~lr whatever the gradient's size, so the
        # parameters stay within a few float32 roundings of lr-sized steps
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=0,
                                   atol=2 * (U * a.abs().max().item() + 16 * U * kw["lr"]) * 64)
    _no_cpu(th1)


def test_lists_of_different_lengths_get_pytorchs_error(th1):
    """They never reach the kernel: the route says why, PyTorch's own check answers."""
    p = torch.zeros(4, device=th1)
    with pytest.raises(RuntimeError, match=r"grads.size\(\) == n_tensors"):
        torch._fused_sgd_([p], [p, p], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=True)
    why = [r["detail"] for r in flbridge.stats(th1)["routes"] if r["op"] == "aten::_fused_sgd_.default"]
    assert why == ["grads has 2 tensors and self 1 (th1FusedSgd takes lists of one length)"]
