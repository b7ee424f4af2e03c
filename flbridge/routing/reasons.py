"""Why an op did not run natively, and how flbridge says so.

Shared by the native kernel checks, the route's fallback chain and the
vendor-error recovery, so a leaf module.
"""
from __future__ import annotations


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
