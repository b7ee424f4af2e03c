"""`flbridge demo --graph`: a small transformer's inference on a chip, eager
and captured in a torch.fl.FLGraph, beside the CPU."""
from __future__ import annotations

import copy
import statistics
import time
import warnings

import torch
import torch.nn as nn

from .timing import one_torch_thread


def _median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run_graph_demo(device=None, batch: int = 8, rounds: int = 20, out=print) -> int:
    import flbridge

    from ..devices import chip_for, current_device

    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"demo: batch must be a whole number of at least 1, got {batch!r}")
    flbridge.init()
    chip = chip_for(device if device is not None else current_device())
    dev = chip.device
    torch.fl.set_device(dev)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    cpu = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    fl = copy.deepcopy(cpu).to(dev)
    x = torch.randn(batch, 32, 64)
    static_x = x.to(dev)
    out(f"flbridge demo --graph: 2-layer transformer encoder (d_model 64, 4 heads), batch {batch} x 32 tokens, "
        f"inference on {dev} = {chip.device_type}, eager and by graph replay, beside the CPU\n")
    prev_fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)   # op by op, as in training (the same ops on every side)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", flbridge.FallbackWarning)
            ref = cpu(x)
            for _ in range(3):
                eager = fl(static_x)                     # warm-up: decisions, uploads
            g = torch.fl.FLGraph()
            try:
                with torch.fl.graph(g):
                    static_y = fl(static_x)
            except torch.fl.GraphCaptureError as e:
                out(f"cannot capture on {chip.device_type}: {e}")
                return 1
            g.replay()
            identical = torch.equal(static_y.cpu(), eager.cpu())
            close = (static_y.cpu() - ref).abs().max().item()
            new_x = torch.randn(batch, 32, 64)
            static_x.copy_(new_x)
            g.replay()
            follows = torch.equal(static_y.cpu(), fl(new_x.to(dev)).cpu())
            with one_torch_thread():
                t_cpu = _median_ms(lambda: cpu(x), rounds)
                t_eager = _median_ms(lambda: fl(static_x), rounds)
                t_replay = _median_ms(g.replay, rounds)
    finally:
        torch.backends.mha.set_fastpath_enabled(prev_fast)
    out(f"captured {g.num_calls} vendor calls; replay bit-identical to eager: {identical}; "
        f"follows a new input: {follows}; largest difference from the CPU: {close:.2e}\n")
    out(f"  {'':14s} {'ms/forward':>11s} {'x CPU':>7s}")
    for name, t in (("CPU (torch)", t_cpu), ("fl eager", t_eager), ("fl replay", t_replay)):
        out(f"  {name:14s} {t:11.2f} {t / t_cpu:7.2f}")
    out(f"\n(medians of {rounds}, torch at one thread as the simulator runs one; docs/performance.md has the "
        f"measured figures and how to reproduce them)")
    return 0 if identical and follows else 2
