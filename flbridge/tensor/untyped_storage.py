"""``untyped_storage()`` of an fl tensor, with a working ``resize_``.

An XPUTensor is a wrapper subclass: PyTorch gives it a storage object
without data, whose ``resize_`` raises "invalid python storage".  FSDP2
frees each unsharded parameter after use and re-allocates it before the
next all-gather exactly that way (``storage.resize_(0)`` /
``storage.resize_(nbytes)``), so the storage object is given this subclass
(same object, still a ``torch.UntypedStorage``), whose ``size``/``nbytes``
/``resize_`` act on the tensor's :class:`~flbridge.tensor.residency.Storage`,
shared by all its views.
"""
from __future__ import annotations

import weakref

import torch

# storage object -> the fl tensor that last asked for it (read at call time:
# set_ can give a tensor another Storage)
_OWNER: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class FLUntypedStorage(torch.UntypedStorage):
    __slots__ = ()

    def _st(self):
        t = _OWNER[self]()
        if t is None:
            raise RuntimeError("the fl tensor that owned this storage was freed")
        return t._st

    def size(self) -> int:
        return self._st().nbytes

    def nbytes(self) -> int:
        return self._st().nbytes

    def resize_(self, nbytes: int):
        resize_bytes(self._st(), int(nbytes))
        return self


def storage_of(t) -> FLUntypedStorage:
    s = torch.Tensor.untyped_storage(t)
    if type(s) is not FLUntypedStorage:
        s.__class__ = FLUntypedStorage
    _OWNER[s] = weakref.ref(t)
    return s


def resize_bytes(st, nbytes: int) -> None:
    """Resizes a Storage like PyTorch's storage resize_: the first
    min(old, new) bytes are kept; 0 frees the host and device memory."""
    if nbytes < 0:
        raise ValueError(f"storage size must be >= 0, got {nbytes}")
    if nbytes == st.nbytes:
        return
    keep = min(st.nbytes, nbytes)
    host = None
    if keep:
        st.ensure_host()
        host = torch.empty(nbytes, dtype=torch.uint8)
        host[:keep].copy_(st.host[:keep])
    st.drop_device()
    st.host, st.typed = host, None
    st.host_valid = host is not None   # grown bytes past `keep` are undefined, as in PyTorch
    st.dev_valid = False
    st.nbytes = nbytes
    st.version += 1
