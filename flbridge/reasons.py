"""Why an op did not run natively, and how flbridge says so.

Shared by the native kernel checks, the route's fallback chain and the
vendor-error recovery, so a leaf module.
"""
from __future__ import annotations

import sys

import torch


class FallbackWarning(UserWarning):
    """An op did not run natively (said once per op, chip and kind of reason)."""


class Reason:
    """Why an op cannot run natively, and what would fix it.  `kind` is one
    of: no_kernel, forced, dtype, dims, device, argument, constraint, layout,
    vendor_error."""
    __slots__ = ("kind", "text", "fix", "dtype", "supported")

    def __init__(self, kind, text, fix="", dtype=None, supported=None):
        self.kind, self.text, self.fix, self.dtype, self.supported = kind, text, fix, dtype, supported

    def __str__(self):
        return self.text


# returned by a native run that failed in the vendor's code (inputs untouched)
FAILED = object()

_PKG_DIR = __file__.rsplit("/", 1)[0]
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def user_stacklevel() -> int:
    """stacklevel pointing warnings.warn at the first frame outside flbridge
    and torch (the user's line)."""
    f, level = sys._getframe(1), 1
    while f is not None and (f.f_code.co_filename.startswith(_PKG_DIR) or
                             f.f_code.co_filename.startswith(_TORCH_DIR)):
        f, level = f.f_back, level + 1
    return level
