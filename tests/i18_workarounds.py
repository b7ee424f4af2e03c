"""Test-side workarounds for flbridge defects that issue 18 fixes (branch
i18); the integration tests apply them in their rank processes until that
branch is merged, then this file goes.  Nothing in flbridge/ uses it.

A. Module.to() on fl parameters swaps tensors (the process-wide
   swap-on-conversion flag flbridge sets at import, and, since fl tensors
   are traceable wrapper subclasses, always), and swap_tensors refuses
   parameters that have weakrefs: DeepSpeed's debug name map puts a
   weakref.finalize on every parameter before its engine calls
   module.to(device); and load_state_dict swaps too, which refuses ZeRO's
   parameters (views of its flat buffers).  Workaround: that map keeps its
   names without the finalizers, and the flag is turned off once DeepSpeed
   is imported.
B. `param.data = view_of_flat_buffer` (ZeRO's flat partitions) does not carry
   flbridge's storage (`_st`) over.  Workaround: a `data` property on
   XPUTensor whose setter also takes the new tensor's storage.
C. `untyped_storage().data_ptr()` of an fl tensor fails, which safetensors
   and huggingface_hub (HF checkpoints) call.  Workaround: the storage
   object's data_ptr is the device address of flbridge's storage.  And
   since fl tensors are traceable wrapper subclasses (torch.compile on fl),
   huggingface_hub identifies their storages through __tensor_flatten__'s
   inner stand-in, whose storage has no data pointer either: its storage
   helpers answer from the fl tensor itself.
"""
import torch


def apply() -> None:
    _data_property()
    _storage_data_ptr()
    from flbridge.integrations import when_imported
    when_imported("huggingface_hub.serialization._torch", _hub_storage_ids)


def _data_property() -> None:
    from flbridge.tensor import XPUTensor
    if "data" in XPUTensor.__dict__:
        return
    base = torch._C.TensorBase.data

    def _get(self):
        return base.__get__(self)

    def _set(self, new):
        base.__set__(self, new)
        if type(new) is XPUTensor:
            self._st = new._st
            for k in ("_d", "_dd", "_k", "_hv"):
                self.__dict__.pop(k, None)

    XPUTensor.data = property(_get, _set)


def for_deepspeed() -> None:
    """Workaround A, applied when deepspeed is imported (DS_ACCELERATOR is
    read then: importing it here would be too early for a CPU run)."""
    from flbridge.integrations import when_imported
    when_imported("deepspeed.utils.debug", _no_finalizers)


def _no_finalizers(debug) -> None:
    # and load_state_dict copies into ZeRO's parameters (views of its flat buffers) instead of swapping
    torch.__future__.set_swap_module_params_on_conversion(False)
    if getattr(debug.WeakIdNameMap.__setitem__, "_i18_workaround", False):
        return

    def __setitem__(self, obj, name):   # the names without a weakref.finalize on the parameter
        self._names[id(obj)] = name

    __setitem__._i18_workaround = True
    debug.WeakIdNameMap.__setitem__ = __setitem__


def _storage_data_ptr() -> None:
    from flbridge.tensor.residency import make_resident
    from flbridge.tensor.untyped_storage import FLUntypedStorage
    if "data_ptr" in FLUntypedStorage.__dict__:
        return

    def data_ptr(self):
        st = self._st()
        if not st.nbytes:
            return 0
        make_resident(st.chip, [st])
        return st.dev

    FLUntypedStorage.data_ptr = data_ptr


def ds_rank(rank: int, world: int, cfg, init_method: str) -> None:
    """flbridge.demos.deepspeed's spawned rank, after the workarounds."""
    apply()
    for_deepspeed()
    from flbridge.demos.deepspeed import train_rank
    train_rank(rank, world, cfg, init_method)


def _hub_storage_ids(hub) -> None:
    from flbridge.tensor import XPUTensor
    if getattr(hub._get_unique_id, "_i18_workaround", False):
        return

    def storage_id(t):
        return t.untyped_storage().data_ptr()

    def storage_size(t):
        return t.untyped_storage().nbytes()

    def complete(t):
        return t.data_ptr() == storage_id(t) and t.nelement() * t.element_size() == storage_size(t)

    for name, ours in (("_get_unique_id", storage_id), ("storage_ptr", storage_id),
                       ("get_torch_storage_size", storage_size), ("_is_complete", complete)):
        orig = getattr(hub, name)

        def wrapper(tensor, *a, _orig=orig, _ours=ours, **kw):
            return _ours(tensor) if type(tensor) is XPUTensor else _orig(tensor, *a, **kw)

        wrapper._i18_workaround = True
        setattr(hub, name, wrapper)
