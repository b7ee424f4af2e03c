"""The `fl` PyTorch device: PrivateUse1 registration in pure Python and the
`torch.fl` device module.  (Chip lookup is in flbridge.devices, the
`flbridge.device(...)` context and `flbridge.wrap(...)` in flbridge.backend.context.)

Facts this relies on (torch 2.13): `_setup_privateuseone_for_python_backend`
renames PrivateUse1 and installs a Python device guard (without it, backward
aborts the process); `empty.memory_format` / `empty_strided` kernels on
PrivateUse1 make every factory and `.to("fl")` work; the Python guard reports
one device, so backward must run on the calling thread (multithreaded
backward would look for a per-device queue that does not exist for fl:1+).
"""
from __future__ import annotations

import torch

from ..devices import checkpoint, chip_for, current
from ..devices import table as devices
from ..errors import FlbridgeError
from ..routing import install as install_dispatch
from ..routing import nested
from ..routing import special as crossings
from ..routing import views as metaops
from ..tensor import Storage, XPUTensor, dense_strides, new_tensor, paramdata, untyped_storage
from . import accelerator, dataparallel, failsafe, pinned, quantized
from .torch_fl import FL_MODULE


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return bool(devices.usable_chips())

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    # also takes over an error the autograd engine left pending (flbridge.backend.failsafe)
    type_ = failsafe.guard_type


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    chip = chip_for(device if device is not None else "fl")
    dtype = dtype or torch.get_default_dtype()
    if memory_format is not None and memory_format not in (torch.contiguous_format, torch.preserve_format):
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    else:
        strides = dense_strides([int(x) for x in size])
    return new_tensor(chip, tuple(size), tuple(strides), dtype)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    chip = chip_for(device if device is not None else "fl")
    return new_tensor(chip, tuple(size), tuple(stride), dtype or torch.get_default_dtype())


def _host_factory(op):
    """A PrivateUse1 kernel for a factory with no tensor argument (so no
    __torch_dispatch__): made on the CPU, then adopted by the chip as its
    host bytes (uploaded when a kernel first needs them)."""
    def kernel(*args, **kwargs):
        chip = chip_for(kwargs.get("device") or "fl")
        cpu = op(*args, **dict(kwargs, device="cpu"))
        if cpu._is_zerotensor():
            # an "efficient" zero tensor has no bytes at all; fl tensors are
            # always dense: a real one (same values)
            cpu = torch.zeros(cpu.shape, dtype=cpu.dtype, device="cpu")
        st = Storage.adopt_host(chip, cpu)
        return new_tensor(chip, tuple(cpu.shape), cpu.stride(), cpu.dtype, storage=st,
                          offset=cpu.storage_offset())
    return kernel


def _unsupported_factory(what):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"flbridge: {what} tensors are not supported on fl devices (only dense, "
                                  f"strided ones); create it on the CPU")
    return kernel


# Factories PyTorch dispatches on the device argument alone (besides empty /
# empty_strided); tests/test_device.py finds them all from the dispatcher.
HOST_FACTORIES = ("_efficientzerotensor", "tril_indices", "triu_indices", "from_file", "_make_dep_token")
UNSUPPORTED_FACTORIES = {"_empty_affine_quantized": "quantized", "_sparse_coo_tensor_with_dims": "sparse",
                         "_cudnn_init_dropout_state": "cuDNN dropout state"}


def _copy_from(self, dst, non_blocking=False):
    return crossings.copy_(torch.ops.aten.copy_.default, (dst, self), {})


def _copy_from_and_resize(self, dst):
    if tuple(dst.shape) != tuple(self.shape) and type(dst) is XPUTensor:
        metaops.resize_(torch.ops.aten.resize_.default, (dst, list(self.shape)), {})
    elif tuple(dst.shape) != tuple(self.shape):
        dst.resize_(self.shape)
    return crossings.copy_(torch.ops.aten.copy_.default, (dst, self), {})


_LIBRARY: list = []


def _refuse_dlpack_export() -> None:
    """torch.to_dlpack(fl_tensor) (a C function, no dispatch) exported the
    wrapper's empty storage: a capsule that became a broken tensor.  It
    raises XPUTensor.__dlpack__'s error instead."""
    import torch.utils.dlpack as dlpack
    to_dlpack = dlpack.to_dlpack
    if getattr(to_dlpack, "_flbridge", False):
        return

    def to_dlpack_(tensor, *args, **kwargs):
        if type(tensor) is XPUTensor:
            tensor.__dlpack__()
        return to_dlpack(tensor, *args, **kwargs)
    to_dlpack_._flbridge = True
    to_dlpack_.__doc__ = to_dlpack.__doc__
    dlpack.to_dlpack = torch.to_dlpack = to_dlpack_


def register() -> None:
    """Registers PrivateUse1 as `fl` (once per process)."""
    if devices.is_registered():
        return
    name = torch._C._get_privateuse1_backend_name()
    if name == "fl":
        raise FlbridgeError("PrivateUse1 is already registered as 'fl' by someone other than this "
                            "flbridge instance (was flbridge imported twice under different names?)")
    if name != "privateuseone":
        raise FlbridgeError(f"PrivateUse1 is already taken by another library as {name!r}; flbridge "
                            f"needs it for the 'fl' device. Only one PrivateUse1 backend can exist per "
                            f"process: run flbridge in a process that does not import that library.")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    install_dispatch(XPUTensor)   # every aten op on an fl tensor goes to flbridge.routing.dispatch.dispatch
    _setup_privateuseone_for_python_backend("fl", backend_module=FL_MODULE, hook=_Hooks(), device_guard=_Guard())
    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten
    lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    # torch.tensor(data, device="fl") copies with Python dispatch excluded,
    # which reaches the backend's _copy_from
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    for name in HOST_FACTORIES:
        op = getattr(aten, name).default
        lib.impl(name, _host_factory(op), "PrivateUse1")
    for name, what in UNSUPPORTED_FACTORIES.items():
        lib.impl(name, _unsupported_factory(what), "PrivateUse1")
    pinned.register(lib)
    quantized.register(lib)   # quantized tensors and models: one clear error at the move
    nested.install()          # jagged nested tensors over fl values: one clear error when made
    _LIBRARY.append(lib)   # the registrations live as long as the Library object
    from torch.optim import optimizer as _opt
    if XPUTensor not in _opt._foreach_supported_types:
        _opt._foreach_supported_types.append(XPUTensor)
    # `.data =` with fl tensors; Module.to / .cpu / .half keep each parameter
    # object (tied weights stay tied) without a process-wide flag
    paramdata.install()
    untyped_storage.install()   # storages made on fl (map_location functions, collate in workers)
    _refuse_dlpack_export()
    checkpoint.register()
    failsafe.install()   # an exception during backward reaches backward()'s caller
    current.install()    # "fl" without an index is the current fl device
    accelerator.install()   # torch.accelerator.* answered by torch.fl
    dataparallel.install()  # nn.DataParallel's scatter/gather/broadcast for fl tensors
    from .. import amp  # autocast kernels, torch.fl.amp, get_amp_supported_dtype
    from ..compiler.backend import install as install_compile
    amp.install(FL_MODULE)
    install_compile()   # torch.compile on fl: the default backend's routing, Dynamo's skip list
    devices.mark_registered()
