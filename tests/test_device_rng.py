"""Device random numbers (flbridge.routing.rng): the chips' counter-based
random kernels, driven by a (seed, offset) flbridge owns per chip.

Values cannot equal the CPU's (another engine), so distributions are
checked against PyTorch's definitions statistically, with bounds from the
sample size: a mean within K standard errors (sigma / sqrt(n)), a variance
within K standard errors of the sample variance (sqrt((mu4 - sigma^4) / n)),
a rate within K * sqrt(p (1 - p) / n).  K = 6: a correct kernel fails one
such check with probability < 2e-9, a wrong one (a shifted mean, a
mis-scaled variance) by far more than 6 standard errors at these sizes.
The seeds are fixed, so a run is reproducible.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import flbridge
from tests.conftest import routes

K = 6.0
N = 1 << 16
U = 2.0 ** -24          # float32 unit roundoff


@pytest.fixture(params=["xpu:th1", "xpu:x1"])
def rngchip(request, flchips):
    """Each chip with random kernels, made the current device (torch.fl.manual_seed seeds that one)."""
    chip = flchips[request.param]
    flbridge.reset_stats(request.param)
    prev = torch.fl.current_device()
    torch.fl.set_device(chip.device)
    yield chip.device
    torch.fl.set_device(prev)


def _gen(dev):
    return torch.fl.default_generators[dev.index]


def _no_cpu(dev):
    bad = {k: v for k, v in routes(dev).items() if k[1] == "cpu"}
    assert not bad, f"ran on the CPU: {bad}"


def _close_mean(x, mu, sigma):
    n = x.numel()
    m = x.double().mean().item()
    assert abs(m - mu) <= K * sigma / math.sqrt(n), (m, mu, sigma, n)


def _close_var(x, var, mu4):
    n = x.numel()
    v = x.double().var().item()
    assert abs(v - var) <= K * math.sqrt((mu4 - var * var) / n), (v, var)


# ------------------------------------------------------------ distributions

def test_uniform_rand_and_uniform_match_the_uniform_distribution(rngchip):
    torch.fl.manual_seed(1)
    x = torch.rand(N, device=rngchip).cpu()
    assert x.min() >= 0 and x.max() < 1
    _close_mean(x, 0.5, math.sqrt(1 / 12))
    _close_var(x, 1 / 12, 1 / 80)
    a, b = -3.0, 5.0
    y = torch.empty(N, device=rngchip).uniform_(a, b).cpu()
    assert y.min() >= a and y.max() < b
    w = b - a
    _close_mean(y, (a + b) / 2, w / math.sqrt(12))
    _close_var(y, w * w / 12, w ** 4 / 80)
    # no two neighbours equal more often than float32 granularity allows
    assert (x[1:] == x[:-1]).sum() <= 2
    _no_cpu(rngchip)


def test_normal_randn_and_normal_match_the_normal_distribution(rngchip):
    torch.fl.manual_seed(2)
    x = torch.randn(N, device=rngchip).cpu()
    _close_mean(x, 0.0, 1.0)
    _close_var(x, 1.0, 3.0)
    # tails: P(|x| > 3) = 0.0027, a binomial count
    p3 = 0.0026998
    assert abs((x.abs() > 3).double().mean().item() - p3) <= K * math.sqrt(p3 * (1 - p3) / N)
    m, s = 2.5, 0.5
    y = torch.empty(N, device=rngchip).normal_(m, s).cpu()
    _close_mean(y, m, s)
    _close_var(y, s * s, 3 * s ** 4)
    _no_cpu(rngchip)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_bernoulli_rate(rngchip, p):
    torch.fl.manual_seed(3)
    x = torch.empty(N, device=rngchip).bernoulli_(p).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.double().mean().item() - p) <= K * math.sqrt(p * (1 - p) / N)
    b = torch.empty(N, dtype=torch.bool, device=rngchip).bernoulli_(p).cpu()
    assert abs(b.double().mean().item() - p) <= K * math.sqrt(p * (1 - p) / N)
    _no_cpu(rngchip)


def test_randint_range_coverage_and_uniformity(rngchip):
    torch.fl.manual_seed(4)
    lo, hi = -3, 7
    x = torch.randint(lo, hi, (N,), device=rngchip).cpu()
    assert x.dtype == torch.int64 and x.min() == lo and x.max() == hi - 1
    counts = torch.bincount(x - lo, minlength=hi - lo).double()
    q = 1 / (hi - lo)
    assert ((counts / N - q).abs() <= K * math.sqrt(q * (1 - q) / N)).all(), counts
    # a range wider than 32 bits takes two words per element
    big = torch.randint(0, 1 << 40, (N,), device=rngchip).cpu()
    assert big.min() >= 0 and big.max() < (1 << 40)
    _close_mean(big.double() / (1 << 40), 0.5, math.sqrt(1 / 12))
    f = torch.empty(N, device=rngchip).random_(0, 5).cpu()
    assert set(f.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    _no_cpu(rngchip)


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_keeps_1_minus_p_and_scales_as_pytorch(rngchip, p):
    torch.fl.manual_seed(5)
    x = torch.randn(N)
    out, mask = torch.ops.aten.native_dropout(x.to(rngchip), p, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool
    keep = 1 - p
    assert abs(mask.double().mean().item() - keep) <= K * math.sqrt(p * keep / N)
    # PyTorch's definition: input * mask * (1 / (1 - p)); one rounding apart at most
    ref = x * mask * (1.0 / keep)
    torch.testing.assert_close(out, ref, rtol=2 * U, atol=0)
    # eval mode, and p = 0: the input itself, every element kept
    e_out, e_mask = torch.ops.aten.native_dropout(x.to(rngchip), p, False)
    assert torch.equal(e_out.cpu(), x) and bool(e_mask.cpu().all())
    # F.dropout's gradient goes through the same mask
    xr = x[:256].to(rngchip).requires_grad_()
    y = F.dropout(xr, p, training=True)
    y.sum().backward()
    yc, gc = y.detach().cpu(), xr.grad.cpu()
    assert torch.equal(gc != 0, yc != 0)
    torch.testing.assert_close(gc[gc != 0], torch.full_like(gc[gc != 0], 1 / keep), rtol=2 * U, atol=0)
    _no_cpu(rngchip)


def test_half_precision_draws_on_the_chip(flchips):
    """bfloat16 on th1, float16 on x1 (the types the specs list)."""
    for name, dt in (("xpu:th1", torch.bfloat16), ("xpu:x1", torch.float16)):
        dev = flchips[name].device
        flbridge.reset_stats(name)
        torch.fl.manual_seed_all(6)
        x = torch.rand(N, device=dev, dtype=dt).cpu()
        assert x.dtype == dt and x.min() >= 0 and x.max() <= 1
        _close_mean(x.float(), 0.5, math.sqrt(1 / 12))
        y = torch.randn(N, device=dev, dtype=dt).cpu()
        _close_mean(y.float(), 0.0, 1.0)
        _no_cpu(dev)


# ------------------------------------------------- seeds, offsets, states

def test_same_seed_same_values_other_offset_other_values(rngchip):
    torch.fl.manual_seed(123)
    a = torch.rand(100, device=rngchip).cpu()
    b = torch.rand(100, device=rngchip).cpu()        # the offset moved on
    torch.fl.manual_seed(123)
    a2 = torch.rand(100, device=rngchip).cpu()
    torch.fl.manual_seed(124)
    c = torch.rand(100, device=rngchip).cpu()
    assert torch.equal(a, a2)
    assert not torch.equal(a, b) and (a == b).sum() <= 1
    assert (a == c).sum() <= 1


def test_rng_state_is_seed_and_offset_bytes_and_replays(rngchip):
    torch.fl.manual_seed(7)
    s0 = torch.fl.get_rng_state()
    assert s0.dtype == torch.uint8 and s0.device.type == "cpu" and s0.numel() == 16
    assert int.from_bytes(bytes(s0[:8].tolist()), "little") == 7 == torch.fl.initial_seed()
    assert int.from_bytes(bytes(s0[8:].tolist()), "little") == 0
    a = torch.randn(10, device=rngchip).cpu()
    s1 = torch.fl.get_rng_state()
    # 10 elements read whole Philox blocks: 4 * ceil(10 / 4) = 12 words
    assert int.from_bytes(bytes(s1[8:].tolist()), "little") == 12
    b = F.dropout(torch.ones(33, device=rngchip), 0.5).cpu()
    torch.fl.set_rng_state(s0)
    assert torch.equal(torch.randn(10, device=rngchip).cpu(), a)
    assert torch.equal(F.dropout(torch.ones(33, device=rngchip), 0.5).cpu(), b)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.fl.set_rng_state(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="multiple of 4"):
        torch.fl.set_rng_state(torch.tensor([0] * 8 + [3] + [0] * 7, dtype=torch.uint8))


def test_seed_initial_seed_and_manual_seed_all(flchips):
    torch.fl.manual_seed_all(99)
    devs = [c.device for c in flchips.values()]
    assert all(torch.fl.get_rng_state(d)[:8].tolist() == [99] + [0] * 7 for d in devs)
    firsts = [torch.rand(8, device=d).cpu() for d in devs]
    assert all(torch.equal(firsts[0], f) for f in firsts)     # one scheme: same (seed, offset), same numbers
    torch.fl.seed()
    s = torch.fl.initial_seed()
    assert s != 99 and 0 <= s < 2 ** 63
    torch.fl.manual_seed(-1)                                # negatives wrap as torch.Generator's do
    assert torch.fl.initial_seed() == 2 ** 64 - 1


@pytest.mark.filterwarnings("ignore:FL reports that you have")   # torch's note on forking every device
def test_fork_rng_restores_the_chip_state(rngchip):
    torch.fl.manual_seed(11)
    with torch.random.fork_rng(device_type="fl"):
        inside = torch.rand(50, device=rngchip).cpu()
    after = torch.rand(50, device=rngchip).cpu()
    assert torch.equal(inside, after)
    with torch.random.fork_rng(devices=[rngchip.index], device_type="fl"):
        torch.fl.manual_seed(12)
        torch.rand(50, device=rngchip)
    assert not torch.equal(torch.rand(50, device=rngchip).cpu(), after)


def test_an_fl_generator_object_draws_its_own_stream(rngchip):
    g = torch.fl.Generator(rngchip)
    assert g.device == rngchip
    g.manual_seed(21)
    a = torch.rand(64, device=rngchip, generator=g).cpu()
    torch.fl.manual_seed(0)
    torch.rand(64, device=rngchip)                 # the default generator does not disturb g's stream
    g.manual_seed(21)
    assert torch.equal(torch.rand(64, device=rngchip, generator=g).cpu(), a)
    torch.fl.manual_seed(21)
    assert torch.equal(torch.rand(64, device=rngchip).cpu(), a)    # same (seed, offset), same numbers
    _no_cpu(rngchip)


def test_a_cpu_generator_or_another_chips_draws_on_the_host_from_it(rngchip, flchips):
    """A CPU torch.Generator gives the CPU's numbers (the op runs on the host
    from it); another chip's fl generator is not this chip's stream."""
    cpu_vals = torch.empty(32).uniform_(generator=torch.Generator().manual_seed(8))
    got = torch.empty(32, device=rngchip).uniform_(generator=torch.Generator().manual_seed(8)).cpu()
    assert torch.equal(got, cpu_vals)
    assert routes(rngchip).get(("aten::uniform_.default", "cpu")) == 1
    other = next(c.device for c in flchips.values() if c.device != rngchip)
    g = torch.fl.Generator(other)
    g.manual_seed(9)
    off = g.get_offset()
    torch.empty(32, device=rngchip).uniform_(generator=g)
    assert g.get_offset() == off + 4          # one host draw from its (seed, offset)
    why = [r["detail"] for r in flbridge.stats(rngchip)["routes"] if r["op"] == "aten::uniform_.default"
           and r["route"] == "cpu"]
    assert any("generator= is" in w for w in why), why


def test_a_random_op_without_a_kernel_replays_with_the_state(rngchip):
    """randperm runs on the host, seeded from the chip's (seed, offset)."""
    torch.fl.manual_seed(31)
    s = torch.fl.get_rng_state()
    a = torch.randperm(20, device=rngchip).cpu()
    b = torch.randperm(20, device=rngchip).cpu()
    torch.fl.set_rng_state(s)
    assert torch.equal(torch.randperm(20, device=rngchip).cpu(), a)
    assert not torch.equal(a, b)
    assert sorted(a.tolist()) == list(range(20))


# ------------------------------------------------------- checkpointing

@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_the_same_dropout_masks(th1, use_reentrant):
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 32).to(th1)

    def block(x):
        return F.dropout(torch.tanh(lin(x)), 0.5, training=True).sum(-1)

    x = torch.randn(8, 16)
    grads = []
    for ckpt in (False, True):
        torch.fl.manual_seed_all(41)
        xi = x.to(th1).requires_grad_()
        y = checkpoint(block, xi, use_reentrant=use_reentrant) if ckpt else block(xi)
        y.sum().backward()
        grads.append((y.detach().cpu(), xi.grad.cpu(), lin.weight.grad.cpu()))
        lin.weight.grad = lin.bias.grad = None
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    _no_cpu(th1)


# -------------------------------------------- decomposed random ops

def test_like_factories_and_tensor_bernoulli_run_on_the_chip(rngchip):
    torch.fl.manual_seed(51)
    x = torch.empty(N, device=rngchip)
    u = torch.rand_like(x).cpu()
    _close_mean(u, 0.5, math.sqrt(1 / 12))
    _close_mean(torch.randn_like(x).cpu(), 0.0, 1.0)
    r = torch.randint_like(x, 3, 9).cpu()
    assert r.dtype == torch.float32 and set(r.unique().tolist()) == set(map(float, range(3, 9)))
    p = torch.linspace(0, 1, N).to(rngchip)
    b = torch.bernoulli(p).cpu()
    # E[sum b] = sum p, Var = sum p (1 - p)
    pc = p.cpu().double()
    assert abs(b.double().sum().item() - pc.sum().item()) <= K * math.sqrt((pc * (1 - pc)).sum().item())
    assert b[0] == 0 and b[-1] == 1                         # probability 0 and 1 exactly
    bp = torch.bernoulli(x, 0.25).cpu()
    assert abs(bp.double().mean().item() - 0.25) <= K * math.sqrt(0.25 * 0.75 / N)
    f = torch.empty(N, device=rngchip).random_().cpu()       # ATen: [0, 2**24] for float32
    assert f.min() >= 0 and f.max() <= 2 ** 24 and torch.equal(f, f.round())
    _close_mean(f.double() / 2 ** 24, 0.5, math.sqrt(1 / 12))
    e = torch.empty(N, device=rngchip).exponential_().cpu()
    assert e.min() > 0
    _close_mean(e, 1.0, 1.0)
    _no_cpu(rngchip)


def test_multinomial_follows_the_probabilities(rngchip):
    torch.fl.manual_seed(61)
    probs = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 0.0])      # unnormalized, two impossible categories
    q = probs / probs.sum()
    rows = 1 << 14
    pd = probs.repeat(rows, 1).to(rngchip)
    one = torch.multinomial(pd, 1).cpu()
    assert one.shape == (rows, 1) and one.dtype == torch.int64
    counts = torch.bincount(one.flatten(), minlength=6).double()
    assert counts[0] == 0 and counts[5] == 0
    assert ((counts / rows - q.double()).abs() <= K * (q * (1 - q) / rows).sqrt().double()).all(), counts
    three = torch.multinomial(pd[:512], 3).cpu()               # without replacement: distinct, possible ones
    assert all(len(set(r)) == 3 and not ({0, 5} & set(r)) for r in three.tolist())
    rep = torch.multinomial(pd[0], rows, replacement=True).cpu()
    counts = torch.bincount(rep, minlength=6).double()
    assert counts[0] == 0 and counts[5] == 0
    assert ((counts / rows - q.double()).abs() <= K * (q * (1 - q) / rows).sqrt().double()).all(), counts
    with pytest.raises(RuntimeError, match="inf.*nan.*< 0"):
        torch.multinomial(torch.tensor([0.5, -0.1]).to(rngchip), 1)
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        torch.multinomial(torch.zeros(2, 3).to(rngchip), 1)
    _no_cpu(rngchip)


# ------------------------------------------------------------- graphs

def test_graph_replays_draw_new_numbers_like_eager_runs_at_the_next_offsets(th1):
    """As CUDA graphs: each replay takes the generator's offset and advances
    it by what the graph consumes; replay i equals an eager run at that offset."""
    prev = torch.fl.current_device()
    torch.fl.set_device(th1)
    try:
        x = torch.ones(64, 64, device=th1)

        def step():
            return F.dropout(x, 0.5) + torch.rand(64, 64, device=th1)

        torch.fl.manual_seed(71)
        gen = _gen(th1)
        start = gen.get_offset()
        g = torch.fl.FLGraph()
        with torch.fl.graph(g):
            y = step()
        assert gen.get_offset() == start        # capture does not advance the generator
        per_run = 2 * 64 * 64                    # one word per element for dropout and rand
        outs = []
        for i in range(3):
            g.replay()
            assert gen.get_offset() == start + (i + 1) * per_run
            outs.append(y.cpu())
        assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
        for i, o in enumerate(outs):
            gen.set_offset(start + i * per_run)
            assert torch.equal(step().cpu(), o)
            kept = (o >= 1).double().mean().item()       # dropout kept x = 1 -> 2 + u >= 2, dropped -> u < 1
            assert abs(kept - 0.5) <= K * math.sqrt(0.25 / o.numel())
        # a state saved before a replay replays it
        s = torch.fl.get_rng_state()
        g.replay()
        a = y.cpu()
        torch.fl.set_rng_state(s)
        g.replay()
        assert torch.equal(y.cpu(), a)
        _no_cpu(th1)
    finally:
        torch.fl.set_device(prev)


def test_make_graphed_callables_with_dropout_equals_eager_at_each_calls_offset(th1):
    """A graphed module with dropout: every call draws a new mask (the
    offset advances by the forward graph's words), and its output and
    gradients equal an eager copy run from the same offset."""
    import copy
    prev = torch.fl.current_device()
    torch.fl.set_device(th1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 16)).to(th1)
        ref = copy.deepcopy(model)
        torch.fl.manual_seed(3)
        graphed = torch.fl.make_graphed_callables(model, (torch.randn(8, 16, device=th1, requires_grad=True),))
        gen = _gen(th1)
        x = torch.randn(8, 16)
        masks = []
        for _ in range(2):
            start = gen.get_offset()
            xg = x.to(th1).requires_grad_()
            y = graphed(xg)
            y.sum().backward()
            assert gen.get_offset() == start + 8 * 32          # one word per element of the dropout
            gen.set_offset(start)
            xr = x.to(th1).requires_grad_()
            yr = ref(xr)
            yr.sum().backward()
            assert torch.equal(y.detach().cpu(), yr.detach().cpu())
            assert torch.equal(xg.grad.cpu(), xr.grad.cpu())
            assert torch.equal(model[0].weight.grad.cpu(), ref[0].weight.grad.cpu())
            model.zero_grad()
            ref.zero_grad()
            masks.append(y.detach().cpu())
        assert not torch.equal(masks[0], masks[1])
        _no_cpu(th1)
    finally:
        torch.fl.set_device(prev)


def test_dropout_backward_is_one_native_call_equal_to_pytorchs(rngchip):
    """native_dropout_backward = grad * mask * scale, the product rounded once
    (PyTorch's CPU kernel), strided and in the chip's half dtype too."""
    low = torch.bfloat16 if "th1" in flbridge.stats(rngchip)["device_type"] else torch.float16
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, low):
        grad = torch.randn(9, 40, generator=g).to(dtype)
        grad[0, 0], grad[0, 1] = float("nan"), -1.0
        mask = torch.rand(9, 40, generator=g) > 0.3
        mask[0, :2] = False                                # a dropped NaN stays NaN, a dropped -1 is -0.0
        for scale in (1 / 0.7, 2.0):
            ref = torch.ops.aten.native_dropout_backward(grad, mask, scale)
            flbridge.reset_stats(rngchip)
            got = torch.ops.aten.native_dropout_backward(grad.to(rngchip), mask.to(rngchip), scale)
            got_t = torch.ops.aten.native_dropout_backward(grad.to(rngchip).t(), mask.to(rngchip).t(), scale)
            torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0, equal_nan=True)
            torch.testing.assert_close(got_t.cpu(), ref.t(), rtol=0, atol=0, equal_nan=True)
            assert bool(torch.signbit(got.cpu()[0, 1])) == bool(torch.signbit(ref[0, 1]))
            r = {x["op"]: x["route"] for x in flbridge.stats(rngchip)["routes"]}
            assert r["aten::native_dropout_backward.default"] == "native", r
