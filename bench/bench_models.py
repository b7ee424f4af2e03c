"""Small models on the simulated chips against the CPU, side by side, with
where the chip's time goes, and graph replay.

    python bench/bench_models.py [--rounds 15] [--chips xpu:x1,xpu:th1]

For each chip, in one process, interleaved round by round with the same
computation on the CPU (torch at one thread, as the simulators run one):

  encoder fwd     a 2-layer transformer encoder (d_model 64, 4 heads, FFN
                  128, batch 8 x 32 tokens), inference; PyTorch's fused
                  fast path off so the model runs op by op as in training
  gpt train step  flbridge.demos.models.TinyGPT (137k parameters, tied
                  embedding): forward, cross-entropy, backward, AdamW step
  encoder replay  the encoder forward captured once in a torch.fl.FLGraph
                  and replayed (static input)
  gpt step replay the whole training step (forward, backward,
                  AdamW(capturable=True).step()) captured once and replayed

Each eager row also runs the model on "floor": a minimal pass-through
`__torch_dispatch__` wrapper subclass (unwrap, run the op on the CPU, rewrap;
nothing else).  It is the cost any pure-Python wrapper-subclass backend pays
before doing any work of its own, so fl/floor is flbridge's own overhead and
floor/cpu is what the design (no compiled extension) costs on these models.

It prints the median time per iteration, the ratios, and a breakdown of one
instrumented iteration: time inside vendor kernels, inside CPU fallbacks, in
transfers, and the rest (flbridge's own Python plus PyTorch's above it), with
the op counts per route.  The breakdown run is separate from the timed runs
(its instrumentation costs time).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

os.environ.setdefault("FLBRIDGE_WARN", "off")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import flbridge  # noqa: E402
from flbridge.binding import launch  # noqa: E402
import flbridge.routing.route as _route_mod  # noqa: E402
from flbridge.demos.models import TinyGPT, token_batch  # noqa: E402
import sidebyside  # noqa: E402
from floors import Floor  # noqa: E402


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def on_floor(module):
    """A copy of `module` whose parameters and buffers are Floor tensors."""
    m = copy.deepcopy(module)
    prev = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m._apply(Floor)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(prev)
    return m


class Timer:
    """An observer timing vendor kernels, plus CPU fallbacks and transfers."""

    def __init__(self):
        self.kernel = self.fallback = self.transfer = 0.0
        self.kernels = 0

    def wrap_op(self, func, args, kwargs, run):
        return run

    def wrap_kernel(self, chip, label, run):
        def timed():
            t0 = time.perf_counter()
            try:
                return run()
            finally:
                self.kernel += time.perf_counter() - t0
                self.kernels += 1
        return timed

    def on_transfer(self, chip, kind, nbytes):
        pass

    def transfer_done(self, chip, kind):
        pass


def instrument(timer):
    """Times CPU fallbacks and the runtime's copy functions for one run."""
    orig_fb = _route_mod.cpu_fallback

    def fb(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig_fb(*a, **k)
        finally:
            timer.fallback += time.perf_counter() - t0
    patched = [(_route_mod, "cpu_fallback", orig_fb)]
    _route_mod.cpu_fallback = fb
    for chip in flbridge.chips():
        rt = chip.runtime
        for name in ("h2d_batch", "d2h", "h2d", "map"):
            orig = getattr(rt, name)

            def wrapped(*a, _orig=orig, **k):
                t0 = time.perf_counter()
                try:
                    return _orig(*a, **k)
                finally:
                    timer.transfer += time.perf_counter() - t0
            setattr(rt, name, wrapped)
            patched.append((rt, name, None))
    return patched


def uninstrument(patched):
    for obj, name, orig in patched:
        if orig is not None:
            setattr(obj, name, orig)
        else:
            delattr(obj, name)   # back to the class's method


def breakdown(step, dev):
    timer = Timer()
    patched = instrument(timer)
    launch.attach(timer)
    flbridge.reset_stats(dev)
    try:
        t0 = time.perf_counter()
        step()
        torch.fl.synchronize(dev)
        total = time.perf_counter() - t0
    finally:
        launch.detach(timer)
        uninstrument(patched)
    s = flbridge.stats(dev)
    rest = total - timer.kernel - timer.fallback - timer.transfer
    return (f"instrumented {total * 1e3:7.2f} ms: kernels {timer.kernel * 1e3:6.2f} ({timer.kernels} calls), "
            f"CPU fallbacks {timer.fallback * 1e3:6.2f}, transfers {timer.transfer * 1e3:5.2f} "
            f"({s['h2d_bytes'] + s['d2h_bytes']} B copied, {s['mapped_bytes']} B mapped), "
            f"bridge+torch {rest * 1e3:6.2f}; ops: {s['native_ops']} native, {s['decomposed_ops']} decomposed, "
            f"{s['cpu_fallback_ops']} on the CPU")


def side_by_side(steps, rounds):
    """([median seconds per step], [median per-round ratio to the first]) for
    `steps` (the first is the CPU), timed by sidebyside.side_by_side (the
    order shuffled every round)."""
    res = sidebyside.side_by_side({i: s for i, s in enumerate(steps)}, rounds, warmup=3)
    return [res[i][0] for i in range(len(steps))], [res[i][1] for i in range(len(steps))]


def row(label, medians, ratios, names=("cpu", "floor", "fl")):
    cols = "   ".join(f"{n} {m * 1e3:7.2f} ms" for n, m in zip(names, medians))
    rat = "   ".join(f"{n}/cpu {r:5.2f}" for n, r in zip(names[1:], ratios[1:]))
    extra = f"   fl/floor {medians[-1] / medians[1]:5.2f}" if len(medians) == 3 else ""
    print(f"  {label:<16} {cols}   {rat}{extra}")


def bench_chip(name: str, rounds: int) -> None:
    dev = flbridge.torch_device(name)
    torch.fl.set_device(dev)
    print(f"\n{name} ({dev})")

    # encoder forward
    enc = encoder()
    encf, encp = copy.deepcopy(enc).to(dev), on_floor(enc)
    x = torch.randn(8, 32, 64)
    xf, xp = x.to(dev), Floor(x)

    def forward(m, inp):
        def run():
            with torch.no_grad():
                return m(inp)
        return run
    cpu_fwd, floor_fwd, fl_fwd = forward(enc, x), forward(encp, xp), forward(encf, xf)
    torch.testing.assert_close(fl_fwd().cpu(), cpu_fwd(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(floor_fwd().elem, cpu_fwd(), rtol=0, atol=0)
    row("encoder fwd", *side_by_side([cpu_fwd, floor_fwd, fl_fwd], rounds))
    print(f"    {breakdown(fl_fwd, dev)}")

    # the same forward by graph replay
    g = torch.fl.FLGraph()
    try:
        with torch.no_grad():
            with torch.fl.graph(g):
                static_y = encf(xf)
    except torch.fl.GraphCaptureError as e:
        print(f"  encoder replay   not capturable on {name}: {e}")
    else:
        replay(g, static_y, fl_fwd, cpu_fwd, rounds)
    gpt_step(dev, rounds)


def replay(g, static_y, fl_fwd, cpu_fwd, rounds):
    g.replay()
    eager = fl_fwd().cpu()
    identical = torch.equal(static_y.cpu(), eager)
    medians, ratios = side_by_side([cpu_fwd, g.replay], rounds)
    row("encoder replay", medians, ratios, ("cpu", "fl"))
    print(f"    {g.num_calls} vendor calls, bit-identical to eager: {identical}; {replay_cost(g)}")


def replay_cost(g, reps: int = 15) -> str:
    """The replay loop's host cost per vendor call beyond the kernels: the
    median wall time of g.replay() minus the median device time of its
    kernels (the runtime's kernel timer, read after each call in separate,
    interleaved runs of the same calls).  What remains is the loop, the cffi
    call and the runtime's argument checks before its kernel starts."""
    rt = g.chip.runtime
    if not rt.has_kernel_timer:
        return "no kernel timer in this runtime: host cost not separable"
    walls, kernels = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        g.replay()
        walls.append(time.perf_counter() - t0)
        ns = 0
        for cfn, args in g._prog:
            cfn(*args)
            ns += rt.last_kernel_ns()
        kernels.append(ns * 1e-9)
    wall, kern = statistics.median(walls), statistics.median(kernels)
    ok, n = rt.ok, len(g._prog)
    prog = [((lambda *a: ok), args) for _, args in g._prog]   # the same loop, the C calls stubbed
    loops = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i, (cfn, args) in enumerate(prog):
            if cfn(*args) != ok:
                raise AssertionError(i)
        loops.append(time.perf_counter() - t0)
    out = rt.ffi.new(rt._kernel_timer_type)             # a C call that does nothing much
    trivial = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            rt._kernel_timer(out)
        trivial.append(time.perf_counter() - t0)
    return (f"per replay {wall * 1e3:.2f} ms, of which kernels (device timer) {kern * 1e3:.2f} ms: "
            f"host cost per call beyond its kernel {(wall - kern) / n * 1e6:.2f} us = the replay loop "
            f"{statistics.median(loops) / n * 1e6:.2f} us + the C call (a trivial one: "
            f"{statistics.median(trivial) / n * 1e6:.2f} us) + the runtime's argument checks")


def gpt_step(dev, rounds):
    torch.manual_seed(0)
    cpu_m = TinyGPT()
    fl_m, floor_m = copy.deepcopy(cpu_m).to(dev), on_floor(cpu_m)
    idx, tgt = token_batch(8, 24)

    def step(m, i, t, **opt_kw):
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, **opt_kw)

        def run():
            o.zero_grad()
            _, loss = m(i, t)
            loss.backward()
            o.step()
            return loss
        return run
    cpu_step = step(cpu_m, idx, tgt)
    floor_step = step(floor_m, Floor(idx), Floor(tgt))
    fl_step = step(fl_m, idx.to(dev), tgt.to(dev))
    row("gpt train step", *side_by_side([cpu_step, floor_step, fl_step], rounds))
    print(f"    {breakdown(fl_step, dev)}")
    gpt_replay(dev, rounds, cpu_step, step)


def gpt_replay(dev, rounds, cpu_step, step):
    """The whole training step captured as one graph: forward, backward and
    a capturable AdamW step (torch.cuda's whole-network capture recipe)."""
    torch.manual_seed(0)
    m = TinyGPT().to(dev)
    idx, tgt = token_batch(8, 24)
    static_idx, static_tgt = idx.to(dev), tgt.to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=True)

    def run():
        _, loss = m(static_idx, static_tgt)
        loss.backward()
        opt.step()
        return loss
    side = torch.fl.Stream()
    side.wait_stream(torch.fl.current_stream())
    with torch.fl.stream(side):                      # warm-up: caches, optimizer state
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            run()
    torch.fl.current_stream().wait_stream(side)
    g = torch.fl.FLGraph()
    opt.zero_grad(set_to_none=True)
    try:
        with torch.fl.graph(g):
            run()
    except torch.fl.GraphCaptureError as e:
        print(f"  gpt step replay  not capturable on {dev}: {e}")
        return
    medians, ratios = side_by_side([cpu_step, g.replay], rounds)
    row("gpt step replay", medians, ratios, ("cpu", "fl"))
    print(f"    {g.num_calls} vendor calls; {replay_cost(g)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--chips", default="xpu:x1,xpu:th1")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)
    flbridge.init()
    print(f"torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}; medians of {a.rounds} "
          f"interleaved rounds")
    for name in a.chips.split(","):
        bench_chip(name.strip(), a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
