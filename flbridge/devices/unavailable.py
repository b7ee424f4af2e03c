"""The slot of a chip whose spec has problems.

Device indices are positions in discovery order (docs/device.md), so a
broken spec keeps its index and every other chip keeps its own: a script
using ``fl:1`` never silently lands on another chip because an earlier spec
broke.  The slot holds an :class:`UnavailableChip`.  What every chip must
answer for whole-machine calls (``torch.fl.empty_cache()``,
``synchronize()``, ``manual_seed_all()``, ``flbridge.reset_stats()``) it
answers as an empty device; anything that would run on it (making or using
a tensor there, its properties, its spec) raises
:class:`~flbridge.errors.DeviceUnavailableError` naming the spec file and
its problems.  It has no ``device``: tensors are never made on it.
"""
from __future__ import annotations

import torch

from ..errors import DeviceUnavailableError
from .stats import ChipStats


class _Refuses:
    """Answers the listed no-op calls; any other attribute raises the chip's error."""

    def __init__(self, chip, **answers):
        self._chip, self._answers = chip, answers

    def __getattr__(self, name):
        answers = self.__dict__.get("_answers", {})
        if name in answers:
            return answers[name]
        if name.startswith("__") or "_chip" not in self.__dict__:
            raise AttributeError(name)
        raise self._chip.error()


class UnavailableChip:
    available = False

    def __init__(self, index: int, file: str, problems: list[str], device_type: str | None = None):
        self.index = index
        # no `device`: asking for it (to make or move a tensor here, to enter
        # flbridge.device(...)) raises the error below
        self.file = file
        self.problems = list(problems)
        # the spec's name when it parsed and is not another chip's; a label otherwise
        self.device_type = device_type or f"<unavailable {file.rsplit('/', 1)[-1]}>"
        self.generator = torch.Generator()
        self.generator.manual_seed(torch.initial_seed())
        self.stats = ChipStats()
        self.allocator = _Refuses(self, allocated=0, cached=0, peak=0, empty_cache=lambda: 0,
                                  reset_peak=lambda: None)
        self.runtime = _Refuses(self, synchronize=lambda: None, reset_counters=lambda: None,
                                shutdown=lambda: None, counters=lambda: {}, mem_info=lambda: None,
                                ops={}, device_type=self.device_type)
        self.warned: set = set()

    def error(self) -> DeviceUnavailableError:
        return DeviceUnavailableError(self.index, self.device_type, self.file, self.problems)

    def __getattr__(self, name):
        # only attributes not set above reach here: spec, routes, constant(), ...
        if name.startswith("__"):
            raise AttributeError(name)
        raise self.error()

    def __repr__(self) -> str:
        return f"<UnavailableChip fl:{self.index} {self.device_type} ({self.file})>"

    def stats_dict(self) -> dict:
        return {"device": f"fl:{self.index}", "device_type": self.device_type, "available": False,
                "file": self.file, "problems": list(self.problems)}

    def memory_allocated(self) -> int:
        return 0

    def memory_reserved(self) -> int:
        return 0
