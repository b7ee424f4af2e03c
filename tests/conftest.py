"""Test session setup.

The simulators run in strict mode for the whole session: a call flbridge
sends that the chip cannot take aborts the test process, so a passing run
proves the router never sends one.  (Tests of the simulators themselves,
which make invalid calls on purpose, switch it off for their private copy.)
"""
import os
import sys

for _chip in ("X1SIM", "TH1SIM"):
    os.environ.setdefault(f"{_chip}_STRICT", "1")

from flbridge._paths import source_root  # noqa: E402

_root = source_root()
if _root is not None and os.environ.get("FLSIM_SKIP_BUILD") != "1":
    # A checkout: make sure the simulators match their sources (incremental).
    # (FLSIM_SKIP_BUILD=1 runs against libraries built elsewhere, e.g. with
    # FLBRIDGE_DEVICE_DIR naming specs that point at them.)
    sys.path.insert(0, str(_root / "native_sim"))
    import build as _native_build  # noqa: E402

    _native_build.build()
    sys.path.pop(0)

import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _frozen_import_heap():
    """What exists when the first test starts (torch, the collected test
    modules, OpInfo's database) is moved out of the garbage collector's view
    for the session: every collection, automatic or a test's gc.collect(),
    then walks only what the tests made (test_compile's per-test
    gc.collect() took 0.45 s each).  Those objects live for the session
    anyway."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def flchips():
    """Every registered chip, by spec name (one flbridge.init() per session)."""
    import flbridge
    flbridge.init()
    return {c.device_type: c for c in flbridge.chips()}


def _dev(flchips, name):
    import flbridge
    chip = flchips[name]
    flbridge.reset_stats(name)
    chip.warned.clear()
    return chip.device


@pytest.fixture
def x1(flchips):
    """torch.device of the x1 chip, with its counters zeroed."""
    return _dev(flchips, "xpu:x1")


@pytest.fixture
def x1v2(flchips):
    return _dev(flchips, "xpu:x1-v2")


@pytest.fixture
def th1(flchips):
    return _dev(flchips, "xpu:th1")


@pytest.fixture(params=["xpu:x1", "xpu:th1", "xpu:x1-v2"])
def anychip(request, flchips):
    """Each chip in turn."""
    return _dev(flchips, request.param)


def routes(device) -> dict:
    """{(op, route): calls} from flbridge.stats()."""
    import flbridge
    out = {}
    for r in flbridge.stats(device)["routes"]:
        key = (r["op"], r["route"])
        out[key] = out.get(key, 0) + r["calls"]
    return out


def sim_kernels(device) -> dict:
    """The simulator's own per-kernel launch counters for the chip."""
    from flbridge.devices import chip_for
    rt = chip_for(device).runtime
    ffi, lib = rt.ffi, rt.lib
    if hasattr(lib, "x1_get_kernel_counters"):
        arr, n = ffi.new("x1_kernel_counter_t[96]"), ffi.new("int32_t *")
        lib.x1_get_kernel_counters(arr, 96, n)
    else:
        arr, n = ffi.new("th1KernelStat_t[96]"), ffi.new("int *")
        lib.th1GetKernelStats(arr, 96, n)
    return {ffi.string(arr[i].name).decode(): int(arr[i].launches) for i in range(n[0])}


def run_in_threads(work, n: int) -> list:
    """work(i) for i in range(n), on n threads at once; the exceptions raised."""
    import threading

    errors: list = []

    def guarded(i):
        try:
            work(i)
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
