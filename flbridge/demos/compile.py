"""`flbridge demo --compile`: a small GPT trained with torch.compile(backend="fl")
on a chip, beside the CPU, and what the compiler made of it."""
from __future__ import annotations

import copy
import statistics
import time
import warnings

import torch

from .timing import one_torch_thread


def _step(model, opt, opt_step, x, y):
    def run():
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt_step()
        return loss
    return run


def run_compile_demo(steps: int = 8, device=None, batch: int = 8, out=print) -> int:
    # one torch thread throughout (the simulator runs one): Dynamo's guards include the thread count, so setting it
    # only around the timing would recompile every graph there
    with one_torch_thread():
        return _run(steps, device, batch, out)


def _run(steps, device, batch, out) -> int:
    import flbridge
    from ..compiler import backend as compile_backend
    from ..devices import chip_for, current_device
    from .models import TinyGPT, token_batch

    for name, v in (("steps", steps), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"demo: {name} must be a whole number of at least 1, got {v!r}")
    flbridge.init()
    chip = chip_for(device if device is not None else current_device())
    dev = chip.device
    torch.fl.set_device(dev)
    torch.manual_seed(0)
    cpu = TinyGPT()
    eager, comp = copy.deepcopy(cpu).to(dev), copy.deepcopy(cpu).to(dev)
    x, y = token_batch(batch, 24)
    fx, fy = x.to(dev), y.to(dev)
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(comp.parameters(), lr=1e-3, capturable=True)   # a compilable optimizer step
    compile_backend.reset()
    cstep = _step(torch.compile(comp, backend="fl"), opt, torch.compile(opt.step, backend="fl"), fx, fy)
    cpu_step = _step(cpu, opt_c, opt_c.step, x, y)
    eager_step = _step(eager, opt_e, opt_e.step, fx, fy)
    out(f"flbridge demo --compile: TinyGPT training, torch.compile(model, backend=\"fl\") and a compiled "
        f"AdamW step, on {dev} = {chip.device_type}, beside the CPU; batch {batch} x 24 tokens\n")
    out(f"{'step':>4}  {'cpu loss':>10}  {'compiled loss':>13}  {'|diff|':>9}  {'compiled ms':>11}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
        for i in range(1, steps + 1):
            t0 = time.perf_counter()
            loss = cstep()
            ms = (time.perf_counter() - t0) * 1e3
            ref = cpu_step()
            out(f"{i:>4}  {ref.item():>10.5f}  {loss.item():>13.5f}  {abs(ref.item() - loss.item()):>9.2e}  "
                f"{ms:>11.1f}{'  (Dynamo, AOTAutograd, capture run)' if i == 1 else ''}")
        diff = max((a.detach() - b.detach().cpu()).abs().max().item()
                   for a, b in zip(cpu.parameters(), comp.parameters()))
        out(f"\nlargest parameter difference after training: {diff:.2e}")
        times = {"CPU (torch)": [], "fl eager": [], "fl compiled": []}
        for _ in range(5):
            for name, fn in (("CPU (torch)", cpu_step), ("fl eager", eager_step), ("fl compiled", cstep)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["CPU (torch)"])
    out(f"\n  {'':14s} {'ms/step':>8s} {'x CPU':>7s}   (medians of 5, torch at one thread as the simulator runs one)")
    for name, ts in times.items():
        t = statistics.median(ts)
        out(f"  {name:14s} {t * 1e3:8.2f} {t / base:7.2f}")
    s = compile_backend.stats()
    out(f"\nWhat the compiler made of it: {s['graphs']} graphs (forward, backward, optimizer step), "
        f"{s['captures']} capture runs, {s['replays']} replays of {s['vendor_calls']} recorded vendor calls")
    if s["eager_nodes"]:
        out("  run eagerly on every call (not replayable):")
        for op, why in s["eager_nodes"].items():
            out(f"    {op}: {why}")
    else:
        out("  every node replayed (nothing had to run eagerly)")
    out("\n(docs/compile.md says what compiles and what graph-breaks; docs/performance.md has the figures)")
    return 0 if diff < 1e-3 else 2
