"""flbridge: run unmodified PyTorch programs on AI chips described by a YAML
spec and a vendor C runtime.

    import torch, flbridge
    flbridge.init()
    x = torch.randn(8, 3, 32, 32).to("fl")
    with flbridge.device("xpu:x1"):
        y = torch.zeros(4, device="xpu")
"""
from __future__ import annotations

import threading
import warnings

import torch

from .errors import (DeviceError, DeviceUnavailableError, FlbridgeError, HeaderError, OutOfMemoryError,
                     RuntimeLoadError, SpecError, SpecProblem, SpecWarning, UnsupportedOpError)

__version__ = "0.1.0"
__all__ = ["init", "chips", "stats", "reset_stats", "torch_device", "device", "wrap", "FlbridgeError",
           "SpecError", "SpecProblem", "HeaderError", "RuntimeLoadError", "DeviceError", "OutOfMemoryError",
           "UnsupportedOpError", "FallbackWarning", "XPUTensor", "SpecWarning", "DeviceUnavailableError",
           "profiler", "autocompare", "coverage"]

_LOCK = threading.Lock()


def init() -> list:
    """Registers the `fl` device and loads every discovered chip (once per
    process; later calls return the same chips).  Specs come from
    FLBRIDGE_DEVICE_DIR, else the packaged device_specs/.

    A spec with problems does not stop the others: its chip is unavailable
    (it keeps its index, so the others keep theirs; using it raises
    DeviceUnavailableError) and a SpecWarning lists its problems.  With
    FLBRIDGE_STRICT_SPECS=1 the first bad spec's error is raised instead.
    Returns the usable chips."""
    from . import backend as devmod, config  # noqa: F401 - backend installs __torch_dispatch__
    from .chip import Chip
    from .errors import SpecWarning
    from .registry import discover, load_specs
    from .runtime import init_runtime, load_runtime
    from .unavailable import UnavailableChip

    with _LOCK:
        if devmod._STATE.initialized:
            torch._C._set_multithreading_enabled(False)
            return [c for c in devmod.chips() if getattr(c, "available", True)]
        config.reload()
        slots = load_specs(discover())
        runtimes: dict = {}
        for slot in slots:
            if slot.error is None:
                try:
                    runtimes[slot.index] = load_runtime(slot.spec)
                except FlbridgeError as e:   # SpecError, RuntimeLoadError
                    slot.error = e
        _raise_if_strict(slots, config.CONFIG.strict_specs)
        by_lib: dict = {}
        for slot in slots:
            if slot.error is None:
                by_lib.setdefault(slot.spec.runtime_so, []).append(slot.spec.device_type)
        for lib, names in by_lib.items():
            if len(names) > 1:
                warnings.warn(f"flbridge: {', '.join(names)} load the same runtime library {lib}; they share "
                              f"its state (device memory, counters) as one device would. Give each chip "
                              f"its own runtime_so if they are separate devices.", stacklevel=2)
        for slot in slots:
            if slot.error is None:
                try:
                    init_runtime(runtimes[slot.index])
                except FlbridgeError as e:   # DeviceError: the vendor's init failed
                    slot.error = e
        _raise_if_strict(slots, config.CONFIG.strict_specs)
        devmod.register()
        from .distributed import register as _register_flccl
        _register_flccl()  # torch.distributed's "flccl" backend
        chips, by_type = [], {}
        for slot in slots:
            if slot.error is None:
                chip = Chip(slot.index, slot.spec, runtimes[slot.index])
            else:
                claimed = slot.device_type
                mine = claimed is not None and not any(s.device_type == claimed for s in slots[:slot.index])
                chip = UnavailableChip(slot.index, str(slot.path), slot.problems, claimed if mine else None)
                warnings.warn(SpecWarning(
                    f"flbridge: fl:{slot.index} ({chip.device_type}) is unavailable, the other chips are "
                    f"loaded. {slot.path} has problems:\n  " + "\n  ".join(slot.problems)
                    + f"\nFix the spec (flbridge validate {slot.path}), or set FLBRIDGE_STRICT_SPECS=1 to "
                      f"make a bad spec an error.", index=slot.index, file=str(slot.path),
                    problems=slot.problems), stacklevel=2)
            chips.append(chip)
            if chip.device_type not in by_type and not chip.device_type.startswith("<"):
                by_type[chip.device_type] = chip
        if not any(getattr(c, "available", True) for c in chips):
            chips, by_type = [], {}   # nothing usable: torch.fl.is_available() is False
        devmod._STATE.chips = chips
        devmod._STATE.by_type = by_type
        devmod._STATE.initialized = True
        # setting it runs the current-device hooks (autocast's default dtype) now that the chips exist
        devmod._TLS.current = devmod.current_device()
        # the Python device guard reports one device: run backward on the
        # calling thread (see flbridge/device.py)
        torch._C._set_multithreading_enabled(False)
        if not chips:
            warnings.warn("flbridge: no usable device specs were loaded; torch.fl.is_available() is False",
                          stacklevel=2)
        from . import compare, profiler as _profiler
        _profiler.install()   # device time for torch.profiler's fl activity
        compare.from_env(config.CONFIG.autocompare, config.CONFIG.autocompare_report)
        return [c for c in chips if getattr(c, "available", True)]


def _raise_if_strict(slots, strict: bool) -> None:
    """FLBRIDGE_STRICT_SPECS=1: any bad spec is an error (all their problems
    in one SpecError when they are all spec problems)."""
    bad = [s.error for s in slots if s.error is not None]
    if not strict or not bad:
        return
    if all(isinstance(e, SpecError) for e in bad):
        raise SpecError([p for e in bad for p in e.problems])
    raise bad[0]


def chips() -> list:
    from . import backend as devmod
    return devmod.chips()


def torch_device(spec_name: str) -> torch.device:
    """The torch.device of a chip given its spec name, e.g. torch_device("xpu:x1") -> fl:1."""
    from .backend import torch_device as _td
    return _td(spec_name)


def device(spec_name="xpu"):
    """Context: make a chip current and the default device; 'xpu' and
    'xpu:<name>' strings work wherever torch takes a device."""
    from .context import device as _d
    return _d(spec_name)


def wrap(model, device=None):
    from .context import wrap as _w
    return _w(model, device)


def stats(device=None) -> dict:
    """Transfer and routing counters: for one chip (`"xpu:x1"`, a torch.device
    or an index), or {device_type: dict} for all."""
    from .backend import chip_for, chips as _chips
    if device is None:
        return {c.device_type: c.stats_dict() for c in _chips()}
    return chip_for(device).stats_dict()


def reset_stats(device=None) -> None:
    """Zeroes flbridge's counters and the runtimes' own counters."""
    from .backend import chip_for, chips as _chips
    targets = _chips() if device is None else [chip_for(device)]
    for c in targets:
        c.stats.reset()
        c.runtime.reset_counters()


def autocompare(ops=None, rtol=None, atol=None, tolerances=None, raise_on_mismatch=False, warn=True):
    """Context: every op that runs on a chip is run again on the CPU and
    compared (flbridge/compare.py); its report: .table(), .report(), .to_json()."""
    from .compare import autocompare as _a
    return _a(ops=ops, rtol=rtol, atol=atol, tolerances=tolerances, raise_on_mismatch=raise_on_mismatch, warn=warn)


def coverage(model, example_inputs=(), device=None, backward=True, loss_fn=None, optimizer=None,
             example_kwargs=None):
    """Every aten op `model` calls and the route it would take on each chip,
    without running a kernel (flbridge/opcoverage.py)."""
    from .opcoverage import coverage as _c
    return _c(model, example_inputs, device=device, backward=backward, loss_fn=loss_fn, optimizer=optimizer,
              example_kwargs=example_kwargs)


def __getattr__(name):
    if name == "XPUTensor":
        from .tensor import XPUTensor
        return XPUTensor
    if name == "profiler":
        import importlib
        return importlib.import_module(".profiler", __name__)
    if name == "FallbackWarning":
        from .reasons import FallbackWarning
        return FallbackWarning
    raise AttributeError(f"module 'flbridge' has no attribute {name!r}")


def _register_device_name() -> None:
    """At import: PyTorch learns the "fl" device type, so `torch.device("fl")`
    parses and a first use without init() initializes lazily, as CUDA does
    (or says what is wrong).  If another library holds PrivateUse1, nothing
    happens here and init() reports it."""
    from . import backend
    try:
        backend.register()
    except FlbridgeError:
        pass


_register_device_name()
