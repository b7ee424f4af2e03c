"""The device spec's data model: the dataclasses a checked spec becomes
(DeviceSpec and what it holds), the dtype names a spec may use, and the
tables of known fields the checks walk (docs/spec-format.md)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

# ------------------------------------------------------------------ dtypes

DTYPE_NAMES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "double": torch.float64, "fp64": torch.float64,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "long": torch.int64, "bool": torch.bool,
}


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


# ------------------------------------------------------------------- model

@dataclass(frozen=True)
class Constraints:
    values: dict          # aten arg -> tuple of allowed values (each element, for lists)
    ndim: dict            # tensor arg -> tuple of allowed ranks
    sizes: dict           # tensor arg -> tuple of dim names ("..." = any leading dims)
    multiple_of: dict     # dim name -> int
    max: dict             # dim name (or "numel") -> int
    range: dict           # aten arg -> (min, max) inclusive, for each element
    present: tuple        # optional tensor args that must be given (not None)
    length: dict          # list arg -> the number of values the kernel reads
    pad: tuple = ()       # multiple_of dims the bridge may zero-pad on the device (sizes "out": the result)
    numel: dict = field(default_factory=dict)         # tensor (or list) arg -> exact element count (each element)
    may_be_empty: dict = field(default_factory=dict)  # tensor list arg -> expression ("" = always) under which
    #                                                   it may be empty (passed as a NULL pointer)
    require: tuple = ()   # expressions over the arguments that must all hold (C syntax, flbridge.binding.callplan)

    def __bool__(self):
        return bool(self.values or self.ndim or self.sizes or self.multiple_of or self.max
                    or self.range or self.present or self.length or self.numel or self.may_be_empty
                    or self.require)


@dataclass(frozen=True)
class RngSpec:
    """Which C parameters of an op entry take the chip generator's state
    (docs/spec-format.md, "rng"): flbridge passes its (seed, offset) and
    advances the offset by what the call consumes."""
    seed: str                     # C parameter receiving the seed
    offset: str                   # C parameter receiving the offset (a word index, a multiple of 4)
    words_per_element: object = 1  # int, or an expression over the op's arguments ("train ? 1 : 0")


@dataclass(frozen=True)
class Quirk:
    pass_as: torch.dtype
    convert: str          # vendor function (src, dst) converting on the device


@dataclass
class OpEntry:
    """One native (or vendor-fallback) implementation of one aten overload."""
    op: object                    # torch._ops.OpOverload
    qualname: str
    impl: str                     # C function name
    dtypes: tuple                 # allowed compute dtypes
    arg_dtypes: dict              # tensor arg -> allowed dtypes (args with their own dtype)
    args: dict                    # C param -> binding (aten arg, "len(x)", {from, map})
    bind: dict                    # C param -> constant
    outputs: list | None          # C params receiving the returns, None entries = not produced
    constraints: Constraints
    layout: dict                  # tensor arg / "out" -> layout string (NHWC, OHWI, ...)
    contiguous: tuple             # tensor args the kernel needs contiguous
    broadcast: tuple              # tensor args expanded (stride 0) to the first output's shape
    quirks: dict                  # tensor arg -> Quirk
    ignore_args: tuple            # aten args the kernel does not need
    file: str = ""
    line: int = 0
    alias_of: str | None = None   # friendly name written in the spec
    path: str = ""                # field path in the spec, for messages
    rng: RngSpec | None = None    # the generator state's C parameters (random ops)


@dataclass(frozen=True)
class RoleFn:
    fn: str
    args: tuple | None            # canonical names in C parameter order, when C names differ
    values: dict                  # init only: C param -> value
    file: str
    line: int


@dataclass(frozen=True)
class TensorStruct:
    type: str
    fields: dict                  # role (data, ndim, shape, strides, dtype, offset) -> C field
    file: str
    line: int


@dataclass
class RuntimeSpec:
    roles: dict                   # role -> RoleFn
    status_success: object        # constant name or int
    status_oom: object | None
    tensor: TensorStruct
    dtype_codes: dict             # torch.dtype -> constant name or int
    file: str
    line: int


@dataclass
class Capabilities:
    dtypes: tuple
    memory_total_bytes: int | None
    bandwidth_gbps: float | None
    compute: dict
    features: tuple
    amp_dtype: torch.dtype | None = None   # autocast's lower precision; None: autocast is refused


# dtypes autocast may lower to, in the order the default picks them
AMP_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class Fallback:
    kind: str                     # "vendor" | "python" | "cpu" | "error"
    entry: OpEntry | None = None  # vendor
    target: str = ""              # python: "module:function"
    file: str = ""
    line: int = 0


@dataclass
class DeviceSpec:
    device_type: str
    vendor: str
    chip_model: str
    driver_version: str
    runtime_so: Path
    runtime_header: Path
    capabilities: Capabilities
    runtime: RuntimeSpec
    ops: dict                     # OpOverload -> OpEntry
    op_specific: dict             # OpOverload -> Fallback
    fallback_default: str         # "cpu" | "error"
    decompose: bool
    file: str
    description: str = ""
    locations: dict = field(default_factory=dict)  # field path -> (file, line)
    collectives: object = None    # collectives_spec.CollectivesSpec, when the chip has a CCL

    @property
    def name(self) -> str:
        return self.device_type.split(":", 1)[1]


# ------------------------------------------------------------ validation

ROLE_PARAMS = {
    "init": None,  # any parameters, each given a value under `values`
    "shutdown": (),
    "last_error": (),
    "malloc": ("ptr", "nbytes"),
    "free": ("ptr",),
    "memcpy_h2d": ("dst", "src", "nbytes"),
    "memcpy_d2h": ("dst", "src", "nbytes"),
    "memcpy_d2d": ("dst", "src", "nbytes"),
    "memcpy_h2d_batch": ("dst", "src", "nbytes", "count"),
    "mem_map": ("host_ptr", "nbytes", "ptr"),
    "mem_unmap": ("ptr",),
    "mem_info": ("free_bytes", "total_bytes"),
    "synchronize": (),
    "counters": ("counters",),
    "reset_counters": (),
    "kernel_timer": ("ns",),   # out: device ns of the calling thread's last kernel or copy
    "copy": ("src", "dst"),
    "fill": ("dst", "value"),
    # the words a random kernel consumes for `numel` elements (counter-based generators)
    "rng_words": ("numel", "words_per_element", "words"),
}
REQUIRED_ROLES = ("init", "last_error", "malloc", "free", "memcpy_h2d", "memcpy_d2h")
TENSOR_FIELDS = ("data", "ndim", "shape", "strides", "dtype")
COMPUTE_KEYS = ("peak_tflops_fp32", "peak_tflops_fp16", "peak_tflops_bf16", "peak_tops_int8",
                "max_threads_per_block", "compute_units", "clock_mhz")
TOP_KEYS = ("device_type", "vendor", "chip_model", "driver_version", "runtime_so", "runtime_header",
            "description", "capabilities", "runtime", "supported_ops", "fallback_policy", "collectives")
OP_KEYS = ("name", "impl", "dtype_support", "arg_dtypes", "args", "bind", "outputs", "constraints",
           "layout", "contiguous", "broadcast", "dtype_quirks", "ignore_args", "rng")
KNOWN_PATHS = (
    [*TOP_KEYS, "extends", "capabilities.dtypes", "capabilities.amp_dtype", "capabilities.memory",
     "capabilities.memory.total_gb", "capabilities.memory.bandwidth_gbps", "capabilities.compute",
     "capabilities.features",
     "runtime.status", "runtime.status.success", "runtime.status.out_of_memory", "runtime.tensor",
     "runtime.dtypes", "fallback_policy.default", "fallback_policy.decompose",
     "fallback_policy.op_specific"]
    + [f"capabilities.compute.{k}" for k in COMPUTE_KEYS]
    + [f"runtime.{r}" for r in ROLE_PARAMS]
    + [f"supported_ops[].{k}" for k in OP_KEYS]
)
LAYOUT_FAMILIES = ("NCHW", "OIHW", "NCL", "OIL", "NCDHW")

# a chip's spec name: "xpu:<name>"
DEVICE_TYPE = re.compile(r"^xpu:[a-z][a-z0-9_-]*$")
