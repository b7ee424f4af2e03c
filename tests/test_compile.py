"""torch.compile on fl: the traceable XPUTensor, the `fl` backend (capture,
replay, eager steps), the default backend on fl, Dynamo's skip list.

Compiled results are compared with flbridge's eager results (the same
kernels on the same arguments: bit-identical) and with the CPU (float32
tolerance).  The model-sized runs (encoder, TinyGPT, HF models) are
@pytest.mark.slow."""
from __future__ import annotations

import copy
import operator
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import flbridge
import flbridge.compiler.backend as compile_backend
from flbridge.tensor import XPUTensor
from tests.conftest import run_in_threads

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import gc

    import torch._dynamo
    torch._dynamo.reset()
    compile_backend.reset()
    yield
    torch._dynamo.reset()                # compiled graphs go, and their memory pools with them
    compile_backend.reset()
    # scalar constants made during capture runs sit in the chips' constant caches, in blocks of the
    # (now closed) pools until evicted: drop them so later tests see allocators without pool blocks
    for chip in flbridge.chips():
        with chip._const_lock:
            chip._constants.clear()
    gc.collect()
    # what survives is the session's (imports, caches): out of later collections' way,
    # as conftest does with the heap the session starts with
    gc.freeze()


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


# ------------------------------------------------- the traceable protocol

def test_stand_in_is_a_plain_fl_tensor_with_the_geometry_and_views_share_its_storage(anychip):
    x = torch.randn(4, 8).to(anychip)
    v = x[1:3, 2:6]
    p, q = x._fl, v._fl
    assert type(p) is torch.Tensor and p.device == anychip and p.dtype == x.dtype
    assert "Python" not in str(torch._C._dispatch_keys(p))          # no __torch_dispatch__: tracers fake it
    assert (q.shape, q.stride(), q.storage_offset()) == (v.shape, v.stride(), v.storage_offset())
    assert torch._C._is_alias_of(p, q)                              # the tracer sees flbridge's aliasing
    assert not torch._C._is_alias_of(p, torch.randn(4, 8).to(anychip)._fl)
    assert x.__tensor_flatten__() == (["_fl"], None) and type(x).__tensor_flatten__(x) == (["_fl"], None)


def test_flattening_changes_nothing_eager_and_in_place_views_drop_the_stand_in(x1):
    cpu = torch.randn(4, 6)
    x = cpu.to(x1)
    before = x._fl
    x.t_()                                                          # in-place view: new geometry
    assert "_fl" not in x.__dict__
    assert x._fl.shape == (6, 4) and x._fl.stride() == (1, 6) and x._fl is not before
    v = x[:, 1]
    v.mul_(2.0)                                                     # in place through a view
    expected = cpu.t().clone()
    expected[:, 1] *= 2.0
    torch.testing.assert_close(x.cpu(), expected, rtol=0, atol=0)
    assert copy.deepcopy(x).__dict__.get("_fl") is None             # a copy gets its own stand-in later


def test_fake_tensors_of_fl_tensors_are_traced_xputensors_on_the_device(th1):
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = torch.randn(3, 5).to(th1)
    with FakeTensorMode() as mode:
        f = mode.from_tensor(x)
        y = (f * 2).sum(0)
    assert type(f) is XPUTensor and f.device == th1 and y.shape == (5,)
    assert type(y._fl).__name__ == "FakeTensor" and y._fl.device == th1


# ----------------------------------------------------------- backend "fl"

def test_backend_fl_trains_like_eager_and_replays(x1):
    cpu = mlp()
    eager, comp = copy.deepcopy(cpu).to(x1), copy.deepcopy(cpu).to(x1)
    cm = torch.compile(comp, backend="fl")
    for step in range(3):
        x = torch.randn(5, 8)
        for m in (cpu, eager, comp):
            m.zero_grad()
        y_c = cm(x.to(x1))
        y_c.square().mean().backward()
        y_e = eager(x.to(x1))
        y_e.square().mean().backward()
        y = cpu(x)
        y.square().mean().backward()
        assert torch.equal(y_c.cpu(), y_e.cpu())                     # the same kernels: bit-identical
        torch.testing.assert_close(y_c.cpu(), y, rtol=1e-5, atol=1e-6)
        for pc, pe, p in zip(comp.parameters(), eager.parameters(), cpu.parameters()):
            assert type(pc.grad) is XPUTensor
            assert torch.equal(pc.grad.cpu(), pe.grad.cpu())
            torch.testing.assert_close(pc.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
    s = compile_backend.stats()
    assert s["graphs"] == 2 and s["captures"] == 2 and s["replays"] == 4   # forward, backward; 2 replays each
    assert s["vendor_calls"] > 0 and not s["eager_nodes"]


def test_each_replay_takes_back_the_blocks_of_the_call_before(x1):
    """A training step's compiled graphs get the device blocks their previous
    call had, where those are free again: the descriptors need no re-pointing
    and the kernels touch the memory the last call left in the caches (the
    allocator's last-freed-first order alone made every call's blocks
    another set of addresses)."""
    m = mlp().to(x1)
    ref = copy.deepcopy(m).cpu()
    opts = [torch.optim.SGD(p.parameters(), lr=0.1) for p in (m, ref)]

    def step(model, x, y):
        return (model(x) - y).square().mean()
    cs = torch.compile(step, backend="fl")
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    seen = {"forward": [], "backward": []}
    for _ in range(5):
        for o in opts:
            o.zero_grad()
        cs(m, x.to(x1), y.to(x1)).backward()
        step(ref, x, y).backward()
        for o in opts:
            o.step()
        for cg in compile_backend._COMPILED:
            (prog,) = [p for ps in cg.programs.values() for p in ps]
            seen[cg.kind].append(list(prog.fresh_last))
    fwd, bwd = seen["forward"][1:], seen["backward"][1:]
    assert all(f == fwd[0] for f in fwd)
    # backward: its gradients' blocks, freed by zero_grad, less the one the eager
    # ones_like of backward()'s seed takes first (the block freed last)
    assert all(sum(a != b for a, b in zip(g, bwd[0])) <= 1 for g in bwd)
    for pc, p in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(pc.cpu(), p, rtol=1e-5, atol=1e-6)


def test_a_new_batch_size_recompiles_once_then_replays(th1):
    m = mlp().to(th1)
    cm = torch.compile(m, backend="fl")
    ref = mlp()
    with torch.no_grad():
        for b in (3, 5, 7, 5, 9, 3):
            x = torch.randn(b, 8)
            torch.testing.assert_close(cm(x.to(th1)).cpu(), ref(x), rtol=1e-5, atol=1e-6)
    s = compile_backend.stats()
    assert s["graphs"] == 2                  # batch 3 static, then one graph with a symbolic batch
    assert s["captures"] == 5                # one capture run per concrete size (3, 5, 7, 9, and 3 again)
    assert s["replays"] == 1                 # the second batch of 5


@pytest.mark.parametrize("backend", ["fl", pytest.param("inductor", marks=pytest.mark.slow)])
def test_training_through_batch_size_changes_gives_the_cpus_gradients(x1, backend):
    """After a new batch size, Dynamo recompiles with a symbolic batch; the
    backward graph then gets saved tensors of symbolic size and no SymInt
    argument.  Each size needs its own program: one captured at batch 6
    replayed at batch 8 gave gradients off by 2.0, and at batch 4 a vendor
    call past the end of an allocation."""
    cpu = mlp()
    m = copy.deepcopy(cpu).to(x1)
    cm = torch.compile(m, backend=backend) if backend == "fl" else torch.compile(m)
    for b in (4, 4, 6, 8, 8, 16, 4, 6):
        x = torch.randn(b, 8)
        for mod in (cpu, m):
            mod.zero_grad()
        y = cm(x.to(x1))
        (y * y).sum().backward()
        yc = cpu(x)
        (yc * yc).sum().backward()
        torch.testing.assert_close(y.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-6)
        for p, pc in zip(m.parameters(), cpu.parameters()):
            torch.testing.assert_close(p.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5)
    s = compile_backend.stats()
    assert s["replays"] >= 4          # batch 4 (forward, backward) and the second batch 8 replay


@pytest.mark.parametrize("chip,dtype", [("x1", torch.float16), ("th1", torch.bfloat16)])
def test_autocast_around_and_inside_a_compiled_call_follows_eager_autocast(request, chip, dtype):
    """The autocast kernels run while Dynamo and AOTAutograd trace (their
    casts land in the graph); a traced tensor has no chip of its own and no
    weight-cast cache entry."""
    dev = request.getfixturevalue(chip)
    torch.manual_seed(0)
    m = mlp().to(dev)
    x = torch.randn(6, 8).to(dev)

    def inner(x):
        with torch.autocast("fl", dtype=dtype):
            return m(x)
    with torch.autocast("fl", dtype=dtype):
        ref = m(x)
    ref.float().sum().backward()
    ref_grads = [p.grad.cpu() for p in m.parameters()]
    around, compiled_inner = torch.compile(m, backend="fl"), torch.compile(inner, backend="fl")
    for run in (lambda: around(x), lambda: compiled_inner(x)):
        for _ in range(2):
            m.zero_grad()
            with torch.autocast("fl", dtype=dtype):
                y = run()
            assert y.dtype == dtype
            torch.testing.assert_close(y.float().cpu(), ref.float().cpu(), rtol=0, atol=0)
            y.float().sum().backward()
            for p, g in zip(m.parameters(), ref_grads):
                torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-3, atol=1e-3)


def test_dynamic_true_and_modes_run(x1):
    ref = mlp()
    for mode in ("reduce-overhead", "max-autotune"):
        torch._dynamo.reset()
        cm = torch.compile(mlp().to(x1), backend="fl", dynamic=True, mode=mode)
        with torch.no_grad():
            for b in (2, 6, 2):
                x = torch.randn(b, 8)
                torch.testing.assert_close(cm(x.to(x1)).cpu(), ref(x), rtol=1e-5, atol=1e-6)


def _guard_text(fn) -> str:
    entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
    return "\n".join(str(e.guard_manager) for e in entries)


def test_guards_on_an_fl_tensor_are_its_own_and_still_recompile_on_every_change(x1):
    """The stand-in's guards, the flatten metadata and attribute list are
    dropped (flbridge.compiler.guards); the outer tensor's guards stay, so
    a new shape, dtype, stride, requires_grad or device still recompiles."""
    def f(x, w):
        return (x @ w).relu() * 2

    cf = torch.compile(f, backend="fl")
    w = torch.randn(4, 3)
    wf = w.to(x1)
    cases = [torch.randn(5, 4), torch.randn(6, 4), torch.randn(4, 5).t(), torch.randn(5, 4, dtype=torch.float64)]
    for x in cases + cases[:1]:
        ref = f(x, w.to(x.dtype))
        out = cf(x.to(x1), wf.to(x.dtype))
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)
    text = _guard_text(f)
    assert "TENSOR_MATCH" in text and "XPUTensor" in text
    assert "__tensor_flatten__" not in text and "check_metadata" not in text
    # (a dynamic batch's shape guards still read sizes through the stand-in; nothing else does)
    assert not [ln for ln in text.splitlines() if "._fl" in ln and "size()" not in ln and "stride()" not in ln]
    # requires_grad flips: a graph with a backward, gradients right
    x = torch.randn(5, 4)
    xf = x.to(x1).requires_grad_()
    cf(xf, wf).sum().backward()
    xc = x.clone().requires_grad_()
    f(xc, w).sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    # a parameter whose geometry changes in place (its stand-in goes with it)
    m = torch.nn.Linear(4, 3).to(x1)
    cm = torch.compile(m, backend="fl")
    xi = torch.randn(2, 4)
    with torch.no_grad():
        cm(xi.to(x1))
        m.weight.data = torch.randn(4, 3).t().to(x1)           # same shape, new strides and storage
        ref = xi @ m.weight.cpu().t() + m.bias.cpu()
        torch.testing.assert_close(cm(xi.to(x1)).cpu(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["data", "data_view", pytest.param("set_", marks=pytest.mark.slow)])
def test_a_parameter_given_new_data_between_calls_is_read_anew(x1, how):
    """`p.data = new` keeps p's geometry (the guards pass) but gives it a new
    Storage: the stand-in the compiled code finds it by must go with the old one."""
    cpu = mlp()
    m = copy.deepcopy(cpu).to(x1)
    cm = torch.compile(m, backend="fl")
    x = torch.randn(5, 8)
    for j in range(3):
        for _ in range(2):
            m.zero_grad()
            cpu.zero_grad()
            y = cm(x.to(x1))
            y.square().sum().backward()
            yc = cpu(x)
            yc.square().sum().backward()
            torch.testing.assert_close(y.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(m[0].weight.grad.cpu(), cpu[0].weight.grad, rtol=1e-5, atol=1e-6)
        new = torch.randn(16 * 8 + 3 * j)[3 * j:].view(16, 8)
        cpu[0].weight.data = new.clone()
        if how == "data":
            m[0].weight.data = new.clone().to(x1)
        elif how == "data_view":                    # a view of a bigger tensor, another offset each time
            m[0].weight.data = torch.cat([torch.zeros(3 * j), new.flatten()]).to(x1)[3 * j:].view(16, 8)
        else:
            with torch.no_grad():
                m[0].weight.set_(new.clone().to(x1))


@pytest.mark.parametrize("chip,device_copy", [("x1", True), pytest.param("th1", True, marks=pytest.mark.slow),
                                               ("x1", False)])
def test_outputs_of_every_call_stay_as_computed_while_later_calls_replay(request, chip, device_copy, monkeypatch):
    """The capture run allocates from the program's pool, where a freed
    intermediate's block is handed out again: its outputs could share an
    address every replay writes.  They move to blocks of their own (a device
    copy, or through the host where the runtime has none)."""
    anychip = request.getfixturevalue(chip)
    if not device_copy:
        monkeypatch.setattr(flbridge.chips()[anychip.index].runtime, "_d2d", None)
    cpu = mlp()
    m = copy.deepcopy(cpu).to(anychip)
    cm = torch.compile(m, backend="fl")
    kept = []
    for i in range(4):
        x = torch.randn(4, 8)
        if i % 2:
            y = cm(x.to(anychip))
            y.sum().backward()
        else:
            with torch.no_grad():
                y = cm(x.to(anychip))
        kept.append((y, cpu(x).detach()))
    for y, ref in kept:                              # read only now, after the replays
        torch.testing.assert_close(y.detach().cpu(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("what", ["output", "weight"])
def test_an_in_place_change_of_what_backward_saved_is_an_error_on_every_call(x1, what):
    """Tanh saves its output and the linear layer its weight; a replay's
    outputs over the same storage as another output, or as an input, are
    views of it, so the change bumps the saved tensor's version as in eager."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).to(x1)
    cm = torch.compile(m, backend="fl")
    for _ in range(3):
        y = cm(torch.randn(4, 8).to(x1).requires_grad_())
        with torch.no_grad():
            (y if what == "output" else m[0].weight).add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_one_compiled_model_served_from_three_threads_gives_each_its_own_result(x1):
    """A program patches its descriptors in place and keeps intermediates at
    fixed addresses: calls of one compiled graph take turns."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).eval()
    cm = torch.compile(copy.deepcopy(m).to(x1), backend="fl")
    xs = [torch.randn(16, 64) for _ in range(3)]
    refs = [m(x).detach() for x in xs]
    with torch.no_grad():
        for x in xs:
            cm(x.to(x1))
    wrong = []

    def serve(k):
        with torch.no_grad():
            for i in range(25):
                j = (k + i) % 3
                if not torch.allclose(cm(xs[j].to(x1)).cpu(), refs[j], rtol=1e-5, atol=1e-5):
                    wrong.append(j)
    errors = run_in_threads(serve, 3)
    assert not errors and not wrong


def test_a_compiled_call_inside_an_flgraph_capture_is_recorded(x1):
    """While an FLGraph records, a compiled graph runs its ops through
    flbridge's dispatch, where the recording sees them (a replay of its own
    calls would bypass it)."""
    m = mlp()
    cm = torch.compile(copy.deepcopy(m).to(x1), backend="fl")
    sx = torch.randn(4, 8).to(x1)
    with torch.no_grad():
        cm(sx)
        cm(sx)                                  # captured and replayed by the compiled graph first
        g = torch.fl.FLGraph()
        with torch.fl.device(x1), torch.fl.graph(g):
            sy = cm(sx)
        assert g.num_calls > 0
        for _ in range(2):
            x = torch.randn(4, 8)
            sx.copy_(x.to(x1))
            g.replay()
            torch.testing.assert_close(sy.cpu(), m(x), rtol=1e-5, atol=1e-6)


def test_a_compiled_model_runs_under_inference_mode(x1):
    m = mlp()
    cm = torch.compile(copy.deepcopy(m).to(x1), backend="fl")
    for _ in range(3):
        x = torch.randn(5, 8)
        with torch.inference_mode():
            y = cm(x.to(x1))
        assert y.is_inference()
        torch.testing.assert_close(y.cpu(), m(x).detach(), rtol=1e-5, atol=1e-6)


def test_a_stand_in_reaching_an_op_says_which_backends_run_on_fl(x1):
    """backend="aot_eager" runs AOTAutograd's graphs on the data-less
    stand-ins; an op that meets one beside a real fl tensor says so."""
    x, y = torch.randn(4).to(x1), torch.randn(4).to(x1)
    with pytest.warns(flbridge.FallbackWarning), \
            pytest.raises(NotImplementedError, match="stand-in of an fl tensor.*backend='fl', 'eager'"):
        torch.atan2(x, y._fl)                       # x1 has no atan2 kernel: the CPU fallback sees it


def test_a_symbolic_size_never_enters_the_stand_in_address_counter(x1):
    """A backend that sizes stand-ins from a dynamic graph's fake values hands
    stand_in_storage a SymInt: kept, it made the next address symbolic, and
    every later stand-in cost a symbolic evaluation (~60 ms)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from flbridge.tensor import traceable
    env = ShapeEnv()
    n = env.create_symintnode(env.create_symbol(64, ConstantSource("n")), hint=64)
    us = traceable.stand_in_storage(n, x1)
    assert us.nbytes() == 64 and type(traceable._stand_in_next[0]) is int


def test_a_users_guard_filter_still_applies_beside_flbridges(x1):
    m = mlp().to(x1)

    def f(x):
        return m(x)
    cf = torch.compile(f, backend="fl",
                       options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(cf(x.to(x1)).cpu(), mlp()(x), rtol=1e-5, atol=1e-6)
    text = _guard_text(f)
    assert "TENSOR_MATCH" in text and "XPUTensor" in text            # the input's own guards
    assert "._fl" not in text and "_parameters" not in text    # theirs: no parameter guards; ours: no stand-ins


def test_bad_mode_or_option_says_what_is_accepted(x1):
    x = torch.randn(2, 8).to(x1)
    with pytest.raises(Exception, match="unknown torch.compile mode 'fastest'.*use one of default"):
        torch.compile(mlp().to(x1), backend="fl", mode="fastest")(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option 'tile' for backend 'fl'; known options: capture"):
        torch.compile(mlp().to(x1), backend="fl", options={"tile": 4})(x)


def _clone_view_of_input(x):
    return (x[1:].clone().view(-1),)


def _clone_view_beside_its_source(x):
    y = x * 2
    return y, y.clone().view(-1)


@pytest.mark.parametrize("fn", [_clone_view_of_input, _clone_view_beside_its_source])
def test_a_copy_returned_as_a_view_stays_a_copy_of_inputs_and_other_outputs(x1, fn):
    """The pass that drops identity clones keeps those whose source shares
    memory with an input or an output: writing into any output leaves the
    input and the other outputs as they were, as on the CPU."""
    cf = torch.compile(fn, backend="fl")
    for _ in range(3):                      # the capture run, then replays
        x = torch.arange(12.0).to(x1)
        outs = cf(x)
        expected = [o.cpu().clone() for o in fn(torch.arange(12.0))]
        for i, o in enumerate(outs):
            o.fill_(-1.0)
            assert torch.equal(x.cpu(), torch.arange(12.0))
            for j, other in enumerate(outs):
                if j != i:
                    assert torch.equal(other.cpu(), expected[j])
            expected[i].fill_(-1.0)


def test_an_identity_clone_inside_the_graph_is_dropped(x1):
    """Eval-mode dropout and contiguous() of a contiguous tensor reach the
    graph as clones; copying would be a device call per clone per call."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.ReLU()).eval()
    cm = torch.compile(copy.deepcopy(m).to(x1), backend="fl")
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(cm(x.to(x1)).cpu(), m(x), rtol=1e-5, atol=1e-6)
    (cg,) = compile_backend._COMPILED
    assert cg.removed_clones == 1


@pytest.mark.parametrize("chip", ["x1", pytest.param("th1", marks=pytest.mark.slow)])
@pytest.mark.parametrize("draw", [
    lambda x: x + torch.empty_like(x).normal_(0, 2),
    lambda x: torch.nn.init.kaiming_uniform_(x.clone()),
    lambda x: x.clone().bernoulli_(torch.full_like(x, 0.3)),
    lambda x: x.clone().exponential_(),
], ids=["normal_", "uniform_", "bernoulli_", "exponential_"])
def test_in_place_random_ops_draw_in_compiled_code_what_they_draw_eagerly(request, chip, draw):
    """AOTAutograd writes x.normal_() as normal_functional(x) (uniform(x),
    random(x), ...): these run the chip's in-place kernel on a new tensor,
    drawing what eager code draws from the chip's generator, as
    backend="aot_eager" on the CPU gives eager's numbers."""
    dev = request.getfixturevalue(chip)
    x = torch.zeros(4, 5, device=dev)
    comp = torch.compile(draw, backend="fl")
    for seed in (1, 2):                     # the capture run, then a replay
        torch.manual_seed(seed)
        eager = draw(x).cpu()
        torch.manual_seed(seed)
        assert torch.equal(comp(x).cpu(), eager)
    # the random op is an eager step each call (a replay would repeat its numbers), on the chip
    assert set(compile_backend.stats()["eager_nodes"].values()) == {"random: new numbers every call"}


def test_a_graph_past_its_eight_programs_drops_the_least_recently_used(x1):
    """Sizes 2..10 (nine programs: 2 is dropped), 2 again (captured anew),
    11 (drops 3, not 2), then 2 replays."""
    cf = torch.compile(lambda x: (x * 2 + 1).sum(0), backend="fl", dynamic=True)
    captured = []
    for n in [*range(2, 11), 2, 11, 2]:
        before = compile_backend.stats()["captures"]
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x.to(x1)).cpu(), (x * 2 + 1).sum(0))
        captured.append(compile_backend.stats()["captures"] > before)
    assert captured == [True] * 9 + [True, True, False]
    (cg,) = compile_backend._COMPILED
    assert sum(len(v) for v in cg.programs.values()) == 8


@pytest.mark.parametrize("chip", ["x1", "x1v2"])
def test_kernels_after_a_host_write_into_an_input_read_this_calls_input(request, chip):
    """A KV-cache update: index_copy_ into the cache runs on the CPU on x1
    (an eager step), and the kernels after it read the cache.  With a new
    cache tensor every call (beam search reorders it with index_select),
    its upload after the host write went to a new zero-copy mapping while
    the kernels read the block the call began with: wrong from the second
    call, the cache itself right."""
    dev = request.getfixturevalue(chip)

    def step(k_new, cache, pos, w):
        cache.index_copy_(2, pos, k_new)
        return (cache * w).sum(dim=(-1, -2))
    f = torch.compile(step, backend="fl")
    torch.manual_seed(0)
    w = torch.randn(4)
    cache_c = torch.zeros(3, 2, 6, 4)
    cache_f = cache_c.to(dev)
    for t in range(6):
        k, pos, beams = torch.randn(3, 2, 1, 4), torch.tensor([t]), torch.randint(0, 3, (3,))
        cache_c, cache_f = cache_c.index_select(0, beams), cache_f.index_select(0, beams.to(dev))
        expected = step(k, cache_c, pos, w)
        torch.testing.assert_close(f(k.to(dev), cache_f, pos.to(dev), w.to(dev)).cpu(), expected)
        torch.testing.assert_close(cache_f.cpu(), cache_c)
    assert compile_backend.stats()["replays"] >= 4


def _positives_doubled(x):
    return x[x > 0] * 2


def _prefix_by_count(x):
    return x[:(x > 0).sum().item()] * 2


@pytest.mark.parametrize("fn, flag", [(_positives_doubled, "capture_dynamic_output_shape_ops"),
                                      (_prefix_by_count, "capture_scalar_outputs")])
def test_a_graph_with_data_dependent_sizes_runs_eagerly_every_call(x1, fn, flag):
    """With Dynamo told to keep nonzero / x[mask] / sizes from .item() in the
    graph, the sizes change from call to call: a replay of the capture run's
    calls returned its sizes (x[x > 0] * 2 of four positives gave two)."""
    with torch._dynamo.config.patch(**{flag: True}):
        cf = torch.compile(fn, backend="fl")
        for vals in ([1., -1., 2., -2.], [1., 3., 2., 5.], [-1., -3., 2., -5.]):
            x = torch.tensor(vals)
            torch.testing.assert_close(cf(x.to(x1)).cpu(), fn(x))
    assert list(compile_backend.stats()["eager_graphs"]) == [
        "data-dependent sizes (a replay would repeat the capture run's)"]


def test_a_whole_model_saves_and_copies_after_a_compiled_call(th1):
    """Tracing leaves compile-time objects on the parameters (the stand-in,
    the outer storage fakeification describes): torch.save(model) and
    deepcopy leave them out, as they leave out the rest of flbridge's
    per-tensor state."""
    import io
    model = torch.nn.Linear(4, 2).to(th1)
    torch.compile(model, backend="fl")(torch.randn(3, 4).to(th1)).sum().backward()
    buf = io.BytesIO()
    torch.save(model, buf)
    for where in (None, "cpu"):
        buf.seek(0)
        m2 = torch.load(buf, weights_only=False, map_location=where)
        assert m2.weight.device == (th1 if where is None else torch.device("cpu"))
        assert torch.equal(m2.weight.cpu(), model.weight.cpu()) and torch.equal(m2.bias.cpu(), model.bias.cpu())
    m3 = copy.deepcopy(model)
    assert "_described_storage" not in m3.weight.__dict__
    x = torch.randn(3, 4)
    torch.testing.assert_close(torch.compile(m3, backend="fl")(x.to(th1)).cpu(), model(x.to(th1)).cpu())


@pytest.mark.parametrize("how", [pytest.param("hessian", marks=pytest.mark.slow), "jvp of grad"])
def test_forward_over_reverse_autodiff_compiles(x1, how):
    """torch.func.hessian (jacfwd of jacrev) and jvp(grad(f)): the traced
    backward moves a tensor to the meta device, a new tensor that the
    tracing path had taken for an alias of its fl input."""
    from torch.func import grad, hessian, jvp
    if how == "hessian":
        def fn(x, t):
            return hessian(lambda v: (v.sin() * v.pow(3)).sum())(x)
    else:
        def fn(x, t):
            return jvp(grad(lambda v: v.sin().sum()), (x,), (t,))
    x, t = torch.randn(3), torch.ones(3)
    got = torch.compile(fn, backend="fl")(x.to(x1), t.to(x1))
    want = fn(x, t)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6)


def test_a_node_without_a_device_route_is_an_eager_step_every_call(x1):
    def f(x, w):
        return torch.erf(x @ w) * 2 + 1                               # x1 has no erf kernel
    cf = torch.compile(f, backend="fl")
    w = torch.randn(4, 4)
    with pytest.warns(flbridge.FallbackWarning, match="erf"):
        for _ in range(3):
            x = torch.randn(3, 4)
            torch.testing.assert_close(cf(x.to(x1), w.to(x1)).cpu(), f(x, w), rtol=1e-5, atol=1e-6)
    s = compile_backend.stats()
    assert s["replays"] == 2 and "aten.erf.default" in s["eager_nodes"]
    assert "runs on the CPU" in s["eager_nodes"]["aten.erf.default"]


def test_outputs_that_are_views_of_an_input_alias_it(th1):
    cf = torch.compile(lambda x: (x.view(-1), x.t(), x * 2), backend="fl")
    for _ in range(2):
        cpu = torch.randn(3, 4)
        x = cpu.to(th1)
        a, b, c = cf(x)
        x.add_(1.0)
        assert torch.equal(a.cpu(), (cpu + 1).view(-1)) and torch.equal(b.cpu(), (cpu + 1).t())
        assert torch.equal(c.cpu(), cpu * 2)


def test_batch_norm_running_stats_update_as_in_eager(x1):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
    comp = copy.deepcopy(cpu).to(x1)
    cm = torch.compile(comp, backend="fl")
    for _ in range(3):
        x = torch.randn(6, 8)
        cm(x.to(x1)).sum().backward()
        cpu(x).sum().backward()
    torch.testing.assert_close(comp[1].running_mean.cpu(), cpu[1].running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(comp[1].running_var.cpu(), cpu[1].running_var, rtol=1e-5, atol=1e-6)
    assert comp[1].num_batches_tracked.item() == 3


@pytest.mark.parametrize("capturable", [pytest.param(False, marks=pytest.mark.slow), True])
def test_compiled_adamw_step_follows_the_cpu(th1, capturable):
    compiled_step_follows_the_cpu(th1, torch.optim.AdamW, dict(lr=1e-2, capturable=capturable))


def train_beside_the_cpu(chip, cls, kw, steps=4):
    """`steps` steps of optimizer `cls` on a small MLP, the step compiled
    with backend fl on `chip` (kw as given) and eager on the CPU (kw without
    capturable); returns (cpu model, chip model, cpu optimizer, chip optimizer)."""
    cpu = mlp()
    comp = copy.deepcopy(cpu).to(chip)
    opt_c = cls(cpu.parameters(), **{k: v for k, v in kw.items() if k != "capturable"})
    opt = cls(comp.parameters(), **kw)
    step = torch.compile(opt.step, backend="fl")
    for _ in range(steps):
        x = torch.randn(5, 8)
        opt.zero_grad()
        opt_c.zero_grad()
        comp(x.to(chip)).square().mean().backward()
        cpu(x).square().mean().backward()
        step()
        opt_c.step()
    return cpu, comp, opt_c, opt


def compiled_step_follows_the_cpu(chip, cls, kw):
    """Four steps of optimizer `cls` on a small MLP, compiled with backend fl
    on `chip` and eager on the CPU: the parameters stay the CPU's."""
    cpu, comp, _, _ = train_beside_the_cpu(chip, cls, kw)
    for p, q in zip(comp.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    assert compile_backend.stats()["replays"] >= 2


def test_compiled_adamw_graph_updates_in_place_with_one_lerp_and_constant_fills(x1):
    """amsgrad: a step the fused kernel does not take (fuse_adam leaves it),
    so the foreach chain is lowered op by op."""
    m = mlp().to(x1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=True, foreach=True, amsgrad=True)
    step = torch.compile(opt.step, backend="fl")
    m(torch.randn(5, 8).to(x1)).square().mean().backward()
    step()
    step()
    (cg,) = [c for c in compile_backend._COMPILED if c.kind == "inference"]
    targets = [str(n.target) for n in cg.nodes if n.op == "call_function"]
    # every update writes where the state lives (no copy back), the first moment is one lerp
    assert "aten.copy_.default" not in targets
    assert "aten._foreach_lerp_.Scalar" in targets and "aten._foreach_sub.List" not in targets
    # the lerp's weights (a full_like per parameter) went with the sub and the addcmul
    assert len(cg._constant) == 0 and compile_backend.stats()["replays"] == 1
    assert cg.fused_adam == 0


@pytest.mark.parametrize("cls,kw", [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
                                    (torch.optim.AdamW, dict(lr=3e-3, weight_decay=0.0, betas=(0.8, 0.95))),
                                    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, eps=1e-6)),
                                    (torch.optim.Adam, dict(lr=1e-2)),
                                    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05, maximize=True))],
                         ids=["adamw", "adamw-no-decay", "adam-l2", "adam", "adamw-maximize"])
def test_compiled_adam_step_is_the_vendors_fused_kernel_and_follows_the_cpu(th1, cls, kw):
    """The foreach chain of a compiled Adam/AdamW step becomes one
    _fused_adam(w)_ call (fuse_adam.py) on a chip whose spec has it: one
    vendor call per step for the update, and the parameters and moments
    still follow the CPU's eager (foreach) optimizer."""
    cpu, comp, opt_c, opt = train_beside_the_cpu(th1, cls, dict(foreach=True, capturable=True, **kw))
    (cg,) = [c for c in compile_backend._COMPILED if c.kind == "inference"]
    targets = [str(n.target) for n in cg.nodes if n.op == "call_function" and n.target is not operator.getitem]
    # with no weight decay the two kernels make the same update: the pass takes the AdamW one
    l2 = cls is torch.optim.Adam and kw.get("weight_decay", 0) != 0
    fused = "aten._fused_adam_.default" if l2 else "aten._fused_adamw_.default"
    assert cg.fused_adam == 1 and targets == ["aten._foreach_add_.Scalar", fused], targets
    (prog,) = [p for ps in cg.programs.values() for p in ps]
    labels = [label for seg in prog.steps for label in getattr(seg, "labels", ())]
    # the step counters one by one (and the fill of their 1), then one call for the whole update
    assert len(labels) <= len(list(cpu.parameters())) + 2 and "FusedAdam" in labels[-1], labels
    for p, q in zip(comp.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(comp.parameters(), cpu.parameters()):
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][k].cpu(), opt_c.state[q][k], rtol=1e-5, atol=1e-7)


@pytest.fixture
def force_fallback():
    """Sets FLBRIDGE_FORCE_FALLBACK's patterns for one test (routes made again)."""
    from flbridge import config

    def force(*patterns):
        config.CONFIG.force_fallback = [re.compile(p) for p in patterns]
        for c in flbridge.chips():
            c.routes.clear()
    yield force
    force()


def test_adam_chains_the_fused_kernel_does_not_take_stay_as_they_are(x1, force_fallback):
    """amsgrad (the chain has a running maximum the pass does not match),
    step counters on the CPU (capturable=False: the fused kernel takes fl
    tensors only), and a chip that would not run _fused_adamw_ itself: the
    step is lowered op by op, replayed, and still follows the CPU."""
    for kw, forced in ((dict(amsgrad=True), ()), (dict(capturable=False), ()), ({}, ("aten::_fused_adamw_",))):
        force_fallback(*forced)
        compile_backend.reset()
        torch._dynamo.reset()
        cpu, comp, _, _ = train_beside_the_cpu(x1, torch.optim.AdamW,
                                               dict(lr=1e-2, foreach=True, **{"capturable": True, **kw}), steps=3)
        (cg,) = [c for c in compile_backend._COMPILED if c.kind == "inference"]
        assert cg.fused_adam == 0 and cg.replays == 2, (kw, cg.replays)
        for p, q in zip(comp.parameters(), cpu.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def _aten_graph(f, *shapes):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes))


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_reinplacing_writes_an_input_only_when_nothing_reads_it_later():
    from flbridge.compiler.passes import reinplace_input_updates
    aten = torch.ops.aten

    def read_before(x):
        r = aten.add.Tensor(x, 1)
        y = aten.mul.Tensor(x, 0.5)
        aten.copy_.default(x, y)
        return (r,)

    def read_after(x):
        y = aten.mul.Tensor(x, 0.5)
        r = aten.add.Tensor(x, 1)
        aten.copy_.default(x, y)
        return (r,)

    def view_read_after(x):
        v = aten.view.default(x, [-1])
        y = aten.mul.Tensor(x, 0.5)
        r = aten.add.Tensor(v, 1)
        aten.copy_.default(x, y)
        return (r,)

    def foreach_chain(xs, gs):
        a = aten._foreach_mul.Scalar([xs], 0.9)
        b = aten._foreach_add.List([a[0]], [gs])
        aten.copy_.default(xs, b[0])
        return ()

    gm = _aten_graph(read_before, (3, 4))
    assert reinplace_input_updates(gm) == 1
    assert _targets(gm) == ["aten.add.Tensor", "aten.mul_.Tensor"]
    for f in (read_after, view_read_after):
        gm = _aten_graph(f, (3, 4))
        before = _targets(gm)
        assert reinplace_input_updates(gm) == 0 and _targets(gm) == before
    gm = _aten_graph(foreach_chain, (3,), (3,))
    reinplace_input_updates(gm)
    assert _targets(gm) == ["aten._foreach_mul_.Scalar", "aten._foreach_add_.List"]
    x, g = torch.randn(3), torch.randn(3)
    want = x * 0.9 + g
    gm(x, g)
    torch.testing.assert_close(x, want)


def test_a_constant_fill_is_made_once_and_never_handed_out(x1):
    def f(x):
        return x + torch.full_like(x, 3.0), torch.zeros_like(x)
    cf = torch.compile(f, backend="fl")
    for _ in range(3):
        x = torch.randn(4, 5)
        y, z = cf(x.to(x1))
        torch.testing.assert_close(y.cpu(), x + 3.0)
        assert torch.equal(z.cpu(), torch.zeros(4, 5))
        z.add_(1.0)                  # an output is the caller's: the next call's zeros are new
    (cg,) = compile_backend._COMPILED
    assert [str(n.target) for n in cg._constant] == ["aten.full_like.default"]
    (prog,) = [p for ps in cg.programs.values() for p in ps]
    labels = [label for s in prog.steps for label in getattr(s, "labels", ())]
    assert sum("fill" in label for label in labels) == 1      # the zeros output, not the constant


_OPTIMIZERS = {
    "SGD nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "Adam amsgrad": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, capturable=True)),
    "AdamW maximize": (torch.optim.AdamW, dict(lr=1e-2, maximize=True, weight_decay=0.1, capturable=True)),
    "RMSprop centered": (torch.optim.RMSprop, dict(lr=1e-2, centered=True, momentum=0.5, capturable=True)),
    "Adagrad": (torch.optim.Adagrad, dict(lr=0.1)),
    "Adamax": (torch.optim.Adamax, dict(lr=1e-2, capturable=True)),
    "NAdam": (torch.optim.NAdam, dict(lr=1e-2, capturable=True)),
    "RAdam": (torch.optim.RAdam, dict(lr=1e-2, capturable=True)),
    "Adadelta": (torch.optim.Adadelta, dict(lr=1.0, capturable=True)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_every_compiled_optimizer_step_follows_the_cpu(th1, name):
    # the graph passes rewrite each optimizer's update graph (in place, chains, lerp): the values stay the CPU's
    compiled_step_follows_the_cpu(th1, *_OPTIMIZERS[name])


def test_capture_false_runs_the_graph_eagerly(x1):
    cm = torch.compile(mlp().to(x1), backend="fl", options={"capture": False})
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(cm(x.to(x1)).cpu(), mlp()(x), rtol=1e-5, atol=1e-6)
        cm(x.to(x1))
    s = compile_backend.stats()
    assert s["captures"] == 0 and s["replays"] == 0 and s["graphs"] == 1


# ------------------------------------------------------ the default backend

def test_default_compile_makes_fl_tensors_inside_the_region(x1):
    m = mlp()
    mf = copy.deepcopy(m).to(x1)

    def f(mod, x):
        return mod(x) + torch.arange(4, device=x.device) + torch.zeros(4, device=x.device) \
            + torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
    cf = torch.compile(f)
    for _ in range(2):
        x = torch.randn(3, 8)
        torch.testing.assert_close(cf(mf, x.to(x1)).cpu(), f(m, x), rtol=1e-5, atol=1e-6)
    assert compile_backend.stats()["graphs"] == 1          # Inductor was not asked: the fl backend was


def test_the_default_compile_sends_graphs_that_touch_fl_to_the_fl_backend_and_the_rest_to_inductor(x1, monkeypatch):
    """Graph by graph: CPU code goes to Inductor; code with fl inputs, or
    CPU inputs (or none) that makes fl tensors, to the fl backend.  The last
    kinds had gone to Inductor: "KeyError: 'fl'".  (Inductor is replaced by
    a spy that runs the graph as is, to keep the test fast.)"""
    import torch._inductor.compile_fx as compile_fx
    to_inductor = []

    def inductor_spy(gm, inputs, **kwargs):
        to_inductor.append(gm)
        return gm.forward
    monkeypatch.setattr(compile_fx, "compile_fx", inductor_spy)
    x = torch.randn(3)
    cases = (("cpu only", lambda x: x.relu() * 2, x, x.relu() * 2, "cpu"),
             ("fl input", lambda x: x.relu() * 2, x.to(x1), x.relu() * 2, x1),
             ("cpu in, fl factory", lambda x: torch.ones(x.shape, device=x1) * 2 + x.sum().to(x1), x,
              torch.full((3,), 2.0) + x.sum(), x1),
             ("cpu in, moved to fl", lambda x: x.to(x1).relu() + 1, x, x.relu() + 1, x1),
             ("no tensor in", lambda n: torch.arange(n, device=x1).float() * 2, 4, torch.arange(4.0) * 2, x1))
    for name, fn, arg, want, where in cases:
        torch._dynamo.reset()
        compile_backend.reset()
        before = len(to_inductor)
        out = torch.compile(fn)(arg)
        assert out.device == torch.device(where), name
        torch.testing.assert_close(out.cpu(), want)
        went_to_fl = compile_backend.stats()["graphs"] > 0
        assert went_to_fl == (where != "cpu") and (len(to_inductor) > before) == (where == "cpu"), name


# ------------------------------------------------------------- skip list

def test_dynamo_skips_flbridge_files_but_compiles_its_model_files():
    import torch._dynamo.trace_rules as tr
    import flbridge.demos.models
    import flbridge.routing.route
    assert tr.check_file(flbridge.routing.route.__file__).skipped
    assert tr.check_file(compile_backend.__file__).skipped
    assert not tr.check_file(flbridge.demos.models.__file__).skipped


def test_the_current_device_wrappers_are_inlined_into_callers_but_never_compiled_alone(x1):
    """Tensor.to on fl:1 as the current device is flbridge's wrapper: Dynamo
    inlines it into user code (no graph break) but never compiles it as a
    frame of its own when flbridge's own code calls it eagerly."""
    import torch._dynamo.trace_rules as tr
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    with torch.fl.device(x1):
        wrapper = torch.Tensor.to
        assert getattr(wrapper, "__flbridge_original__", None) is not None
        assert tr.check_verbose(wrapper, is_inlined_call=False).skipped
        assert not tr.check_verbose(wrapper, is_inlined_call=True).skipped
        explained = torch._dynamo.explain(lambda x: x.to(torch.float16) * 2)(torch.randn(3).to(x1))
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        assert not _debug_get_cache_entry_list(wrapper.__code__)


@pytest.mark.slow
def test_a_compiled_transformer_under_float16_autocast_trains_on_x1(x1):
    """nn.Transformer with key padding masks graph-breaks at .item() and runs
    parts eagerly, where flbridge's autocast casts call Tensor.to: Dynamo
    compiled that wrapper as a frame of its own per tensor, and a recompile
    failed ('sources must not be empty for symbol')."""
    import torch.nn.functional as F
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    with torch.fl.device(x1):
        torch.manual_seed(0)
        emb, tr_, out = (torch.nn.Embedding(20, 16), torch.nn.Transformer(16, 2, 2, 2, 32, dropout=0.0),
                         torch.nn.Linear(16, 20))
        m = torch.nn.ModuleDict({"emb": emb, "tr": tr_, "out": out})

        def forward(mod, src, tgt, skpm, tkpm):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.size(0), device=tgt.device)
            h = mod["tr"](mod["emb"](src), mod["emb"](tgt), tgt_mask=mask, src_key_padding_mask=skpm,
                          tgt_key_padding_mask=tkpm, memory_key_padding_mask=skpm)
            return mod["out"](h)
        eager_m = copy.deepcopy(m).to(x1)
        m.to(x1)
        f = torch.compile(forward, backend="fl")
        for _ in range(3):
            src, tgt = torch.randint(1, 20, (6, 3)), torch.randint(1, 20, (5, 3))
            skpm = torch.zeros(3, 6, dtype=torch.bool)
            skpm[1, -2:] = True
            tkpm = torch.zeros(3, 4, dtype=torch.bool)
            tkpm[2, -1:] = True
            args = (src.to(x1), tgt[:-1].to(x1), skpm.to(x1), tkpm.to(x1))
            labels = tgt[1:].reshape(-1).to(x1)
            with torch.autocast("fl", dtype=torch.float16):
                loss = F.cross_entropy(f(m, *args).reshape(-1, 20), labels)
                ref = F.cross_entropy(forward(eager_m, *args).reshape(-1, 20), labels)
            torch.testing.assert_close(loss.cpu(), ref.cpu(), rtol=2e-3, atol=2e-3)
            loss.backward()
        assert not _debug_get_cache_entry_list(torch.Tensor.to.__code__)


# ------------------------------------------------------------- slow suite

@pytest.mark.slow
def test_backend_resolves_by_name_in_a_fresh_process_before_flbridge_is_imported():
    code = ("import sys, torch, torch._dynamo\n"
            "assert 'flbridge' not in sys.modules\n"
            "assert 'fl' in torch._dynamo.list_backends()\n"
            "fn = torch._dynamo.lookup_backend('fl')\n"
            "print(fn.__module__, 'flbridge' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, FLBRIDGE_WARN="off"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["flbridge.compiler.backend", "True"]


@pytest.mark.slow
def test_dynamo_sees_one_graph_of_a_transformer_encoder(x1):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    encf = copy.deepcopy(enc).to(x1)
    x = torch.randn(2, 16, 64)
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        explained = torch._dynamo.explain(encf)(x.to(x1))
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        torch._dynamo.reset()
        cm = torch.compile(encf, backend="fl")
        with torch.no_grad():
            for _ in range(2):
                torch.testing.assert_close(cm(x.to(x1)).cpu(), enc(x), rtol=1e-4, atol=1e-5)
    finally:
        torch.backends.mha.set_fastpath_enabled(prev)
    assert compile_backend.stats()["replays"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fl", "inductor"])
def test_tinygpt_training_compiled_follows_eager_step_for_step(th1, backend):
    from flbridge.demos.models import TinyGPT, token_batch
    torch.manual_seed(0)
    cpu = TinyGPT()
    eager, comp = copy.deepcopy(cpu).to(th1), copy.deepcopy(cpu).to(th1)
    idx, tgt = token_batch(4, 16)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(comp.parameters(), lr=1e-3, capturable=True)
    cm = torch.compile(comp, backend=backend)
    step = torch.compile(opt.step, backend=backend)
    for _ in range(3):
        opt.zero_grad()
        opt_e.zero_grad()
        _, loss = cm(idx.to(th1), tgt.to(th1))
        loss.backward()
        step()
        _, loss_e = eager(idx.to(th1), tgt.to(th1))
        loss_e.backward()
        opt_e.step()
        # the compiled step runs capturable AdamW's traced ops (bias corrections on the device):
        # other roundings than eager AdamW's, amplified by the division by sqrt(v) + eps
        torch.testing.assert_close(loss.cpu(), loss_e.cpu(), rtol=1e-5, atol=1e-6)
    for p, q in zip(comp.parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5)
    assert compile_backend.stats()["replays"] >= 6


def _hf(name):
    transformers = pytest.importorskip("transformers")
    if name == "bert":
        cfg = transformers.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_hf_models_compiled_forward_and_training_step_match_the_cpu(x1, name):
    torch.manual_seed(0)
    cpu = _hf(name).train()
    comp = copy.deepcopy(cpu).to(x1)
    cm = torch.compile(comp, backend="fl")
    ids = torch.randint(0, 512, (2, 12))
    for _ in range(2):                                  # capture, then replay
        comp.zero_grad()
        cpu.zero_grad()
        out = cm(input_ids=ids.to(x1), labels=ids.to(x1))
        out.loss.backward()
        ref = cpu(input_ids=ids, labels=ids)
        ref.loss.backward()
        torch.testing.assert_close(out.logits.cpu(), ref.logits, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out.loss.cpu(), ref.loss, rtol=1e-4, atol=1e-5)
        for p, q in zip(comp.parameters(), cpu.parameters()):
            if q.grad is not None:
                torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    assert compile_backend.stats()["replays"] >= 2


def _adamw_chain(read_between=False, second_moment_first=False):
    """torch 2.13's _multi_tensor_adam (capturable AdamW) as AOTAutograd
    hands it to the backend, updates in place, on two parameters."""
    lr, wd, b1, b2, eps = 1e-2, 0.05, 0.9, 0.999, 1e-8

    def step(p0, p1, g0, g1, m0, m1, v0, v1, s0, s1):
        ps, gs, ms, vs, ss = [p0, p1], [g0, g1], [m0, m1], [v0, v1], [s0, s1]
        torch._foreach_add_(ss, 1)
        torch._foreach_mul_(ps, 1 - lr * wd)
        if second_moment_first:       # the second moment's updates in the other order: not Adam
            torch._foreach_addcmul_(vs, gs, gs, 1 - b2)
            torch._foreach_mul_(vs, b2)
        else:
            torch._foreach_lerp_(ms, gs, 1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, 1 - b2)
        if second_moment_first:
            torch._foreach_lerp_(ms, gs, 1 - b1)
        out = ps[0].sum() if read_between else None
        bc1 = torch._foreach_sub(torch._foreach_pow(b1, ss), 1)
        bc2 = torch._foreach_neg(torch._foreach_sub(torch._foreach_pow(b2, ss), 1))
        step_size = torch._foreach_reciprocal(torch._foreach_div(bc1, lr))
        bc2 = torch._foreach_sqrt(bc2)
        d = torch._foreach_div(torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(vs), bc2), eps), step_size)
        torch._foreach_addcdiv_(ps, ms, d)
        return (out,)
    return step


def _adam_state():
    g = torch.Generator().manual_seed(0)
    p, grad = [torch.randn(4, 3, generator=g), torch.randn(3, generator=g)], \
        [torch.randn(4, 3, generator=g), torch.randn(3, generator=g)]
    m, v = [torch.randn(4, 3, generator=g) * 0.1, torch.zeros(3)], [torch.rand(4, 3, generator=g) * 0.01, torch.zeros(3)]
    return p + grad + m + v + [torch.tensor(2.0), torch.tensor(2.0)]


def test_fuse_adam_takes_the_exact_chain_and_nothing_that_reads_or_reorders_it():
    """Pass level (make_fx graphs, CPU tensors, the chip's answer stubbed):
    the chain becomes one _fused_adamw_ with the optimizer's lr, betas, eps
    and weight decay, and gives the foreach step's values; a read of a
    parameter in the middle, or the second moment's updates in another
    order, leave the graph as it is."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from flbridge.compiler.fuse_adam import fuse_adam_steps
    asked = []

    def yes(op, args, kwargs):
        asked.append((op, kwargs))
        return True
    gm = make_fx(_adamw_chain())(*_adam_state())
    assert fuse_adam_steps(gm, yes) == 1
    assert [t for t in _targets(gm) if "getitem" not in t] == ["aten._foreach_add_.Scalar",
                                                              "aten._fused_adamw_.default"]
    (op, kw), = asked
    assert op is torch.ops.aten._fused_adamw_.default and not kw["maximize"] and not kw["amsgrad"]
    assert (kw["lr"], kw["beta1"], kw["beta2"], kw["eps"]) == (1e-2, 0.9, 0.999, 1e-8)
    assert abs(kw["weight_decay"] - 0.05) < 1e-12
    want, got = _adam_state(), _adam_state()
    _adamw_chain()(*want)
    gm(*got)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    for variant in (dict(read_between=True), dict(second_moment_first=True)):
        gm = make_fx(_adamw_chain(**variant))(*_adam_state())
        assert fuse_adam_steps(gm, yes) == 0, variant
    gm = make_fx(_adamw_chain())(*_adam_state())
    assert fuse_adam_steps(gm, lambda op, args, kwargs: False) == 0


@pytest.mark.parametrize("backend", ["fl", pytest.param("inductor", marks=pytest.mark.slow)])
def test_a_factory_on_the_current_device_follows_it_when_dynamo_traces_again(x1, th1, backend):
    """`torch.zeros(..., device="fl")` in a compiled function called on one
    device, then (the input on another, so Dynamo traces again) on another:
    the new trace makes its tensor on the new current device.  FakeTensorMode's
    process-wide cache had handed the second trace the first one's fake."""
    def f(x):
        return x + torch.zeros(x.shape, device="fl") + 1

    cf = torch.compile(f, backend=backend)
    for dev in (x1, th1, x1):
        x = torch.randn(2, 5)
        with torch.fl.device(dev):
            out = cf(x.to(dev))
        assert out.device == dev
        torch.testing.assert_close(out.cpu(), x + 1)


def test_parameters_living_in_one_flat_buffer_compile_and_train_like_the_cpu(x1):
    """Parameters given `.data = flat[a:b]` (what DeepSpeed ZeRO does with its
    flat groups) share one Storage without being views of each other.
    Fakeifying them had failed: "Attempted to set the storage of a tensor on
    device fl:0 to a storage on different device meta"."""
    torch.manual_seed(0)
    ref = mlp()
    m = copy.deepcopy(ref).to(x1)
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    off = 0
    for p in m.parameters():
        p.data = flat[off:off + p.numel()].view_as(p)
        off += p.numel()
    opt, opt_ref = (torch.optim.SGD(mod.parameters(), lr=0.1) for mod in (m, ref))
    cm = torch.compile(m, backend="fl")
    for _ in range(3):
        x = torch.randn(4, 8)
        for mod, o, inp in ((cm, opt, x.to(x1)), (ref, opt_ref, x)):
            mod(inp).square().sum().backward()
            o.step()
            o.zero_grad()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(flat.cpu(), torch.cat([q.detach().reshape(-1) for q in ref.parameters()]),
                               rtol=1e-5, atol=1e-6)          # the steps wrote through to the flat buffer


@pytest.mark.parametrize("backend", ["fl", pytest.param("inductor", marks=pytest.mark.slow)])
def test_a_pipeline_over_two_chips_compiled_as_a_whole_trains_like_the_cpu(x1, th1, backend):
    """Stage 1 on one chip, stage 2 on another, `h.to(...)` between, compiled
    as one function: it had raised GraphCaptureError ("a copy from fl:0 to
    fl:1 during graph capture") on every call.  Such a graph runs eagerly."""
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 8), torch.randn(8, 4)

    def f(x, w1, w2):
        h = torch.relu(x @ w1)
        return (h.to(w2.device) @ w2).sum(0)

    cf = torch.compile(f, backend=backend)
    a, b = w1.to(x1).requires_grad_(), w2.to(th1).requires_grad_()
    ra, rb = w1.clone().requires_grad_(), w2.clone().requires_grad_()
    for _ in range(2):
        x = torch.randn(3, 8)
        out = cf(x.to(x1), a, b)
        ref = f(x, ra, rb)
        assert out.device == th1
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
        out.sum().backward()
        ref.sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ra.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.cpu(), rb.grad, rtol=1e-5, atol=1e-5)
    eager = compile_backend.stats()["eager_graphs"]
    assert sum(eager.values()) >= 2 and all("spans" in why for why in eager), eager


_EAGER_AFTER = {"relu->dropout": lambda t: F.dropout(torch.relu(t), 0.3, True),
                "tanh->dropout": lambda t: F.dropout(torch.tanh(t), 0.3, True),
                "softmax->dropout": lambda t: F.dropout(torch.softmax(t, -1), 0.3, True),
                "relu->flip": lambda t: torch.relu(t).flip(1)}       # flip: a CPU fallback on x1


@pytest.mark.parametrize("case", [c if c in ("relu->dropout", "relu->flip") else pytest.param(c, marks=pytest.mark.slow)
                                  for c in _EAGER_AFTER])
def test_an_eager_step_reads_this_calls_value_of_a_saved_activation(x1, case):
    """An activation saved for backward (returned as an alias of itself) and
    read by an eager step (dropout, a CPU fallback): every call's output and
    gradient equal eager's with the same seed.  The eager step had read the
    activation at its capture-run address, so from the second call on it saw
    the first call's values (GPT-2 and Llama training with dropout drifted)."""
    g = _EAGER_AFTER[case]
    torch.manual_seed(0)
    w1, w2 = (torch.randn(8, 16).to(x1).requires_grad_(), torch.randn(16, 8).to(x1).requires_grad_())

    def f(x, w1, w2):
        return g(x @ w1) @ w2
    cf = torch.compile(f, backend="fl")
    for i in range(3):
        x = torch.randn(4, 8).to(x1)
        torch.manual_seed(10 + i)
        a = f(x, w1, w2)
        ga = torch.autograd.grad(a.square().sum(), w1)[0]
        torch.manual_seed(10 + i)
        b = cf(x, w1, w2)
        gb = torch.autograd.grad(b.square().sum(), w1)[0]
        assert torch.equal(a.cpu(), b.cpu()) and torch.equal(ga.cpu(), gb.cpu()), i


def test_an_eager_step_reads_this_calls_value_when_a_view_of_it_is_returned(x1):
    def f(x):
        h = x * 2
        return h.t(), h.flip(1), h[0], torch.erf(h * 0.1)
    cf = torch.compile(f, backend="fl")
    for i in range(3):
        x = torch.arange(6.).reshape(2, 3) + 10 * i
        for a, b in zip(f(x), cf(x.to(x1))):
            torch.testing.assert_close(b.cpu(), a)


@pytest.mark.parametrize("reentrant", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_activation_checkpointing_around_dropout_recomputes_the_same_mask(x1, reentrant):
    """torch.utils.checkpoint around a block with dropout in a compiled model:
    AOTAutograd's graphs hold run_and_save_rng_state / run_with_rng_state,
    which had no implementation for fl tensors ("'NotImplementedType' object
    is not subscriptable").  Outputs and gradients equal eager fl's with the
    same seed, every call."""
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.drop = torch.nn.Dropout(0.3)

        def inner(self, x):
            return self.drop(torch.tanh(self.lin(x)))

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=reentrant) * 2

    torch.manual_seed(0)
    eager = Block().to(x1)
    comp = copy.deepcopy(eager)
    cm = torch.compile(comp, backend="fl")
    for i in range(3):
        x = torch.randn(4, 8).to(x1).requires_grad_()   # reentrant checkpointing needs an input that does
        torch.manual_seed(10 + i)
        a = eager(x)
        a.square().sum().backward()
        torch.manual_seed(10 + i)
        b = cm(x)
        b.square().sum().backward()
        assert torch.equal(a.detach().cpu(), b.detach().cpu()), i
        for p, q in zip(eager.parameters(), comp.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-6, atol=1e-6)


@torch.library.custom_op("flbridge_test::scale_add_", mutates_args=("acc",))
def _scale_add_(acc: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
    acc.add_(x, alpha=alpha)


@pytest.mark.parametrize("backend", ["fl", "default"])
def test_a_custom_op_that_mutates_its_input_runs_in_a_compiled_graph(x1, backend):
    """A torch.library.custom_op with mutates_args, on an intermediate and on
    a graph input: functionalization makes it auto_functionalized_v2, which had
    no implementation for fl tensors ("'NotImplementedType' object is not
    subscriptable" at the first call).  Values and the mutated input equal
    the CPU's, every call (replays included)."""
    def f(x, acc):
        y = x * 2
        _scale_add_(y, x, 0.5)            # an intermediate
        _scale_add_(acc, y, 2.0)          # a graph input: the caller sees the write
        return y.sum(1)

    cf = torch.compile(f, backend="fl") if backend == "fl" else torch.compile(f)
    for i in range(3):
        x, acc = torch.randn(3, 4) + i, torch.randn(3, 4)
        fa = acc.to(x1)
        out = cf(x.to(x1), fa)
        ref = f(x, acc)
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(fa.cpu(), acc, rtol=1e-6, atol=1e-6)
    assert compile_backend.stats()["replays"] >= 2


@pytest.mark.parametrize("also_return", [False, True])
def test_a_stream_synchronize_inside_a_compiled_function_replays(x1, also_return):
    """s.synchronize() between ops: Dynamo puts it in the graph as a
    control_deps higher-order op that hands the value before it through to
    the ops after it.  The second call (the first replay) had failed ("'NoneType'
    object is not subscriptable"): the handed-through value was taken for a
    result made anew by the eager step."""
    def f(x, s):
        y = x + 1
        s.synchronize()
        return (y * 2, y) if also_return else y * 2

    s = torch.fl.Stream(x1)
    cf = torch.compile(f, backend="fl")
    for i in range(3):
        x = torch.randn(4, 8) + i
        out = cf(x.to(x1), s)
        outs = out if also_return else (out,)
        for a, b in zip(outs, ((x + 1) * 2, x + 1)):
            torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0)
    assert compile_backend.stats()["replays"] == 2


def test_a_deleted_compiled_model_gives_its_device_memory_back(th1):
    """The programs' memory pools go with the compiled graphs when PyTorch
    drops them (the model deleted, Dynamo's cache reset).  flbridge's list of
    compiled graphs had held every graph for good: 2.8 MB of this model's
    pools stayed on the device."""
    import gc

    import torch._dynamo
    x = torch.randn(64, 256).to(th1) * 1.0
    torch.fl.empty_cache()
    before = torch.fl.memory_reserved(th1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).to(th1)
    cm = torch.compile(model, backend="fl")
    with torch.no_grad():
        for _ in range(3):
            y = cm(x)
    assert compile_backend.stats()["replays"] == 2
    assert torch.fl.memory_reserved(th1) > before + 256 * 256 * 4
    del cm, model, y
    torch._dynamo.reset()
    gc.collect()
    torch.fl.empty_cache()
    assert torch.fl.memory_reserved(th1) == before
    assert compile_backend.stats()["graphs"] == 0


def test_memory_reserved_counts_the_pools_empty_cache_leaves(th1):
    """torch.fl.empty_cache() frees the shared cache, not the free blocks of
    compiled programs' pools: memory_reserved() still counts those and equals
    what the runtime holds.  It had dropped them from the count, and after
    the program was evicted, tensors taking its blocks made the count lower
    than memory_allocated()."""
    from flbridge.devices import chip_for
    rt = chip_for(th1).runtime

    def f(x):
        return ((x * 2).sin() + 1).relu() * 3

    cf = torch.compile(f, backend="fl", dynamic=True)     # one graph, a program per size
    x = torch.randn(256, 256).to(th1) * 1.0
    y = cf(x)
    y = cf(x)
    del y
    torch.fl.empty_cache()
    assert torch.fl.memory_reserved(th1) == rt.counters()["memInUse"]
    for n in range(1, 9):                      # 8 more argument keys: the first program is evicted
        cf(torch.randn(256 + n, 256).to(th1))
    held = [torch.empty(256, 256, device=th1) + 1 for _ in range(4)]
    assert torch.fl.memory_reserved(th1) == rt.counters()["memInUse"]
    assert torch.fl.memory_reserved(th1) >= torch.fl.memory_allocated(th1)


def test_more_sizes_than_programs_keep_the_device_memory_bounded(th1):
    """30 sizes, again and again, through a graph that keeps 8 programs: each
    new capture took new device memory while evicted programs' blocks sat in
    the shared cache unused, so memory_reserved grew by about 1.1 MB a round
    (until an out-of-memory emptied the cache).  Captures now take free
    blocks of the shared cache first."""
    def f(x):
        return ((x * 2).sin() + 1).relu().sum(1)

    cf = torch.compile(f, backend="fl", dynamic=True)
    reserved = []
    for _ in range(4):
        for n in range(30):
            x = torch.randn(64 + n, 128)
            torch.testing.assert_close(cf(x.to(th1)).cpu(), f(x), rtol=1e-5, atol=1e-5)
        reserved.append(torch.fl.memory_reserved(th1))
    assert reserved[-1] - reserved[1] < 256 * 1024, reserved


def test_the_capture_run_leaves_no_intermediate_for_the_garbage_collector(x1):
    """The first (capture) call's intermediates are freed when it returns, not
    at the next garbage collection: each node's argument lookup was a
    recursive closure over the run's values (a reference cycle), which kept
    1 MiB of intermediates on the device after every capture."""
    import gc

    def f(x):
        a = x.exp() * 2
        b = x.sin() + a
        return b * x + a

    x = torch.randn(1 << 16).to(x1) * 1.0
    before = torch.fl.memory_allocated(x1)
    cf = torch.compile(f, backend="fl")
    gc.collect()
    gc.disable()
    try:
        for _ in range(2):
            torch.testing.assert_close(cf(x).cpu(), f(x.cpu()), rtol=1e-5, atol=1e-5)
            # (the chip's cache of scalar constants may take a 512-byte block; an intermediate is 256 KiB)
            assert torch.fl.memory_allocated(x1) - before < 4096
    finally:
        gc.enable()


def test_an_empty_batch_trains_through_a_compiled_model(x1):
    """A batch of 0 rows: forward and backward (zero gradients), then real
    batches, as on the CPU.  The empty output's gradient (strides (0, 0))
    had failed AOTAutograd's tangent check: "expected SubclassCreationMeta,
    got PlainTensorMeta"."""
    ref = mlp()
    m = copy.deepcopy(ref).to(x1)
    cm = torch.compile(m, backend="fl")
    for rows in (0, 3, 0):
        x = torch.randn(rows, 8)
        cm(x.to(x1)).sum().backward()
        ref(x).sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)


def test_a_failure_of_the_fl_backend_under_the_default_compile_says_which_backend_failed(x1, monkeypatch):
    """Dynamo names the failing backend 'inductor' when the default compile's
    fl graph fails; the error carries a note that the fl backend ran it."""
    from flbridge.compiler import lowering

    def broken(*a, **k):
        raise RuntimeError("a lowering failure")
    monkeypatch.setattr(lowering.CompiledGraph, "__init__", broken)
    with pytest.raises(Exception, match=r"(?s)a lowering failure.*the error above is the 'fl' backend's"):
        torch.compile(lambda x: x * 2)(torch.randn(3).to(x1))
