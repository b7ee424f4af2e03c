"""Profiling fl programs: device time in torch.profiler's tables and chrome
traces, and flbridge.profiler's summary of routes, fallbacks and bytes."""
import json
import re
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import flbridge
from flbridge import config
from flbridge.binding import launch
from flbridge.observe import profiler
from flbridge.devices import chip_for

FL = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _runtime_total_ns(device) -> int:
    """The simulator's own total of kernel and copy time."""
    rt = chip_for(device).runtime
    lib, n = rt.lib, rt.ffi.new("uint64_t *")
    fn = lib.x1_get_kernel_ns_total if hasattr(lib, "x1_get_kernel_ns_total") else lib.th1GetTotalKernelTime
    assert fn(n) == rt.ok
    return int(n[0])


@pytest.mark.parametrize("name", ["xpu:x1", "xpu:th1"])
def test_torch_profiler_shows_device_time_of_each_kernel(flchips, name):
    dev = flchips[name].device
    flbridge.reset_stats(dev)
    a, b = torch.randn(32, 32).to(dev), torch.randn(32, 32).to(dev)
    impl = chip_for(dev).runtime.ops[torch.ops.aten.mm.default].entry.impl
    before = _runtime_total_ns(dev)
    with profile(activities=FL) as prof:
        c = (a @ b).relu()
        c.cpu()
    spent = _runtime_total_ns(dev) - before
    ka = {e.key: e for e in prof.key_averages()}
    mm = ka[f"{impl} [{name}]"]
    assert mm.count == 1 and mm.self_device_time_total > 0
    # the aten op's FL total is the device time of what it launched (its
    # kernel, and the upload or mapping of its inputs); none is its own
    sess = profiler.session_of(prof)
    caused = [e for e in sess.events if e.op == "aten::mm.default"]
    assert {e.label for e in caused} & {f"{impl} [{name}]"}
    assert ka["aten::mm"].device_time_total == pytest.approx(sum(e.device_ns for e in caused) / 1000)
    assert ka["aten::mm"].self_device_time_total == 0
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "Self FL" in table and "FL total" in table and "Self FL time total" in table
    # every kernel and transfer, timed by the runtime itself: the simulator's own total agrees to the ns
    assert sum(e.device_ns for e in sess.events) == spent > 0
    assert {e.timer for e in sess.events} == {"runtime"}
    assert {e.kind for e in sess.events} >= {"kernel", "d2h"}
    assert {e.kind for e in sess.events} & {"h2d", "map"}
    assert not launch.WATCH.active


def test_chrome_trace_has_a_device_lane_linked_to_the_calls(th1, tmp_path):
    a = torch.randn(64, 64)
    impl = chip_for(th1).runtime.ops[torch.ops.aten.mm.default].entry.impl
    with profile(activities=FL) as prof:
        x = a.to(th1)
        y = (x @ x).cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    evs = json.loads(path.read_text())["traceEvents"]
    (pid,) = [e["pid"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name"
              and e["args"]["name"] == f"fl:{th1.index} xpu:th1"]
    lane = [e for e in evs if e.get("pid") == pid and e["ph"] == "X"]
    kernels = [e for e in lane if e["cat"] == "kernel"]
    copies = {e["name"]: e for e in lane if e["cat"] == "gpu_memcpy"}
    assert [k["name"] for k in kernels] == [impl]
    assert kernels[0]["args"]["aten op"] == "aten::mm.default" and kernels[0]["dur"] > 0
    assert kernels[0]["args"]["device time"] == "runtime kernel timer"
    assert copies["memcpy_h2d"]["args"]["bytes"] == a.numel() * 4           # uploaded by the mm that needed it
    assert copies["memcpy_h2d"]["args"]["aten op"] == "aten::mm.default"
    assert copies["memcpy_d2h"]["args"]["bytes"] == a.numel() * 4
    anns = {e["name"]: e for e in evs if e.get("cat") == "user_annotation"}
    for ev in lane:
        label = f"{ev['name']} [xpu:th1]"
        ann = anns[label]
        assert ann["ts"] <= ev["ts"] and ev["ts"] + ev["dur"] <= ann["ts"] + ann["dur"] + 1e-3
        flows = [e for e in evs if e.get("cat") == "ac2g" and e.get("pid") in (pid, ann["pid"])
                 and ((e["ph"] == "f" and e["ts"] == ev["ts"] and e["tid"] == ev["tid"])
                      or (e["ph"] == "s" and e["ts"] == ann["ts"] and e["tid"] == ann["tid"]))]
        assert len(flows) == 2 and flows[0]["id"] == flows[1]["id"]
    torch.testing.assert_close(y, a @ a, rtol=1e-4, atol=1e-4)


@pytest.fixture
def forced_mul():
    """aten::mul.Tensor forced to the CPU (FLBRIDGE_FORCE_FALLBACK) for one test."""
    config.CONFIG.force_fallback = [re.compile(r"aten::mul\.Tensor")]
    for c in flbridge.chips():
        c.routes.clear()
    yield
    config.CONFIG.force_fallback = []
    for c in flbridge.chips():
        c.routes.clear()


def test_summary_gives_routes_fallback_share_bytes_and_fixes(x1, forced_mul):
    a, b = torch.randn(16, 16).to(x1), torch.randn(16, 16).to(x1)
    with flbridge.profiler.profile() as prof:
        for _ in range(3):
            a @ b                       # native
        d = a * b                       # forced to the CPU
        d.sum().item()                  # native sum (uploads d), then a download
    s = prof.summary_dict()
    st = flbridge.stats(x1)
    assert s["routes"]["native"]["calls"] == 4 and s["routes"]["cpu"]["calls"] == 1
    assert s["routed_ops"] == 5 and s["fallback_ops"] == 1 and s["fallback_share_ops"] == pytest.approx(0.2)
    (fb,) = s["top_fallbacks"]
    assert fb["op"] == "aten::mul.Tensor" and fb["route"] == "cpu" and "FLBRIDGE_FORCE_FALLBACK" in fb["reason"]
    assert fb["fix"] == "unset FLBRIDGE_FORCE_FALLBACK"
    moved = s["bytes"]["xpu:x1"]
    for kind, key in (("h2d", "h2d_bytes"), ("d2h", "d2h_bytes"), ("map", "mapped_bytes")):
        assert moved.get(kind, {"bytes": 0})["bytes"] == st[key]
    assert moved["d2h"]["bytes"] == 4                                     # the .item()
    mm = next(r for r in s["per_op"] if r["op"] == "aten::mm.default")
    assert mm["calls"] == 3 and mm["route"] == "native" and 0 < mm["kernel_ns"] < mm["time_ns"]
    t = s["time_ns"]
    assert 0 < t["kernels_device"] <= t["kernels_host"] and t["cpu_fallback"] > 0
    assert t["kernels_host"] + t["transfers_host"] + t["cpu_fallback"] + t["observer"] + t["host_overhead"] == t["ops"]
    assert 0 < t["observer"] < t["ops"]
    text = prof.summary()
    assert "fell back 1 (20% of ops" in text and "fix: unset FLBRIDGE_FORCE_FALLBACK" in text
    assert "device time from the runtime's kernel timer" in text
    assert "Self FL" in prof.table()


def test_host_timing_when_the_runtime_has_no_kernel_timer(x1, monkeypatch):
    monkeypatch.setattr(chip_for(x1).runtime, "_kernel_timer", None)
    a = torch.randn(8).to(x1)
    with flbridge.profiler.profile() as prof:
        (a + a).relu()
    kernels = [e for e in prof.session.events if e.kind == "kernel"]
    assert kernels and all(e.timer == "host" and e.device_ns == e.host_ns for e in kernels)
    assert prof.summary_dict()["device_time_from"] == ["host"]
    assert "host timing around each vendor call" in prof.summary()


def test_nothing_is_attached_unless_the_fl_activity_is_profiled(x1):
    a = torch.randn(8).to(x1)
    assert not launch.WATCH.active and launch.WATCH.observers == []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert not launch.WATCH.active
        a + a
    assert profiler.session_of(prof) is None
    with profile(activities=FL):
        assert launch.WATCH.active
    assert not launch.WATCH.active and launch.WATCH.observers == []


@pytest.mark.slow    # a fresh interpreter: 4 s
def test_the_profiler_imports_as_a_module_and_is_one_object():
    """`import flbridge.profiler` and `from flbridge.profiler import profile` in a
    fresh interpreter, before and after attribute access: one module object."""
    code = ("import flbridge.profiler as a\n"
            "from flbridge.profiler import profile\n"
            "import flbridge, flbridge.observe.profiler as real\n"
            "assert a is real and flbridge.profiler is real and profile is real.profile, (a, real)\n"
            "with profile() as prof:\n"
            "    pass\n"
            "print('ok', type(prof).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]
