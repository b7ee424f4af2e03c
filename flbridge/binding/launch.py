"""The one point where flbridge calls the vendor's compute functions and
moves bytes: kernels, the adapter's copies and conversions, constant fills,
uploads, downloads and mappings all pass through here.

Whoever wants to see them attaches here, at no cost when nobody does:
torch.profiler (a `record_function` event per vendor call), graph capture
(flbridge.graphs records each call for replay and refuses what cannot be
replayed) and the observers of flbridge.profiler (device time, routes) and
flbridge.observe.autocompare (autocompare).  The hot path is one attribute test per call.
"""
from __future__ import annotations

import threading

import torch.autograd.profiler as _profiler


class _ThreadState(threading.local):
    capture = None      # the FLGraph being captured on this thread, if any


STATE = _ThreadState()


class _Watch:
    """Global switch for the slow path: True while any observer is attached."""
    active = False
    observers: list = []


WATCH = _Watch()


def kernel(chip, label: str, cfn, cargs):
    """Calls a vendor compute function; returns its status."""
    if STATE.capture is None and not WATCH.active and not _profiler._is_profiler_enabled:
        return cfn(*cargs)
    return _observed_kernel(chip, label, cfn, cargs)


def _observed_kernel(chip, label, cfn, cargs):
    cap = STATE.capture
    if cap is not None:
        cap.record_call(chip, label, cfn, cargs)
    run = _Thunk(cfn, cargs)
    for obs in WATCH.observers:
        run = obs.wrap_kernel(chip, label, run)
    if _profiler._is_profiler_enabled:
        with _profiler.record_function(label):
            return run()
    return run()


class _Thunk:
    __slots__ = ("cfn", "cargs")

    def __init__(self, cfn, cargs):
        self.cfn, self.cargs = cfn, cargs

    def __call__(self):
        return self.cfn(*self.cargs)


def transfer(chip, kind: str, nbytes: int, storages=()) -> None:
    """Announces a transfer ("h2d", "d2h", "map") before it happens: graph
    capture refuses host reads; observers count and time it."""
    cap = STATE.capture
    if cap is not None:
        cap.on_transfer(chip, kind, nbytes, storages)
    for obs in WATCH.observers:
        obs.on_transfer(chip, kind, nbytes)


def transferred(chip, kind: str) -> None:
    """The transfer announced last on this thread has completed (the runtime
    calls it while observers are attached, so they can time it)."""
    for obs in WATCH.observers:
        obs.transfer_done(chip, kind)


def watching() -> bool:
    """Whether transfers need announcing (keeps residency's hot path flat)."""
    return STATE.capture is not None or WATCH.active


def attach(observer) -> None:
    """observer: an object with
    - wrap_op(func, args, kwargs, run) -> run': around each aten op that
      reaches flbridge (run() dispatches it and returns its result);
    - wrap_kernel(chip, label, run) -> run': around each vendor compute call
      (run() returns the vendor status);
    - on_transfer(chip, kind, nbytes): before each upload, download, mapping;
    - transfer_done(chip, kind): after it."""
    if observer not in WATCH.observers:
        WATCH.observers = WATCH.observers + [observer]
    WATCH.active = bool(WATCH.observers)


def detach(observer) -> None:
    WATCH.observers = [o for o in WATCH.observers if o is not observer]
    WATCH.active = bool(WATCH.observers)
