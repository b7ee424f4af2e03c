"""`flbridge demo --deepspeed`: DeepSpeed ZeRO on N processes, one chip
each, beside a one-process CPU run of the same steps.

The rank body (:func:`train_rank`) is an ordinary DeepSpeed script: nothing
in it names flbridge's accelerator, which `import flbridge` installed
(flbridge/integrations/deepspeed.py).  The only fl line is the chip choice,
`torch.fl.set_device(...)`, for a chip other than fl:0.  It is launched by
:func:`run_ranks` (torch.multiprocessing), by ``torchrun -m
flbridge.demos.deepspeed`` or by ``deepspeed --num_gpus N --module
flbridge.demos.deepspeed``; :func:`reference` is the one-process CPU run in
plain PyTorch that every rank's parameters must match.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m flbridge.demos.deepspeed --device xpu:th1 --stage 2 --out /tmp/ds
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .ddp import build_model, demo_chip, global_batch, loss_of, run_beside_cpu, spawn

BUCKET = 5_000_000       # elements per ZeRO communication bucket (20 MB in float32)
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class DSConfig:
    device: str = "xpu:th1"       # chip by spec name, the same type on every rank
    model: str = "cnn"            # cnn | gpt (flbridge.demos.ddp's models)
    stage: int = 2                # ZeRO stage
    steps: int = 3
    batch: int = 8                # global batch, split evenly over the ranks
    lr: float = 1e-2
    weight_decay: float = 0.01
    optimizer: str = "Adam"       # Adam (DeepSpeed's FusedAdam: flbridge's fused step on fl) | torch_adam | SGD
    precision: str = "fp32"       # fp32 | bf16 | fp16 (dynamic loss scaling)
    loss_scale_power: int = 8     # fp16: the initial loss scale is 2**this
    clip: float = 1.0             # gradient_clipping (DeepSpeed's default is 1.0)
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    offload: bool = False         # offload_optimizer to the CPU (a torch optimizer: nothing compiled)
    checkpoint: bool = True       # save, load into a fresh engine, one more step on both
    out: str = ""                 # folder for rank<r>.pt results and the checkpoint
    quiet: bool = False           # silence fallback warnings in the ranks
    threads: int = 1              # torch CPU threads per rank
    timeout_s: float = 120.0
    cpu: bool = False             # the ranks on the CPU (DeepSpeed's CPU accelerator, gloo): the bench's baseline
    compile: bool = False         # engine.compile(backend="fl") before training (not for the checkpoint's fresh engine)


def ds_config(cfg: DSConfig, world: int) -> dict:
    """The DeepSpeed config of this run."""
    opt = {"type": "SGD" if cfg.optimizer == "SGD" else "Adam",
           "params": {"lr": cfg.lr, "weight_decay": cfg.weight_decay}}
    if cfg.optimizer == "torch_adam" or (cfg.offload and cfg.optimizer == "Adam"):
        opt["params"]["torch_adam"] = True    # offloaded: torch's AdamW on the CPU, not the compiled CPU Adam
    zero = {"stage": cfg.stage, "overlap_comm": cfg.overlap_comm, "contiguous_gradients": cfg.contiguous_gradients,
            # DeepSpeed's default buckets (5e8 elements, 2 GB) are sized for GPUs: a CPU fallback on a slice
            # of one (offload's overflow check, on a chip without amax) would download all of it
            "reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET}
    if cfg.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    conf = {"train_micro_batch_size_per_gpu": cfg.batch // world, "gradient_accumulation_steps": 1,
            "optimizer": opt, "zero_optimization": zero, "gradient_clipping": cfg.clip,
            "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    if cfg.optimizer == "SGD":
        conf["zero_allow_untested_optimizer"] = True   # DeepSpeed tests ZeRO with its Adam variants only
    if cfg.precision == "bf16":
        conf["bf16"] = {"enabled": True}
    elif cfg.precision == "fp16":
        conf["fp16"] = {"enabled": True, "initial_scale_power": cfg.loss_scale_power, "loss_scale_window": 1000}
    return conf


def _check(cfg: DSConfig, world: int) -> None:
    if not cfg.out:
        raise ValueError("DSConfig.out: name a folder for the results and the checkpoint (shared by the ranks)")
    if cfg.batch % world:
        raise ValueError(f"the global batch ({cfg.batch}) must split evenly over {world} processes")
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision {cfg.precision!r}: one of {', '.join(PRECISIONS)}")


# ------------------------------------------------------------------- rank

def train_rank(rank: int, world: int, cfg: DSConfig, init_method: str | None = None) -> dict:
    """One rank: DeepSpeed ZeRO training, then (cfg.checkpoint) a checkpoint
    saved by every rank and loaded into a fresh engine.  Writes
    <out>/rank<r>.pt and returns the same dict."""
    _check(cfg, world)
    if cfg.cpu:
        os.environ["DS_ACCELERATOR"] = "cpu"   # read when deepspeed is imported, below
    import flbridge
    import deepspeed

    from .. import distributed as fldist

    torch.set_num_threads(cfg.threads)
    if cfg.quiet:
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
    if not cfg.cpu:
        torch.fl.set_device(cfg.device)      # a chip other than fl:0: the script's only fl line
    kw = {}
    if init_method:   # spawned: no launcher set the environment DeepSpeed reads
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
        kw = {"init_method": init_method, "rank": rank, "world_size": world, "auto_mpi_discovery": False}
    deepspeed.init_distributed(dist_backend="gloo" if cfg.cpu else None, timeout=_timeout(cfg), **kw)
    conf = ds_config(cfg, world)
    # each rank starts from its own values: DeepSpeed's broadcast from rank 0 must equalize them
    model = build_model(cfg.model, seed=rank)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=conf)
    if cfg.compile:
        engine.compile(backend="aot_eager" if cfg.cpu else "fl")
    dev = engine.device
    x, y = _shard(cfg, rank, world, dev)
    if not cfg.cpu:
        flbridge.reset_stats(dev)
    fldist.reset_stats()
    losses, step_s, scales = [], [], []
    for _ in range(cfg.steps):
        t0 = time.perf_counter()
        loss = loss_of(engine, cfg.model, x, y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())           # waits for the step, like a synchronize
        step_s.append(time.perf_counter() - t0)
        scales.append(_loss_scale(engine))
    result = {
        "rank": rank, "world": world, "config": asdict(cfg), "ds_config": conf,
        "params": _full_params(engine), "losses": losses, "step_s": step_s, "loss_scales": scales,
        "skipped_steps": int(getattr(engine, "skipped_steps", 0)),
        "optimizer": type(engine.optimizer).__name__,
        "base_optimizer": type(getattr(engine.optimizer, "optimizer", engine.optimizer)).__name__,
        "accelerator": type(deepspeed.get_accelerator()).__name__,
        "param_device": str(next(engine.module.parameters()).device),
        "param_dtype": str(next(engine.module.parameters()).dtype),
        "bus": {} if cfg.cpu else {k: v for k, v in flbridge.stats(dev).items() if k.endswith(("_bytes", "_calls"))},
        "collectives": {f"{path} {coll}": v for (path, coll), v in fldist.stats().items()},
        "group": repr(torch.distributed.group.WORLD),
    }
    if cfg.checkpoint:
        result.update(_checkpoint_round_trip(engine, cfg, rank, world, conf, x, y))
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    torch.save(result, Path(cfg.out) / f"rank{rank}.pt")
    deepspeed.comm.barrier()
    torch.distributed.destroy_process_group()
    return result


def _timeout(cfg: DSConfig):
    from datetime import timedelta
    return timedelta(seconds=cfg.timeout_s)


def _shard(cfg: DSConfig, rank: int, world: int, dev):
    x, y = global_batch(cfg.model, cfg.batch)
    per = cfg.batch // world
    x, y = x[rank * per:(rank + 1) * per].to(dev), y[rank * per:(rank + 1) * per].to(dev)
    if x.is_floating_point():
        x = x.to(PRECISIONS[cfg.precision])  # DeepSpeed casts the model, the script its inputs
    return x, y


def _loss_scale(engine):
    scale = getattr(engine.optimizer, "loss_scale", None)
    return float(scale) if isinstance(scale, (int, float)) or torch.is_tensor(scale) else None


def _full_params(engine) -> list:
    """Every parameter in full, on the CPU, in float32 (ZeRO-3 gathers its partitions)."""
    params = list(engine.module.parameters())
    if engine.zero_optimization_stage() == 3:
        import deepspeed
        with deepspeed.zero.GatheredParameters(params):
            return [p.detach().float().cpu().clone() for p in params]
    return [p.detach().float().cpu().clone() for p in params]


def _checkpoint_round_trip(engine, cfg: DSConfig, rank: int, world: int, conf: dict, x, y) -> dict:
    """Every rank saves its part; the float32 master weights are read back
    from it (DeepSpeed's zero_to_fp32); a fresh engine (other initial values)
    loads it; one more step on both engines must give the same parameters
    (the optimizer state came back too)."""
    import deepspeed
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    folder = Path(cfg.out) / "checkpoint"
    engine.save_checkpoint(str(folder), tag="demo")
    deepspeed.comm.barrier()
    with contextlib.redirect_stdout(io.StringIO()):   # it prints what it reads
        fp32 = get_fp32_state_dict_from_zero_checkpoint(str(folder), tag="demo")
    master = [fp32[name].float().clone() for name, _ in engine.module.named_parameters()]
    fresh_model = build_model(cfg.model, seed=1234)
    fresh, *_ = deepspeed.initialize(model=fresh_model, model_parameters=fresh_model.parameters(), config=conf)
    fresh.load_checkpoint(str(folder), tag="demo")
    loaded = all(torch.equal(a, b) for a, b in zip(_full_params(fresh), _full_params(engine)))
    for e in (engine, fresh):
        loss = loss_of(e, cfg.model, x, y)
        e.backward(loss)
        e.step()
    resumed = all(torch.equal(a, b) for a, b in zip(_full_params(fresh), _full_params(engine)))
    return {"master": master, "checkpoint_loaded": loaded, "checkpoint_resumed": resumed}


# -------------------------------------------------------------- reference

def reference(cfg: DSConfig, steps: int | None = None, rounding: list | None = None) -> list:
    """One process on the CPU, float32, the global batch, the same steps, in
    plain PyTorch: what DeepSpeed's config means (AdamW or SGD with weight
    decay, gradient clipping by the global norm).  `steps`: how many (default
    cfg.steps; fewer when fp16 loss scaling skipped some).  `rounding`: a
    list to append, per step, how far the same gradient computed in
    cfg.precision on the CPU lies from the float32 one (its largest element
    difference, scaled as clipping scales the gradient)."""
    model = build_model(cfg.model, seed=0)   # rank 0's initial values, which DeepSpeed broadcasts
    if cfg.optimizer == "SGD":
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:   # DeepSpeed's "Adam" is AdamW (adam_w_mode defaults to true), fused or torch's
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    x, y = global_batch(cfg.model, cfg.batch)
    low = PRECISIONS[cfg.precision]
    for _ in range(cfg.steps if steps is None else steps):
        lp = None
        if rounding is not None:
            lp = copy.deepcopy(model).to(low)
            loss_of(lp, cfg.model, x.to(low) if x.is_floating_point() else x, y).backward()
        opt.zero_grad()
        loss_of(model, cfg.model, x, y).backward()
        scale = 1.0
        if cfg.clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip))
            scale = min(1.0, cfg.clip / (norm + 1e-6))
        if lp is not None:
            rounding.append(scale * max((a.grad.float() - b.grad / scale).abs().max().item()
                                        for a, b in zip(lp.parameters(), model.parameters())))
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


# ----------------------------------------------------------------- launch

def _spawn_target(rank: int, world: int, cfg: DSConfig, init_method: str) -> None:
    train_rank(rank, world, cfg, init_method)


def run_ranks(cfg: DSConfig, nproc: int, timeout: float = 600.0) -> list[dict]:
    """Runs train_rank on `nproc` spawned processes; returns their results."""
    with tempfile.TemporaryDirectory(prefix="flbridge-ds-") as tmp:
        if not cfg.out:
            cfg = DSConfig(**{**asdict(cfg), "out": tmp})
        spawn(_spawn_target, (nproc, cfg, f"file://{tmp}/rendezvous"), nproc, timeout)
        return [torch.load(Path(cfg.out) / f"rank{r}.pt", weights_only=False) for r in range(nproc)]


def compare(results: list, ref: list) -> tuple:
    """(parameters identical on every rank, largest difference from `ref`):
    the float32 master weights read back from the checkpoint when there is
    one (the optimizer's, before the cast to a lower precision), else the
    model's parameters."""
    first = results[0]["params"]
    same = all(torch.equal(a, b) for res in results[1:] for a, b in zip(first, res["params"]))
    mine = results[0].get("master") or first
    diff = max((a - b.float()).abs().max().item() for a, b in zip(mine, ref))
    return same, diff


# ------------------------------------------------------------------- demo

def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def run_deepspeed_demo(nproc: int = 2, steps: int = 4, device=None, batch: int = 8, stage: int = 2,
                       out=print) -> int:
    import importlib.util
    if importlib.util.find_spec("deepspeed") is None:
        out("the DeepSpeed demo needs DeepSpeed: pip install deepspeed==0.19.8 (nothing is compiled: "
            "DS_BUILD_OPS=0, the default)")
        return 1
    chip = demo_chip(device, batch, nproc, out)
    if chip is None:
        return 1
    cfg = DSConfig(device=chip.device_type, model="cnn", stage=stage, steps=steps, batch=batch, quiet=True)
    s = chip.spec
    out(f"flbridge demo: DeepSpeed ZeRO stage {stage}, SmallCNN (GroupNorm), {nproc} processes, {steps} steps "
        f"of DeepSpeed's Adam (its fused step runs on the chip) with gradient clipping, global batch {batch}, "
        f"each rank on {chip.device_type} ({s.vendor} {s.chip_model}), backend flccl; beside one CPU process "
        f"in plain PyTorch (AdamW, clip_grad_norm_) on the global batch\n")
    results, ref, elapsed = run_beside_cpu(run_ranks, reference, cfg, nproc, steps, out)
    same, diff = compare(results, ref)
    ckpt = all(r["checkpoint_loaded"] and r["checkpoint_resumed"] for r in results)
    r0 = results[0]
    out(f"\naccelerator: {r0['accelerator']}, optimizer: {r0['optimizer']} around {r0['base_optimizer']}, "
        f"parameters on {r0['param_device']}")
    out(f"parameters identical on every rank: {'yes' if same else 'NO'}")
    out(f"largest difference from the one-process CPU run: {diff:.2e}")
    out(f"checkpoint saved by every rank, loaded into a fresh engine, one more step on both: "
        f"{'identical' if ckpt else 'DIFFERENT'}   ({elapsed:.1f} s in all)")
    out(f"\nCollectives on rank 0 ({r0['group']}):")
    out(f"  {'collective':24s} {'path':8s} {'calls':>6}  {'bytes':>10}")
    for name, v in sorted(r0["collectives"].items()):
        path, coll = name.split(" ", 1)
        out(f"  {coll:24s} {path:8s} {v['calls']:>6}  {_fmt_bytes(v['bytes']):>10}")
    later = r0["step_s"][1:] or r0["step_s"]
    out(f"\ntime per ZeRO step {statistics.median(later) * 1e3:.1f} ms (median of steps 2-{steps}, rank 0)")
    return 0 if same and ckpt and diff < 1e-5 else 2


# ------------------------------------------------------------- launchers

def main(argv: list[str] | None = None) -> int:
    """One rank under torchrun or the deepspeed launcher (RANK, WORLD_SIZE,
    MASTER_ADDR from the environment; the deepspeed launcher adds --local_rank)."""
    ap = argparse.ArgumentParser(prog="python -m flbridge.demos.deepspeed",
                                 description="one DeepSpeed rank (launch with torchrun or deepspeed)")
    d = DSConfig()
    ap.add_argument("--device", default=d.device, help="chip by spec name (xpu:<name>)")
    ap.add_argument("--model", default=d.model, choices=("cnn", "gpt"))
    ap.add_argument("--stage", type=int, default=d.stage)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--batch", type=int, default=d.batch)
    ap.add_argument("--optimizer", default=d.optimizer, choices=("Adam", "torch_adam", "SGD"))
    ap.add_argument("--precision", default=d.precision, choices=tuple(PRECISIONS))
    ap.add_argument("--overlap-comm", action="store_true")
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--no-checkpoint", action="store_true")
    ap.add_argument("--compile", action="store_true", help='engine.compile(backend="fl") before training')
    ap.add_argument("--local_rank", type=int, default=None, help="(set by the deepspeed launcher)")
    ap.add_argument("--out", required=True, help="folder for the rank<r>.pt results")
    a = ap.parse_args(argv)
    cfg = DSConfig(device=a.device, model=a.model, stage=a.stage, steps=a.steps, batch=a.batch,
                   optimizer=a.optimizer, precision=a.precision, overlap_comm=a.overlap_comm, offload=a.offload,
                   checkpoint=not a.no_checkpoint, out=a.out, compile=a.compile)
    train_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
