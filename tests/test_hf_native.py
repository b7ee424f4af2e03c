"""HF transformers models stay on the chip (issue: real models native on
every chip).  Tiny random configurations built in code, nothing downloaded:

* a training step of GPT-2, Llama and BERT on th1 with dropout on and
  AdamW(fused=True) runs every op natively and moves no more than its inputs
  (the second step is counted: the first creates the optimizer state);
* with dropout off the same step equals the CPU's (loss and gradients);
* float16 inference of the three on x1 runs no op on the CPU.

`python bench/bench_hf_coverage.py [--fused] [--chip xpu:x1 --infer float16]`
prints the route tables these check."""
import copy

import pytest
import torch

import flbridge

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")

B, T = 2, 16


def _build(name, p):
    tf = transformers
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=p,
                            embd_pdrop=p, attn_pdrop=p)
        return tf.GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, attention_dropout=p)
        return tf.LlamaForCausalLM(cfg)
    cfg = tf.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                        vocab_size=256, max_position_embeddings=64, hidden_dropout_prob=p,
                        attention_probs_dropout_prob=p)
    return tf.BertForSequenceClassification(cfg)


def _batch(name):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 256, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 12:] = 0
    labels = ids.clone() if name != "bert" else torch.tensor([0, 1])
    return ids, mask, labels


def _step(model, opt, dev, ids, mask, labels):
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=labels.to(dev))
    out.loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_training_step_with_dropout_and_fused_adamw_stays_on_th1(th1, name):
    torch.manual_seed(0)
    model = _build(name, 0.1).train().to(th1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ids, mask, labels = _batch(name)
    _step(model, opt, th1, ids, mask, labels)
    flbridge.reset_stats(th1)
    _step(model, opt, th1, ids, mask, labels)
    s = flbridge.stats(th1)
    assert s["fallback_ops"] == 0, [(r["op"], r["route"], r["detail"]) for r in s["routes"] if r["route"] != "native"]
    minimum = ids.numel() * 8 + mask.numel() * 8 + labels.numel() * 8
    moved = s["h2d_bytes"] + s["d2h_bytes"] + s["mapped_bytes"]
    assert moved <= 1.1 * minimum + 1024, (moved, minimum)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_training_step_without_dropout_equals_the_cpus(th1, name):
    torch.manual_seed(0)
    cpu = _build(name, 0.0).train()
    fl = copy.deepcopy(cpu).to(th1)
    ids, mask, labels = _batch(name)
    ref = _step(cpu, None, "cpu", ids, mask, labels)
    got = _step(fl, None, th1, ids, mask, labels)
    # float32 throughout; 2 layers of width 64: sums of at most a few hundred terms
    torch.testing.assert_close(got.loss.detach().cpu(), ref.loss.detach(), rtol=1e-5, atol=1e-5)
    # (an attention key's bias has a gradient of zero but for rounding: the
    # absolute part of the tolerance is scaled by the largest gradient)
    scale = max(float(p.grad.abs().max()) for p in cpu.parameters() if p.grad is not None)
    for (n, a), b in zip(cpu.named_parameters(), fl.parameters()):
        if a.grad is None:
            assert b.grad is None, n
            continue
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-6 * scale, msg=n)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_float16_inference_stays_on_x1(x1, name):
    torch.manual_seed(0)
    cpu = _build(name, 0.1).eval()
    fl = copy.deepcopy(cpu).half().to(x1)
    ids, mask, _ = _batch(name)
    with torch.no_grad():
        ref = cpu(input_ids=ids, attention_mask=mask).logits
        fl(input_ids=ids.to(x1), attention_mask=mask.to(x1))
        flbridge.reset_stats(x1)
        got = fl(input_ids=ids.to(x1), attention_mask=mask.to(x1)).logits
    s = flbridge.stats(x1)
    assert s["cpu_fallback_ops"] == 0, [(r["op"], r["detail"]) for r in s["routes"] if r["route"] == "cpu"]
    assert got.dtype == torch.float16
    # float16 weights and activations (eps 2**-10) through two layers against the float32 CPU
    torch.testing.assert_close(got.float().cpu(), ref, rtol=2e-2, atol=2e-2 * float(ref.abs().max()))


def _small_cnn():
    from flbridge.demos.models import SmallCNN
    return SmallCNN(), (8, 3, 32, 32)


def _resnet18():
    from tests.zoo_models import ResNet18
    return ResNet18(), (1, 3, 64, 64)


@pytest.mark.parametrize("build", [_small_cnn, _resnet18], ids=["SmallCNN", "ResNet18"])
def test_float16_cnn_inference_is_all_native_on_x1_v2(x1v2, build):
    """Every op on the chip's kernels (ResNet's 7x7 stem pads 3, x1 at most 2:
    the padding is applied explicitly on the chip)."""
    torch.manual_seed(0)
    cpu, shape = build()
    cpu.eval()
    fl = copy.deepcopy(cpu).half().to(x1v2)
    x = torch.randn(*shape)
    with torch.no_grad():
        ref = cpu(x)
        fl(x.half().to(x1v2))
        flbridge.reset_stats(x1v2)
        got = fl(x.half().to(x1v2))
    s = flbridge.stats(x1v2)
    assert s["fallback_ops"] == 0 and s["native_ops"] > 0, [r for r in s["routes"] if r["route"] != "native"]
    torch.testing.assert_close(got.float().cpu(), ref, rtol=2e-2, atol=2e-2 * float(ref.abs().max()))
