"""``untyped_storage()`` of an fl tensor, working like a CUDA tensor's.

An XPUTensor is a wrapper subclass: PyTorch gives it a storage object
without data, whose methods raise "invalid python storage".  So the storage
object is given this subclass (same object, still a ``torch.UntypedStorage``),
whose methods act on the tensor's :class:`~flbridge.tensor.residency.Storage`,
shared by all its views:

* ``size``/``nbytes``/``resize_``: FSDP2 frees each unsharded parameter
  after use and re-allocates it before the next all-gather exactly that way
  (``storage.resize_(0)`` / ``storage.resize_(nbytes)``);
* ``data_ptr()``: the device address of the storage's first byte, as for
  CUDA (so ``t.data_ptr() - t.untyped_storage().data_ptr()`` is the byte
  offset); safetensors and HF ``save_pretrained`` find shared tensors (tied
  weights) with it;
* ``cpu()``, ``tolist()``, indexing, ``print``, ``clone()``, ``copy_()``
  and pickling: what ``torch.save`` (which writes ``storage.cpu()``) and
  debugging need.

A storage made on fl directly (``torch.UntypedStorage(n, device="fl:1")``,
``cpu_storage.to(device="fl:1")``, a ``map_location`` function, a
DataLoader worker's collate) is PyTorch's C++ constructor asking the
device's C++ allocator, which a Python backend cannot register: the process
died with SIGSEGV.  :func:`install` routes such a construction to a new fl
tensor's storage of that many bytes.
"""
from __future__ import annotations

import weakref

import torch

from .residency import make_resident

# storage object -> the Storage of the fl tensor that last asked for it
# (views share one storage object; set_ gives a tensor a new one)
_OWNER: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class FLUntypedStorage(torch.UntypedStorage):
    __slots__ = ()

    def _st(self):
        return _OWNER[self]

    def size(self) -> int:
        return self._st().nbytes

    def nbytes(self) -> int:
        return self._st().nbytes

    def resize_(self, nbytes: int):
        resize_bytes(self._st(), int(nbytes))
        return self

    def data_ptr(self) -> int:
        st = self._st()
        if not st.nbytes:
            return 0
        make_resident(st.chip, [st])
        return st.dev

    def cpu(self) -> torch.UntypedStorage:
        """A CPU copy of the bytes."""
        st = self._st()
        if not st.nbytes:
            return torch.UntypedStorage(0)
        st.ensure_host()
        return st.host.clone().untyped_storage()

    def to(self, *, device, non_blocking: bool = False):
        device = torch.device(device)
        if device.type == "cpu":
            return self.cpu()
        if device.type == "fl" and (device.index is None or device == self.device):
            return self
        return self.cpu().to(device=device)

    def _bytes(self) -> torch.Tensor:
        """The storage as a 1-D uint8 fl tensor (aliasing it)."""
        st = self._st()
        return torch.empty(0, dtype=torch.uint8, device=st.chip.device).set_(self, 0, (st.nbytes,), (1,))

    def copy_(self, source, non_blocking=None):
        src = source._untyped_storage if isinstance(source, torch.TypedStorage) else source
        if src.nbytes() != self.nbytes():
            raise RuntimeError(f"size mismatch, {self.nbytes()} vs {src.nbytes()}")
        if self.nbytes():
            data = src._bytes() if isinstance(src, FLUntypedStorage) else _host_bytes(src)
            self._bytes().copy_(data)
        return self

    def clone(self) -> "FLUntypedStorage":
        return storage_of(self._bytes().clone())

    def fill_(self, value):
        self._bytes().fill_(value)
        return self

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            raise NotImplementedError("slicing the storage of an fl tensor is not supported: slice the "
                                      "tensor, or .cpu() the storage first")
        return self._bytes()[idx].item()

    def __setitem__(self, idx, value):
        self._bytes()[idx] = value

    def tolist(self) -> list:
        return self.cpu().tolist()

    def __iter__(self):
        return iter(self.tolist())

    def __repr__(self):
        data = " " + "\n ".join(str(b) for b in self.tolist())
        return f"{data}\n[{torch.typename(self)}(device={self.device}) of size {self.nbytes()}]"

    __str__ = __repr__

    def __reduce__(self):
        # by value: its bytes on the CPU, made an fl storage again where it is loaded.
        # (UntypedStorage.__reduce__ calls torch.save on the storage, which does not take
        # this class for a storage (torch.is_storage tests the exact type) and pickles it
        # through __reduce__ again: endless recursion)
        # (the bytes as a uint8 CPU tensor: a bare CPU UntypedStorage pickles but does not
        # unpickle in torch 2.13, "type object 'torch.storage.UntypedStorage' has no attribute 'dtype'")
        return (_rebuild, (_host_bytes(self.cpu()), str(self.device)))

    def _write_file(self, *args, **kwargs):
        # torch.save's legacy format (and pickle, which uses it) writes the bytes from the host
        return self.cpu()._write_file(*args, **kwargs)


def _host_bytes(storage) -> torch.Tensor:
    """A CPU storage as a 1-D uint8 CPU tensor (aliasing it)."""
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _rebuild(host: torch.Tensor, device) -> FLUntypedStorage:
    """An fl storage on `device` holding the bytes of the uint8 CPU tensor `host`."""
    return storage_of(host.to(device))


def storage_of(t) -> FLUntypedStorage:
    s = torch.Tensor.untyped_storage(t)
    if type(s) is not FLUntypedStorage:
        s.__class__ = FLUntypedStorage
    _OWNER[s] = t._st
    return s


def owner_storage(storage):
    """The Storage of an fl tensor's untyped storage object, or None."""
    return _OWNER.get(storage) if type(storage) is FLUntypedStorage else None


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


def _fl_storage(construct, cls, args, device) -> FLUntypedStorage:
    if torch.utils.data.get_worker_info() is not None:
        # default_collate in a worker puts the batch into shared memory of the element's device
        raise RuntimeError(
            f"flbridge: a DataLoader worker process is batching tensors on {device}: fl tensors cannot be "
            f"handed between processes (there is no shared device memory). Return CPU tensors from the "
            f"Dataset and move each batch to the device in the training loop (batch.to(device)); "
            f"pin_memory=True works for that")
    if len(args) == 1 and isinstance(args[0], int):
        return storage_of(torch.empty(args[0], dtype=torch.uint8, device=device))
    return _rebuild(_host_bytes(construct(cls, *args)), device)   # the bytes given (a sequence, or none)


def install() -> None:
    """torch.UntypedStorage(..., device=<fl>) makes an fl storage (once per process)."""
    cls = torch.UntypedStorage
    if getattr(cls.__dict__.get("__new__"), "_flbridge", False):
        return
    construct = torch._C.StorageBase.__new__

    def __new__(cls, *args, device=None, **kwargs):
        if device is not None and not kwargs:
            dev = torch.device(device) if not isinstance(device, torch.device) else device
            if dev.type == "fl":
                return _fl_storage(construct, cls, args, dev)
        if device is not None:
            kwargs["device"] = device
        return construct(cls, *args, **kwargs)
    __new__._flbridge = True
    cls.__new__ = __new__
