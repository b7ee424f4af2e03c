"""A Lightning script, unchanged but `import flbridge` (the chip line and the
result file are the test's): a small classifier, SGD, 32 fixed samples in
batches of 8.  argv[1]: JSON of the run's options; argv[2]: the folder for
results (result-rank<r>.json, params-rank<r>.pt).

Options: chip (a spec name made current first), trainer (Trainer keywords),
epochs, checkpoint (save one per epoch into <out>/ckpt), resume (a
checkpoint file to continue from)."""
import json
import sys
import warnings
from pathlib import Path

import torch

import flbridge  # noqa: F401 - the one line a CUDA script adds

opts = json.loads(sys.argv[1])
out = Path(sys.argv[2])
warnings.simplefilter("ignore")
if opts.get("chip"):
    torch.fl.set_device(opts["chip"])

import lightning as L  # noqa: E402


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.losses, self.dtypes = [], set()

    def training_step(self, batch, i):
        x, y = batch
        logits = self.net(x)
        self.dtypes.add(str(logits.dtype))
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


g = torch.Generator().manual_seed(0)
x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
model = Classifier()
callbacks = []
if opts.get("checkpoint"):
    callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=str(out / "ckpt"), save_top_k=-1,
                                                         every_n_epochs=1))
trainer = L.Trainer(max_epochs=opts.get("epochs", 1), logger=False, enable_checkpointing=bool(callbacks),
                    callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
                    **opts.get("trainer", {}))
import flbridge.distributed as fldist  # noqa: E402

fldist.reset_stats()
trainer.fit(model, data, ckpt_path=opts.get("resume"))
plugin = trainer.precision_plugin
group = repr(torch.distributed.group.WORLD) if torch.distributed.is_initialized() else None
result = {
    "accelerator": type(trainer.accelerator).__name__, "strategy": type(trainer.strategy).__name__,
    "root_device": str(trainer.strategy.root_device), "precision": type(plugin).__name__,
    "autocast_device": getattr(plugin, "device", None),
    "scaler": type(plugin.scaler).__name__ if getattr(plugin, "scaler", None) is not None else None,
    "dtypes": sorted(model.dtypes), "losses": model.losses, "group": group, "rank": trainer.global_rank,
    "collectives": {f"{p} {c}": v for (p, c), v in fldist.stats().items()},
}
out.mkdir(parents=True, exist_ok=True)
rank = trainer.global_rank
(out / f"result-rank{rank}.json").write_text(json.dumps(result))
torch.save({k: v.detach().float().cpu() for k, v in model.named_parameters()}, out / f"params-rank{rank}.pt")
