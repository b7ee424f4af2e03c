"""Loading checkpoints straight onto a chip: torch.load(..., map_location="fl:1").

torch.load restores each storage with ``storage.to(device)``, which for a
device without a C++ allocator (PrivateUse1 from Python) crashes the
interpreter.  flbridge registers a restore location for "fl" / "fl:N" that
is tried first: the loaded CPU bytes are kept and tagged with their
destination (:class:`DeviceBoundStorage`, whose ``device`` says "fl:N"), so
torch's own ``_rebuild_tensor`` creates an fl tensor on that device and
``set_``s it to the bytes; :func:`adopt` turns that ``set_`` into an fl
tensor whose host side is those bytes (no copy; uploaded or mapped when a
kernel first needs them).  Tensors that shared a storage in the checkpoint
share one on the chip.  Works with and without ``weights_only=True``, for
map_location given as a string, a torch.device, a dict or a callable that
returns such a location.
"""
from __future__ import annotations

import re

import torch
import torch.serialization as _ser

from ..tensor import Storage, set_geometry
from .table import chip_for

_LOCATION = re.compile(r"^fl(:\d+)?$")


class DeviceBoundStorage(torch.UntypedStorage):
    """CPU bytes from a checkpoint on their way to an fl device.  Only its
    `device` differs from a CPU storage: torch.load reads it to decide where
    the rebuilt tensor lives."""

    @property
    def device(self):
        return self._fl_device


def _tag(storage):
    return None  # fl tensors are saved as CPU tensors (XPUTensor.__reduce_ex__)


def _restore(storage, location):
    if not isinstance(location, str) or not _LOCATION.match(location):
        return None
    device = chip_for(torch.device(location)).device  # raises a clear error for a missing chip
    untyped = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
    if untyped.device.type != "cpu":
        untyped = untyped.cpu()
    untyped.__class__ = DeviceBoundStorage
    untyped._fl_device = device
    untyped._fl_storage = None
    return untyped


def register() -> None:
    # before torch's own privateuse1 entry (priority 23), after the CPU one (10)
    if not any(entry[2] is _restore for entry in _ser._package_registry):
        _ser.register_package(15, _tag, _restore)


def is_device_bound(storage) -> bool:
    return isinstance(storage, DeviceBoundStorage)


def adopt(t, storage: DeviceBoundStorage, offset: int, size, stride) -> None:
    """t.set_(storage, offset, size, stride) for an fl tensor t: t's bytes
    become the checkpoint's (shared by every tensor set to this storage)."""
    chip = t._st.chip
    if storage._fl_device != chip.device:
        raise RuntimeError(f"set_: the storage is bound for {storage._fl_device}, the tensor is on {chip.device}")
    st = storage._fl_storage
    if st is None:
        host = torch.empty(0, dtype=torch.uint8, device="cpu")
        host.set_(storage)
        st = Storage.adopt_host(chip, host)
        storage._fl_storage = st
    t._st = st
    set_geometry(t, tuple(size), tuple(stride) if stride else _dense(size), int(offset))


def _dense(size):
    out, acc = [], 1
    for s in reversed(size):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))
