"""torch.fl.FLGraph: capture once, replay as a flat list of vendor calls,
with torch.cuda.graphs' API and semantics."""
import copy
import gc

import pytest
import torch
import torch.nn as nn

import flbridge
from flbridge.devices import chip_for
from tests.conftest import sim_kernels


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))   # th1: multiples of 16


@pytest.fixture
def on(th1):
    """th1 made the current fl device (captures run on the current device)."""
    prev = torch.fl.current_device()
    torch.fl.set_device(th1)
    yield th1
    torch.fl.set_device(prev)


def test_replay_is_bit_identical_to_eager_and_follows_new_inputs(on):
    model = _mlp().to(on)
    static_x = torch.randn(16, 16).to(on)
    g = torch.fl.FLGraph()
    with torch.no_grad():
        model(static_x)                                        # warm-up: caches and uploads
        with torch.fl.graph(g):
            static_y = model(static_x)
        assert g.num_calls == 3                                # addmm, relu, addmm: nothing else
        for _ in range(3):
            x = torch.randn(16, 16)
            static_x.copy_(x)                                  # new data into the static input
            launches = sim_kernels(on).get("addmm", 0)
            g.replay()
            assert sim_kernels(on)["addmm"] == launches + 2    # the kernels really ran again
            assert torch.equal(static_y.cpu(), model(x.to(on)).cpu())   # bit-identical to eager
    assert flbridge.stats(on)["graph_replays"] == 3


def test_training_step_through_make_graphed_callables(on):
    cpu = _mlp()
    model = copy.deepcopy(cpu).to(on)
    sample = torch.randn(16, 16).to(on).requires_grad_()
    graphed = torch.fl.make_graphed_callables(model, (sample,))
    assert graphed is model
    opt, opt_c = torch.optim.SGD(model.parameters(), 0.1), torch.optim.SGD(cpu.parameters(), 0.1)
    for step in range(3):
        x = torch.randn(16, 16)
        for m, o, xx in ((model, opt, x.to(on).requires_grad_()), (cpu, opt_c, x.requires_grad_())):
            o.zero_grad()
            y = m(xx)
            (y * y).mean().backward()
            o.step()
    for a, b in zip(cpu.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    assert flbridge.stats(on)["graph_replays"] >= 6            # a forward and a backward graph per step


def test_what_cannot_be_replayed_is_refused_at_capture(on):
    model = _mlp().to(on)
    x = torch.randn(16, 16).to(on)
    with torch.no_grad():
        model(x)
        with pytest.raises(torch.fl.GraphCaptureError, match=r"read of device data on the host.*\.item\(\)"):
            with torch.fl.graph(torch.fl.FLGraph()):
                model(x).sum().item()
        with pytest.raises(torch.fl.GraphCaptureError, match=r"aten::atan.default on xpu:th1 would run on the CPU"):
            with torch.fl.graph(torch.fl.FLGraph()):
                torch.atan(model(x))
        with pytest.raises(torch.fl.GraphCaptureError, match="host data cannot be replayed"):
            with torch.fl.graph(torch.fl.FLGraph()):
                model(torch.randn(16, 16).to(on))
    assert not torch.fl.is_current_stream_capturing()
    y = model(x)                                               # eager again after a failed capture
    assert y.shape == (16, 16)


def test_private_pool_keeps_replay_memory_and_reset_gives_it_back(on):
    model = _mlp().to(on)
    x = torch.randn(64, 16).to(on)
    with torch.no_grad():
        model(x)
        gc.collect()
        torch.fl.empty_cache()
        before = torch.fl.memory_reserved(on)
        g = torch.fl.FLGraph()
        with torch.fl.graph(g):
            y = model(x)
        held = torch.fl.memory_reserved(on)
        assert held > before                                   # intermediates and the result, reserved
        alloc = chip_for(on).allocator
        assert g.pool().reserved > 0
        eager = model(torch.ones(64, 16).to(on))               # eager work never takes the graph's blocks
        assert not any(a in alloc.pool_of for a in [eager._st.dev])
        del y
        g.reset()
        gc.collect()
        assert not alloc.pool_of
    torch.fl.empty_cache()


def test_replay_refreshes_a_static_input_written_on_the_host(x1v2):
    prev = torch.fl.current_device()
    torch.fl.set_device(x1v2)                                  # x1 maps host memory (zero-copy)
    try:
        lin = nn.Linear(8, 8).to(x1v2)
        static_x = torch.zeros(4, 8).to(x1v2)
        g = torch.fl.FLGraph()
        with torch.no_grad():
            lin(static_x)
            with torch.fl.graph(g):
                y = lin(static_x)
            for _ in range(2):
                x = torch.randn(4, 8)
                static_x.copy_(x)
                g.replay()
                torch.testing.assert_close(y.cpu(), lin(x.to(x1v2)).cpu(), rtol=0, atol=0)
    finally:
        torch.fl.set_device(prev)


def test_a_whole_training_step_replays_like_the_cpu(anychip):
    """Forward, backward and AdamW(capturable=True).step() captured as one
    graph (torch.cuda's whole-network capture recipe): every replay is one
    more optimizer step, and the parameters follow the CPU's step for step.

    How close: AdamW divides each step by sqrt(v) + eps.  With the default
    eps=1e-8, a gradient that is rounding noise (1e-10, where the CPU's and
    the chip's summation orders differ, and the CPU's own order depends on
    the kernels it picks for the machine) becomes a step of up to lr: 4
    steps of lr=1e-3 put parameters 1.07e-5 apart on an AVX-512 CPU, 2e-6 to
    4.9e-6 on others.  eps=1e-6 bounds that amplification at lr * noise / eps
    (1e-7 for noise 1e-10); measured, the largest difference falls to
    7.7e-7 under every ATEN_CPU_CAPABILITY and simulator build, 13x inside
    atol=1e-5, while a wrong kernel still moves parameters by about lr per
    step."""
    from flbridge.demos.models import TinyGPT, token_batch
    prev = torch.fl.current_device()
    torch.fl.set_device(anychip)
    try:
        torch.manual_seed(0)
        cpu = TinyGPT()
        model = copy.deepcopy(cpu).to(anychip)
        opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-3, eps=1e-6)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, capturable=True)
        idx, tgt = token_batch(8, 24)
        static_idx, static_tgt = idx.to(anychip), tgt.to(anychip)

        def cpu_step():
            opt_c.zero_grad(set_to_none=True)
            cpu(idx, tgt)[1].backward()
            opt_c.step()

        side = torch.fl.Stream()                                  # warm-up on a side stream
        side.wait_stream(torch.fl.current_stream())
        with torch.fl.stream(side):
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                model(static_idx, static_tgt)[1].backward()
                opt.step()
                cpu_step()
        torch.fl.current_stream().wait_stream(side)
        g = torch.fl.FLGraph()
        opt.zero_grad(set_to_none=True)
        with torch.fl.graph(g):                                   # capture runs the step once, eagerly
            static_loss = model(static_idx, static_tgt)[1]
            static_loss.backward()
            opt.step()
        cpu_step()
        assert g.num_calls > 100
        before = flbridge.stats(anychip)
        for _ in range(2):
            g.replay()
            cpu_step()
        after = flbridge.stats(anychip)
        assert after["replayed_kernels"] - before["replayed_kernels"] == 2 * g.num_calls
        for k in ("h2d_bytes", "d2h_bytes", "cpu_fallback_ops"):             # vendor calls only
            assert after[k] == before[k], k
        for (name, a), b in zip(cpu.named_parameters(), model.parameters()):
            torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5,
                                       msg=lambda m, name=name: f"{name}: {m}")
        ref = cpu(idx, tgt)[1]
        g.replay()                                                # static_loss is the replayed forward's
        torch.testing.assert_close(static_loss.cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    finally:
        torch.fl.set_device(prev)
