"""Profiling fl programs: device time in torch.profiler, and what ran where.

Two ways in, one machinery:

* ``torch.profiler.profile(activities=[ProfilerActivity.CPU,
  ProfilerActivity.PrivateUse1])`` on fl tensors: each vendor kernel and each
  transfer (h2d, d2h, map) gets its device time attached to its event, so
  ``key_averages().table()`` shows "Self FL" / "FL total" columns, and
  ``export_chrome_trace()`` writes a device lane per chip with every kernel
  and transfer, linked by a flow arrow to the call that caused it.
* ``flbridge.profiler.profile()``: the same profiler (those activities), plus
  :meth:`Profile.summary`: time per op and its route, the share of ops and of
  time that fell back, bytes moved each way, the top fallbacks with their fix,
  and host overhead against kernel time.

Device time comes from the runtime's kernel timer when the spec names one
(``runtime.kernel_timer``: the device's own measure of its last kernel or
copy), else from host timing around the vendor call.  Both are labelled.

Nothing here runs unless a profiler with the fl activity is active: starting
one attaches an observer to :mod:`flbridge.binding.launch` (the single point where
vendor calls and transfers happen); stopping it detaches it.  torch.profiler
has no Python hook for device events, so :func:`install` wraps four methods
of ``torch.autograd.profiler.profile`` (start, stop, parsing the results,
exporting the trace) to do this.
"""
from __future__ import annotations

import json
import threading
import time
from collections import defaultdict

import torch
import torch.autograd.profiler as _tprof

from ..specs import info
from ..tensor import chip_of
from ..binding import launch

# per transfer kind: its event label prefix (the spec's role names)
_TRANSFER_LABEL = {"h2d": "memcpy_h2d", "d2h": "memcpy_d2h", "map": "mem_map"}
# the chip's own stats counters that say which route an op took
_COUNTERS = ("native_ops", "vendor_fallback_ops", "python_fallback_ops", "decomposed_ops", "cpu_fallback_ops")
_ROUTE_OF = ("native", "vendor_fallback", "python_fallback", "decomposed", "cpu")
OTHER = "flbridge"     # ops flbridge answers without a route: views, copies, allocation, _foreach_ loops
FALLBACK_ROUTES = ("vendor_fallback", "python_fallback", "decomposed", "cpu")
# device lanes in the chrome trace: pid base (far from real process ids), lane per kind of work
_TRACE_PID = 1 << 30
_LANE = {"kernel": 0, "h2d": 1, "d2h": 1, "map": 1}


class DeviceEvent:
    """One vendor kernel or transfer, as the profiler saw it."""
    __slots__ = ("kind", "label", "index", "device_type", "nbytes", "device_ns", "timer", "host_ns", "t0",
                 "op", "tid")

    def __init__(self, kind, label, chip, nbytes, device_ns, timer, host_ns, t0, op, tid):
        self.kind, self.label, self.nbytes = kind, label, nbytes
        self.index, self.device_type = chip.index, chip.device_type
        self.device_ns, self.timer, self.host_ns, self.t0, self.op, self.tid = \
            device_ns, timer, host_ns, t0, op, tid


class _Frame:
    """One aten op on the way through flbridge.routing.dispatch."""
    __slots__ = ("qualname", "chip", "t0", "child_ns", "kernel_ns", "kernel_host_ns", "transfer_ns",
                 "child_counts", "observer_ns")

    def __init__(self, qualname, chip):
        self.qualname, self.chip = qualname, chip
        self.child_ns = self.kernel_ns = self.kernel_host_ns = self.transfer_ns = 0
        self.observer_ns = 0       # this profiler's own bookkeeping inside the op, outside its nested ops
        self.child_counts = None


class OpStat:
    """One row of the summary: an op on a chip by one route (and, for a
    fallback, one kind of reason)."""
    __slots__ = ("op", "device_type", "route", "reason_kind", "reason", "fix", "calls", "self_ns", "kernel_ns",
                 "transfer_ns")

    def __init__(self, op, device_type, route, reason_kind, reason, fix):
        self.op, self.device_type, self.route, self.reason_kind = op, device_type, route, reason_kind
        self.reason, self.fix = reason, fix
        self.calls = self.self_ns = self.kernel_ns = self.transfer_ns = 0


class Session:
    """A launch observer that records device events and, per aten op, its
    route and time, from start() to stop()."""

    def __init__(self):
        self.events: list[DeviceEvent] = []
        self.stats: dict = {}
        self.bytes = defaultdict(lambda: [0, 0])      # kind -> [bytes, calls]
        self.top_ns = 0                               # wall time of top-level ops
        self.observer_ns = 0                          # this profiler's own bookkeeping inside them
        self.wall_ns = 0
        self._t_start = 0
        self._tls = threading.local()
        self._lock = threading.Lock()

    def start(self) -> None:
        self._t_start = time.perf_counter_ns()
        launch.attach(self)

    def stop(self) -> None:
        launch.detach(self)
        self.wall_ns = time.perf_counter_ns() - self._t_start

    def _stack(self) -> list:
        st = self._tls.__dict__.get("stack")
        if st is None:
            st = self._tls.stack = []
        return st

    # -------------------------------------------------------- observer

    def wrap_op(self, func, args, kwargs, run):
        return _OpRun(self, func, args, kwargs, run)

    def wrap_kernel(self, chip, label, run):
        return _KernelRun(self, chip, label, run)

    def on_transfer(self, chip, kind, nbytes) -> None:
        t_in = time.perf_counter_ns()
        rf = None
        if _tprof._is_profiler_enabled:
            rf = _tprof.record_function(f"{_TRANSFER_LABEL.get(kind, kind)} [{chip.device_type}]")
            rf.__enter__()
        pend = self._tls.__dict__.setdefault("pending", [])
        t0 = time.perf_counter_ns()
        stack = self._stack()
        if stack:
            stack[-1].observer_ns += t0 - t_in
        pend.append((kind, nbytes, rf, t0))

    def transfer_done(self, chip, kind) -> None:
        pend = self._tls.__dict__.get("pending")
        if not pend:
            return  # announced before this session started
        k, nbytes, rf, t0 = pend.pop()
        t1 = time.perf_counter_ns()
        dev, timer = _device_ns(chip, t1 - t0)
        if rf is not None:
            rf.__exit__(None, None, None)
        stack = self._stack()
        op = stack[-1].qualname if stack else None
        if stack:
            stack[-1].transfer_ns += t1 - t0
        label = f"{_TRANSFER_LABEL.get(k, k)} [{chip.device_type}]"
        with self._lock:
            self.events.append(DeviceEvent(k, label, chip, nbytes, dev, timer, t1 - t0, t0, op,
                                           threading.get_native_id()))
            b = self.bytes[(chip.device_type, k)]
            b[0] += nbytes
            b[1] += 1
        if stack:
            stack[-1].observer_ns += time.perf_counter_ns() - t1

    # ---------------------------------------------------------- ops

    def _close(self, frame, func, args, kwargs, incl_ns, before, parent):
        chip = frame.chip
        route, counts = None, None
        if chip is not None:
            s = chip.stats
            counts = [getattr(s, k) - b for k, b in zip(_COUNTERS, before)]
            own = counts if frame.child_counts is None else [c - d for c, d in zip(counts, frame.child_counts)]
            # the op's own route: what it incremented itself (a vendor kernel
            # that failed and fell back to the CPU counts as the CPU)
            for i in (4, 2, 1, 3, 0):
                if own[i] > 0:
                    route = _ROUTE_OF[i]
                    break
        if parent is not None:
            parent.child_ns += incl_ns
            if counts is not None and parent.chip is chip:
                if parent.child_counts is None:
                    parent.child_counts = counts
                else:
                    parent.child_counts = [a + b for a, b in zip(parent.child_counts, counts)]
        else:
            self.top_ns += incl_ns
        route = route or OTHER
        reason_kind = reason = fix = ""
        if route in FALLBACK_ROUTES and chip is not None:
            r = chip.routes.get(func)
            if r is not None:
                reason_kind, reason, fix = r.explain(args, kwargs)
        key = (frame.qualname, chip.device_type if chip is not None else "", route, reason_kind)
        with self._lock:
            st = self.stats.get(key)
            if st is None:
                st = self.stats[key] = OpStat(key[0], key[1], route, reason_kind, reason, fix)
            st.calls += 1
            st.self_ns += incl_ns - frame.child_ns - frame.observer_ns
            self.observer_ns += frame.observer_ns
            st.kernel_ns += frame.kernel_ns
            st.transfer_ns += frame.transfer_ns

    # ----------------------------------------------- torch.profiler

    def attach_to(self, function_events, use_device) -> None:
        """Gives each vendor-call event of torch.profiler its device time
        (FunctionEvent.append_kernel; is_legacy so the table adds it up)."""
        if use_device != torch._C._get_privateuse1_backend_name():
            return
        mine = defaultdict(list)
        for e in self.events:
            mine[e.label].append(e)
        theirs = defaultdict(list)
        for fe in function_events:
            if fe.name in mine:
                theirs[fe.name].append(fe)
        for label, fes in theirs.items():
            fes.sort(key=lambda fe: fe.time_range.start)
            for fe, e in zip(fes, sorted(mine[label], key=lambda e: e.t0)):
                fe.append_kernel(label, e.index, e.device_ns / 1000.0)
                fe.is_legacy = True

    def rewrite_trace(self, path: str) -> None:
        """Adds a device lane per chip to a chrome trace written by kineto:
        each kernel and transfer with its device time, under the call that
        caused it, with a flow arrow from that call."""
        with open(path) as f:
            trace = json.load(f)
        evs = trace.get("traceEvents", [])
        mine = defaultdict(list)
        for e in self.events:
            mine[(e.tid, e.label)].append(e)
        anns = defaultdict(list)
        for ev in evs:
            if ev.get("ph") == "X" and ev.get("cat") == "user_annotation" and (ev.get("tid"), ev.get("name")) in mine:
                anns[(ev["tid"], ev["name"])].append(ev)
        added, chips = [], {}
        flow = 0
        for key, lst in anns.items():
            lst.sort(key=lambda ev: ev["ts"])
            for ev, e in zip(lst, sorted(mine[key], key=lambda e: e.t0)):
                flow += 1
                pid = _TRACE_PID + e.index
                chips[e.index] = e.device_type
                dur = e.device_ns / 1000.0
                ts = ev["ts"] + max(0.0, ev.get("dur", 0.0) - dur)   # ends with its call
                lane = _LANE.get(e.kind, 0)
                args = {"device": f"fl:{e.index}", "chip": e.device_type, "aten op": e.op or "",
                        "device time": "runtime kernel timer" if e.timer == "runtime" else "host timing",
                        "External id": ev.get("args", {}).get("External id")}
                if e.kind != "kernel":
                    args["bytes"] = e.nbytes
                added.append({"ph": "X", "cat": "kernel" if e.kind == "kernel" else "gpu_memcpy",
                              "name": e.label.rsplit(" [", 1)[0], "pid": pid, "tid": lane, "ts": ts,
                              "dur": dur, "args": args})
                added.append({"ph": "s", "id": flow, "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"],
                              "cat": "ac2g", "name": "ac2g"})
                added.append({"ph": "f", "id": flow, "pid": pid, "tid": lane, "ts": ts, "cat": "ac2g",
                              "name": "ac2g", "bp": "e"})
        for index, dtype in chips.items():
            pid = _TRACE_PID + index
            added += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"fl:{index} {dtype}"}},
                      {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": _TRACE_PID + index}},
                      {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "kernels"}},
                      {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "transfers"}}]
        trace["traceEvents"] = evs + added
        with open(path, "w") as f:
            json.dump(trace, f)

    # ----------------------------------------------------- summary

    def summary_dict(self, top: int = 5) -> dict:
        """What ran where and where the time went (see Profile.summary)."""
        rows = sorted(self.stats.values(), key=lambda s: -s.self_ns)
        routed = [s for s in rows if s.route != OTHER]
        n_routed = sum(s.calls for s in routed)
        n_fell = sum(s.calls for s in routed if s.route in FALLBACK_ROUTES)
        t_routed = sum(s.self_ns for s in routed)
        t_fell = sum(s.self_ns for s in routed if s.route in FALLBACK_ROUTES)
        by_route = defaultdict(lambda: [0, 0])
        for s in rows:
            by_route[s.route][0] += s.calls
            by_route[s.route][1] += s.self_ns
        kernels = [e for e in self.events if e.kind == "kernel"]
        transfers = [e for e in self.events if e.kind != "kernel"]
        k_dev = sum(e.device_ns for e in kernels)
        k_host = sum(e.host_ns for e in kernels)
        x_host = sum(e.host_ns for e in transfers)
        x_dev = sum(e.device_ns for e in transfers)
        cpu_ns = sum(max(0, s.self_ns - s.transfer_ns) for s in rows if s.route == "cpu")
        timers = sorted({e.timer for e in self.events})
        fallbacks = sorted((s for s in routed if s.route in FALLBACK_ROUTES), key=lambda s: (-s.self_ns, -s.calls))
        moved = {}
        for (dtype, kind), (nb, calls) in sorted(self.bytes.items()):
            moved.setdefault(dtype, {})[kind] = {"bytes": nb, "calls": calls}
        return {
            "ops": n_routed + sum(s.calls for s in rows if s.route == OTHER),
            "routed_ops": n_routed,
            "fallback_ops": n_fell,
            "fallback_share_ops": n_fell / n_routed if n_routed else 0.0,
            "fallback_share_time": t_fell / t_routed if t_routed else 0.0,
            "window_ns": self.wall_ns,
            "time_ns": {"ops": self.top_ns, "kernels_device": k_dev, "kernels_host": k_host,
                        "transfers_device": x_dev, "transfers_host": x_host, "cpu_fallback": cpu_ns,
                        "observer": self.observer_ns,
                        # what flbridge itself adds: the ops' time less the vendor's calls (kernels and
                        # copies as the host sees them, launch cost included: the runtime's, not
                        # flbridge's), the CPU fallback's compute, and this profiler's own bookkeeping
                        "host_overhead": max(0, self.top_ns - self.observer_ns - k_host - x_host - cpu_ns)},
            "device_time_from": timers,
            "routes": {r: {"calls": c, "time_ns": t} for r, (c, t) in sorted(by_route.items())},
            "bytes": moved,
            "per_op": [{"op": s.op, "device": s.device_type, "route": s.route, "calls": s.calls,
                        "time_ns": s.self_ns, "kernel_ns": s.kernel_ns, "reason": s.reason} for s in rows],
            "top_fallbacks": [{"op": s.op, "device": s.device_type, "route": s.route, "calls": s.calls,
                               "time_ns": s.self_ns, "reason": s.reason, "fix": s.fix} for s in fallbacks[:top]],
        }


def _device_ns(chip, host_ns: int):
    """(device ns, "runtime" | "host") for the vendor call that just ended."""
    rt = chip.runtime
    if rt.has_kernel_timer:
        try:
            return rt.last_kernel_ns(), "runtime"
        except Exception:  # noqa: BLE001 - a timer that fails must not fail the program being profiled
            pass
    return host_ns, "host"


class _OpRun:
    __slots__ = ("sess", "func", "args", "kwargs", "run")

    def __init__(self, sess, func, args, kwargs, run):
        self.sess, self.func, self.args, self.kwargs, self.run = sess, func, args, kwargs, run

    def __call__(self):
        t_in = time.perf_counter_ns()
        sess = self.sess
        stack = sess._stack()
        chip = chip_of(self.args, self.kwargs)
        before = [getattr(chip.stats, k) for k in _COUNTERS] if chip is not None else None
        frame = _Frame(info(self.func).qualname, chip)
        parent = stack[-1] if stack else None
        stack.append(frame)
        t0 = time.perf_counter_ns()
        try:
            return self.run()
        finally:
            t1 = time.perf_counter_ns()
            stack.pop()
            sess._close(frame, self.func, self.args, self.kwargs, t1 - t0, before, parent)
            if parent is not None:   # this op's own bookkeeping ran inside its parent's time
                parent.observer_ns += (t0 - t_in) + (time.perf_counter_ns() - t1)


class _KernelRun:
    __slots__ = ("sess", "chip", "label", "run")

    def __init__(self, sess, chip, label, run):
        self.sess, self.chip, self.label, self.run = sess, chip, label, run

    def __call__(self):
        t0 = time.perf_counter_ns()
        status = self.run()
        host = time.perf_counter_ns() - t0
        sess, chip = self.sess, self.chip
        dev, timer = _device_ns(chip, host)
        stack = sess._stack()
        op = None
        if stack:
            f = stack[-1]
            f.kernel_ns += dev
            f.kernel_host_ns += host
            op = f.qualname
        with sess._lock:
            sess.events.append(DeviceEvent("kernel", self.label, chip, 0, dev, timer, host, t0, op,
                                           threading.get_native_id()))
        if stack:
            stack[-1].observer_ns += time.perf_counter_ns() - t0 - host
        return status


# ------------------------------------------------------------- torch hooks

_INSTALLED = False
_ATTR = "_flbridge_session"


def install() -> None:
    """Hooks flbridge's device time into torch.autograd.profiler.profile
    (which torch.profiler.profile drives): a session starts and stops with
    each profiling window whose activities include the fl device.  Once per
    process; flbridge.init() calls it."""
    global _INSTALLED
    if _INSTALLED:
        return
    cls = _tprof.profile
    start, exit_, parse, export = cls._start_trace, cls.__exit__, cls._parse_kineto_results, cls.export_chrome_trace

    def _start_trace(self):
        start(self)
        if self.use_device == torch._C._get_privateuse1_backend_name():
            sess = Session()
            setattr(self, _ATTR, sess)
            sess.start()

    def __exit__(self, exc_type, exc_val, exc_tb):
        try:
            return exit_(self, exc_type, exc_val, exc_tb)
        finally:
            sess = getattr(self, _ATTR, None)
            if sess is not None:
                sess.stop()

    def _parse_kineto_results(self, result, *a, **k):
        events = parse(self, result, *a, **k)
        sess = getattr(self, _ATTR, None)
        if sess is not None:
            sess.attach_to(events, self.use_device)
        return events

    def export_chrome_trace(self, path, *a, **k):
        out = export(self, path, *a, **k)
        sess = getattr(self, _ATTR, None)
        if sess is not None and sess.events:
            sess.rewrite_trace(path)
        return out

    _start_trace.__doc__, __exit__.__doc__ = start.__doc__, exit_.__doc__
    _parse_kineto_results.__doc__, export_chrome_trace.__doc__ = parse.__doc__, export.__doc__
    cls._start_trace, cls.__exit__ = _start_trace, __exit__
    cls._parse_kineto_results, cls.export_chrome_trace = _parse_kineto_results, export_chrome_trace
    _INSTALLED = True


def session_of(prof) -> Session | None:
    """The flbridge session of a torch.profiler.profile (or of the autograd
    profiler it drives), if fl was among its activities."""
    p = getattr(prof, "profiler", prof)
    return getattr(p, _ATTR, None)


# --------------------------------------------------------- flbridge.profiler.profile

class Profile:
    """torch.profiler.profile with the CPU and fl activities, plus
    :meth:`summary`.  Use as a context manager:

        with flbridge.profiler.profile() as prof:
            model(x)
        print(prof.key_averages().table(sort_by="self_device_time_total"))
        print(prof.summary())
    """

    def __init__(self, **kwargs):
        from torch.profiler import ProfilerActivity
        install()
        kwargs.setdefault("activities", [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])
        self.torch_profiler = torch.profiler.profile(**kwargs)

    def __enter__(self):
        self.torch_profiler.__enter__()
        return self

    def __exit__(self, *exc):
        return self.torch_profiler.__exit__(*exc)

    def start(self) -> None:
        self.torch_profiler.start()

    def stop(self) -> None:
        self.torch_profiler.stop()

    def step(self) -> None:
        self.torch_profiler.step()

    def key_averages(self, *args, **kwargs):
        return self.torch_profiler.key_averages(*args, **kwargs)

    def events(self):
        return self.torch_profiler.events()

    def table(self, sort_by: str = "self_device_time_total", row_limit: int = 30, **kwargs) -> str:
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit, **kwargs)

    def export_chrome_trace(self, path: str) -> None:
        self.torch_profiler.export_chrome_trace(path)

    @property
    def session(self) -> Session:
        sess = session_of(self.torch_profiler)
        if sess is None:
            raise RuntimeError("flbridge.profiler: nothing was profiled yet (use the profile as a context "
                               "manager, or start() and stop() it)")
        return sess

    def summary_dict(self, top: int = 5) -> dict:
        return self.session.summary_dict(top)

    def summary(self, top: int = 5, per_op: int = 15) -> str:
        """Time per op and its route, the share of ops and of time that fell
        back, bytes moved each way, the top fallbacks with their fix, and
        host overhead against kernel time."""
        return render_summary(self.summary_dict(top), per_op)


def profile(**kwargs) -> Profile:
    """flbridge's profiler: torch.profiler.profile(activities=[CPU, fl],
    **kwargs) with a :meth:`Profile.summary` of routes and fallbacks."""
    return Profile(**kwargs)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render_summary(d: dict, per_op: int = 15) -> str:
    t = d["time_ns"]
    total = max(1, t["ops"] - t["observer"])   # the ops' time without this profiler
    src_text = {"runtime": "the runtime's kernel timer", "host": "host timing around each vendor call"}
    routes = d["routes"]
    n_cpu = routes.get("cpu", {}).get("calls", 0)
    n_native = routes.get("native", {}).get("calls", 0)
    routed = d["routed_ops"] or 1
    lines = [f"flbridge profile: {d['ops']} aten ops on fl devices, {_ms(t['ops'])} inside flbridge"
             + (f" (of a {_ms(d['window_ns'])} profiling window)" if d["window_ns"] else ""),
             f"  ops that need a kernel: {d['routed_ops']}; native {n_native} ({_pct(n_native / routed)}); "
             f"fell back {d['fallback_ops']} ({_pct(d['fallback_share_ops'])} of ops, "
             f"{_pct(d['fallback_share_time'])} of their time); to the CPU {n_cpu} ({_pct(n_cpu / routed)})"]
    if routes:
        lines.append("  by route: " + ", ".join(
            f"{r} {v['calls']} ops / {_ms(v['time_ns'])}"
            for r, v in sorted(routes.items(), key=lambda kv: -kv[1]["time_ns"])))
    if OTHER in routes:
        lines.append(f"  ({OTHER}: ops that need no kernel: views, copies between devices, allocation, "
                     f"_foreach_ loops)")
    lines.append(f"  time: kernels {_ms(t['kernels_device'])} on the device ({_ms(t['kernels_host'])} on the host "
                 f"around the calls), transfers {_ms(t['transfers_host'])}, CPU fallback "
                 f"{_ms(t['cpu_fallback'])}, flbridge host overhead {_ms(t['host_overhead'])} "
                 f"({_pct(t['host_overhead'] / total)}); this profiler's own cost, left out: "
                 f"{_ms(t['observer'])}")
    if d["device_time_from"]:
        lines.append("  device time from " + " and ".join(src_text[s] for s in d["device_time_from"]))
    for dtype, kinds in d["bytes"].items():
        parts = []
        for kind, what in (("h2d", "host->device"), ("d2h", "device->host"), ("map", "mapped (zero-copy)")):
            if kind in kinds:
                n = kinds[kind]["calls"]
                parts.append(f"{what} {_bytes(kinds[kind]['bytes'])} in {n} call{'s' if n != 1 else ''}")
        lines.append(f"  bytes on {dtype}: " + ", ".join(parts))
    if d["per_op"]:
        lines.append("")
        lines.append(f"  {'op':44s} {'device':10s} {'route':16s} {'calls':>6s} {'time':>12s} {'share':>6s} "
                     f"{'kernels':>12s}")
        for r in d["per_op"][:per_op]:
            lines.append(f"  {r['op'][:44]:44s} {r['device'][:10]:10s} {r['route']:16s} {r['calls']:6d} "
                         f"{_ms(r['time_ns']):>12s} {_pct(r['time_ns'] / total):>6s} {_ms(r['kernel_ns']):>12s}")
        if len(d["per_op"]) > per_op:
            lines.append(f"  ... {len(d['per_op']) - per_op} more rows (summary_dict()['per_op'])")
    if d["top_fallbacks"]:
        lines.append("")
        lines.append("  top fallbacks:")
        for i, f in enumerate(d["top_fallbacks"], 1):
            lines.append(f"  {i}. {f['op']} on {f['device']}: {f['route']}, {f['calls']} calls, "
                         f"{_ms(f['time_ns'])} -- {f['reason']}")
            if f["fix"]:
                lines.append(f"     fix: {f['fix']}")
    return "\n".join(lines)
