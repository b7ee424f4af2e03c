"""Bring-up: flbridge.init() loads every discovered chip and registers the
`fl` device, torch.distributed's flccl backend and the observers.

The device type itself is registered when flbridge is imported
(register_device_name()), which also leaves init() as the lazy-init hook of
flbridge.devices: the first use of an fl device initializes, as the first
CUDA call does.
"""
from __future__ import annotations

import threading
import warnings

import torch

from .. import config
from ..devices import Chip, UnavailableChip
from ..devices import table as devices
from ..errors import FlbridgeError, SpecError, SpecWarning
from ..specs import discover, load_specs
from ..binding import init_runtime, load_runtime
from .registration import register

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
    with _LOCK:
        if devices.is_initialized():
            torch._C._set_multithreading_enabled(False)
            return devices.usable_chips()
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
        register()
        from ..distributed import register as register_flccl  # imports torch.distributed: only at init
        register_flccl()  # torch.distributed's "flccl" backend
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
        devices.install(chips, by_type)
        # the Python device guard reports one device: run backward on the
        # calling thread (see flbridge/backend/registration.py)
        torch._C._set_multithreading_enabled(False)
        if not chips:
            warnings.warn("flbridge: no usable device specs were loaded; torch.fl.is_available() is False",
                          stacklevel=2)
        from ..observe import autocompare as compare  # the observers load with the first init, not at import
        from ..observe import profiler
        profiler.install()   # device time for torch.profiler's fl activity
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


def register_device_name() -> None:
    """At import: PyTorch learns the "fl" device type, so `torch.device("fl")`
    parses and a first use without init() initializes lazily, as CUDA does
    (or says what is wrong).  If another library holds PrivateUse1, nothing
    happens here and init() reports it."""
    devices.set_lazy_init(init)
    try:
        register()
    except FlbridgeError:
        pass
