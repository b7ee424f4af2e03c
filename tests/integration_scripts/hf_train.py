"""A HF Trainer script, unchanged but `import flbridge` (the chip line and
the result file are the test's): a 2-layer GPT-2 built in code, dropout off,
on 32 fixed sequences.  argv[1]: JSON of the run's options; argv[2]: the
folder for results (result-rank<r>.json, params-rank<r>.pt).

Options: chip (a spec name made current first), args (TrainingArguments
keywords), resume (a checkpoint folder)."""
import json
import os
import sys
import warnings
from pathlib import Path

import torch

import flbridge  # the one line a CUDA script adds

opts = json.loads(sys.argv[1])
out = Path(sys.argv[2])
warnings.simplefilter("ignore", flbridge.FallbackWarning)
if opts.get("chip"):
    torch.fl.set_device(opts["chip"])

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402


class Sequences(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (32, 16), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
seen = {}


def _dtype_of_logits(module, inputs, output):
    seen.setdefault("logits_dtype", str(output.dtype))


model.lm_head.register_forward_hook(_dtype_of_logits)
kw = dict(output_dir=str(out / "trainer"), per_device_train_batch_size=4, max_steps=6, logging_steps=1,
          save_strategy="no", report_to=[], disable_tqdm=True, learning_rate=1e-3, seed=0, data_seed=0)
kw.update(opts.get("args", {}))
args = TrainingArguments(**kw)
trainer = Trainer(model=model, args=args, train_dataset=Sequences())
import flbridge.distributed as fldist  # noqa: E402

fldist.reset_stats()
trainer.train(resume_from_checkpoint=opts.get("resume"))
rank = int(os.environ.get("RANK", 0))
acc = trainer.accelerator
group = None
if torch.distributed.is_initialized():
    group = repr(torch.distributed.group.WORLD)
result = {
    "device": str(args.device), "param_device": str(next(model.parameters()).device),
    "losses": {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h},
    "distributed_type": str(acc.distributed_type), "mixed_precision": acc.mixed_precision,
    "native_amp": acc.native_amp, "scaler": type(acc.scaler).__name__ if acc.scaler is not None else None,
    "logits_dtype": seen.get("logits_dtype"), "group": group,
    "collectives": {f"{p} {c}": v for (p, c), v in fldist.stats().items()},
}
out.mkdir(parents=True, exist_ok=True)
(out / f"result-rank{rank}.json").write_text(json.dumps(result))
torch.save({k: v.detach().float().cpu() for k, v in model.named_parameters()}, out / f"params-rank{rank}.pt")
