"""The per-op cost of several checkouts of flbridge, side by side: how a
change to the router moved native/floor.

    git worktree add /tmp/before <commit>   # then build its simulators:
    (cd /tmp/before && python native_sim/build.py)
    python bench/bench_checkouts.py /tmp/before .

For each checkout (in a subprocess of its own, which imports flbridge from
that checkout), times a 16-element float32 add and a 16x16 mm on x1 (fl:1)
and th1 (fl:0) against the passthrough floor of bench_overhead.py, in 15
interleaved rounds, and prints the median of the per-round native/floor
ratios.  The checkouts run one after the other, twice, so drift of the
machine shows up as a difference between the two passes.  The mm row
includes the simulator's kernel, so it compares routers only between
checkouts with the same native_sim/.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("FLBRIDGE_WARN", "off")


def measure(root: str) -> None:
    sys.path.insert(0, root)
    import torch

    import flbridge
    assert flbridge.__file__.startswith(os.path.abspath(root)), flbridge.__file__

    from floors import Passthrough

    flbridge.init()
    for dev in ("fl:1", "fl:0"):
        for name, shape, fn in (("add 16", (16,), lambda x, y: x + y), ("mm 16x16", (16, 16), lambda x, y: x @ y)):
            a, b = torch.randn(shape).to(dev), torch.randn(shape).to(dev)
            pa, pb = Passthrough(torch.randn(shape)), Passthrough(torch.randn(shape))
            for _ in range(2000):
                fn(a, b)
                fn(pa, pb)
            ratios = []
            for _ in range(15):
                t0 = time.perf_counter()
                for _ in range(3000):
                    fn(a, b)
                t1 = time.perf_counter()
                for _ in range(3000):
                    fn(pa, pb)
                ratios.append((t1 - t0) / (time.perf_counter() - t1))
            print(f"  {root:<30} {dev:<5} {name:<9} native/floor {statistics.median(ratios):.2f}", flush=True)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        measure(sys.argv[2])
        return 0
    roots = sys.argv[1:] or ["."]
    for p in range(2):
        print(f"pass {p + 1}")
        for root in roots:
            r = subprocess.run([sys.executable, __file__, "--one", root], text=True, capture_output=True)
            print(r.stdout, end="")
            if r.returncode:
                print(r.stderr[-2000:])
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
