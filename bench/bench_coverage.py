"""How much of a real training step stays on the chip, and what crosses the bus.

    python bench/bench_coverage.py [--steps 4] [--batch 2] [--seq 12] [--routes all|fallback|none]
                                   [--only gpt-th1,cnn-x1-v2,gpt-fp16-x1]

Scenarios, each run beside the same computation on the CPU (the losses must agree):

  gpt-th1       TinyGPT training on xpu:th1, float32, AdamW(foreach=True)
  cnn-x1-v2     the demo's SmallCNN training on xpu:x1-v2, float32, Adam(foreach=True)
  gpt-fp16-x1   TinyGPT inference in float16 on xpu:x1 (loss of a new batch each step)

A first warm-up step places parameters and creates the optimizer state; the
counters are then reset and `--steps` steps are measured.  Per scenario it
prints the share of aten ops that ran natively, the bytes moved per step
(host->device, device->host, mapped zero-copy) against the minimum a step
needs (its new batch in, its loss value out), and the route table (op,
route, calls, detail) for what did not run natively (`--routes all` lists
every row).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

os.environ.setdefault("FLBRIDGE_WARN", "off")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flbridge  # noqa: E402
from flbridge.demos.models import SmallCNN, TinyGPT, synthetic_batch, token_batch  # noqa: E402


def _batches(kind, n, batch, seq):
    """n+1 new batches (the first one is the warm-up's)."""
    if kind == "gpt":
        return [token_batch(batch, seq, seed=i) for i in range(n + 1)]
    return [synthetic_batch(max(batch, 8), seed=i) for i in range(n + 1)]


def _loss(kind, model, x, y):
    if kind == "gpt":
        return model(x, y)[1]
    return F.cross_entropy(model(x), y)


def run(name, chip_name, kind, train, dtype, opt_name, steps, batch, seq):
    dev = flbridge.torch_device(chip_name)
    cpu = (TinyGPT() if kind == "gpt" else SmallCNN()).to(dtype)
    if not train:
        cpu.eval()
    fl = copy.deepcopy(cpu).to(dev)
    opts = None
    if train:
        make = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True),
                "adam": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True)}[opt_name]
        opts = (make(cpu.parameters()), make(fl.parameters()))
    data = _batches(kind, steps, batch, seq)
    losses = []
    minimum = 0
    for i, (x, y) in enumerate(data):
        if i == 1:
            flbridge.reset_stats(dev)
        if i >= 1:
            # what a step cannot avoid: its batch goes in, its loss value comes out
            minimum += x.numel() * x.element_size() + y.numel() * y.element_size() + \
                torch.empty(0, dtype=dtype).element_size()
        x, y = x.to(dtype) if x.is_floating_point() else x, y
        pair = []
        for k, (model, xx, yy) in enumerate(((cpu, x, y), (fl, x.to(dev), y.to(dev)))):
            if train:
                opts[k].zero_grad()
                loss = _loss(kind, model, xx, yy)
                loss.backward()
                opts[k].step()
            else:
                with torch.no_grad():
                    loss = _loss(kind, model, xx, yy)
            pair.append(loss.item())
        losses.append(pair)
    st = flbridge.stats(dev)
    total = st["native_ops"] + st["fallback_ops"]
    moved = st["h2d_bytes"] + st["d2h_bytes"] + st["mapped_bytes"]
    return dict(name=name, chip=chip_name, dev=dev, stats=st, total=total, moved=moved, minimum=minimum,
                losses=losses, steps=steps)


SCENARIOS = {
    "gpt-th1": dict(chip_name="xpu:th1", kind="gpt", train=True, dtype=torch.float32, opt_name="adamw"),
    "cnn-x1-v2": dict(chip_name="xpu:x1-v2", kind="cnn", train=True, dtype=torch.float32, opt_name="adam"),
    "gpt-fp16-x1": dict(chip_name="xpu:x1", kind="gpt", train=False, dtype=torch.float16, opt_name=None),
}


def report(r, routes_mode, out=print):
    st, n = r["stats"], r["steps"]
    share = st["native_ops"] / r["total"] if r["total"] else 0.0
    out(f"\n== {r['name']} on {r['chip']} ({r['dev']}), {n} measured steps")
    out(f"  {'step':>4}  {'cpu loss':>10}  {'fl loss':>10}  {'|diff|':>9}")
    for i, (a, b) in enumerate(r["losses"]):
        out(f"  {i if i else 'warm':>4}  {a:>10.5f}  {b:>10.5f}  {abs(a - b):>9.2e}")
    out(f"  ops: {r['total']} ({r['total'] / n:.0f}/step); native {st['native_ops']} ({share:.1%}); "
        f"fallback {st['fallback_ops']} (cpu {st['cpu_fallback_ops']}, decomposed {st['decomposed_ops']}, "
        f"vendor {st['vendor_fallback_ops']}, python {st['python_fallback_ops']})")
    per = {k: st[k] / n for k in ("h2d_bytes", "d2h_bytes", "mapped_bytes")}
    mn = r["minimum"] / n
    out(f"  bytes/step: h2d {per['h2d_bytes']:.0f}, d2h {per['d2h_bytes']:.0f}, mapped {per['mapped_bytes']:.0f}"
        f"; total {r['moved'] / n:.0f} vs minimum {mn:.0f} (batch in + loss out) = {r['moved'] / r['minimum']:.2f}x")
    rows = st["routes"]
    if routes_mode == "fallback":
        rows = [x for x in rows if x["route"] != "native"]
    if routes_mode != "none" and rows:
        out(f"  {'op':46s} {'route':16s} {'calls':>6}  detail")
        for x in sorted(rows, key=lambda x: (x["route"] == "native", -x["calls"], x["op"])):
            out(f"  {x['op']:46s} {x['route']:16s} {x['calls']:>6}  {x['detail']}")
    return share, r["moved"] / r["minimum"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=12)
    ap.add_argument("--routes", choices=["all", "fallback", "none"], default="fallback")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    a = ap.parse_args(argv)
    flbridge.init()
    summary = []
    for name in a.only.split(","):
        r = run(name, steps=a.steps, batch=a.batch, seq=a.seq, **SCENARIOS[name])
        share, ratio = report(r, a.routes)
        worst = max(abs(x - y) for x, y in r["losses"])
        summary.append((name, r["chip"], share, ratio, worst))
    print(f"\n{'scenario':14s} {'chip':10s} {'native':>8} {'bytes/min':>10} {'max |loss diff|':>16}")
    for name, chip, share, ratio, worst in summary:
        print(f"{name:14s} {chip:10s} {share:>8.1%} {ratio:>9.2f}x {worst:>16.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
