"""DDP and DeepSpeed ZeRO-2 on 2 processes: time per step and bytes moved,
fl against the CPU, side by side in one run.

    python bench/bench_ddp.py [--steps 6] [--model cnn|gpt|both] [--no-zero] [--cpu-zero2]

For each model (the demo's CNN on xpu:x1-v2, the small GPT on xpu:th1) it
runs the same 2-rank SGD training four (five) ways, each a fresh pair of
processes (flbridge.demos.ddp.run_ranks, flbridge.demos.deepspeed.run_ranks):

  cpu gloo     DDP, the model on the CPU, init_process_group("gloo"): the baseline
  fl host      DDP, fl tensors, backend flccl, every collective staged through gloo
  fl vendor    DDP, fl tensors, backend flccl, the chip's collectives library
  cpu zero2    (--cpu-zero2) DeepSpeed ZeRO stage 2 on DeepSpeed's CPU accelerator
               (gloo); DeepSpeed compiles its shared-memory comm op for it on the
               first run (minutes; cached after), so it is not run by default
  fl zero2     DeepSpeed ZeRO stage 2 on fl (`import flbridge`), flccl; nothing compiled

and prints, per rank 0 and per step (the first step, which makes every
routing decision, is left out of the times):

  ms/step      median wall time of a training step
  coll. B      bytes this rank contributed to collectives (payload)
  staged B     device->host bytes the host path's staging downloaded (its
               uploads happen later, when a kernel needs the data: in bus B)
  bus B        bytes flbridge moved between host and device (h2d + d2h), all causes
  mapped B     bytes made visible to the chip by mapping host memory (no copy)

The bus bytes include the model's own traffic (CPU fallbacks of ops the chip
lacks), which depends on where the gradients are current after the
collective: on the host after the host path, on the device after the vendor
path.  Ratios are against the cpu gloo row.  Every rank runs one torch CPU
thread (torchrun's default): the two ranks share the machine's cores.

Then, per chip, the time of one all_reduce alone (8 KiB, 1 MiB, 4 MiB of
float32) on the host and the vendor path, including the next kernel on the
tensor (which pays the host path's upload, if any).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("FLBRIDGE_WARN", "off")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flbridge.demos.ddp import DDPConfig, run_ranks  # noqa: E402
from flbridge.demos.deepspeed import DSConfig  # noqa: E402
from flbridge.demos.deepspeed import run_ranks as run_zero_ranks  # noqa: E402

CASES = {"cnn": "xpu:x1-v2", "gpt": "xpu:th1"}


def measure(cfg) -> dict:
    if isinstance(cfg, DSConfig):
        r = run_zero_ranks(cfg, 2, timeout=1800)[0]
    else:
        r = run_ranks(cfg, 2, timeout=900)[0]
    later = r["step_s"][1:] or r["step_s"]
    steps = len(r["step_s"])
    coll = sum(v["bytes"] for v in r["collectives"].values())
    if cfg.cpu:  # gloo's own collectives are not counted by flbridge: DDP all-reduces every gradient once
        coll = sum(p.numel() * p.element_size() for p in r["params"]) * steps
        if isinstance(cfg, DSConfig):   # ZeRO-2 over gloo: flbridge does not see its collectives
            coll = float("nan")
    b = r["bus"]
    staged = sum(v["staged_d2h_bytes"] for v in r["collectives"].values())
    return {"ms": statistics.median(later) * 1e3, "coll": coll / steps, "staged": staged / steps,
            "bus": (b.get("h2d_bytes", 0) + b.get("d2h_bytes", 0)) / steps,
            "mapped": b.get("mapped_bytes", 0) / steps,
            "paths": ", ".join(f"{k} x{v['calls']}" for k, v in sorted(r["collectives"].items()))}


def _latency_rank(rank: int, world: int, init: str, device: str, vendor: bool, sizes: list, out: str) -> None:
    import datetime
    import time

    import torch
    import torch.distributed as dist

    import flbridge
    from flbridge import distributed as fldist
    flbridge.init()
    torch.set_num_threads(1)
    torch.fl.set_device(device)
    fldist.use_vendor_collectives(vendor)
    dist.init_process_group("flccl", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    res = {}
    for n in sizes:
        t = torch.ones(n // 4, device=torch.device("fl", torch.fl.current_device()))
        for _ in range(3):
            dist.all_reduce(t)
        ts = []
        for _ in range(30):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            t.add_(0.0)  # the next kernel: the host path's lazy upload is part of the cost
            ts.append(time.perf_counter() - t0)
        res[n] = statistics.median(ts)
    if rank == 0:
        torch.save(res, Path(out) / "latency.pt")
    dist.destroy_process_group()


def latency(device: str, sizes: list) -> dict:
    """Median time of one all_reduce (plus the next kernel) per path, 2 ranks."""
    import tempfile

    import torch

    from flbridge.demos.ddp import spawn
    out = {}
    for vendor in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            spawn(_latency_rank, (2, f"file://{tmp}/rv", device, vendor, sizes, tmp), 2, 600)
            out["fl vendor" if vendor else "fl host"] = torch.load(Path(tmp) / "latency.pt")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--model", choices=("cnn", "gpt", "both"), default="both")
    ap.add_argument("--no-zero", action="store_true", help="DDP only (no DeepSpeed rows)")
    ap.add_argument("--cpu-zero2", action="store_true",
                    help="also ZeRO-2 on DeepSpeed's CPU accelerator (compiles DeepSpeed's shm comm op once)")
    a = ap.parse_args()
    models = ("cnn", "gpt") if a.model == "both" else (a.model,)
    for model in models:
        device = CASES[model]
        base = DDPConfig(device=device, model=model, steps=a.steps, batch=8, quiet=True)
        rows = {
            "cpu gloo": measure(replace(base, cpu=True)),
            "fl host": measure(replace(base, vendor=False)),
            "fl vendor": measure(base),
        }
        if not a.no_zero:
            # the same SGD steps (no clipping, no weight decay) under ZeRO-2: DeepSpeed's engine in place of DDP
            zero = DSConfig(device=device, model=model, stage=2, steps=a.steps, batch=8, optimizer="SGD",
                            lr=base.lr, weight_decay=0.0, clip=0.0, checkpoint=False, quiet=True)
            if a.cpu_zero2:
                rows["cpu zero2"] = measure(replace(zero, cpu=True))
            rows["fl zero2"] = measure(zero)
        ref = rows["cpu gloo"]
        print(f"\n{model} on {device}: 2 processes, {a.steps} SGD steps, global batch 8 (rank 0, per step)")
        print(f"  {'':10s} {'ms/step':>9} {'x cpu':>6} {'coll. B':>9} {'staged B':>9} {'bus B':>10} "
              f"{'mapped B':>9}  collectives")
        for name, r in rows.items():
            print(f"  {name:10s} {r['ms']:>9.1f} {r['ms'] / ref['ms']:>6.2f} {r['coll']:>9.0f} {r['staged']:>9.0f} "
                  f"{r['bus']:>10.0f} {r['mapped']:>9.0f}  {r['paths'] or '(gloo, not counted by flbridge)'}")
    sizes = [8 << 10, 1 << 20, 4 << 20]
    for device in sorted(set(CASES[m] for m in models)):
        lat = latency(device, sizes)
        print(f"\nall_reduce alone on {device}, 2 processes (median of 30, with the next kernel)")
        print(f"  {'':10s} " + " ".join(f"{_size(n):>10}" for n in sizes))
        for name, r in lat.items():
            print(f"  {name:10s} " + " ".join(f"{r[n] * 1e6:>8.0f}us" for n in sizes))
    return 0


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


if __name__ == "__main__":
    raise SystemExit(main())
