"""Finding and loading specs: discover() lists the spec files of
FLBRIDGE_DEVICE_DIR or the packaged device_specs/ in a stable order (folders
in the order given, files sorted by name; device index = position), and
load_spec() / load_specs() parse and check them (following `extends`)."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import _paths
from ..errors import SpecDirWarning, SpecError, SpecProblem
from .checks import check_spec
from .reader import is_file, load_with_extends
from .schema import DEVICE_TYPE, DeviceSpec


def load_spec(path: str | Path, *, static: bool = False) -> DeviceSpec:
    """Parses and checks one spec file (and what it extends).  `static`:
    without importing `python:` fallback modules."""
    spec, problems, _ = _load(Path(path), static)
    if problems:
        raise SpecError(problems)
    return spec


def _load(p: Path, static: bool) -> tuple[DeviceSpec | None, list[SpecProblem], str | None]:
    """(spec, problems, the device_type the file names even if it fails)."""
    problems: list[SpecProblem] = []
    data = load_with_extends(p, problems)
    dt = data.get("device_type") if data is not None else None
    claimed = dt if isinstance(dt, str) and DEVICE_TYPE.match(dt) else None
    if data is None or problems:
        return None, problems or [SpecProblem(str(p), 1, "<file>", "cannot load")], claimed
    spec, problems = check_spec(data, Path(data.file), imports=not static)
    return spec, problems, claimed


# ------------------------------------------------------------- discovery


def spec_dirs() -> tuple[list[Path], str]:
    """The folders to search and where that list came from."""
    env = os.environ.get("FLBRIDGE_DEVICE_DIR")
    if env:
        return [Path(os.path.expanduser(p)) for p in env.split(os.pathsep) if p.strip()], "FLBRIDGE_DEVICE_DIR"
    return [_paths.default_spec_dir()], "the packaged device_specs/"


def discover() -> list[Path]:
    """Spec files in a stable order: folders as listed, files by name."""
    dirs, origin = spec_dirs()
    found = []
    for d in dirs:
        why = not_a_folder(d)
        if why:
            warnings.warn(f"flbridge: device spec folder {d} {why} (from {origin}); no devices are loaded "
                          f"from it. Set FLBRIDGE_DEVICE_DIR to a folder holding device YAML files "
                          f"(several folders: separate with '{os.pathsep}').", SpecDirWarning, stacklevel=3)
            continue
        try:
            found.extend(sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml") and is_file(p)))
        except OSError as e:
            warnings.warn(f"flbridge: cannot list device spec folder {d} (from {origin}): {e.strerror or e}",
                          SpecDirWarning, stacklevel=3)
    return found


def not_a_folder(d: Path) -> str | None:
    try:
        if d.is_dir():
            return None
        if d.exists():
            hint = f"; to load only this spec, set FLBRIDGE_DEVICE_DIR={d.parent} or move it into a " \
                   f"folder of its own" if d.suffix in (".yaml", ".yml") else ""
            return f"is a file, not a folder{hint}"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return "does not exist"


@dataclass
class SpecSlot:
    """One discovered spec file: its device index (its position in discovery
    order), and its spec or the error that keeps it from loading."""
    index: int
    path: Path
    spec: DeviceSpec | None = None
    error: Exception | None = None     # SpecError / RuntimeLoadError / DeviceError
    claimed: str | None = None         # the device_type the file names, even when it fails

    @property
    def problems(self) -> list[str]:
        e = self.error
        if e is None:
            return []
        subs = getattr(e, "problems", None) or [e]
        return [str(p) if isinstance(p, SpecProblem) else
                (f"{p.file}:{p.line}: {p.field}: {p.message}" if getattr(p, "file", "") else str(p))
                for p in subs]

    @property
    def device_type(self) -> str | None:
        return self.spec.device_type if self.spec is not None else self.claimed


def load_specs(paths: list[Path], *, static: bool = False) -> list[SpecSlot]:
    """load_spec for each file; a problem stays with its file.  Two specs
    claiming one device_type: the first in `paths` keeps it, the others get
    a SpecError naming both files."""
    slots = []
    seen: dict[str, DeviceSpec] = {}
    for i, p in enumerate(paths):
        slot = SpecSlot(i, Path(p))
        slot.spec, problems, slot.claimed = _load(Path(p), static)
        if problems:
            slot.error = SpecError(problems)
        if slot.spec is not None:
            first = seen.setdefault(slot.spec.device_type, slot.spec)
            if first is not slot.spec:
                slot.error = SpecError(_duplicate(slot.spec, first))
        slots.append(slot)
    return slots


def _duplicate(s: DeviceSpec, first: DeviceSpec) -> SpecProblem:
    return SpecProblem(s.file, s.locations.get("device_type", (s.file, 1))[1], "device_type",
                       f"{s.device_type!r} is also claimed by {first.file}:"
                       f"{first.locations.get('device_type', ('', 1))[1]}; each chip needs its own "
                       f"device_type (the first one loads)")


def check_unique(specs: list[DeviceSpec]) -> None:
    """Raises SpecError when two specs claim one device_type."""
    seen: dict[str, DeviceSpec] = {}
    problems = []
    for s in specs:
        first = seen.setdefault(s.device_type, s)
        if first is not s:
            problems.append(_duplicate(s, first))
    if problems:
        raise SpecError(problems)

