"""How fast could a compiled step on fl be?  The floor, side by side with today.

    python bench/bench_compile_floor.py [--rounds 15] [--chips xpu:x1,xpu:th1]

A compiled call costs its vendor kernels plus PyTorch's per-call machinery
(Dynamo's guards, AOTAutograd's wrappers, autograd, the optimizer's Python)
plus flbridge's own Python.  This bench measures the first two apart, with
the tensors flbridge has today (XPUTensor, a wrapper subclass) and with the
tensors a different design would have: *plain* PrivateUse1 tensors, as a C++
backend makes (docs/compile.md, "Where the time goes"; the research notes'
option c5).  flbridge cannot run a model on plain fl tensors, so here they
carry no data and the graphs do no work: what is left is PyTorch's share.

For each chip, in one process, interleaved round by round, process CPU time:

  cpu                   the program eager on the CPU (the 1.0 of every ratio)
  fl compile=fl         torch.compile(..., backend="fl") as today
  kernels alone         the vendor calls of those compiled graphs, back to
                        back in one Python loop (what any backend driving
                        these simulated kernels pays at least)
  null graphs, fl       PyTorch's machinery with graphs that do nothing, on
                        flbridge's XPUTensors
  null graphs, plain fl the same on plain PrivateUse1 tensors (outputs made
                        by one C++ alias each, as a C++ backend allocates)
  null graphs, cpu      the same on CPU tensors

and prints "kernels alone + null graphs, plain fl": the best a compiled call
could do on these simulators with no flbridge Python at all.

The programs: the encoder forward of bench_compile.py (inference), and the
TinyGPT training step of bench_compile.py (zero_grad, forward, backward,
compiled AdamW(capturable=True) step) with one change for every row: the
forward returns the loss only.  With the logits as an output too, autograd
makes their (unused) gradient with a factory on fl, which flbridge answers
with an XPUTensor, not a plain tensor.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("FLBRIDGE_WARN", "off")

import torch  # noqa: E402

import flbridge  # noqa: E402
import flbridge.compiler.backend as compile_backend  # noqa: E402
from flbridge.demos.models import TinyGPT, token_batch  # noqa: E402
from flbridge.tensor import traceable  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_compile as bc  # noqa: E402
import sidebyside  # noqa: E402
from sidebyside import side_by_side  # noqa: E402

def plain(dev, shape, stride, dtype, offset=0):
    """A plain (no subclass, no Python key) tensor on fl with this geometry
    and a storage of its own that holds no data."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    span = 1 + offset + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0) if all(shape) else 0
    return traceable.plain_tensor(traceable.stand_in_storage(span * itemsize, dev), dtype, tuple(shape),
                                  tuple(stride), offset)


def plain_like(dev, t):
    return plain(dev, t.shape, t.stride(), t.dtype, t.storage_offset())


def plain_module(m, dev):
    """m with every parameter and buffer replaced by a plain fl tensor."""
    for mod in m.modules():
        for n, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[n] = torch.nn.Parameter(plain_like(dev, p), requires_grad=p.requires_grad)
        for n, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[n] = plain_like(dev, b)
    return m


def plain_null_backend(dev):
    """Graphs that do nothing on plain fl tensors: each call hands back new
    tensors (one C++ alias of a prototype each) of the outputs' geometry."""
    from torch._dynamo.backends.common import aot_autograd
    alias, meta = traceable._alias, traceable._META

    def compiler(g, _inputs):
        outs = next(n for n in g.graph.nodes if n.op == "output").args[0]
        protos = [plain_like(dev, o.meta["val"]) if isinstance(o, torch.fx.Node)
                  and isinstance(o.meta.get("val"), torch.Tensor) else None for o in outs]

        def run(args):
            args.clear()
            return [alias(meta, p) if p is not None else None for p in protos]
        run._boxed_call = True
        return run
    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, inference_compiler=compiler,
                        keep_inference_input_mutations=True)


def kernels_of(graphs):
    """One call running every recorded vendor call of these compiled graphs back to back."""
    calls = [c for _, seg in bc.segments_of(graphs) for c in seg.calls]

    def run():
        for cfn, cargs in calls:
            cfn(*cargs)
    return run, len(calls)


def report(label, res, ncalls):
    print(f"  {label} ({ncalls} vendor calls)")
    for k, (med, ratio) in res.items():
        print(f"    {k:24s} {med * 1e3:8.3f} ms   x cpu {ratio:5.2f}")
    floor = res["kernels alone"][1] + res["null graphs, plain fl"][1]
    today = res["fl compile=fl"][1]
    print(f"    kernels alone + null graphs, plain fl = {floor:.2f}x the cpu (the floor with plain fl tensors "
          f"and no flbridge Python); compile=fl today {today:.2f}x; target 0.7x")


def bench_encoder(dev, rounds):
    enc = bc.encoder()
    x = torch.randn(8, 32, 64)
    xf = x.to(dev)

    fwd = bc.inference
    before = len(compile_backend._COMPILED)
    c_fl = fwd(torch.compile(bc.own_code(copy.deepcopy(enc).to(dev)), backend="fl"), xf)
    ref = fwd(enc, x)()
    torch.testing.assert_close(c_fl().cpu(), ref, rtol=1e-4, atol=1e-5)
    kernels, ncalls = kernels_of(compile_backend._COMPILED[before:])
    null_fl = fwd(torch.compile(bc.own_code(copy.deepcopy(enc).to(dev)), backend=bc.null_backend()), xf)
    null_plain = fwd(torch.compile(bc.own_code(plain_module(copy.deepcopy(enc), dev)),
                                   backend=plain_null_backend(dev)), plain_like(dev, x))
    null_cpu = fwd(torch.compile(bc.own_code(copy.deepcopy(enc)), backend=bc.null_backend()), x)
    steps = {"cpu": fwd(enc, x), "fl compile=fl": c_fl, "kernels alone": kernels, "null graphs, fl": null_fl,
             "null graphs, plain fl": null_plain, "null graphs, cpu": null_cpu}
    report("encoder fwd", side_by_side(steps, rounds), ncalls)


def bench_gpt(dev, rounds):
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu_m = TinyGPT()
    idx, tgt = token_batch(8, 24)

    def step(m, i, t, backend=None, state=None, seed=None):
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=backend is not None)
        if state is not None:       # plain tensors: no factory may run on fl (it would make XPUTensors)
            for p in m.parameters():
                o.state[p] = state(p)

        def loss_only(a, b):
            return m(a, b)[1]
        fwd, ostep = loss_only, o.step
        if backend is not None:
            fwd = torch.compile(bc.own_code(loss_only), backend=backend)
            ostep = torch.compile(bc.own_code(o.step), backend=backend)

        def run():
            o.zero_grad()
            loss = fwd(i, t)
            loss.backward(seed)
            ostep()
            return loss
        return run
    fi, ft = idx.to(dev), tgt.to(dev)
    before = len(compile_backend._COMPILED)
    c_fl = step(copy.deepcopy(cpu_m).to(dev), fi, ft, "fl")
    ref = step(copy.deepcopy(cpu_m), idx, tgt)
    for _ in range(2):
        torch.testing.assert_close(c_fl().cpu(), ref(), rtol=1e-4, atol=1e-5)
    kernels, ncalls = kernels_of(compile_backend._COMPILED[before:])
    null_fl = step(copy.deepcopy(cpu_m).to(dev), fi, ft, bc.null_backend())
    pm = plain_module(copy.deepcopy(cpu_m), dev)
    null_plain = step(pm, plain_like(dev, idx), plain_like(dev, tgt), plain_null_backend(dev),
                      state=lambda p: {"step": plain(dev, (), (), torch.float32),
                                       "exp_avg": plain_like(dev, p), "exp_avg_sq": plain_like(dev, p)},
                      seed=plain(dev, (), (), torch.float32))
    null_cpu = step(copy.deepcopy(cpu_m), idx, tgt, bc.null_backend())
    steps = {"cpu": step(copy.deepcopy(cpu_m), idx, tgt), "fl compile=fl": c_fl, "kernels alone": kernels,
             "null graphs, fl": null_fl, "null graphs, plain fl": null_plain, "null graphs, cpu": null_cpu}
    report("gpt train step (loss only)", side_by_side(steps, rounds), ncalls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--chips", default="xpu:x1,xpu:th1")
    a = ap.parse_args()
    sidebyside.CLOCK = time.process_time
    bc.setup_process()
    print(f"torch {torch.__version__}, 1 thread; iterations timed by process CPU time; medians of "
          f"{a.rounds} interleaved rounds")
    for chip in a.chips.split(","):
        dev = flbridge.torch_device(chip)
        torch.fl.set_device(dev)
        print(f"\n{chip} ({dev})")
        bench_encoder(dev, a.rounds)
        bench_gpt(dev, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
