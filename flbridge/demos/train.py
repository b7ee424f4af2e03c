"""`flbridge demo`: train a small CNN (or, with --model gpt, a small GPT) on
a chip beside the CPU and show what ran where and what crossed the bus."""
from __future__ import annotations

import copy
import time
import warnings

import torch
import torch.nn.functional as F

from .models import SmallCNN, TinyGPT, synthetic_batch, token_batch


def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _workload(model: str, batch: int):
    """(cpu model, loss of (model, inputs) -> scalar, inputs, title) for the demo."""
    if model == "cnn":
        torch.manual_seed(0)
        x, y = synthetic_batch(batch)
        return SmallCNN(), (lambda m, xx, yy: F.cross_entropy(m(xx), yy)), (x, y), \
            "SmallCNN (conv, batch norm, pooling, linear), Adam"
    x, y = token_batch(batch, 24)
    return TinyGPT(), (lambda m, xx, yy: m(xx, yy)[1]), (x, y), \
        "TinyGPT (2 decoder blocks, tied embedding, 137k parameters, 24 tokens), Adam"


def run_demo(steps: int = 8, device=None, batch: int = 16, out=print, model: str = "cnn") -> int:
    """Trains on `device` (a spec name or fl index; default the current fl
    device, fl:0) and on the CPU side by side."""
    import flbridge

    from ..devices import chip_for, current_device

    for name, v in (("steps", steps), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"demo: {name} must be a whole number of at least 1, got {v!r}")
    if model not in ("cnn", "gpt"):
        raise ValueError(f"demo: model must be 'cnn' or 'gpt', got {model!r}")

    flbridge.init()
    if not flbridge.chips():
        out("no fl devices: set FLBRIDGE_DEVICE_DIR to a folder of device specs")
        return 1
    chip = chip_for(device if device is not None else current_device())
    dev = chip.device
    cpu_model, loss_of, (x, y), title = _workload(model, batch)
    fl_model = copy.deepcopy(cpu_model).to(dev)
    opt_c = torch.optim.Adam(cpu_model.parameters(), lr=1e-2)
    opt_f = torch.optim.Adam(fl_model.parameters(), lr=1e-2)
    s = chip.spec
    out(f"flbridge demo: {title}, {steps} steps, batch {batch}, on {dev} = {s.device_type} "
        f"({s.vendor} {s.chip_model}) beside the CPU\n")
    out(f"{'step':>4}  {'cpu loss':>10}  {'fl loss':>10}  {'|diff|':>9}")
    flbridge.reset_stats(dev)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)  # the table below says it all
        for step in range(1, steps + 1):
            losses = []
            for m, opt, xx, yy in ((cpu_model, opt_c, x, y), (fl_model, opt_f, x.to(dev), y.to(dev))):
                opt.zero_grad()
                loss = loss_of(m, xx, yy)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            out(f"{step:>4}  {losses[0]:>10.5f}  {losses[1]:>10.5f}  {abs(losses[0] - losses[1]):>9.2e}")
    elapsed = time.perf_counter() - t0
    diff = max((a.detach() - b.detach().cpu()).abs().max().item()
               for a, b in zip(cpu_model.parameters(), fl_model.parameters()))
    out(f"\nlargest parameter difference after training: {diff:.2e}   ({elapsed:.1f} s for both)")

    st = flbridge.stats(dev)
    out(f"\nWhat ran where on {s.device_type} ({dev}):")
    out(f"  {'op':46s} {'route':16s} {'calls':>6}  detail")
    for r in sorted(st["routes"], key=lambda r: (r["route"] != "native", -r["calls"], r["op"])):
        out(f"  {r['op']:46s} {r['route']:16s} {r['calls']:>6}  {r['detail']}")
    total = st["native_ops"] + st["fallback_ops"]
    out(f"\n  native ops {st['native_ops']} of {total} ({100 * st['native_ops'] / max(total, 1):.1f}%); "
        f"fallbacks {st['fallback_ops']} (vendor {st['vendor_fallback_ops']}, decomposed "
        f"{st['decomposed_ops']}, cpu {st['cpu_fallback_ops']}); vendor errors recovered {st['vendor_errors']}")
    out("\nBytes moved:")
    out(f"  host -> device  {_fmt_bytes(st['h2d_bytes']):>10} in {st['h2d_calls']} calls")
    out(f"  mapped (zero-copy) {_fmt_bytes(st['mapped_bytes']):>7} in {st['map_calls']} mappings")
    out(f"  device -> host  {_fmt_bytes(st['d2h_bytes']):>10} in {st['d2h_calls']} calls")
    out(f"  device memory in use {_fmt_bytes(st['memory_allocated'])}, peak {_fmt_bytes(st['max_memory_allocated'])}")
    return 0 if diff < 1e-3 else 2
