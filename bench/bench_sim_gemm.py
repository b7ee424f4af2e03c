"""Speed of the simulated chips' GEMM and convolution against torch on the CPU.

    python bench/bench_sim_gemm.py [--chip x1|th1] [--threads 1] [--budget S] [--wall] [--case NAME ...]

Every case runs one kernel of the simulated chip (operands resident in device
memory, only the call timed) and the same operation in torch, interleaved in
one process so machine noise hits both, and prints the medians, GFLOP/s and
the speed ratio sim/torch (= torch time / sim time; 1.0 means as fast as
torch).  torch runs on `--threads` threads (default 1: the simulator is
single-threaded).  Results are checked against torch before timing.

Times are the calling thread's CPU time (time.thread_time), which on a shared
machine leaves out the time other processes hold the core; `--wall` (implied
by --threads > 1, whose work runs on other threads) uses the wall clock.

The simulators are built with -O3 -march=native (`python native_sim/build.py
--force` rebuilds them; FLSIM_PORTABLE=1 gives plain -O3 and a slower GEMM).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sim import simhelp  # noqa: E402
from tests.sim.simhelp import Chip, load_private  # noqa: E402


def _mm_case(M, K, N, batch=0, b_transposed=False):
    """(name, flops, setup) for C = A @ B, optionally batched or with B = W.T."""
    def setup(chip):
        shape_a = (batch, M, K) if batch else (M, K)
        A = torch.randn(shape_a)
        if b_transposed:  # nn.Linear's x @ W.T: B is a strided view of W [N, K]
            W = torch.randn(N, K)
            B = W.t()
            bd = chip.desc(chip.upload(W), (K, N), (1, K))
        else:
            B = torch.randn((batch, K, N) if batch else (K, N))
            bd = chip.put(B)[1]
        ad = chip.put(A)[1]
        out_shape = (batch, M, N) if batch else (M, N)
        o, od = chip.empty(out_shape)
        lib = chip.lib
        if chip.kind == "x1":
            fn = lib.x1_bmm if batch else lib.x1_mm
            sim = lambda: fn(ad, bd, od)  # noqa: E731
        else:
            sim = lambda: lib.th1Matmul(ad, bd, od)  # noqa: E731
        ref = (lambda: torch.bmm(A, B)) if batch else (lambda: A @ B)  # noqa: E731
        check = lambda: torch.testing.assert_close(chip.get(o, out_shape), ref(),  # noqa: E731
                                                   rtol=1e-4, atol=1e-3)
        return sim, ref, check

    name = (f"bmm {batch}x[{M}x{K}]@[{K}x{N}]" if batch else
            f"mm [{M}x{K}]@[{K}x{N}]" + (" (B=W.T)" if b_transposed else ""))
    return name, 2.0 * max(batch, 1) * M * K * N, setup


def _conv_case(N, H, W, C, O, k, pad, dtype=torch.float32):
    """x1_conv2d on NHWC data in `dtype` against torch's float32 convolution
    (channels_last, as oneDNN likes it): float16 is the chip's own format,
    float32 the CPU's."""
    def setup(chip):
        x = torch.randn(N, C, H, W).to(dtype).float().contiguous(memory_format=torch.channels_last)
        w = (torch.randn(O, C, k, k) / (C * k * k) ** 0.5).to(dtype).float()
        w = w.contiguous(memory_format=torch.channels_last)
        b = torch.randn(O).to(dtype).float()
        xd = chip.put(x.permute(0, 2, 3, 1).contiguous().to(dtype))[1]
        wd = chip.put(w.permute(0, 2, 3, 1).contiguous().to(dtype))[1]
        bd = chip.put(b.to(dtype))[1]
        OH, OW = H + 2 * pad - k + 1, W + 2 * pad - k + 1
        o, od = chip.empty((N, OH, OW, O), dtype)
        ffi, lib = chip.ffi, chip.lib
        one, p = ffi.new("int64_t[2]", [1, 1]), ffi.new("int64_t[2]", [pad, pad])
        sim = lambda: lib.x1_conv2d(xd, wd, bd, one, p, one, 1, od)  # noqa: E731
        ref = lambda: F.conv2d(x, w, b, 1, pad)  # noqa: E731
        # float16: the float32 result rounded once (half an ulp), plus float32 summation order
        tol = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float16 else dict(rtol=1e-4, atol=1e-3)
        check = lambda: torch.testing.assert_close(  # noqa: E731
            chip.get(o, (N, OH, OW, O), dtype).permute(0, 3, 1, 2).float(), ref(), **tol)
        return sim, ref, check

    flops = 2.0 * N * (H + 2 * pad - k + 1) * (W + 2 * pad - k + 1) * O * C * k * k
    half = " float16" if dtype == torch.float16 else ""
    return f"conv2d{half} NHWC N={N} {H}x{W} C={C}->{O} {k}x{k} pad {pad}", flops, setup


def _int_mm_case(M, K, N):
    """x1_gemm_u8 (uint8 with zero point 128, int32 result: torch._int_mm's
    route on x1 after the int8 -> uint8 quirk) against torch._int_mm."""
    def setup(chip):
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8)
        b = torch.randint(-128, 128, (K, N), dtype=torch.int8)
        ad = chip.put((a.to(torch.int32) + 128).to(torch.uint8))[1]
        bd = chip.put((b.to(torch.int32) + 128).to(torch.uint8))[1]
        o, od = chip.empty((M, N), torch.int32)
        sim = lambda: chip.lib.x1_gemm_u8(ad, bd, od)  # noqa: E731
        ref = lambda: torch._int_mm(a, b)  # noqa: E731
        check = lambda: torch.testing.assert_close(chip.get(o, (M, N), torch.int32), ref(),  # noqa: E731
                                                   rtol=0, atol=0)
        return sim, ref, check

    return f"int8 mm [{M}x{K}]@[{K}x{N}] (x1_gemm_u8 vs _int_mm)", 2.0 * M * K * N, setup


CASES = {
    "mm256": _mm_case(256, 256, 256),
    "mm512": _mm_case(512, 512, 512),
    "mm1024": _mm_case(1024, 1024, 1024),
    "proj": _mm_case(64 * 32, 64, 256),
    "proj_down": _mm_case(2048, 256, 64),
    "linear_wt": _mm_case(2048, 256, 256, b_transposed=True),
    "linear_b1": _mm_case(1, 1024, 1024, b_transposed=True),
    "bmm": _mm_case(32, 64, 64, batch=128),
    "conv": _conv_case(8, 32, 32, 16, 32, 3, 1),
    "conv_h": _conv_case(8, 32, 32, 16, 32, 3, 1, torch.float16),
    "conv64_h": _conv_case(8, 32, 32, 64, 64, 3, 1, torch.float16),
    "int_mm256": _int_mm_case(256, 256, 256),
    "int_mm512": _int_mm_case(512, 512, 512),
    "int_mm_proj": _int_mm_case(2048, 256, 64),
}


# cases th1 cannot run, and why
TH1_SKIP = {"conv": "th1 has no convolution kernel", "conv_h": "th1 has no NHWC float16 convolution",
            "conv64_h": "th1 has no NHWC float16 convolution", "int_mm256": "th1 has no int8 GEMM",
            "int_mm512": "th1 has no int8 GEMM", "int_mm_proj": "th1 has no int8 GEMM",
            "linear_b1": "th1's matrix unit needs M, N, K multiples of 16"}


def _time(sim, ref, ok, budget_s, repeat, clock):
    """Interleaved medians (seconds) of sim and ref."""
    assert sim() == ok
    ref()  # warm-up
    t0 = time.perf_counter()
    ref()
    n = repeat or max(7, min(500, int(budget_s / max(time.perf_counter() - t0, 1e-6) / 2)))
    ts, tt = [], []
    for _ in range(n):
        t0 = clock()
        st = sim()
        ts.append(clock() - t0)
        assert st == ok
        t0 = clock()
        ref()
        tt.append(clock() - t0)
    return statistics.median(ts), statistics.median(tt), n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chip", choices=("x1", "th1"), default="x1")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--repeat", type=int, default=0, help="runs per case (default: from --budget)")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per case (default 0.5)")
    ap.add_argument("--wall", action="store_true", help="wall-clock times instead of thread CPU time")
    ap.add_argument("--case", nargs="*", choices=sorted(CASES), help="default: all")
    ap.add_argument("--libs", type=Path, help="load the simulator libraries from this directory")
    a = ap.parse_args()
    if a.libs:
        simhelp.LIBS = a.libs
    torch.set_num_threads(a.threads)
    wall = a.wall or a.threads > 1
    clock = time.perf_counter if wall else time.thread_time
    torch.manual_seed(0)
    names = a.case or list(CASES)
    lib_name = "libx1v2sim.so" if a.chip == "x1" else "libth1sim.so"
    with tempfile.TemporaryDirectory() as tmp:
        chip = Chip(a.chip, *load_private(lib_name, a.chip, Path(tmp)))
        assert (chip.lib.x1_init(0) if a.chip == "x1" else chip.lib.th1Init(0)) == chip.ok
        print(f"{a.chip} simulator (1 thread) vs torch {torch.__version__} CPU "
              f"({torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}), "
              f"float32 unless noted, medians of {'wall-clock' if wall else 'thread CPU'} time")
        print(f"{'case':44s} {'sim ms':>9s} {'GFLOP/s':>8s} {'torch ms':>9s} {'GFLOP/s':>8s}"
              f" {'sim/torch':>9s}  runs")
        for key in names:
            title, flops, setup = CASES[key]
            if a.chip == "th1" and key in TH1_SKIP:
                print(f"{title:44s} skipped: {TH1_SKIP[key]}")
                continue
            sim, ref, check = setup(chip)
            assert sim() == chip.ok, chip.last_error()
            check()
            s, t, n = _time(sim, ref, chip.ok, a.budget, a.repeat, clock)
            print(f"{title:44s} {s * 1e3:9.3f} {flops / s / 1e9:8.1f} {t * 1e3:9.3f}"
                  f" {flops / t / 1e9:8.1f} {t / s:9.2f}  {n}", flush=True)
            chip.free_all()


if __name__ == "__main__":
    main()
