"""Per-op cost of flbridge's router and the bytes it moves, side by side.

    python bench/bench_overhead.py [--rounds 15] [--iters 4000]

Part 1, per-op cost of a 16-element float32 add (and of a 16x16 mm, which
takes the general native path), all measured in this process in interleaved
rounds (each round times every variant once; the report gives
the median per variant and the median of the per-round ratios, so machine
noise hits all variants alike):

  torch         plain CPU tensors
  floor         a minimal passthrough wrapper subclass (unwrap, run on CPU,
                wrap): the least any __torch_dispatch__ design can cost
  native        flbridge, routed to the chip's kernel (x1_add / th1Add)
  cpu-fallback  flbridge, the same op forced down the CPU fallback

then metadata ops (view, transpose, select, expand, detach) on a small
tensor: flbridge against the floor.  Targets (issue 9): a native op within
1.5x the floor, a metadata op within 1.2x, a CPU fallback within 2.5x.

Part 2, bytes made visible to the device for a small CNN's first and second
forward pass (inference), against the minimum the program needs: parameters
and the input once, then only the new input.

Part 3, what observing costs, per 16-element add, interleaved the same way:

  off              nothing attached: the path every program takes (the same
                   code as before the observability hooks existed)
  no-op observer   an observer attached that does nothing: the slow path's
                   own machinery (flbridge.binding.launch)
  profiler session flbridge.profiler's observer alone: route per op, device
                   time from the runtime's kernel timer
  torch.profiler   torch.profiler.profile(activities=[CPU, fl]) around the
                   loop (kineto's own events included)
  autocompare      every op run again on the CPU and compared (--iters / 20)

`--profiling-only` runs part 3 alone.
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

import flbridge  # noqa: E402
from flbridge import config  # noqa: E402
from flbridge.demos.models import SmallCNN  # noqa: E402
from floors import Passthrough  # noqa: E402


def time_loop(fn, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


OPS = {
    # name: (shape of both operands, the op, the aten overload it dispatches)
    "add": ((16,), lambda x, y: x + y, r"aten::add\.Tensor"),
    "mm": ((16, 16), lambda x, y: x @ y, r"aten::mm\.default"),
}


def per_op(chip_name: str, op: str, rounds: int, iters: int) -> dict:
    dev = flbridge.torch_device(chip_name)
    shape, op_fn, pattern = OPS[op]
    a_cpu, b_cpu = torch.randn(shape), torch.randn(shape)
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    pa, pb = Passthrough(a_cpu), Passthrough(b_cpu)
    variants = {
        "torch": lambda: op_fn(a_cpu, b_cpu),
        "floor": lambda: op_fn(pa, pb),
        "native": lambda: op_fn(a, b),
    }
    flbridge.reset_stats(dev)
    for variant in variants.values():
        time_loop(variant, iters // 4)                       # warm caches
    chip = flbridge.chips()[dev.index]
    results = {k: [] for k in list(variants) + ["cpu-fallback"]}
    for _ in range(rounds):
        for name, fn in variants.items():
            results[name].append(time_loop(fn, iters))
        # the same op, forced down the CPU fallback
        config.CONFIG.force_fallback = [__import__("re").compile(pattern)]
        chip.routes.clear()
        time_loop(variants["native"], 50)
        results["cpu-fallback"].append(time_loop(variants["native"], iters))
        config.CONFIG.force_fallback = []
        chip.routes.clear()
        time_loop(variants["native"], 50)
    s = flbridge.stats(dev)
    import re
    assert any(r["route"] == "native" and re.match(pattern, r["op"]) for r in s["routes"])
    assert any(r["route"] == "cpu" and re.match(pattern, r["op"]) for r in s["routes"])
    return results


def report_per_op(name: str, op: str, res: dict) -> None:
    med = {k: statistics.median(v) for k, v in res.items()}
    ratio = lambda k, base: statistics.median(x / y for x, y in zip(res[k], res[base]))  # noqa: E731
    what = {"add": "16-element float32 add (pointwise fast path)",
            "mm": "16x16 float32 mm (general path: cached meta shapes)"}[op]
    print(f"\n{name}: {what}, median of {len(res['torch'])} interleaved rounds")
    print(f"  {'variant':14s} {'us/op':>8s} {'x floor':>8s} {'x torch':>8s}")
    for k in ("torch", "floor", "native", "cpu-fallback"):
        print(f"  {k:14s} {med[k]:8.2f} {ratio(k, 'floor'):8.2f} {ratio(k, 'torch'):8.2f}")
    verdict = "within" if ratio("native", "floor") <= 1.5 else "OVER"
    print(f"  native / floor = {ratio('native', 'floor'):.2f}  ({verdict} the 1.5x target)")


VIEWS = {
    # metadata ops: no kernel, no bytes; flbridge makes a new wrapper over the same storage
    "view": lambda t: t.view(8, 64),
    "transpose": lambda t: t.transpose(1, 2),
    "select": lambda t: t[1],
    "expand": lambda t: t.unsqueeze(0).expand(3, 4, 8, 16),
    "detach": lambda t: t.detach(),
}


def metadata_ops(chip_name: str, rounds: int, iters: int) -> None:
    """Views, aliases and other metadata ops: flbridge vs the floor."""
    dev = flbridge.torch_device(chip_name)
    cpu = torch.randn(4, 8, 16)
    fl, floor = cpu.to(dev), Passthrough(cpu)
    print(f"\n{chip_name}: metadata ops on a 4x8x16 float32 tensor, median of {rounds} interleaved rounds")
    print(f"  {'op':10s} {'torch':>8s} {'floor':>8s} {'fl':>8s} {'fl/floor':>9s}")
    worst = 0.0
    for name, fn in VIEWS.items():
        for t in (cpu, fl, floor):
            time_loop(lambda: fn(t), iters // 4)
        res = {"torch": [], "floor": [], "fl": []}
        for _ in range(rounds):
            res["torch"].append(time_loop(lambda: fn(cpu), iters))
            res["floor"].append(time_loop(lambda: fn(floor), iters))
            res["fl"].append(time_loop(lambda: fn(fl), iters))
        r = statistics.median(x / y for x, y in zip(res["fl"], res["floor"]))
        worst = max(worst, r)
        print(f"  {name:10s} {statistics.median(res['torch']):8.2f} {statistics.median(res['floor']):8.2f} "
              f"{statistics.median(res['fl']):8.2f} {r:9.2f}")
    verdict = "within" if worst <= 1.2 else "OVER"
    print(f"  worst fl / floor = {worst:.2f}  ({verdict} the 1.2x target)")


def bytes_moved(chip_name: str) -> None:
    dev = flbridge.torch_device(chip_name)
    torch.manual_seed(0)
    cpu = SmallCNN().eval()
    model = copy.deepcopy(cpu).to(dev)
    # what inference reads: parameters and running statistics (not num_batches_tracked)
    params = sum(t.numel() * t.element_size() for n, t in list(model.named_parameters()) +
                 list(model.named_buffers()) if not n.endswith("num_batches_tracked"))
    x1, x2 = torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16)
    inp = x1.numel() * x1.element_size()
    rows = []
    for label, x, minimum in (("first forward", x1, params + inp), ("second forward", x2, inp)):
        flbridge.reset_stats(dev)
        with torch.no_grad():
            y = model(x.to(dev))
        s = flbridge.stats(dev)
        up = s["h2d_bytes"] + s["mapped_bytes"]
        rows.append((label, up, s["h2d_bytes"], s["mapped_bytes"], s["d2h_bytes"], minimum,
                     s["native_ops"], s["cpu_fallback_ops"]))
        torch.testing.assert_close(y.cpu(), cpu(x), rtol=1e-4, atol=1e-4)
    print(f"\n{chip_name}: SmallCNN inference, bytes made visible to the device "
          f"(parameters and running stats {params} B, input {inp} B)")
    print(f"  {'pass':15s} {'to device':>10s} {'(copied':>8s} {'mapped)':>8s} {'minimum':>8s} {'ratio':>6s} "
          f"{'to host':>8s} {'native':>7s} {'cpu':>4s}")
    for label, up, h2d, mapped, d2h, minimum, nat, cpu_ops in rows:
        print(f"  {label:15s} {up:10d} {h2d:8d} {mapped:8d} {minimum:8d} {up / minimum:6.2f} {d2h:8d} "
              f"{nat:7d} {cpu_ops:4d}")


class NoOpObserver:
    def wrap_op(self, func, args, kwargs, run):
        return run

    def wrap_kernel(self, chip, label, run):
        return run

    def on_transfer(self, chip, kind, nbytes):
        pass

    def transfer_done(self, chip, kind):
        pass


def profiling_cost(chip_name: str, rounds: int, iters: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from flbridge.binding import launch
    from flbridge.observe import profiler
    from flbridge.observe.autocompare import AutoCompare
    dev = flbridge.torch_device(chip_name)
    a, b = torch.randn(16).to(dev), torch.randn(16).to(dev)

    def add():
        return a + b

    def attached(observer, n):
        launch.attach(observer)
        try:
            return time_loop(add, n)
        finally:
            launch.detach(observer)

    def under_torch_profiler(n):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            return time_loop(add, n)

    small = max(iters // 20, 20)
    variants = {
        "off": lambda: time_loop(add, iters),
        "no-op observer": lambda: attached(NoOpObserver(), iters),
        "profiler session": lambda: attached(profiler.Session(), iters),
        "torch.profiler": lambda: under_torch_profiler(iters),
        "autocompare": lambda: attached(AutoCompare(warn=False), small),
    }
    for fn in variants.values():
        fn()                                   # warm caches
    res = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            res[k].append(fn())
    assert not launch.WATCH.active
    return res


def report_profiling_cost(name: str, res: dict) -> None:
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"\n{name}: cost of observing a 16-element float32 add, median of {len(res['off'])} interleaved rounds")
    print(f"  {'variant':17s} {'us/op':>8s} {'x off':>8s}")
    for k in res:
        r = statistics.median(x / y for x, y in zip(res[k], res["off"]))
        print(f"  {k:17s} {med[k]:8.2f} {r:8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--profiling-only", action="store_true", help="part 3 alone")
    a = ap.parse_args()
    flbridge.init()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, python {sys.version.split()[0]}")
    if a.profiling_only:
        for chip in ("xpu:x1", "xpu:th1"):
            report_profiling_cost(chip, profiling_cost(chip, a.rounds, a.iters))
        return 0
    for op in ("add", "mm"):
        for chip in ("xpu:x1", "xpu:th1"):
            report_per_op(chip, op, per_op(chip, op, a.rounds, a.iters))
    for chip in ("xpu:x1", "xpu:th1"):
        metadata_ops(chip, a.rounds, a.iters)
    for chip in ("xpu:x1-v2", "xpu:x1", "xpu:th1"):
        bytes_moved(chip)
    for chip in ("xpu:x1", "xpu:th1"):
        report_profiling_cost(chip, profiling_cost(chip, a.rounds, a.iters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
