"""torch.fl.Stream / torch.fl.Event, with torch.cuda's signatures.

The vendor runtimes flbridge drives expose one in-order queue per device
(a `synchronize` role, no stream handles), so every fl stream is that queue:
work is ordered, `wait_*` need do nothing, and `synchronize()` / `query()`
map to the runtime's synchronize.  Events record a host timestamp after
synchronizing the device, so `elapsed_time` is correct for runtimes that
execute asynchronously too (and exact for the synchronous simulators).
"""
from __future__ import annotations

import contextlib
import threading
import time

import torch

from ..devices import chip_for, current_device
from ..devices.table import set_current_index

_TLS = threading.local()


_PRIVATE_USE1 = int(torch._C._autograd.DeviceType.PrivateUse1)


class Stream(torch.Stream):
    """torch.fl.Stream(device=None, priority=0): a torch.Stream of an fl
    device, so `tensor.record_stream(s)`, torch.accelerator and code that
    type-checks torch.Stream take it."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        idx = chip_for(current_device() if device is None else device).index
        return super().__new__(cls, stream_id=0, device_index=idx, device_type=_PRIVATE_USE1)

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.priority = priority

    def synchronize(self) -> None:
        chip_for(self.device).runtime.synchronize()

    def query(self) -> bool:
        self.synchronize()
        return True

    def wait_event(self, event: "Event") -> None:
        pass  # one in-order queue per device: already ordered

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __enter__(self):
        # as torch.cuda.stream(s): s's device is current inside, with s its stream
        self._prev = (current_device(), current_stream(self.device))
        set_stream(self)
        return self

    def __exit__(self, *exc):
        device, stream = self._prev
        set_stream(stream)
        set_current_index(device)
        return False

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and other.device == self.device and other.stream_id == self.stream_id

    def __hash__(self):
        return hash((self.device, self.stream_id))

    def __repr__(self):
        return f"torch.fl.Stream(device={self.device}, stream_id={self.stream_id})"


class Event:
    """torch.fl.Event(enable_timing=False, blocking=False, interprocess=False)"""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device = None
        self._ns = None

    def record(self, stream: Stream | None = None) -> None:
        stream = stream if stream is not None else current_stream()
        stream.synchronize()
        self.device = stream.device
        self._ns = time.perf_counter_ns()

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return self._ns is not None

    def synchronize(self) -> None:
        if self.device is not None:
            chip_for(self.device).runtime.synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and end_event (both recorded)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True to use elapsed_time")
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end_event._ns - self._ns) / 1e6

    def __repr__(self):
        state = "recorded" if self._ns is not None else "not recorded"
        return f"torch.fl.Event(device={self.device}, {state})"


def current_stream(device=None) -> Stream:
    idx = chip_for(current_device() if device is None else device).index
    streams = getattr(_TLS, "streams", None)
    if streams is None:
        streams = _TLS.streams = {}
    s = streams.get(idx)
    if s is None:
        s = streams[idx] = Stream(idx)
    return s


def default_stream(device=None) -> Stream:
    return Stream(device)


def set_stream(stream: Stream) -> None:
    """Makes `stream` its device's current stream, and its device the current
    device (as torch.cuda.set_stream and torch.accelerator.set_stream do)."""
    if stream is None:
        return
    streams = getattr(_TLS, "streams", None)
    if streams is None:
        streams = _TLS.streams = {}
    streams[stream.device.index] = stream
    set_current_index(chip_for(stream.device).index)


@contextlib.contextmanager
def stream(s: Stream | None):
    """with torch.fl.stream(s): ... (a no-op for None, as in torch.cuda)"""
    if s is None:
        yield
        return
    with s:
        yield


def _is_stream(x) -> bool:
    return isinstance(x, (Stream, torch.Stream))
