"""torch.compile on fl, side by side with eager, graph replay and the CPU.

    python bench/bench_compile.py [--rounds 9] [--chips xpu:x1,xpu:th1] [--skip-hf] [--hf-only] [--gpt-only]
                                  [--cpu-time] [--block K]

(--cpu-time: time per iteration as this process's CPU time, not wall
time: on a machine shared with other jobs the wall time of a 1 ms step
depends on the scheduler more than on the code.  The simulators and torch
run on this process's one thread either way; first calls are wall time.
--block K: each round runs each program K times in a row, as a training
loop does, instead of once; the order of the programs is shuffled every
round either way, bench/sidebyside.py.)

Part 1, for each chip, in one process, interleaved round by round (torch at
one thread, as the simulators run one):

  encoder fwd     a 2-layer nn.TransformerEncoder (d_model 64, 4 heads, FFN
                  128, batch 8 x 32 tokens), inference, PyTorch's fused fast
                  path off (as in bench_models.py)
  gpt train step  flbridge.demos.models.TinyGPT (batch 8 x 24 tokens):
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
  compile=fl, no kernels  compile=fl with every recorded vendor call
                  replaced by a no-op: the compiled call's cost beyond its
                  kernels
  null graphs, cpu / fl  compiled with a backend whose graphs do no work
                  (they return new, unfilled tensors): PyTorch's own per-call
                  machinery, on plain CPU tensors and on fl tensors
  fl compile=fl+gf  backend="fl" with PyTorch's guard filter
                  options={"guard_filter_fn":
                  torch.compiler.skip_guard_on_all_nn_modules_unsafe}: no
                  per-call checks of the modules' parameters (see
                  docs/compile.md, "Guards cost")

It prints the median time per iteration, the median of the per-round ratios
to the CPU, and each compiled variant's first call (Dynamo, AOTAutograd and
the capture run; torch._dynamo is imported before, its import time is
printed once).  Targets (issue 17): compile=fl at most 0.7x the CPU, first
call under 5 s.

Part 2, HF BERT, GPT-2 and Llama (random init, tiny configs: hidden 64, 2
layers, 4 heads, vocabulary 512, batch 4 x 16) compiled with backend="fl":
forward logits and a training step (loss, gradients, parameters after one
SGD step) against the CPU with torch.testing.assert_close at float32
tolerances (rtol 1e-4, atol 1e-5), and the time of the forward and of a
training step (compiled model and compiled AdamW(capturable=True) step)
against fl eager.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import itertools
import os
import sys
import time

os.environ.setdefault("FLBRIDGE_WARN", "off")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import flbridge  # noqa: E402
import flbridge.compiler.backend as compile_backend  # noqa: E402
from flbridge.demos.models import TinyGPT, token_batch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402
from sidebyside import side_by_side  # noqa: E402


GUARD_FILTER = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def own_code(fn):
    """A wrapper around fn with a code object of its own.  Dynamo caches
    compiled graphs per code object and checks every cached entry's guards
    in turn: variants compiled from one module class (or Optimizer.step)
    would slow each other down; each variant here gets its own, as a program
    with one compiled model has.  Each has its own file name and function
    name too: Dynamo's automatic-dynamic state is kept per (file, line,
    name), and wrappers sharing one would make every program compiled after
    the first with other shapes a dynamic-shape compile."""
    name = f"call_{next(_OWN_CODE)}"
    ns = {"fn": fn}
    src = f"def {name}(*args, **kwargs):\n    return fn(*args, **kwargs)\n"
    exec(compile(src, f"<bench own_code {name}>", "exec"), ns)  # noqa: S102 - a fresh code object
    return ns[name]


_OWN_CODE = itertools.count()


def first_call(fn):
    """(result, (wall seconds, CPU seconds)): under load, the wall time of a
    compile is mostly waiting for a core."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - t0, time.process_time() - c0)


def report(label, res, firsts, target=0.7):
    print(f"  {label}")
    for k, (med, ratio) in res.items():
        extra = f"   first call {firsts[k][0]:5.2f} s ({firsts[k][1]:.2f} s CPU)" if k in firsts else ""
        print(f"    {k:22s} {med * 1e3:8.2f} ms   x cpu {ratio:5.2f}{extra}")
    r = res["fl compile=fl"][1]
    print(f"    compile=fl / cpu = {r:.2f} ({'within' if r <= target else 'OVER'} the {target}x target); "
          f"first call {firsts['fl compile=fl'][0]:.2f} s, {firsts['fl compile=fl'][1]:.2f} s CPU "
          f"({'within' if firsts['fl compile=fl'][1] < 5 else 'OVER'} the 5 s target)")


def inference(m, inp):
    """A call of m(inp) under no_grad (the encoder rows)."""
    def run():
        with torch.no_grad():
            return m(inp)
    return run


def bench_encoder(dev, rounds):
    enc = encoder()
    x = torch.randn(8, 32, 64)
    xf = x.to(dev)
    eager, for_graph, for_fl, for_default, for_gf = (copy.deepcopy(enc).to(dev) for _ in range(5))
    c_fl = torch.compile(own_code(for_fl), backend="fl")
    c_default = torch.compile(own_code(for_default))
    c_gf = torch.compile(own_code(for_gf), backend="fl", options=GUARD_FILTER)

    fwd = inference
    firsts = {}
    ref = fwd(enc, x)()
    for name, m in (("fl compile=fl", c_fl), ("fl compile", c_default), ("fl compile=fl+gf", c_gf)):
        y, firsts[name] = first_call(fwd(m, xf))
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-5)
    g = torch.fl.FLGraph()
    with torch.no_grad():
        for_graph(xf)
        with torch.fl.graph(g):
            static_y = for_graph(xf)
    before = len(compile_backend._COMPILED)
    c_floor = torch.compile(own_code(copy.deepcopy(enc).to(dev)), backend="fl")
    fwd(c_floor, xf)()
    stub_calls(compile_backend._COMPILED[before:])
    null_cpu = torch.compile(own_code(copy.deepcopy(enc)), backend=null_backend())
    null_fl = torch.compile(own_code(copy.deepcopy(enc).to(dev)), backend=null_backend())
    fwd(null_cpu, x)()
    fwd(null_fl, xf)()
    steps = {"cpu": fwd(enc, x), "fl eager": fwd(eager, xf), "fl replay": g.replay,
             "fl compile=fl": fwd(c_fl, xf), "fl compile": fwd(c_default, xf), "fl compile=fl+gf": fwd(c_gf, xf),
             "compile=fl, no kernels": fwd(c_floor, xf), "null graphs, cpu": fwd(null_cpu, x),
             "null graphs, fl": fwd(null_fl, xf)}
    res = side_by_side(steps, rounds)
    torch.testing.assert_close(static_y.cpu(), ref, rtol=1e-4, atol=1e-5)
    report("encoder fwd", res, firsts)
    apart(res)


def bench_gpt(dev, rounds):
    # five variants compile Optimizer.step's inner frames: start from empty caches (Dynamo's
    # recompile limit counts entries per code object, across chips)
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu_m = TinyGPT()
    idx, tgt = token_batch(8, 24)
    fi, ft = idx.to(dev), tgt.to(dev)

    def step(m, i, t, compile_with=None, **opt_kw):
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, **opt_kw)
        fwd, ostep = m, o.step
        if compile_with is not None:
            fwd = torch.compile(own_code(m), **compile_with)
            ostep = torch.compile(own_code(o.step), **{k: v for k, v in compile_with.items() if k != "options"})

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
    # the same compiled step with every recorded vendor call replaced by a no-op: what the step
    # costs beyond its kernels (Dynamo's guards, AOTAutograd's wrappers, autograd, flbridge's replay)
    before = len(compile_backend._COMPILED)
    c_floor = step(copy.deepcopy(cpu_m).to(dev), fi, ft, {"backend": "fl"}, capturable=True)
    c_floor()
    stub_calls(compile_backend._COMPILED[before:])
    # PyTorch's own per-step machinery (Dynamo, AOTAutograd, autograd, the optimizer's Python)
    # with graphs that do nothing: on plain CPU tensors, and on fl tensors
    null_cpu = step(copy.deepcopy(cpu_m), idx, tgt, {"backend": null_backend()}, capturable=True)
    null_fl = step(copy.deepcopy(cpu_m).to(dev), fi, ft, {"backend": null_backend()}, capturable=True)
    null_cpu()
    null_fl()
    steps = {"cpu": cpu_step, "fl eager": fl_step, "fl replay": g.replay, "fl compile=fl": c_fl,
             "fl compile": c_default, "compile=fl, no kernels": c_floor, "null graphs, cpu": null_cpu,
             "null graphs, fl": null_fl}
    res = side_by_side(steps, rounds)
    report("gpt train step", res, firsts)
    apart(res)


def apart(res):
    """The compiled call taken apart: beyond its kernels, and PyTorch's share."""
    floor, plain = res["compile=fl, no kernels"][1], res["null graphs, cpu"][1]
    print(f"    beyond the kernels the compiled call costs {floor:.2f}x the cpu (PyTorch's machinery alone: "
          f"{res['null graphs, fl'][1]:.2f}x on fl tensors, {plain:.2f}x on plain tensors); "
          f"bench/bench_compile_floor.py gives the compiled kernels alone and the floor")


def null_backend():
    """A torch.compile backend whose AOTAutograd graphs run once (through flbridge for fl
    graphs), then hand back new, unfilled tensors of the first call's outputs every call:
    what remains is PyTorch's per-call machinery (guards, AOTAutograd's wrappers, autograd)."""
    from torch._dynamo.backends.common import aot_autograd

    from flbridge.compiler.lowering import CompiledGraph
    from flbridge.tensor import XPUTensor
    from flbridge.tensor.traceable import unwrap_arg
    from flbridge.tensor.xpu_tensor import new_tensor

    def compiler(g, _inputs):
        first = []

        def run(args):
            if not first:
                on_fl = any(isinstance(unwrap_arg(a), XPUTensor) for a in args)
                first.append(CompiledGraph(g, capture=False)(args) if on_fl else g(*args))
                args.clear()
                return list(first[0])
            args.clear()
            out = []
            for v in first[0]:
                if type(v) is XPUTensor:
                    v = new_tensor(v._st.chip, tuple(v.shape), v.stride(), v.dtype)
                elif isinstance(v, torch.Tensor):
                    v = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype)
                out.append(v)
            return out
        run._boxed_call = True
        return run
    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, inference_compiler=compiler,
                        keep_inference_input_mutations=True)


def stub_calls(graphs):
    """Replaces the recorded vendor calls of these compiled graphs with a C-level no-op that
    returns the runtime's success code (the timing floor: everything but the kernels runs)."""
    import functools

    for prog, seg in segments_of(graphs):
        seg.calls = [(functools.partial(int, prog.chip.runtime.ok), ())] * len(seg.calls)


def segments_of(graphs):
    """(program, segment of recorded vendor calls) of these compiled graphs, in order."""
    from flbridge.compiler.lowering import _Segment
    for cg in graphs:
        for progs in cg.programs.values():
            for prog in progs:
                for seg in prog.steps:
                    if isinstance(seg, _Segment):
                        yield prog, seg


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
        cm = torch.compile(own_code(comp), backend="fl")
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
        # a training step: forward, loss, backward, then one SGD step on both sides (an update linear
        # in the gradient: Adam's first step divides by |g| and amplifies rounding in tiny gradients)
        comp.zero_grad()

        def fwd_bwd():
            loss = cm(input_ids=fids, labels=fids).loss
            loss.backward()
            return loss
        loss_c, first_train = first_call(fwd_bwd)
        cpu.zero_grad()
        loss_ref = cpu(input_ids=ids, labels=ids).loss
        loss_ref.backward()
        check("train loss", loss_c.detach().cpu(), loss_ref.detach())
        grads = [(p.grad.cpu(), q.grad) for p, q in zip(comp.parameters(), cpu.parameters()) if q.grad is not None]
        check("train grads", torch.cat([a.flatten() for a, _ in grads]), torch.cat([b.flatten() for _, b in grads]))
        for m in (comp, cpu):
            torch.optim.SGD(m.parameters(), lr=0.1).step()
        check("params after step", torch.cat([p.detach().cpu().flatten() for p in comp.parameters()]),
              torch.cat([p.detach().flatten() for p in cpu.parameters()]))
        opt = torch.optim.AdamW(comp.parameters(), lr=1e-3, capturable=True)
        ostep = torch.compile(own_code(opt.step), backend="fl")

        def train(model, o, step, i):
            def run():
                o.zero_grad()
                loss = model(input_ids=i, labels=i).loss
                loss.backward()
                step()
                return loss
            return run
        t_comp = train(cm, opt, ostep, fids)
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
              f"first call (CPU s): forward {first_fwd[1]:.1f}, forward+backward {first_train[1]:.1f}")


def setup_process() -> None:
    """One torch thread (the simulators run one), PyTorch's fused MHA fast
    path off (the models run as written), flbridge's chips up."""
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)
    flbridge.init()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--chips", default="xpu:x1,xpu:th1")
    ap.add_argument("--skip-hf", action="store_true", help="part 1 only")
    ap.add_argument("--hf-only", action="store_true", help="part 2 only")
    ap.add_argument("--gpt-only", action="store_true",
                    help="the GPT step only (its first call is then the process's first compile)")
    ap.add_argument("--cpu-time", action="store_true", help="time iterations by process CPU time")
    ap.add_argument("--block", type=int, default=1,
                    help="iterations of one program in a row per round (a training loop's steady state)")
    a = ap.parse_args()
    if a.cpu_time:
        sidebyside.CLOCK = time.process_time
    sidebyside.BLOCK = max(1, a.block)
    setup_process()
    t0 = time.perf_counter()
    importlib.import_module("torch._dynamo")  # a process's one-time cost, reported apart from first calls
    importlib.import_module("torch._functorch.aot_autograd")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, python {sys.version.split()[0]}; "
          f"import torch._dynamo + AOTAutograd {time.perf_counter() - t0:.2f} s; "
          f"iterations timed by {'process CPU time' if a.cpu_time else 'wall time'}, {sidebyside.BLOCK} in a row per round")
    for chip in a.chips.split(","):
        dev = flbridge.torch_device(chip)
        torch.fl.set_device(dev)
        print(f"\n{chip} ({dev})")
        if not a.hf_only:
            if not a.gpt_only:
                bench_encoder(dev, a.rounds)
            bench_gpt(dev, a.rounds)
        if not a.skip_hf and not a.gpt_only:
            bench_hf(dev, max(3, a.rounds // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
