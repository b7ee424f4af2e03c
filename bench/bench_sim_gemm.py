"""Speed of the simulated chips' GEMM against torch on the CPU, side by side.

    python bench/bench_sim_gemm.py [--size 256] [--repeat 50]

Operands are resident in device memory; only the kernel call is timed, with
torch's matmul timed in the same process, interleaved, so machine noise hits
both.  Prints the median of each and their ratio.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sim.simhelp import Chip, load_private  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    n = a.size
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for lib, kind in (("libx1v2sim.so", "x1"), ("libth1sim.so", "th1")):
            chip = Chip(kind, *load_private(lib, kind, Path(tmp)))
            assert (chip.lib.x1_init(0) if kind == "x1" else chip.lib.th1Init(0)) == chip.ok
            A, B = torch.randn(n, n), torch.randn(n, n)
            ad, bd = chip.put(A)[1], chip.put(B)[1]
            o, od = chip.empty((n, n))
            mm = (lambda: chip.lib.x1_mm(ad, bd, od)) if kind == "x1" else (lambda: chip.lib.th1Matmul(ad, bd, od))
            assert mm() == chip.ok
            torch.testing.assert_close(chip.get(o, (n, n)), A @ B, rtol=1e-4, atol=1e-3)
            ts, tt = [], []
            for _ in range(a.repeat):
                t0 = time.perf_counter(); mm(); ts.append(time.perf_counter() - t0)
                t0 = time.perf_counter(); A @ B; tt.append(time.perf_counter() - t0)
            s, t = statistics.median(ts), statistics.median(tt)
            rows.append((kind, s, t))
        print(f"{n}x{n} float32 mm, median of {a.repeat} (torch threads: {torch.get_num_threads()})")
        for kind, s, t in rows:
            print(f"  {kind:4s} sim {s * 1e3:8.3f} ms   torch {t * 1e3:8.3f} ms   ratio {s / t:5.1f}x"
                  f"   ({2 * n**3 / s / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
