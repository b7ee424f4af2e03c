"""fl tensors as CPU tensors over their own host bytes, for collectives that
run on the host (gloo).

The CPU stand-in of an fl tensor is a view of its storage's host buffer, so
staging costs at most one download per storage and no copy on the host:

* read: the host bytes are made current (one device->host copy if the device
  holds the only current copy; none if the host copy is current or the chip
  maps host memory, where host and device are one memory);
* write: the storage is marked written on the host up front, so the device
  side is refreshed once, lazily, when a kernel next needs it (one
  host->device copy, batched with that kernel's other uploads, or none on a
  mapping chip).  An output that covers its whole storage is not downloaded
  first: every byte is about to be overwritten.

Gloo needs dense tensors: a non-contiguous one goes through a contiguous
host copy, written back by :meth:`HostStage.finish` after the collective.
Stage inputs before outputs: an output may share a storage with an input
(an in-place all-gather), and staging it for writing first would skip the
download the input needs.
"""
from __future__ import annotations

import torch

from .xpu_tensor import XPUTensor, covers_storage, host_view


class HostStage:
    def __init__(self):
        self.copies: list = []     # (host view, contiguous stand-in) to write back after the collective
        self.chip = None           # the chip of the first fl tensor staged
        self.nbytes = 0            # bytes of fl tensors staged (for the collective counters)
        self.downloaded = 0        # device->host bytes the staging itself caused

    def read(self, t):
        if type(t) is not XPUTensor:
            return t
        self._note(t)
        v = self._host_view(t)
        return v if v.is_contiguous() else v.contiguous()

    def write(self, t, read: bool = True):
        """The stand-in of an output; `read`: its old values are an input too."""
        if type(t) is not XPUTensor:
            return t
        self._note(t)
        st = t._st
        if not read and not st.host_valid and covers_storage(t):
            if st.host is None:
                st.host = torch.empty(st.nbytes, dtype=torch.uint8)
                st.typed = None
            st.host_valid = True  # about to be overwritten: skip the download
        v = self._host_view(t)
        st.wrote_host()
        if v.is_contiguous():
            return v
        c = v.contiguous() if read else torch.empty(v.shape, dtype=v.dtype)
        self.copies.append((v, c))
        return c

    def _host_view(self, t):
        stats = t._st.chip.stats
        before = stats.d2h_bytes
        v = host_view(t)
        self.downloaded += stats.d2h_bytes - before
        return v

    def _note(self, t) -> None:
        if self.chip is None:
            self.chip = t._st.chip
        self.nbytes += t.numel() * t.element_size()

    def finish(self) -> None:
        """Writes non-contiguous outputs back (after the collective completed)."""
        for v, c in self.copies:
            v.copy_(c)
        self.copies.clear()


def tree_map(fn, x):
    """fn over the tensors of x (a tensor, or lists of them); other values kept."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, y) for y in x)
    return x


def has_fl(x) -> bool:
    if type(x) is XPUTensor:
        return True
    if isinstance(x, (list, tuple)):
        return any(has_fl(y) for y in x)
    return False
