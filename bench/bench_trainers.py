"""HF Trainer and Lightning on fl against the CPU: time per training step,
side by side in one process.

    python bench/bench_trainers.py [--steps 12]

Each trainer runs its ordinary loop on the CPU and on fl (the chips named
below), same model, same data, one process, one torch CPU thread:

  HF Trainer   a 2-layer GPT-2 built in code (n_embd 32, 64-token vocab,
               16-token sequences, batch 4), AdamW; fp32, and the chip's
               mixed precision (bf16 on th1, fp16 on x1)
  Lightning    a 16-32-4 MLP classifier, SGD, batch 8; fp32 and the chip's
               mixed precision

and prints the median step time (the first two steps, which make every
routing decision, left out) and its ratio to the CPU's fp32 run.  What a
step costs on fl is flbridge's per-op cost (docs/performance.md) times the
ops a step runs: both models are small, so the ratios are the wrapper's
floor, not the chips' speed.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("FLBRIDGE_WARN", "off")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import flbridge  # noqa: E402


def _hf(steps: int, chip: str | None, precision: str | None) -> list:
    from transformers import GPT2Config, GPT2LMHeadModel, PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    class Sequences(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randint(0, 64, (4 * steps, 16), generator=g)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": self.x[i]}

    times = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    if chip:
        torch.fl.set_device(chip)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                       eos_token_id=0))
    with tempfile.TemporaryDirectory() as out:
        kw = {precision: True} if precision else {}
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=4, max_steps=steps, save_strategy="no",
                                 report_to=[], disable_tqdm=True, logging_strategy="no", use_cpu=chip is None,
                                 **kw)
        trainer = Trainer(model=model, args=args, train_dataset=Sequences(), callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)    # its end-of-training line would interleave with the table
        trainer.train()
    return times


def _lightning(steps: int, chip: str | None, precision: str) -> list:
    import lightning as L

    times = []

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_batch_start(self, batch, i):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, outputs, batch, i):
            times.append(time.perf_counter() - self.t0)

    if chip:
        torch.fl.set_device(chip)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * steps, 16, generator=g), torch.randint(0, 4, (8 * steps,), generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    trainer = L.Trainer(max_epochs=1, accelerator="fl" if chip else "cpu", devices=1, precision=precision,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Classifier(), data)
    return times


def _median(times: list) -> float:
    later = times[2:] or times
    return statistics.median(later) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name in ("lightning.pytorch", "lightning.fabric", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)   # their start-up notices, not the table
    flbridge.init()
    rows = [
        ("HF Trainer", "cpu fp32", lambda: _hf(a.steps, None, None)),
        ("HF Trainer", "th1 fp32", lambda: _hf(a.steps, "xpu:th1", None)),
        ("HF Trainer", "th1 bf16", lambda: _hf(a.steps, "xpu:th1", "bf16")),
        ("HF Trainer", "x1 fp16", lambda: _hf(a.steps, "xpu:x1", "fp16")),
        ("Lightning", "cpu fp32", lambda: _lightning(a.steps, None, "32-true")),
        ("Lightning", "th1 fp32", lambda: _lightning(a.steps, "xpu:th1", "32-true")),
        ("Lightning", "th1 bf16", lambda: _lightning(a.steps, "xpu:th1", "bf16-mixed")),
        ("Lightning", "x1 fp16", lambda: _lightning(a.steps, "xpu:x1", "16-mixed")),
    ]
    base = {}
    print(f"{'trainer':12s} {'run':10s} {'ms/step':>9} {'x cpu':>6}   (median of steps 3-{a.steps}, one process)")
    for trainer, run, fn in rows:
        ms = _median(fn())
        base.setdefault(trainer, ms)
        print(f"{trainer:12s} {run:10s} {ms:>9.1f} {ms / base[trainer]:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
