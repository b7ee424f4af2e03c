"""What HF transformers models leave on the CPU: one training step (forward,
backward, AdamW) of tiny GPT-2, Llama and BERT configurations (random
weights built in code, nothing downloaded) on a chip, its route table.

    python bench/bench_hf_coverage.py [--chip xpu:th1] [--models gpt2 llama bert] [--specs DIR]
                                      [--dropout P] [--fused] [--infer DTYPE]

Needs `transformers` (pip install transformers).  `--specs DIR` loads the
specs of another folder (FLBRIDGE_DEVICE_DIR), e.g. an older checkout's
device_specs with their runtime_so pointing at this build, to compare.
--dropout P sets every dropout probability of the configurations (default
0.1, HF's; 0 turns dropout off); --fused steps with AdamW(fused=True).
--infer float16 (or bfloat16, float32) runs inference instead: the model in
that dtype, eval mode, one forward under no_grad (the second one counted).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections import Counter


def build(name, p=0.1):
    import transformers as tf
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=p,
                            embd_pdrop=p, attn_pdrop=p)
        return tf.GPT2LMHeadModel(cfg), "causal"
    if name == "llama":
        cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
                             attention_dropout=p)
        return tf.LlamaForCausalLM(cfg), "causal"
    cfg = tf.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                        vocab_size=256, max_position_embeddings=64, hidden_dropout_prob=p,
                        attention_probs_dropout_prob=p)
    return tf.BertForSequenceClassification(cfg), "classify"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chip", default="xpu:th1")
    ap.add_argument("--models", nargs="*", default=["gpt2", "llama", "bert"])
    ap.add_argument("--specs", help="load the specs of this folder (FLBRIDGE_DEVICE_DIR)")
    ap.add_argument("--dropout", type=float, default=0.1, help="every dropout probability (0: off)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--infer", metavar="DTYPE", help="inference in this dtype instead of a training step")
    a = ap.parse_args()
    if a.specs:
        os.environ["FLBRIDGE_DEVICE_DIR"] = a.specs
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("bench_hf_coverage needs transformers: pip install transformers")
    import torch
    import flbridge
    flbridge.init()
    dev = flbridge.torch_device(a.chip)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    if a.infer:
        print(f"inference on {a.chip} in {a.infer}: batch 2, 16 tokens, the second sequence padded by 4")
    else:
        print(f"one training step on {a.chip}: batch 2, 16 tokens, the second sequence padded by 4, "
              f"dropout {a.dropout}, AdamW{'(fused=True)' if a.fused else ''}")
    for name in a.models:
        model, kind = build(name, a.dropout)
        ids = torch.randint(1, 256, (2, 16))
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 12:] = 0
        if a.infer:
            model.eval().to(getattr(torch, a.infer)).to(dev)
            for step in range(2):    # the second forward is counted
                flbridge.reset_stats(a.chip)
                with torch.no_grad():
                    model(input_ids=ids.to(dev), attention_mask=mask.to(dev))
            _report(flbridge.stats(a.chip), name, ids.numel() * 8 + mask.numel() * 8)
            continue
        model.train().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if a.fused else {}))
        for step in range(2):        # the second step is counted (the first warms the optimizer state)
            flbridge.reset_stats(a.chip)
            if kind == "causal":
                out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=ids.to(dev))
            else:
                out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=torch.tensor([0, 1]).to(dev))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
        # the least a step can move: its inputs up (ids, mask, labels); the loss stays on the chip
        labels_bytes = 2 * 16 * 8 if kind == "causal" else 2 * 8
        _report(flbridge.stats(a.chip), name, ids.numel() * 8 + mask.numel() * 8 + labels_bytes)


def _report(s, name, minimum):
    """The route table of one counted step, and its bytes against the minimum."""
    total = s["native_ops"] + s["fallback_ops"]
    left = Counter()
    for r in s["routes"]:
        if r["route"] != "native":
            left[(r["op"], r["route"])] += r["calls"]
    moved = s["h2d_bytes"] + s["d2h_bytes"] + s["mapped_bytes"]
    on_chip = total - s["cpu_fallback_ops"]
    print(f"\n{name}: {total} ops, native {s['native_ops']} ({100 * s['native_ops'] / max(total, 1):.1f}%), "
          f"cpu {s['cpu_fallback_ops']}, decomposed {s['decomposed_ops']}, vendor {s['vendor_fallback_ops']}; "
          f"on the chip {100 * on_chip / max(total, 1):.1f}% (native, vendor fallbacks and decompositions "
          f"into native ops)")
    print(f"  bytes moved {moved} (h2d {s['h2d_bytes']}, d2h {s['d2h_bytes']}, mapped {s['mapped_bytes']}); "
          f"the minimum, its inputs: {minimum}; target <= 1.1 x minimum + 1 KiB = {int(1.1 * minimum + 1024)}")
    for (op, route), n in left.most_common():
        print(f"  {op:48s} {route:16s} {n}")


if __name__ == "__main__":
    main()
