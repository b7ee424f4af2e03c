"""torch.compile on fl, side by side with eager, graph replay and the CPU.

    python bench/bench_compile.py [--rounds 9] [--chips xpu:x1,xpu:th1] [--skip-hf] [--hf-only]

Part 1, for each chip, in one process, interleaved round by round (torch at
one thread, as the simulators run one):

  encoder fwd     a 2-layer nn.TransformerEncoder (d_model 64, 4 heads, FFN
                  128, batch 8 x 32 tokens), inference, PyTorch's fused fast
                  path off (as in bench_models.py)
  gpt train step  flbridge.demo_models.TinyGPT (batch 8 x 24 tokens):
                  zero_grad, forward, cross-entropy, backward, AdamW step

each run as

  cpu             eager on the CPU (AdamW as a CPU user runs it)
  fl eager        eager on the chip (flbridge's dispatch per op)
  fl replay       captured once in a torch.fl.FLGraph, replayed (static
                  input; the GPT step with AdamW(capturable=True))
  fl compile=fl   torch.compile(model, backend="fl"); the GPT step also
                  compiles optimizer.step (AdamW(capturable=True), PyTorch's
                  recipe for a compiled optimizer)
  fl compile      the default torch.compile(model) (Inductor's name; fl
                  graphs go to the fl backend)

It prints the median time per iteration, the median of the per-round ratios
to the CPU, and each compiled variant's first call (Dynamo, AOTAutograd and
the capture run; torch._dynamo is imported before, its import time is
printed once).  Targets (issue 17): compile=fl at most 0.7x the CPU, first
call under 5 s.

Part 2, HF BERT, GPT-2 and Llama (random init, tiny configs: hidden 64, 2
layers, 4 heads, vocabulary 512, batch 4 x 16) compiled with backend="fl":
forward logits and a training step (loss, gradients, parameters after one
AdamW step) against the CPU with torch.testing.assert_close at float32
tolerances (rtol 1e-4, atol 1e-5), and the time of both against fl eager.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import os
import statistics
import sys
import time

os.environ.setdefault("FLBRIDGE_WARN", "off")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import flbridge  # noqa: E402
from flbridge.demo_models import TinyGPT, token_batch  # noqa: E402


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def side_by_side(steps: dict, rounds: int):
    """{name: (median seconds, median ratio to the first step)}, interleaved."""
    for _ in range(2):
        for s in steps.values():
            s()
    times = {k: [] for k in steps}
    for _ in range(rounds):
        for k, s in steps.items():
            t0 = time.perf_counter()
            s()
            times[k].append(time.perf_counter() - t0)
    base = next(iter(times.values()))
    return {k: (statistics.median(v), statistics.median(x / b for x, b in zip(v, base))) for k, v in times.items()}


def first_call(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def report(label, res, firsts, target=0.7):
    print(f"  {label}")
    for k, (med, ratio) in res.items():
        extra = f"   first call {firsts[k]:5.2f} s" if k in firsts else ""
        print(f"    {k:15s} {med * 1e3:8.2f} ms   x cpu {ratio:5.2f}{extra}")
    r = res["fl compile=fl"][1]
    print(f"    compile=fl / cpu = {r:.2f} ({'within' if r <= target else 'OVER'} the {target}x target); "
          f"first call {firsts['fl compile=fl']:.2f} s "
          f"({'within' if firsts['fl compile=fl'] < 5 else 'OVER'} the 5 s target)")


def bench_encoder(dev, rounds):
    enc = encoder()
    x = torch.randn(8, 32, 64)
    xf = x.to(dev)
    eager, for_graph, for_fl, for_default = (copy.deepcopy(enc).to(dev) for _ in range(4))
    c_fl = torch.compile(for_fl, backend="fl")
    c_default = torch.compile(for_default)

    def fwd(m, inp):
        def run():
            with torch.no_grad():
                return m(inp)
        return run
    firsts = {}
    ref = fwd(enc, x)()
    for name, m in (("fl compile=fl", c_fl), ("fl compile", c_default)):
        y, firsts[name] = first_call(fwd(m, xf))
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-5)
    g = torch.fl.FLGraph()
    with torch.no_grad():
        for_graph(xf)
        with torch.fl.graph(g):
            static_y = for_graph(xf)
    steps = {"cpu": fwd(enc, x), "fl eager": fwd(eager, xf), "fl replay": g.replay,
             "fl compile=fl": fwd(c_fl, xf), "fl compile": fwd(c_default, xf)}
    res = side_by_side(steps, rounds)
    torch.testing.assert_close(static_y.cpu(), ref, rtol=1e-4, atol=1e-5)
    report("encoder fwd", res, firsts)


def bench_gpt(dev, rounds):
    torch.manual_seed(0)
    cpu_m = TinyGPT()
    idx, tgt = token_batch(8, 24)
    fi, ft = idx.to(dev), tgt.to(dev)

    def step(m, i, t, compile_with=None, **opt_kw):
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, **opt_kw)
        fwd, ostep = m, o.step
        if compile_with is not None:
            fwd = torch.compile(m, **compile_with)
            ostep = torch.compile(o.step, **compile_with)

        def run():
            o.zero_grad()
            _, loss = fwd(i, t)
            loss.backward()
            ostep()
            return loss
        return run
    cpu_step = step(cpu_m, idx, tgt)
    fl_step = step(copy.deepcopy(cpu_m).to(dev), fi, ft)
    c_fl = step(copy.deepcopy(cpu_m).to(dev), fi, ft, {"backend": "fl"}, capturable=True)
    c_default = step(copy.deepcopy(cpu_m).to(dev), fi, ft, {}, capturable=True)
    firsts = {}
    ref = copy.deepcopy(cpu_m)
    ref_step = step(ref, idx, tgt)
    ref_loss = ref_step()
    for name, s in (("fl compile=fl", c_fl), ("fl compile", c_default)):
        loss, firsts[name] = first_call(s)
        torch.testing.assert_close(loss.cpu(), ref_loss, rtol=1e-4, atol=1e-5)
    # replay: the whole step in one graph (bench_models.py's recipe)
    m = copy.deepcopy(cpu_m).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=True)

    def whole():
        _, loss = m(fi, ft)
        loss.backward()
        opt.step()
        return loss
    side = torch.fl.Stream()
    side.wait_stream(torch.fl.current_stream())
    with torch.fl.stream(side):
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            whole()
    torch.fl.current_stream().wait_stream(side)
    g = torch.fl.FLGraph()
    opt.zero_grad(set_to_none=True)
    with torch.fl.graph(g):
        whole()
    steps = {"cpu": cpu_step, "fl eager": fl_step, "fl replay": g.replay, "fl compile=fl": c_fl,
             "fl compile": c_default}
    res = side_by_side(steps, rounds)
    report("gpt train step", res, firsts)


# ------------------------------------------------------------ HF models

def hf_models():
    from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM)
    common = dict(vocab_size=512)
    return {
        "BERT": lambda: BertForMaskedLM(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                   intermediate_size=128, max_position_embeddings=64,
                                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                   **common)),
        "GPT-2": lambda: GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                    **common)),
        "Llama": lambda: LlamaForCausalLM(LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, intermediate_size=128,
                                                      max_position_embeddings=64, **common)),
    }


def bench_hf(dev, rounds):
    torch.manual_seed(0)
    ids = torch.randint(0, 512, (4, 16))
    fids = ids.to(dev)
    for name, make in hf_models().items():
        torch.manual_seed(0)
        cpu = make().train()
        eager, comp = copy.deepcopy(cpu).to(dev), copy.deepcopy(cpu).to(dev)
        cm = torch.compile(comp, backend="fl")
        ok = []

        def check(what, a, b):
            try:
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
                ok.append((what, True, (a - b).abs().max().item()))
            except AssertionError:
                ok.append((what, False, (a - b).abs().max().item()))

        # forward
        with torch.no_grad():
            (yc, first_fwd) = first_call(lambda: cm(input_ids=fids).logits)
            check("forward logits", yc.cpu(), cpu(input_ids=ids).logits)
        # a training step: forward, loss, backward, AdamW
        opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
        opt = torch.optim.AdamW(comp.parameters(), lr=1e-3, capturable=True)
        ostep = torch.compile(opt.step, backend="fl")

        def train(model, o, step, i):
            def run():
                o.zero_grad()
                loss = model(input_ids=i, labels=i).loss
                loss.backward()
                step()
                return loss
            return run
        t_comp = train(cm, opt, ostep, fids)
        loss_c, first_train = first_call(t_comp)
        opt_c.zero_grad()
        loss_ref = cpu(input_ids=ids, labels=ids).loss
        loss_ref.backward()
        check("train loss", loss_c.cpu(), loss_ref.detach())
        grads = [(p.grad.cpu(), q.grad) for p, q in zip(comp.parameters(), cpu.parameters()) if q.grad is not None]
        check("train grads", torch.cat([a.flatten() for a, _ in grads]), torch.cat([b.flatten() for _, b in grads]))
        opt_c.step()
        check("params after step", torch.cat([p.detach().cpu().flatten() for p in comp.parameters()]),
              torch.cat([p.detach().flatten() for p in cpu.parameters()]))
        # speed against fl eager
        opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)

        def fwd(m):
            def run():
                with torch.no_grad():
                    return m(input_ids=fids).logits
            return run
        fr = side_by_side({"fl eager": fwd(eager), "fl compile=fl": fwd(cm)}, rounds)
        tr = side_by_side({"fl eager": train(eager, opt_e, opt_e.step, fids), "fl compile=fl": t_comp}, rounds)
        verdict = all(v for _, v, _ in ok)
        print(f"  {name:6s} equal to the CPU: {'yes' if verdict else 'NO'} "
              f"({', '.join(f'{w} {d:.1e}' for w, _, d in ok)})")
        print(f"         forward: eager {fr['fl eager'][0] * 1e3:7.2f} ms, compiled {fr['fl compile=fl'][0] * 1e3:7.2f} ms"
              f" (x eager {fr['fl compile=fl'][1]:.2f}); train step: eager {tr['fl eager'][0] * 1e3:7.2f} ms, "
              f"compiled {tr['fl compile=fl'][0] * 1e3:7.2f} ms (x eager {tr['fl compile=fl'][1]:.2f}); "
              f"first call: forward {first_fwd:.1f} s, train step {first_train:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--chips", default="xpu:x1,xpu:th1")
    ap.add_argument("--skip-hf", action="store_true", help="part 1 only")
    ap.add_argument("--hf-only", action="store_true", help="part 2 only")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)
    flbridge.init()
    t0 = time.perf_counter()
    importlib.import_module("torch._dynamo")  # a process's one-time cost, reported apart from first calls
    importlib.import_module("torch._functorch.aot_autograd")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, python {sys.version.split()[0]}; "
          f"import torch._dynamo + AOTAutograd {time.perf_counter() - t0:.2f} s")
    for chip in a.chips.split(","):
        dev = flbridge.torch_device(chip)
        torch.fl.set_device(dev)
        print(f"\n{chip} ({dev})")
        if not a.hf_only:
            bench_encoder(dev, a.rounds)
            bench_gpt(dev, a.rounds)
        if not a.skip_hf:
            bench_hf(dev, max(3, a.rounds // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
