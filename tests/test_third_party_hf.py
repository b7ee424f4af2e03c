"""Hugging Face and nanoGPT-style programs on fl (slow; need transformers,
safetensors and accelerate): gradient checkpointing draws the same dropout
masks, save_pretrained / Trainer checkpoints of models on fl, and a
nanoGPT-style loop with --device=fl --dtype=float32 that checkpoints and
resumes."""
import contextlib
import copy
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytestmark = pytest.mark.slow

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")


def _gpt2(dropout=0.1):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0,
                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg)


IDS = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))


def _grads(model, dev):
    model.zero_grad()
    torch.fl.manual_seed_all(11)
    ids = IDS.to(dev)
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_gpt2_gradient_checkpointing_gives_the_plain_backwards_gradients(th1, use_reentrant):
    """HF's gradient_checkpointing_enable() recomputes each block in
    backward; with dropout the recomputation must draw the forward's masks
    (the issue measured a 36% relative error before)."""
    model = _gpt2().to(th1).train()
    plain = _grads(model, th1)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    ckpt = _grads(model, th1)
    for n, g in plain.items():
        # the same float32 ops in the same order: equal up to rounding of recomputed activations
        torch.testing.assert_close(ckpt[n], g, rtol=1e-5, atol=1e-6, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pickle"])
def test_save_pretrained_of_a_model_on_fl(x1, tmp_path, safe):
    from transformers import GPT2LMHeadModel
    model = _gpt2().to(x1)
    assert model.lm_head.weight is model.transformer.wte.weight          # tied, as GPT-2 is
    model.save_pretrained(tmp_path, safe_serialization=safe)
    back = GPT2LMHeadModel.from_pretrained(tmp_path)
    for (n, p), (_, q) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(q, p.cpu()), n
    assert back.lm_head.weight is back.transformer.wte.weight
    back.to(x1).eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(back(IDS.to(x1)).logits.cpu(), model(IDS.to(x1)).logits.cpu())


def test_trainer_saves_checkpoints_of_a_model_on_fl(x1, tmp_path):
    pytest.importorskip("accelerate")
    from transformers import GPT2LMHeadModel, Trainer, TrainingArguments
    model = _gpt2()
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args)
    model.to(x1)
    trainer.save_model(str(tmp_path / "model"))
    saved = model.transformer.h[0].attn.c_attn.weight.detach().cpu().clone()
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    model(input_ids=IDS.to(x1), labels=IDS.to(x1)).loss.backward()
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer._save_optimizer_and_scheduler(str(tmp_path / "model"))
    files = set(os.listdir(tmp_path / "model"))
    assert {"model.safetensors", "config.json", "optimizer.pt"} <= files
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "model")
    assert torch.equal(back.transformer.h[0].attn.c_attn.weight, saved)
    state = torch.load(tmp_path / "model" / "optimizer.pt", map_location="cpu")
    assert state["state"][0]["exp_avg"].device.type == "cpu"


# ------------------------------------------------------ nanoGPT-style loop

class _Block(nn.Module):
    def __init__(self, d=32, h=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))
        self.h = h

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln2(x))


class _NanoGPT(nn.Module):
    def __init__(self, vocab=64, d=32, n=2, t=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(_Block(d) for _ in range(n))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight                   # nanoGPT's weight tying

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _run(model, device, steps, opt=None, start=0):
    """nanoGPT's train.py loop with --device=fl --dtype=float32 (compile off)."""
    device_type = "fl" if "fl" in str(device) else "cpu"
    ctx = contextlib.nullcontext() if device_type == "cpu" else torch.autocast(device_type=device_type,
                                                                               dtype=torch.float32)
    scaler = torch.amp.GradScaler(device_type, enabled=False)
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for it in range(start, start + steps):
        g = torch.Generator().manual_seed(it)
        data = torch.randint(0, 64, (4, 17), generator=g)
        x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()   # get_batch stacks rows
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        with ctx:
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, opt


def test_a_nanogpt_style_loop_trains_checkpoints_and_resumes_on_the_current_fl_device(flchips, tmp_path):
    torch.manual_seed(0)
    cpu_model = _NanoGPT().eval()                                 # eval: no dropout, comparable to the CPU
    prev = torch.fl.current_device()
    torch.fl.set_device(2)                                         # torchrun's `torch.cuda.set_device(local_rank)`
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*autocast.*")  # no "disabling autocast" warning
            fl_model = copy.deepcopy(cpu_model).to("fl")
            assert fl_model.lm_head.weight.device == torch.device("fl", 2)
            ref, cpu_opt = _run(cpu_model, "cpu", 3)
            got, opt = _run(fl_model, "fl", 3)
        # float32 through 2 blocks and 3 AdamW steps at lr 1e-3: losses agree to ~1e-5 relative
        assert max(abs(a - b) / abs(a) for a, b in zip(ref, got)) < 1e-4, (ref, got)
        torch.save({"model": fl_model.state_dict(), "optimizer": opt.state_dict(), "iter_num": 3},
                   tmp_path / "ckpt.pt")
        ckpt = torch.load(tmp_path / "ckpt.pt", map_location="fl")
        resumed = _NanoGPT().eval().to("fl")
        resumed.load_state_dict(ckpt["model"])
        opt2 = torch.optim.AdamW(resumed.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        opt2.load_state_dict(ckpt["optimizer"])
        assert all(v.device == torch.device("fl", 2) for s in opt2.state.values() for v in s.values()
                   if isinstance(v, torch.Tensor) and v.dim())
        more_ref, _ = _run(cpu_model, "cpu", 2, opt=cpu_opt, start=3)
        more, _ = _run(resumed, "fl", 2, opt=opt2, start=3)
        assert max(abs(a - b) / abs(a) for a, b in zip(more_ref, more)) < 1e-4, (more_ref, more)
    finally:
        torch.fl.set_device(prev)
