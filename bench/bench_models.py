"""Small models on the simulated chips against the CPU, side by side, with
where the chip's time goes, and graph replay.

    python bench/bench_models.py [--rounds 15] [--chips xpu:x1,xpu:th1]

For each chip, in one process, interleaved round by round with the same
computation on the CPU (torch at one thread, as the simulators run one):

  encoder fwd     a 2-layer transformer encoder (d_model 64, 4 heads, FFN
                  128, batch 8 x 32 tokens), inference; PyTorch's fused
                  fast path off so the model runs op by op as in training
  gpt train step  flbridge.demo_models.TinyGPT (137k parameters, tied
                  embedding): forward, cross-entropy, backward, AdamW step
  encoder replay  the encoder forward captured once in a torch.fl.FLGraph
                  and replayed (static input)

It prints the median time per iteration, the ratio to the CPU, and a
breakdown of one instrumented iteration: time inside vendor kernels, inside
CPU fallbacks, in transfers, and the rest (flbridge's own Python plus
PyTorch's above it), with the op counts per route.  The breakdown run is
separate from the timed runs (its instrumentation costs time).
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
from flbridge import launch, route as _route_mod  # noqa: E402
from flbridge.demo_models import TinyGPT, token_batch  # noqa: E402


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


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


def side_by_side(cpu_step, fl_step, rounds):
    for _ in range(3):
        cpu_step()
        fl_step()
    tc, tf = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        cpu_step()
        tc.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fl_step()
        tf.append(time.perf_counter() - t0)
    ratio = statistics.median(f / c for c, f in zip(tc, tf))
    return statistics.median(tc), statistics.median(tf), ratio


def bench_chip(name: str, rounds: int) -> None:
    dev = flbridge.torch_device(name)
    torch.fl.set_device(dev)
    print(f"\n{name} ({dev})")

    # encoder forward
    enc = encoder()
    encf = copy.deepcopy(enc).to(dev)
    x = torch.randn(8, 32, 64)
    xf = x.to(dev)

    def cpu_fwd():
        with torch.no_grad():
            return enc(x)

    def fl_fwd():
        with torch.no_grad():
            return encf(xf)
    torch.testing.assert_close(fl_fwd().cpu(), cpu_fwd(), rtol=1e-3, atol=1e-3)
    c, f, r = side_by_side(cpu_fwd, fl_fwd, rounds)
    print(f"  encoder fwd      cpu {c * 1e3:7.2f} ms   fl {f * 1e3:7.2f} ms   fl/cpu {r:5.2f}")
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
    c, f, r = side_by_side(cpu_fwd, g.replay, rounds)
    timer = Timer()
    launch.attach(timer)
    g.replay()
    launch.detach(timer)
    t0 = time.perf_counter()
    g.replay()
    one = time.perf_counter() - t0
    per_call = (one - timer.kernel) / max(g.num_calls, 1)
    print(f"  encoder replay   cpu {c * 1e3:7.2f} ms   fl {f * 1e3:7.2f} ms   fl/cpu {r:5.2f}   "
          f"({g.num_calls} vendor calls, bit-identical to eager: {identical}, "
          f"host cost per call beyond the kernels ~{per_call * 1e6:.2f} us)")


def gpt_step(dev, rounds):
    torch.manual_seed(0)
    cpu_m = TinyGPT()
    fl_m = copy.deepcopy(cpu_m).to(dev)
    oc = torch.optim.AdamW(cpu_m.parameters(), lr=1e-3)
    of = torch.optim.AdamW(fl_m.parameters(), lr=1e-3)
    idx, tgt = token_batch(8, 24)
    idx_f, tgt_f = idx.to(dev), tgt.to(dev)

    def step(m, o, i, t):
        def run():
            o.zero_grad()
            _, loss = m(i, t)
            loss.backward()
            o.step()
            return loss
        return run
    cpu_step, fl_step = step(cpu_m, oc, idx, tgt), step(fl_m, of, idx_f, tgt_f)
    c, f, r = side_by_side(cpu_step, fl_step, rounds)
    print(f"  gpt train step   cpu {c * 1e3:7.2f} ms   fl {f * 1e3:7.2f} ms   fl/cpu {r:5.2f}")
    print(f"    {breakdown(fl_step, dev)}")


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
