"""`tensor.pin_memory()` and `DataLoader(pin_memory=True)` with fl as the
accelerator.

PyTorch asks the accelerator's C++ hooks for a pinned-memory allocator,
which torch 2.13 does not let a Python backend provide, so pinning fails
with an internal NotImplementedError.  flbridge registers its own CPU kernels
for `_pin_memory` and `is_pinned` (torch.library): pinning for an fl device
copies into fresh host memory that flbridge remembers as pinned, as CUDA's
pin_memory copies into page-locked memory; other devices get PyTorch's own
kernel.  Host memory needs no page-locking here: flbridge's transfers go
through the vendor runtime's copy (or map) functions from any host buffer.
"""
from __future__ import annotations

import threading
import weakref

import torch

_PINNED: set = set()          # data pointers of host storages flbridge pinned
_LOCK = threading.Lock()
_DEFAULT = torch._C.DispatchKey.CompositeExplicitAutograd


def _for_fl(device) -> bool:
    if device is None:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "fl"
    return torch.device(device).type == "fl"


def _pin_memory(self, device=None):
    if not _for_fl(device):
        return torch.ops.aten._pin_memory.default._op_dk(_DEFAULT, self, device)
    out = torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device="cpu")
    out.copy_(self)
    ptr = out.untyped_storage().data_ptr()
    if ptr:
        with _LOCK:
            _PINNED.add(ptr)
        weakref.finalize(out, _forget, ptr)
    return out


def _forget(ptr: int) -> None:
    with _LOCK:
        _PINNED.discard(ptr)


def _is_pinned(self, device=None):
    ptr = self.untyped_storage().data_ptr()
    if ptr and ptr in _PINNED:
        return True
    if not _for_fl(device):
        return torch.ops.aten.is_pinned.default._op_dk(_DEFAULT, self, device)
    return False


def register(lib) -> None:
    lib.impl("_pin_memory", _pin_memory, "CPU")
    lib.impl("is_pinned", _is_pinned, "CPU")
