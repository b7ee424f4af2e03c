"""What ran where and what crossed the bus, per chip.

Counts are kept by flbridge itself (so they exist for any runtime); the
runtime's own counters, when it has them, are reported beside them under
"runtime".
"""
from __future__ import annotations

from collections import Counter

TRANSFER_KEYS = ("h2d_bytes", "h2d_calls", "d2h_bytes", "d2h_calls", "mapped_bytes", "map_calls",
                 "d2d_bytes", "d2d_calls")
OP_KEYS = ("native_ops", "fallback_ops", "vendor_fallback_ops", "python_fallback_ops",
           "decomposed_ops", "cpu_fallback_ops", "vendor_errors", "graph_replays", "replayed_kernels")


class ChipStats:
    """Counters for one chip.  Increments are plain int adds under the GIL.
    The route table is a Counter keyed by (op, route, tag): the kernel's name
    for native calls, the kind of reason for fallbacks (so a reason whose
    text changes per call, a vendor's message or a shape, still makes one
    row); `details` keeps the first full reason seen for each row."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        for k in TRANSFER_KEYS + OP_KEYS:
            setattr(self, k, 0)
        self.routes: Counter = Counter()
        self.details: dict = {}

    def route(self, op: str, kind: str, tag: str, detail: str) -> None:
        key = (op, kind, tag)
        self.routes[key] += 1
        if key not in self.details:
            self.details[key] = detail

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in TRANSFER_KEYS + OP_KEYS}
        d["routes"] = [{"op": op, "route": kind, "detail": self.details.get((op, kind, tag), tag), "calls": n}
                       for (op, kind, tag), n in sorted(self.routes.items(), key=lambda kv: -kv[1])]
        return d
