"""HF accelerate and transformers on fl: `Accelerator()` and `Trainer`
pick the fl device by themselves after `import flbridge`.

accelerate has no device registry: `PartialState` tries a fixed list of
device modules (mps, mlu, sdaa, musa, npu, hpu, cuda, xpu, neuron), else the
CPU, and a few checks name device types literally.  Its one extension point
is the `ACCELERATE_TORCH_DEVICE` environment variable, which transformers'
`TrainingArguments` reads too; a variable is process-wide, is inherited by
child processes that may not import flbridge, and covers neither mixed
precision nor distributed runs.  So flbridge patches the few places that
decide, when the program imports them, each falling through to the library's
own code whenever fl is not concerned:

* accelerate.state.PartialState
  - `default_device`: fl (the current fl device) where accelerate finds no
    accelerator, unless `cpu=True` (`use_cpu=True` in TrainingArguments);
    accelerate 1.16 finds fl itself through `torch.accelerator` but answers
    `torch.device("fl")`, with no index: the current fl device too;
  - `_prepare_backend`: a process under a launcher (LOCAL_RANK set) gets the
    `flccl` backend and accelerate's MULTI_CPU type, whose code paths are the
    device-neutral ones (DistributedDataParallel without device_ids,
    torch.distributed collectives; `DistributedType` is a closed Enum);
  - `set_device`: that process's device is the local rank's chip
    (flbridge/integrations/ranks.py), not `torch.device("cpu", i)`.
* accelerate.utils.dataclasses.DynamoBackend, the closed list of
  torch.compile backends `Accelerator(dynamo_backend=...)` and
  `TrainingArguments(torch_compile_backend=...)` accept: it gains `FL`, so
  "fl" is taken and handed to `torch.compile(model, backend="fl")` (it had
  failed with "'FL' is not a valid DynamoBackend").
* accelerate.accelerator.Accelerator: its constructor refuses fp16 for any
  device type outside a literal tuple.  While it runs, `Accelerator.device`
  answers "cpu" for fl (its only uses there are those checks: the CPU's bf16
  path is fl's; fp16 is off), then fp16 gets what the tuple's devices get:
  native autocast and a GradScaler for fl.  A chip whose spec lacks the
  dtype is refused there, with the fix.  DDP's `find_unused_parameters`
  (transformers turns it on for its models) is turned off, with a warning:
  torch 2.13's reducer needs a pinned-memory allocator for it on a
  PrivateUse1 device, which a Python backend cannot register.
* transformers.training_args: `TrainingArguments.device`
  (`_setup_devices`) falls back to "cpu" (or the environment variable) after
  accelerate chose; on fl it takes accelerate's device.  `bf16=True` is checked with
  `is_torch_bf16_gpu_available()`, which knows CUDA-like devices only: with
  fl it passes, and the Accelerator checks the chip's spec (above).
"""
from __future__ import annotations

import functools
import os
import warnings

import torch

from ..devices import chip_for, current_device
from ..errors import IntegrationError, IntegrationWarning
from . import ddp, ranks

BACKEND = "flccl"


def _fl_device() -> torch.device:
    return torch.device("fl", current_device())


# ---------------------------------------------------------- accelerate.state

def _accept_fl_backend(backends) -> None:
    """Adds FL = "FL" to accelerate's DynamoBackend enum (a str Enum)."""
    if "FL" in backends.__members__:
        return
    member = str.__new__(backends, "FL")
    member._name_, member._value_ = "FL", "FL"
    member.__objclass__ = backends
    backends._member_map_["FL"] = member
    backends._value2member_map_["FL"] = member
    backends._member_names_.append("FL")
    type.__setattr__(backends, "FL", member)


def on_state(state) -> None:
    """Hook: accelerate.state was imported."""
    PS = state.PartialState
    if getattr(PS, "_flbridge", False):
        return
    PS._flbridge = True
    backends = getattr(state, "DynamoBackend", None)    # accelerate.state imports it from accelerate.utils
    if backends is not None:
        _accept_fl_backend(backends)
    DistributedType = state.DistributedType
    orig_default = PS.default_device.fget
    orig_prepare = PS._prepare_backend
    orig_set_device = PS.set_device

    @functools.wraps(orig_default)
    def default_device(self):
        dev = orig_default(self)
        if dev.type == "cpu" and ranks.fl_usable():
            return _fl_device()
        if dev.type == "fl" and dev.index is None:
            # accelerate >= 1.16 finds fl itself (torch.accelerator) and names no index: the current chip
            return _fl_device()
        return dev

    @functools.wraps(orig_prepare)
    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        chosen, kind = orig_prepare(self, cpu, sagemaker_dp, backend)
        if (kind == DistributedType.NO and not cpu and not sagemaker_dp and backend in (None, BACKEND)
                and int(os.environ.get("LOCAL_RANK", -1)) != -1 and ranks.fl_usable()):
            return BACKEND, DistributedType.MULTI_CPU
        return chosen, kind

    @functools.wraps(orig_set_device)
    def set_device(self):
        if self.device is None and self.backend == BACKEND:
            index = ranks.fl_index(self.local_process_index)
            torch.fl.set_device(index)
            self.device = torch.device("fl", index)
            return
        orig_set_device(self)

    PS.default_device = property(default_device)
    PS._prepare_backend = _prepare_backend
    PS.set_device = set_device


# ---------------------------------------------------- accelerate.accelerator

def on_accelerator(module) -> None:
    """Hook: accelerate.accelerator was imported."""
    Accelerator = module.Accelerator
    if getattr(Accelerator, "_flbridge", False):
        return
    Accelerator._flbridge = True
    orig_init = Accelerator.__init__
    orig_device = Accelerator.device.fget
    DistributedType = module.DistributedType

    @functools.wraps(orig_device)
    def device(self):
        dev = orig_device(self)
        if dev.type == "fl" and self.__dict__.get("_flbridge_constructing"):
            return torch.device("cpu")    # the constructor's device checks: as for the CPU
        return dev

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        self._flbridge_constructing = True
        try:
            orig_init(self, *args, **kwargs)
        finally:
            del self._flbridge_constructing
        dev = self.device
        if dev.type != "fl":
            return
        precision = self.state.mixed_precision
        _check_dtype(dev, precision)
        handler = self.ddp_handler
        if handler is not None and handler.find_unused_parameters and self.distributed_type != DistributedType.NO:
            # flbridge.integrations.ddp: the reducer needs a pinned allocator for it (said here, where the
            # setting was made, rather than by DistributedDataParallel later)
            handler.find_unused_parameters = False
            warnings.warn(
                f"flbridge: accelerate's DistributedDataParallelKwargs(find_unused_parameters=True) runs as "
                f"find_unused_parameters=False on fl ({ddp.WHY}). A model whose forward leaves parameters "
                f"unused then fails in DDP: freeze them (requires_grad_(False)) or use them.",
                IntegrationWarning, stacklevel=2)
        if precision == "fp16" and self.distributed_type not in (DistributedType.DEEPSPEED,
                                                                 DistributedType.MEGATRON_LM):
            # what the constructor gives the devices in its fp16 tuple
            kw = self.scaler_handler.to_kwargs() if self.scaler_handler is not None else {}
            self.native_amp = True
            self.scaler = torch.amp.GradScaler("fl", **kw)

    Accelerator.device = property(device)
    Accelerator.__init__ = __init__


def _check_dtype(dev, precision: str) -> None:
    want = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if want is None:
        return
    chip = chip_for(dev)
    if want not in chip.spec.capabilities.dtypes:
        have = [str(d).replace("torch.", "") for d in chip.spec.capabilities.dtypes]
        other = [p for p, d in (("bf16", torch.bfloat16), ("fp16", torch.float16))
                 if d in chip.spec.capabilities.dtypes]
        fix = (f"use mixed_precision={other[0]!r} (TrainingArguments({other[0]}=True))" if other
               else "train in float32 (no mixed precision)")
        raise IntegrationError(f"{precision} mixed precision on {dev} ({chip.device_type}): the chip runs "
                               f"{', '.join(have)}, not {str(want).replace('torch.', '')}. On this chip, {fix}, "
                               f"or make a chip with {str(want).replace('torch.', '')} current "
                               f"(torch.fl.set_device('xpu:<name>')) before creating the Accelerator/Trainer.",
                               library="accelerate", feature=precision)


# ------------------------------------------------- transformers.training_args

def on_training_args(module) -> None:
    """Hook: transformers.training_args was imported."""
    TA = module.TrainingArguments
    if getattr(TA, "_flbridge", False):
        return
    TA._flbridge = True
    orig = TA.__dict__["_setup_devices"]
    orig_fn = orig.func

    @functools.wraps(orig_fn)
    def _setup_devices(self):
        dev = orig_fn(self)
        state = getattr(self, "distributed_state", None)
        chosen = getattr(state, "device", None)
        if dev.type == "cpu" and not self.use_cpu and chosen is not None and chosen.type == "fl":
            return chosen
        return dev

    prop = functools.cached_property(_setup_devices)
    prop.__set_name__(TA, "_setup_devices")
    TA._setup_devices = prop
    orig_bf16 = module.is_torch_bf16_gpu_available

    @functools.wraps(orig_bf16)
    def is_torch_bf16_gpu_available():
        # on fl the chip's dtypes are checked when the Accelerator is made (with the fix in
        # the message), once the program has chosen its chip
        return orig_bf16() or ranks.fl_usable()

    module.is_torch_bf16_gpu_available = is_torch_bf16_gpu_available
