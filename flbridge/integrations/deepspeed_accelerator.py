"""DeepSpeed's accelerator for fl: every member of DeepSpeedAccelerator,
delegating to `torch.fl`.  Imported only when DeepSpeed is (the base class
is DeepSpeed's), by flbridge.integrations.deepspeed.

Device indexes.  DeepSpeed binds each rank to `local_rank` as CUDA does
(`set_device(local_rank)`, `device_name(local_rank)`); its device i is the
i-th chip of the current chip's type (flbridge/integrations/ranks.py).
Make another type current (`torch.fl.set_device("xpu:x1")`) before
`deepspeed.initialize` to train on it.

Streams.  An fl device has one in-order queue (flbridge/backend/streams.py)
and flccl's collectives complete before they return, so a side stream can
overlap nothing: the accelerator is a synchronized device, as DeepSpeed's
CPU accelerator is, and ZeRO's `overlap_comm` runs without a reduction
stream or `record_stream`.
"""
from __future__ import annotations

import functools

import torch
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

from ..devices import chip_at, current_device
from ..devices import set_device as _set_fl_device
from ..distributed import BACKEND
from . import deepspeed_ops, ranks


def _index(device_index) -> int:
    """The fl index of this accelerator's device `device_index` (None: the current one)."""
    if device_index is None:
        return current_device()
    if isinstance(device_index, torch.device):
        return current_device() if device_index.index is None else device_index.index
    if isinstance(device_index, str) and not device_index.isdigit():   # "1": os.environ["LOCAL_RANK"]
        d = torch.device(device_index)
        return current_device() if d.index is None else d.index
    return ranks.fl_index(device_index)


def _dtypes() -> tuple:
    chip = chip_at(current_device())
    return tuple(chip.spec.capabilities.dtypes) if chip is not None else ()


class FL_Accelerator(DeepSpeedAccelerator):  # noqa: N801 - DeepSpeed's naming (CUDA_Accelerator, ...)

    def __init__(self):
        super().__init__()
        self._name = "fl"
        self._communication_backend_name = BACKEND
        self._compile_backend = None
        self._ranges: list = []

    # ------------------------------------------------- device semantics
    def is_synchronized_device(self):
        return True

    def use_host_timers(self):
        return self.is_synchronized_device()

    def resolves_data_dependency(self):
        return self.is_synchronized_device()

    def handles_memory_backpressure(self):
        return self.is_synchronized_device()

    # ------------------------------------------------------------ devices
    def device_name(self, device_index=None):
        if device_index is None:
            return "fl"
        return f"fl:{_index(device_index)}"

    def device(self, device_index=None):
        return torch.device("fl", _index(device_index))

    def set_device(self, device_index):
        _set_fl_device(_index(device_index))

    def current_device(self):
        return ranks.local_index()

    def current_device_name(self):
        return f"fl:{current_device()}"

    def device_count(self):
        return len(ranks.same_type_chips())

    def synchronize(self, device_index=None):
        return torch.fl.synchronize(None if device_index is None else _index(device_index))

    # ---------------------------------------------------------------- RNG
    def random(self):
        return torch.random

    def set_rng_state(self, new_state, device_index=None):
        return torch.fl.set_rng_state(new_state, _index(device_index))

    def get_rng_state(self, device_index=None):
        return torch.fl.get_rng_state(_index(device_index))

    def manual_seed(self, seed):
        return torch.fl.manual_seed(seed)

    def manual_seed_all(self, seed):
        return torch.fl.manual_seed_all(seed)

    def initial_seed(self):
        return torch.fl.initial_seed()

    def default_generator(self, device_index):
        return torch.fl.default_generators[_index(device_index)]

    # ---------------------------------------------------- streams, events
    @property
    def Stream(self):  # noqa: N802
        return torch.fl.Stream

    def stream(self, stream):
        return torch.fl.stream(stream)

    def current_stream(self, device_index=None):
        return torch.fl.current_stream(_index(device_index))

    def default_stream(self, device_index=None):
        return torch.fl.default_stream(_index(device_index))

    @property
    def Event(self):  # noqa: N802
        return torch.fl.Event

    # ------------------------------------------------------------- memory
    def empty_cache(self):
        return torch.fl.empty_cache()

    def memory_allocated(self, device_index=None):
        return torch.fl.memory_allocated(_index(device_index))

    def max_memory_allocated(self, device_index=None):
        return torch.fl.max_memory_allocated(_index(device_index))

    def reset_max_memory_allocated(self, device_index=None):
        return torch.fl.reset_max_memory_allocated(_index(device_index))

    def memory_cached(self, device_index=None):
        return torch.fl.memory_reserved(_index(device_index))

    def max_memory_cached(self, device_index=None):
        return torch.fl.max_memory_reserved(_index(device_index))

    def reset_max_memory_cached(self, device_index=None):
        return torch.fl.reset_max_memory_cached(_index(device_index))

    def memory_stats(self, device_index=None):
        return torch.fl.memory_stats(_index(device_index))

    def reset_peak_memory_stats(self, device_index=None):
        return torch.fl.reset_peak_memory_stats(_index(device_index))

    def memory_reserved(self, device_index=None):
        return torch.fl.memory_reserved(_index(device_index))

    def max_memory_reserved(self, device_index=None):
        return torch.fl.max_memory_reserved(_index(device_index))

    def total_memory(self, device_index=None):
        return torch.fl.get_device_properties(_index(device_index)).total_memory

    def available_memory(self, device_index=None):
        return torch.fl.mem_get_info(_index(device_index))[0]

    # --------------------------------------------------------------- dtypes
    def is_bf16_supported(self):
        return torch.bfloat16 in _dtypes()

    def is_fp16_supported(self):
        return torch.float16 in _dtypes()

    def is_fp64_supported(self):
        # decides the dtype of ZeRO's gradient norm: a chip without float64
        # computes it in float32 on the chip instead of on the CPU
        return torch.float64 in _dtypes()

    def supported_dtypes(self):
        return [d for d in (torch.float32, torch.float16, torch.bfloat16) if d in _dtypes()]

    # ---------------------------------------------------------------- misc
    def is_available(self):
        return torch.fl.is_available()

    def range_push(self, msg, domain=None, category=None):
        # a torch.profiler range while profiling (DeepSpeed names its phases with these)
        handle = None
        if torch.autograd.profiler._is_profiler_enabled:
            handle = torch.ops.profiler._record_function_enter_new(msg, None)
        self._ranges.append(handle)

    def range_pop(self, domain=None):
        handle = self._ranges.pop() if self._ranges else None
        if handle is not None:
            torch.ops.profiler._record_function_exit._RecordFunction(handle)

    def lazy_call(self, callback):
        return callback()

    def communication_backend_name(self):
        return self._communication_backend_name

    def is_triton_supported(self):
        return False

    # ------------------------------------------------------------- graphs
    def create_graph(self):
        return torch.fl.FLGraph()

    def capture_to_graph(self, graph, pool=None, stream=None):
        return torch.fl.graph(graph, pool=pool, stream=stream)

    def replay_graph(self, graph):
        graph.replay()

    def is_current_stream_capturing(self) -> bool:
        return torch.fl.is_current_stream_capturing()

    # ----------------------------------------------------- tensor factories
    def _factory(self, dtype):
        return functools.partial(torch.tensor, dtype=dtype, device=self.current_device_name())

    @property
    def BFloat16Tensor(self):  # noqa: N802
        return self._factory(torch.bfloat16)

    @property
    def ByteTensor(self):  # noqa: N802
        return self._factory(torch.uint8)

    @property
    def DoubleTensor(self):  # noqa: N802
        return self._factory(torch.double)

    @property
    def FloatTensor(self):  # noqa: N802
        return self._factory(torch.float)

    @property
    def HalfTensor(self):  # noqa: N802
        return self._factory(torch.half)

    @property
    def IntTensor(self):  # noqa: N802
        return self._factory(torch.int)

    @property
    def LongTensor(self):  # noqa: N802
        return self._factory(torch.long)

    def on_accelerator(self, tensor):
        return tensor.device.type == "fl"

    # ---------------------------------------------------------- op builders
    def op_builder_dir(self):
        # the folder DeepSpeed lists builder names from (deepspeed.ops.op_builder.all_ops);
        # which builder each name gets is get_op_builder's answer
        return "deepspeed.ops.op_builder.cpu"

    def create_op_builder(self, class_name):
        cls = self.get_op_builder(class_name)
        if cls is None or getattr(cls, "REFUSED", False):
            return None
        return cls()

    def get_op_builder(self, class_name):
        return deepspeed_ops.builder(class_name)

    def build_extension(self):
        from torch.utils.cpp_extension import BuildExtension
        return BuildExtension

    def export_envs(self):
        return ["FLBRIDGE"]

    def visible_devices_envs(self):
        # the launcher needs one name; it is the CPU accelerator's.  fl reads no such
        # variable: each rank's chip follows its local_rank (see the module docstring)
        return ["CUDA_VISIBLE_DEVICES"]

    def set_visible_devices_envs(self, current_env, local_accelerator_ids):
        for env in self.visible_devices_envs():
            current_env[env] = ",".join(map(str, local_accelerator_ids))

    def get_compile_backend(self):
        if self._compile_backend is None:
            self._compile_backend = "fl" if "fl" in torch._dynamo.list_backends(exclude_tags=()) else "eager"
        return self._compile_backend

    def set_compile_backend(self, backend):
        supported = torch._dynamo.list_backends(exclude_tags=())
        if backend not in supported:
            raise ValueError(f"{backend} not supported by {self.device_name()}. Supported Backends are {supported}")
        self._compile_backend = backend
