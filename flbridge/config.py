"""FLBRIDGE_* environment knobs, read at init() (and by reload()).

Every variable starting with FLBRIDGE_ is checked: a name flbridge does not
know is warned about, with the closest known name, so a typo never silently
does nothing.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass, field

from .errors import ConfigWarning
from .suggest import closest

KNOWN = {
    "FLBRIDGE_DEVICE_DIR": "folders holding device spec YAML files (path list)",
    "FLBRIDGE_FALLBACK": "0: never fall back to the CPU; raise UnsupportedOpError instead (default 1)",
    "FLBRIDGE_FORCE_FALLBACK": "comma-separated regexes of op names sent to the CPU (bisect a kernel)",
    "FLBRIDGE_LOG": "comma-separated: dispatch, fallback, transfer (or all); printed on stderr",
    "FLBRIDGE_WARN": "fallback warnings: once (default, per op/chip/reason), always, or off",
    "FLBRIDGE_ZERO_COPY": "0: never map host memory, always copy (default 1)",
    "FLBRIDGE_CACHING_ALLOCATOR": "0: free device memory at once instead of caching it (default 1)",
    "FLBRIDGE_AUTOCOMPARE": "1: run every op that ran on a chip again on the CPU and compare (or comma-separated "
                            "regexes of op names); the report goes to stderr at exit",
    "FLBRIDGE_AUTOCOMPARE_REPORT": "file to write the autocompare report to as JSON at exit",
    "FLBRIDGE_STRICT_SPECS": "1: a spec with problems makes init() raise; default 0: its chip is unavailable "
                             "and the others load",
    "FLBRIDGE_HOST_COPY_LIMIT": "the largest storage (bytes; K, M, G suffixes; default 1M) that keeps a host "
                                "copy while its device side is current, on chips that copy (larger ones keep "
                                "one copy, on the device, as CUDA does); 'inf' keeps every host copy",
}
LOG_TOPICS = ("dispatch", "fallback", "transfer")

# the `flbridge` logger: FLBRIDGE_LOG topics print through it (see _log_to_stderr)
log = logging.getLogger("flbridge")


@dataclass
class Config:
    fallback: bool = True
    force_fallback: list = field(default_factory=list)   # compiled regexes
    log: frozenset = frozenset()
    warn: str = "once"
    zero_copy: bool = True
    caching_allocator: bool = True
    strict_specs: bool = False
    autocompare: str = ""          # "", "1" or op-name regexes
    autocompare_report: str = ""
    host_copy_limit: float = 1 << 20   # bytes; storages above it keep no host copy beside a current device one

    def forced(self, qualname: str) -> bool:
        return any(r.search(qualname) for r in self.force_fallback)


def _flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    v = v.strip().lower()
    if v in ("0", "false", "no", "off"):
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    warnings.warn(f"{name}={os.environ[name]!r} is not 0/1; using {int(default)}", ConfigWarning, stacklevel=3)
    return default


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _bytes(name: str, default: float) -> float:
    v = os.environ.get(name, "").strip().lower()
    if not v:
        return default
    if v in ("inf", "infinity", "unlimited"):
        return float("inf")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", v)
    if m is None or m.group(2) not in _UNITS:
        warnings.warn(f"{name}={os.environ[name]!r} is not a size like 512K, 4M or inf; using {int(default)}",
                      ConfigWarning, stacklevel=3)
        return default
    return float(m.group(1)) * _UNITS[m.group(2)]


def load() -> Config:
    for name in os.environ:
        if name.startswith("FLBRIDGE_") and name not in KNOWN:
            near = closest(name, KNOWN)
            hint = f"; did you mean {near}?" if near else f" (known: {', '.join(KNOWN)})"
            warnings.warn(f"unknown environment variable {name} is ignored{hint}", ConfigWarning, stacklevel=3)
    cfg = Config()
    cfg.fallback = _flag("FLBRIDGE_FALLBACK", True)
    cfg.zero_copy = _flag("FLBRIDGE_ZERO_COPY", True)
    cfg.caching_allocator = _flag("FLBRIDGE_CACHING_ALLOCATOR", True)
    cfg.strict_specs = _flag("FLBRIDGE_STRICT_SPECS", False)
    pats = os.environ.get("FLBRIDGE_FORCE_FALLBACK", "")
    for p in filter(None, (x.strip() for x in pats.split(","))):
        try:
            cfg.force_fallback.append(re.compile(p))
        except re.error as e:
            warnings.warn(f"FLBRIDGE_FORCE_FALLBACK: {p!r} is not a regex ({e}); ignored", ConfigWarning,
                          stacklevel=3)
    topics = {t.strip().lower() for t in os.environ.get("FLBRIDGE_LOG", "").split(",") if t.strip()}
    if "all" in topics:
        topics = set(LOG_TOPICS)
    for t in topics - set(LOG_TOPICS):
        warnings.warn(f"FLBRIDGE_LOG: unknown topic {t!r} (known: {', '.join(LOG_TOPICS)}, all)",
                      ConfigWarning, stacklevel=3)
    cfg.log = frozenset(topics & set(LOG_TOPICS))
    w = os.environ.get("FLBRIDGE_WARN", "once").strip().lower() or "once"
    if w not in ("once", "always", "off"):
        warnings.warn(f"FLBRIDGE_WARN={w!r}: expected once, always or off; using once", ConfigWarning,
                      stacklevel=3)
        w = "once"
    cfg.warn = w
    cfg.host_copy_limit = _bytes("FLBRIDGE_HOST_COPY_LIMIT", cfg.host_copy_limit)
    cfg.autocompare = os.environ.get("FLBRIDGE_AUTOCOMPARE", "").strip()
    cfg.autocompare_report = os.environ.get("FLBRIDGE_AUTOCOMPARE_REPORT", "").strip()
    return cfg


CONFIG = Config()


def reload() -> Config:
    """Re-reads the environment (init() does this)."""
    new = load()
    CONFIG.__dict__.update(new.__dict__)
    _log_to_stderr(CONFIG.log)
    return CONFIG


class _StderrHandler(logging.Handler):
    """FLBRIDGE_LOG's lines on stderr, unless the program's own logging
    configuration prints them already (a root handler that takes INFO)."""

    def emit(self, record):
        if any(h.level <= record.levelno for h in logging.getLogger().handlers):
            return
        try:
            sys.stderr.write(f"flbridge: {record.getMessage()}\n")
        except Exception:  # noqa: BLE001 - a closed stderr must not break the op being logged
            self.handleError(record)


def _log_to_stderr(topics) -> None:
    """Setting FLBRIDGE_LOG is enough to see its lines: the flbridge logger
    logs at INFO and prints to stderr by itself (Python drops INFO records
    when logging is not configured)."""
    for h in [h for h in log.handlers if isinstance(h, _StderrHandler)]:
        log.removeHandler(h)
    if topics:
        log.addHandler(_StderrHandler())
        if log.level == logging.NOTSET or log.level > logging.INFO:
            log.setLevel(logging.INFO)
