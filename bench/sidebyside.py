"""Programs timed side by side in one process: the benches' one timing loop.

On a shared, noisy machine a ratio is only worth something when both sides
ran under the same conditions, so every program runs in every round, and the
ratio reported is the median of the per-round ratios.

Each round runs the programs in a new order (a shuffle, seeded by the round
number, so runs are repeatable): the program run right after another one
finds the caches full of that one's code and data: bench_compile's compiled
encoder call took 3-15% less right after another compiled call (Dynamo's,
AOTAutograd's and flbridge's replay code already cached) than right after
graph replay or the CPU model, 0.02-0.09x of the CPU's time (scratch run, 60
rounds per order, x1 and th1).  A fixed order, or one rotated by one each
round, gives every program the same predecessor in every round and charges
that to it.
"""
from __future__ import annotations

import random
import statistics
import time

CLOCK = time.perf_counter   # time.process_time: process CPU time (benches' --cpu-time)
BLOCK = 1                   # iterations of one program in a row per round (a training loop's steady state)


def side_by_side(steps: dict, rounds: int, warmup: int = 2) -> dict:
    """{name: (median seconds per iteration, median per-round ratio to the
    first program)} for the callables in `steps` (the first is the 1.0)."""
    names = list(steps)
    for _ in range(warmup):
        for s in steps.values():
            s()
    times = {k: [] for k in steps}
    for r in range(rounds):
        for k in random.Random(r).sample(names, len(names)):
            s = steps[k]
            t0 = CLOCK()
            for _ in range(BLOCK):
                s()
            times[k].append((CLOCK() - t0) / BLOCK)
    base = times[names[0]]
    return {k: (statistics.median(v), statistics.median(x / b for x, b in zip(v, base)))
            for k, v in times.items()}
