"""Test-side workarounds for flbridge defects that issue 18 fixes (branch
i18); the integration tests apply them in their rank processes until that
branch is merged, then this file goes.  Nothing in flbridge/ uses it.

A. flbridge sets torch.__future__.set_swap_module_params_on_conversion(True)
   at import, and swap_tensors refuses parameters that have weakrefs:
   DeepSpeed puts a weakref.finalize on every parameter before its engine
   calls module.to(device).  Workaround: deepspeed.initialize moves the model
   to fl first (swapping, no weakrefs yet), then turns the flag off, so the
   engine's same-device .to() and dtype casts take the `.data =` path.
B. `param.data = view_of_flat_buffer` (ZeRO's flat partitions) does not carry
   flbridge's storage (`_st`) over.  Workaround: a `data` property on
   XPUTensor whose setter also takes the new tensor's storage.
C. `untyped_storage().data_ptr()` of an fl tensor fails, which safetensors
   and huggingface_hub (HF checkpoints) call.  Workaround: the storage
   object's data_ptr is the device address of flbridge's storage.
"""
import torch


def apply() -> None:
    _data_property()
    _storage_data_ptr()


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


def deepspeed_initialize() -> None:
    """Wraps deepspeed.initialize when deepspeed is imported (DS_ACCELERATOR
    is read then: importing it here would be too early for a CPU run)."""
    from flbridge.integrations import when_imported
    when_imported("deepspeed", _wrap_initialize)


def _wrap_initialize(deepspeed) -> None:
    orig = deepspeed.initialize
    if getattr(orig, "_i18_workaround", False):
        return

    def initialize(*args, model=None, **kw):
        if model is not None and type(deepspeed.get_accelerator()).__name__ == "FL_Accelerator":
            torch.__future__.set_swap_module_params_on_conversion(True)
            model.to(torch.device("fl", torch.fl.current_device()))
        torch.__future__.set_swap_module_params_on_conversion(False)   # also DeepSpeed on the CPU
        return orig(*args, model=model, **kw)

    initialize._i18_workaround = True
    deepspeed.initialize = initialize


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
    deepspeed_initialize()
    from flbridge.demos.deepspeed import train_rank
    train_rank(rank, world, cfg, init_method)
