"""`flbridge demo --nproc N`: DistributedDataParallel on N processes, one
chip each, beside a one-process CPU run on the global batch.

The same code is the proof in the tests and the DDP benchmark:
:func:`train_rank` is one rank's body (launched by :func:`spawn`, which
wraps ``torch.multiprocessing``, or by ``torchrun -m flbridge.demos.ddp``),
:func:`reference` is the one-process run, and each rank leaves its results
in a folder for the caller to compare.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m flbridge.demos.ddp --device xpu:<name> --model gpt --out /tmp/ddp
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DDPConfig:
    device: str = ""              # chip by spec name, the same on every rank ("": the current fl device)
    model: str = "cnn"            # cnn | gpt
    steps: int = 4
    batch: int = 8                # global batch, split evenly over the ranks
    lr: float = 0.05
    zero: bool = False            # ZeroRedundancyOptimizer around SGD
    fsdp: bool = False            # FSDP2 (fully_shard) instead of DDP
    vendor: bool = True           # use the chip's collectives library (False: host path only)
    backend: str = "flccl"
    timeout_s: float = 60.0
    out: str = ""                 # folder for rank<r>.pt results and the checkpoint (run_ranks makes one)
    quiet: bool = False           # silence fallback warnings in the ranks (the demo's table says it all)
    threads: int = 1              # torch CPU threads per rank (torchrun's default; ranks share the cores)
    cpu: bool = False             # run the ranks on the CPU with gloo (the benchmark's baseline)


# ----------------------------------------------------------------- models

def build_model(name: str, seed: int) -> nn.Module:
    """The proof's models, built deterministically from `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "cnn":
            from .models import SmallCNN
            m = SmallCNN()
            # BatchNorm normalizes each rank's share of the batch on its own
            # (under DDP on any device), which no one-process run on the global
            # batch reproduces; GroupNorm is per sample, so the two must agree.
            m.bn1 = nn.GroupNorm(2, 8)
            return m
        if name == "gpt":
            from .models import TinyGPT
            return TinyGPT(vocab=64, d=32, heads=2, layers=2, ctx=32, seed=seed)
    raise ValueError(f"unknown model {name!r} (cnn or gpt)")


def global_batch(name: str, n: int):
    if name == "cnn":
        from .models import synthetic_batch
        return synthetic_batch(n)
    from .models import token_batch
    return token_batch(batch=n, seq=16, vocab=64)


def loss_of(model, name: str, x, y):
    if name == "cnn":
        return F.cross_entropy(model(x), y)
    return model(x, y)[1]


def reference(cfg: DDPConfig) -> list:
    """One process on the CPU, the global batch, the same steps: the
    parameters every DDP rank must end with."""
    model = build_model(cfg.model, seed=0)   # rank 0's initial values, which DDP broadcasts
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = global_batch(cfg.model, cfg.batch)
    for _ in range(cfg.steps):
        opt.zero_grad()
        loss_of(model, cfg.model, x, y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


# ------------------------------------------------------------------- rank

def train_rank(rank: int, world: int, cfg: DDPConfig, init_method: str | None = None) -> dict:
    """One rank: DDP training, then a checkpoint saved by rank 0 and loaded
    by all.  Writes <out>/rank<r>.pt and returns the same dict."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import flbridge

    from .. import distributed as fldist

    if not cfg.out:
        raise ValueError("DDPConfig.out: name a folder for the results and the checkpoint (shared by the ranks)")
    flbridge.init()
    torch.set_num_threads(cfg.threads)
    if cfg.quiet:
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
    fldist.use_vendor_collectives(cfg.vendor)
    if cfg.cpu:
        dev, backend = torch.device("cpu"), "gloo"
    else:
        if cfg.device:
            torch.fl.set_device(cfg.device)
        dev, backend = torch.device("fl", torch.fl.current_device()), cfg.backend
    kw = {"rank": rank, "world_size": world} if init_method else {}
    dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=cfg.timeout_s), **kw)
    try:
        if cfg.fsdp:
            from torch.distributed.fsdp import fully_shard
            # FSDP2 shards rank 0's values as they are: every rank builds the same model
            model = build_model(cfg.model, seed=0).to(dev)
            for block in getattr(model, "blocks", ()):
                fully_shard(block)
            ddp = fully_shard(model)
        else:
            # each rank starts from different values: DDP's broadcast from rank 0 must equalize them
            model = build_model(cfg.model, seed=rank).to(dev)
            ddp = DDP(model)
        if cfg.zero:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=cfg.lr)
        else:
            opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
        x, y = global_batch(cfg.model, cfg.batch)
        per = cfg.batch // world
        x, y = x[rank * per:(rank + 1) * per].to(dev), y[rank * per:(rank + 1) * per].to(dev)
        if not cfg.cpu:
            flbridge.reset_stats(dev)
        fldist.reset_stats()
        losses, step_s = [], []
        for _ in range(cfg.steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = loss_of(ddp, cfg.model, x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())   # waits for the step, like a synchronize
            step_s.append(time.perf_counter() - t0)
        result = {
            "rank": rank, "world": world, "config": asdict(cfg),
            "params": [(p.full_tensor() if cfg.fsdp else p).detach().cpu().clone() for p in model.parameters()],
            "losses": losses, "step_s": step_s,
            "bus": {} if cfg.cpu else {k: v for k, v in flbridge.stats(dev).items()
                                      if k.endswith(("_bytes", "_calls"))},
            "collectives": {f"{path} {coll}": v for (path, coll), v in fldist.stats().items()},
            "group": repr(dist.group.WORLD),
        }
        # (FSDP2's state dict holds shards: distributed checkpointing is its own subject)
        result["checkpoint_ok"] = None if cfg.fsdp else _checkpoint_round_trip(model, cfg, dev, rank)
        if cfg.zero:
            opt.consolidate_state_dict(to=0)
            if rank == 0:  # the whole optimizer, gathered from every rank's shard
                sd = opt.state_dict()
                n = sum(len(g["params"]) for g in sd["param_groups"])
                result["zero_state_ok"] = n == len(result["params"])
        if cfg.out:
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            torch.save(result, Path(cfg.out) / f"rank{rank}.pt")
        return result
    finally:
        dist.destroy_process_group()


def _checkpoint_round_trip(model, cfg: DDPConfig, dev, rank: int) -> bool:
    """Rank 0 saves the model; every rank loads it into a fresh copy, which
    must then equal its own trained model."""
    import torch.distributed as dist
    folder = Path(cfg.out)
    path = folder / "ddp_checkpoint.pt"
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    dist.barrier()
    fresh = build_model(cfg.model, seed=1234).to(dev)
    fresh.load_state_dict(torch.load(path))
    ok = all(torch.equal(a.detach().cpu(), b.detach().cpu())
             for a, b in zip(fresh.parameters(), model.parameters()))
    dist.barrier()  # nobody removes the file while another rank reads it
    return ok


def _spawn_target(rank: int, world: int, cfg: DDPConfig, init_method: str) -> None:
    train_rank(rank, world, cfg, init_method)


def spawn(fn, args: tuple, nprocs: int, timeout: float, start_method: str = "spawn") -> None:
    """torch.multiprocessing.spawn with a deadline: a rank that fails ends
    the others (and raises its error here); past `timeout` seconds all are
    killed and TimeoutError is raised, so nothing hangs."""
    import torch.multiprocessing as mp
    ctx = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method=start_method)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=0.2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"the {nprocs} ranks did not finish within {timeout:.0f} s")


def run_ranks(cfg: DDPConfig, nproc: int, timeout: float = 300.0) -> list[dict]:
    """Runs train_rank on `nproc` spawned processes; returns their results."""
    with tempfile.TemporaryDirectory(prefix="flbridge-ddp-") as tmp:
        own_out = not cfg.out
        if own_out:
            cfg = DDPConfig(**{**asdict(cfg), "out": tmp})
        init = f"file://{tmp}/rendezvous"
        quiet_cpp = cfg.quiet and "TORCH_CPP_LOG_LEVEL" not in os.environ
        if quiet_cpp:  # DDP's C++ logger warns once per rank that it times CPU and CUDA only
            os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
        try:
            spawn(_spawn_target, (nproc, cfg, init), nproc, timeout)
        finally:
            if quiet_cpp:
                del os.environ["TORCH_CPP_LOG_LEVEL"]
        return [torch.load(Path(cfg.out) / f"rank{r}.pt", weights_only=False) for r in range(nproc)]


# ------------------------------------------------------------------- demo

def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def run_beside_cpu(run_ranks, reference, cfg, nproc: int, steps: int, out):
    """Runs the ranks, then the one-process CPU reference, and prints each
    rank's loss per step: (the ranks' results, the reference, seconds)."""
    from ..errors import FallbackWarning
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        results = run_ranks(cfg, nproc)
        ref = reference(cfg)
    elapsed = time.perf_counter() - t0
    out(f"{'step':>4}  " + "  ".join(f"{f'rank {r} loss':>11}" for r in range(nproc)))
    for i in range(steps):
        out(f"{i + 1:>4}  " + "  ".join(f"{res['losses'][i]:>11.5f}" for res in results))
    return results, ref, elapsed


def demo_chip(device, batch: int, nproc: int, out):
    """The chip a multi-process demo runs on (`device`, else the current fl
    device), or None after saying why it cannot run."""
    import flbridge

    from ..devices import chip_for, current_device

    flbridge.init()
    if not flbridge.chips():
        out("no fl devices: set FLBRIDGE_DEVICE_DIR to a folder of device specs")
        return None
    if batch % nproc:
        out(f"the global batch ({batch}) must split evenly over {nproc} processes")
        return None
    return chip_for(device if device is not None else current_device())


def run_ddp_demo(nproc: int = 2, steps: int = 8, device=None, batch: int = 16, out=print) -> int:
    chip = demo_chip(device, batch, nproc, out)
    if chip is None:
        return 1
    cfg = DDPConfig(device=chip.device_type, model="cnn", steps=steps, batch=batch, quiet=True)
    s = chip.spec
    lib = f"vendor collectives from {s.collectives.header.name}" if s.collectives else "host (gloo) collectives"
    out(f"flbridge demo: SmallCNN (GroupNorm), DistributedDataParallel over {nproc} processes, {steps} SGD "
        f"steps, global batch {batch}, each rank on {chip.device_type} ({s.vendor} {s.chip_model}), backend "
        f"flccl with {lib}; beside one CPU process on the global batch\n")
    results, ref, elapsed = run_beside_cpu(run_ranks, reference, cfg, nproc, steps, out)
    same = all(torch.equal(a, b) for res in results[1:] for a, b in zip(results[0]["params"], res["params"]))
    diff = max((a - b).abs().max().item() for a, b in zip(results[0]["params"], ref))
    ckpt = all(res["checkpoint_ok"] for res in results)
    out(f"\nparameters identical on every rank: {'yes' if same else 'NO'}")
    out(f"largest difference from the one-process CPU run on the global batch: {diff:.2e}")
    out(f"checkpoint saved by rank 0, loaded by every rank: {'identical' if ckpt else 'DIFFERENT'}"
        f"   ({elapsed:.1f} s in all)")
    r0 = results[0]
    out(f"\nCollectives on rank 0 ({r0['group']}):")
    out(f"  {'collective':24s} {'path':8s} {'calls':>6}  {'bytes':>10}")
    for name, v in sorted(r0["collectives"].items()):
        path, coll = name.split(" ", 1)
        out(f"  {coll:24s} {path:8s} {v['calls']:>6}  {_fmt_bytes(v['bytes']):>10}")
    b = r0["bus"]
    out(f"\nBytes moved on rank 0 over {steps} steps:")
    out(f"  host -> device  {_fmt_bytes(b['h2d_bytes']):>10} in {b['h2d_calls']} calls")
    out(f"  mapped (zero-copy) {_fmt_bytes(b['mapped_bytes']):>7} in {b['map_calls']} mappings")
    out(f"  device -> host  {_fmt_bytes(b['d2h_bytes']):>10} in {b['d2h_calls']} calls")
    later = r0["step_s"][1:] or r0["step_s"]
    out(f"  time per DDP step {statistics.median(later) * 1e3:.1f} ms (median of steps 2-{steps})")
    return 0 if same and ckpt and diff < 1e-4 else 2


# -------------------------------------------------------------- torchrun

def main(argv: list[str] | None = None) -> int:
    """One rank under torchrun (RANK, WORLD_SIZE, MASTER_ADDR from the environment)."""
    ap = argparse.ArgumentParser(prog="python -m flbridge.demos.ddp",
                                 description="one DDP rank (launch with torchrun)")
    ap.add_argument("--device", default=DDPConfig.device, help="chip by spec name (xpu:<name>); default: fl:0")
    ap.add_argument("--model", default=DDPConfig.model, choices=("cnn", "gpt"))
    ap.add_argument("--steps", type=int, default=DDPConfig.steps)
    ap.add_argument("--batch", type=int, default=DDPConfig.batch)
    ap.add_argument("--lr", type=float, default=DDPConfig.lr)
    ap.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around SGD")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument("--host-only", action="store_true", help="never use the chip's collectives library")
    ap.add_argument("--out", required=True, help="folder for the rank<r>.pt results")
    a = ap.parse_args(argv)
    cfg = DDPConfig(device=a.device, model=a.model, steps=a.steps, batch=a.batch, lr=a.lr, zero=a.zero,
                    fsdp=a.fsdp, vendor=not a.host_only, out=a.out)
    train_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
