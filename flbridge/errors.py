"""flbridge's exceptions and warnings, all of them: each carries the facts as
fields and a message that says what to change.

A leaf module (torch only), so every layer can raise what it needs without
importing a layer above it.  Sections: specs and headers, the vendor runtime
and memory, routing, and the features built on top (autocast, graphs,
collectives, autocompare)."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch


class FlbridgeError(Exception):
    """Base class of every error flbridge raises on purpose."""


@dataclass(frozen=True)
class SpecProblem:
    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}"


class SpecError(FlbridgeError, ValueError):
    """A device spec is wrong.  `file`, `line`, `field`, `message` describe the
    first problem; `problems` lists all that were found."""

    def __init__(self, problems: list[SpecProblem] | SpecProblem):
        if isinstance(problems, SpecProblem):
            problems = [problems]
        self.problems = list(problems)
        first = self.problems[0]
        self.file, self.line, self.field, self.message = first.file, first.line, first.field, first.message
        text = "\n".join(str(p) for p in self.problems)
        super().__init__(text)


class HeaderError(FlbridgeError):
    """A vendor header cannot be turned into declarations."""

    def __init__(self, file: str, line: int, message: str):
        self.file, self.line, self.message = file, line, message
        super().__init__(f"{file}:{line}: {message}")


class RuntimeLoadError(FlbridgeError, OSError):
    """A vendor runtime library cannot be loaded or lacks a symbol the spec names."""

    def __init__(self, message: str, *, file: str = "", line: int = 0, field: str = "",
                 library: str = "", symbol: str | None = None, reason: str = ""):
        self.file, self.line, self.field = file, line, field
        self.library, self.symbol, self.reason = library, symbol, reason
        self.message = message
        where = f"{file}:{line}: {field}: " if file else ""
        super().__init__(where + message)


class DeviceError(FlbridgeError, RuntimeError):
    """A vendor runtime call returned an error status."""

    def __init__(self, device_type: str, function: str, status: int, status_name: str, message: str):
        self.device_type, self.function = device_type, function
        self.status, self.status_name, self.vendor_message = status, status_name, message
        super().__init__(f"{device_type}: {function} failed with {status_name} ({status}): {message}")


class DeviceOOM(DeviceError):
    """The runtime reported out-of-memory (the allocator retries, then raises
    flbridge.OutOfMemoryError)."""


class OutOfMemoryError(torch.OutOfMemoryError, FlbridgeError):
    """Device memory is exhausted (after releasing the cache and retrying)."""

    def __init__(self, device_type: str, index: int, requested: int, in_use: int, cached: int,
                 capacity: int, vendor_message: str = "", pooled: int = 0):
        self.device_type, self.index = device_type, index
        self.requested, self.in_use, self.cached, self.capacity = requested, in_use, cached, capacity
        self.vendor_message, self.pooled = vendor_message, pooled
        pools = (f"{_fmt(pooled)} kept free in the private memory pools of compiled or captured graphs "
                 f"(their replays write there; given back when the graphs go: del the compiled model or "
                 f"FLGraph, and torch._dynamo.reset()), " if pooled else "")
        super().__init__(
            f"fl:{index} ({device_type}) out of memory: tried to allocate {_fmt(requested)}; "
            f"{_fmt(in_use)} in use by tensors, {_fmt(cached)} cached (released and retried), {pools}"
            f"capacity {_fmt(capacity)}. Free tensors you no longer need (del, or move them to "
            f"the CPU with .cpu()), use a smaller batch, or call torch.fl.empty_cache()."
            + (f" Runtime said: {vendor_message}" if vendor_message else ""))


class UnsupportedOpError(FlbridgeError, RuntimeError):
    """An op cannot run on a chip natively and no fallback is allowed or possible."""

    def __init__(self, op: str, device_type: str, dtype: str | None, reason: str,
                 supported_dtypes: list[str] | None = None, fix: str = ""):
        self.op, self.device_type, self.dtype = op, device_type, dtype
        self.reason, self.supported_dtypes, self.fix = reason, supported_dtypes or [], fix
        msg = f"Op '{op}' not supported on device '{device_type}'"
        if dtype:
            msg += f" with dtype '{dtype}'"
        msg += f": {reason}."
        if supported_dtypes:
            msg += f" Available dtypes: {supported_dtypes}."
        if fix:
            msg += f" Suggested fix: {fix}."
        super().__init__(msg)


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


class DeviceUnavailableError(FlbridgeError, RuntimeError):
    """A device index whose spec has problems: it keeps its index (so the
    other chips keep theirs) but cannot be used."""

    def __init__(self, index: int, label: str, file: str, problems: list[str]):
        self.index, self.label, self.file, self.problems = index, label, file, list(problems)
        shown = "\n  ".join(self.problems[:8]) + (f"\n  ({len(self.problems) - 8} more)"
                                                   if len(self.problems) > 8 else "")
        super().__init__(f"fl:{index} ({label}) is unavailable: its spec {file} has problems:\n  {shown}\n"
                         f"Fix the spec (`flbridge validate {file}`, `flbridge doctor`), or use another "
                         f"fl device (`flbridge devices` lists them).")


class NestedNotSupported(FlbridgeError, NotImplementedError):
    """A nested tensor for an fl device (fl tensors are dense and strided)."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(
            f"flbridge: {what}: nested tensors are not supported on fl devices (fl tensors are dense and "
            f"strided). Pad the sequences into one tensor (torch.nn.utils.rnn.pad_sequence, or "
            f"nt.to_padded_tensor(0.0) on the CPU) with a mask, as attention's attn_mask / key_padding_mask "
            f"take it, or keep the nested tensor on the CPU")


class QuantizedNotSupported(FlbridgeError, NotImplementedError):
    """A quantized tensor or quantized module for an fl device."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(
            f"flbridge: {what}: quantized tensors and quantized modules are not supported on fl devices. Run "
            f"the quantized model on the CPU, or run the float model on fl (torch.autocast('fl') for lower "
            f"precision; a chip's int8 kernels take plain int8 tensors)")


class SpecWarning(UserWarning):
    """A device spec has problems: its chip is unavailable and the other chips
    load (FLBRIDGE_STRICT_SPECS=1 makes it an error instead)."""

    def __init__(self, message: str, *, index: int = -1, file: str = "", problems=()):
        super().__init__(message)
        self.index, self.file, self.problems = index, file, list(problems)


class SpecDirWarning(UserWarning):
    pass


class ConfigWarning(UserWarning):
    pass


# ---------------------------------------------- parsing (turned into SpecProblems / HeaderErrors by callers)

class CExprError(ValueError):
    """Not a valid or not a bounded integer constant expression."""


class NotConstant(CExprError):
    """The expression names something that is not an integer (a type in a
    cast, a function): it is not a constant, which is not an error in a
    #define."""


class OpNameError(ValueError):
    pass


class BindError(ValueError):
    pass


# ------------------------------------------------------------------ routing

class FallbackWarning(UserWarning):
    """An op did not run natively (said once per op, chip and kind of reason)."""


_PKG_DIR = __file__.rsplit("/", 1)[0]
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def user_frame():
    """The first frame outside flbridge and torch (the user's line), or None."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_PKG_DIR) or
                             f.f_code.co_filename.startswith(_TORCH_DIR)):
        f = f.f_back
    return f


def user_stacklevel() -> int:
    """stacklevel pointing warnings.warn at the first frame outside flbridge
    and torch (the user's line)."""
    f, level = sys._getframe(1), 1
    while f is not None and (f.f_code.co_filename.startswith(_PKG_DIR) or
                             f.f_code.co_filename.startswith(_TORCH_DIR)):
        f, level = f.f_back, level + 1
    return level


# ----------------------------------------------------------------- features

class AmpDtypeError(FlbridgeError, RuntimeError):
    """Autocast asked a chip for a lower-precision dtype it does not have."""

    def __init__(self, chip, dtype: torch.dtype, amp_dtypes: tuple):
        """`amp_dtypes`: the dtypes autocast may lower to, in order of preference."""
        caps = chip.spec.capabilities
        self.device_type, self.index, self.dtype = chip.device_type, chip.index, dtype
        self.spec_file = chip.spec.file
        self.supported = [d for d in amp_dtypes if d in caps.dtypes]
        self.default = caps.amp_dtype
        where = (f"fl:{chip.index} ({chip.device_type}, spec {chip.spec.file}: capabilities.dtypes "
                 f"{', '.join(_dtype_name(d) for d in caps.dtypes)})")
        if self.default is None:
            msg = (f"autocast cannot run on {where}: it has no lower-precision float dtype "
                   f"({' or '.join(_dtype_name(d) for d in amp_dtypes)}). Run this part outside autocast "
                   f"(torch.autocast('fl', enabled=False)) or add such a dtype to the spec if the chip has one.")
        else:
            ok = " or ".join(f"torch.{_dtype_name(d)}" for d in self.supported)
            msg = (f"autocast on fl lowers to {_dtype_name(dtype)}, which {where} does not support; autocast "
                   f"can use {ok} there (capabilities.amp_dtype: {_dtype_name(self.default)}). Pass "
                   f"dtype=torch.{_dtype_name(self.default)} to torch.autocast, or make fl:{chip.index} the "
                   f"current device before entering autocast (torch.fl.set_device({chip.index}) or "
                   f"flbridge.device('{chip.device_type}')) so the default is its dtype, or use "
                   f"torch.fl.amp.autocast(), which picks the current chip's dtype.")
        super().__init__(msg)


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


class GraphCaptureError(FlbridgeError, RuntimeError):
    """Something in the captured region cannot be replayed."""


class CollectiveError(FlbridgeError, RuntimeError):
    """A collective failed: the vendor library returned an error, or a peer
    rank is gone.  The process group cannot be used after it."""

    def __init__(self, message: str, *, device_type: str = "", function: str = "", status: int | None = None,
                 status_name: str = "", vendor_message: str = ""):
        self.device_type, self.function, self.status = device_type, function, status
        self.status_name, self.vendor_message = status_name, vendor_message
        super().__init__(message)


class CollectiveFallbackWarning(FallbackWarning):
    """A collective on fl tensors took the host path because the chip's
    collectives library cannot run it (said once per collective, dtype and chip)."""


class MixedChipsError(FlbridgeError, RuntimeError):
    """The ranks of a process group are on different chip types."""

    def __init__(self, by_rank: dict, rank: int):
        self.by_rank, self.rank = by_rank, rank
        listing = ", ".join(f"rank {r} {dt}" for r, dt in sorted(by_rank.items()))
        mine = by_rank[rank]
        super().__init__(
            f"flccl: the ranks of this process group are on different chip types ({listing}). "
            f"A group moves one chip type's tensors: on every rank, make the same chip type current "
            f"with torch.fl.set_device('xpu:<name>') before init_process_group (this is rank {rank}, "
            f"current device {mine}).")


class IntegrationError(FlbridgeError, RuntimeError):
    """A feature of a training library (DeepSpeed, accelerate, Lightning)
    that cannot run on fl; the message names the setting that avoids it."""

    def __init__(self, message: str, *, library: str = "", feature: str = ""):
        self.library, self.feature = library, feature
        super().__init__(message)


class IntegrationWarning(UserWarning):
    """A training library's setting that fl cannot honour was changed to one
    it can (the message says which, and why)."""


class AutocompareWarning(UserWarning):
    """An op's result on a chip differs from the CPU's (said once per op)."""


class AutocompareError(AssertionError):
    """raise_on_mismatch=True and some op differed from the CPU."""
