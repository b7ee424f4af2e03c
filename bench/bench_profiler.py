"""Does flbridge.profiler's "flbridge host overhead" describe the unobserved run?

    python bench/bench_profiler.py [--device fl:1] [--size 224] [--reps 7]

A float16 CNN (four 3x3 convolutions with ReLU and pooling, a linear head)
on 224x224 images, forward only, on the chosen chip.  Side by side in one
run, alternating:

* the unobserved forward's wall time (median of --reps);
* the same forward under flbridge.profiler: the host time of its vendor
  calls, transfers and CPU fallbacks, its reported host overhead, and its
  own observer cost (left out of the overhead).

The figure that matters is the share of host overhead the profiler reports
beside the share the unobserved run shows, (wall - kernels) / wall.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 64, 3, padding=1)
        self.c4 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        for c in (self.c1, self.c2, self.c3, self.c4):
            x = F.max_pool2d(F.relu(c(x)), 2)
        return self.fc(x.mean((2, 3)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="fl:1")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    flbridge.init()
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    model = CNN().half().to(dev).eval()
    x = torch.randn(a.batch, 3, a.size, a.size).half().to(dev)

    def run():
        with torch.no_grad():
            model(x).cpu()

    for _ in range(2):
        run()   # warm-up: routes decided, buffers allocated
    walls, reported, observer, kernels, wall_obs = [], [], [], [], []
    for _ in range(a.reps):
        t0 = time.perf_counter_ns()
        run()
        walls.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        with flbridge.profiler.profile() as p:
            run()
        wall_obs.append(time.perf_counter_ns() - t0)
        t = p.summary_dict()["time_ns"]
        reported.append(t["host_overhead"] / max(1, t["ops"] - t["observer"]))
        observer.append(t["observer"])
        kernels.append(t["kernels_host"] + t["transfers_host"] + t["cpu_fallback"])
    wall = statistics.median(walls)
    kern = statistics.median(kernels)
    print(f"{a.device} ({flbridge.stats(dev)['device_type']}): float16 CNN forward, "
          f"{a.batch}x3x{a.size}x{a.size}, {a.reps} runs each, medians")
    print(f"  unobserved forward            {wall / 1e6:9.3f} ms")
    print(f"  its kernels+transfers (host)  {kern / 1e6:9.3f} ms (measured in the profiled runs)")
    print(f"  overhead the unobserved run shows: (wall - kernels) / wall = {(wall - kern) / wall:6.1%}")
    print(f"  overhead the profiler reports:                               {statistics.median(reported):6.1%}")
    print(f"  profiled forward wall {statistics.median(wall_obs) / 1e6:.3f} ms, "
          f"of which the profiler's own cost (left out) {statistics.median(observer) / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
