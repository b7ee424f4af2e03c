"""What HF transformers models leave on the CPU: one training step (forward,
backward, AdamW) of tiny GPT-2, Llama and BERT configurations (random
weights built in code, nothing downloaded) on a chip, its route table.

    python bench/bench_hf_coverage.py [--chip xpu:th1] [--models gpt2 llama bert] [--specs DIR]
                                      [--dropout P] [--fused]

Needs `transformers` (pip install transformers).  `--specs DIR` loads the
specs of another folder (FLBRIDGE_DEVICE_DIR), e.g. an older checkout's
device_specs with their runtime_so pointing at this build, to compare.
--dropout P sets every dropout probability of the configurations (default
0.1, HF's; 0 turns dropout off); --fused steps with AdamW(fused=True).
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
    print(f"one training step on {a.chip}: batch 2, 16 tokens, the second sequence padded by 4, "
          f"dropout {a.dropout}, AdamW{'(fused=True)' if a.fused else ''}")
    for name in a.models:
        model, kind = build(name, a.dropout)
        model.train().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if a.fused else {}))
        ids = torch.randint(1, 256, (2, 16))
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 12:] = 0
        for step in range(2):        # the second step is counted (the first warms the optimizer state)
            flbridge.reset_stats(a.chip)
            if kind == "causal":
                out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=ids.to(dev))
            else:
                out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=torch.tensor([0, 1]).to(dev))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
        s = flbridge.stats(a.chip)
        total = s["native_ops"] + s["fallback_ops"]
        left = Counter()
        for r in s["routes"]:
            if r["route"] != "native":
                left[(r["op"], r["route"])] += r["calls"]
        print(f"\n{name}: {total} ops, native {s['native_ops']} ({100 * s['native_ops'] / max(total, 1):.1f}%), "
              f"cpu {s['cpu_fallback_ops']}, decomposed {s['decomposed_ops']}, vendor {s['vendor_fallback_ops']}")
        for (op, route), n in left.most_common():
            print(f"  {op:48s} {route:16s} {n}")


if __name__ == "__main__":
    main()
