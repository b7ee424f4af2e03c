"""Where the packaged specs and simulator libraries live.

An installed wheel carries them under ``flbridge/_bundled/`` with the same
relative layout as the source tree (``device_specs/`` beside ``native_sim/``),
so the shipped specs' relative ``runtime_so``/``runtime_header`` paths resolve
in both a checkout (editable install) and an installed package.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED = PACKAGE_DIR / "_bundled"


def source_root() -> Path | None:
    """The checkout holding this package, when running from one."""
    root = PACKAGE_DIR.parent
    if (root / "native_sim" / "build.py").is_file() and (root / "device_specs").is_dir():
        return root
    return None


def data_root() -> Path:
    """The folder holding device_specs/ and native_sim/."""
    if (BUNDLED / "device_specs").is_dir():
        return BUNDLED
    root = source_root()
    if root is not None:
        return root
    return BUNDLED  # missing; callers report it


def default_spec_dir() -> Path:
    return data_root() / "device_specs"


def native_build_dir() -> Path:
    return data_root() / "native_sim" / "build"
