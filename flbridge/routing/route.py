"""The route of one op on one chip: native kernel or the fallback chain.

An :class:`OpRoute` is made once per (chip, op overload) and decides per
call between

1. the native kernel from the spec (:class:`~flbridge.routing.native.NativeKernel`:
   checks, residency, adapter, vendor C call), and, when that cannot or does
   not work, the fallback chain:
2. the op-specific fallback from the spec (a vendor function or a Python one),
3. a torch._decomp decomposition whose parts the chip runs natively,
4. the CPU (:func:`~flbridge.routing.cpu_fallback.cpu_fallback`), or
5. UnsupportedOpError with what to change.

Each step is recorded in the chip's stats; fallbacks warn once per
(op, chip, kind of reason).
"""
from __future__ import annotations

import importlib
import threading
import warnings

import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode

from ..config import CONFIG, log
from ..errors import FallbackWarning, UnsupportedOpError, user_stacklevel
from ..specs import dtype_name, info, normalize
from ..tensor import XPUTensor, chip_of
from ..binding import launch
from .adapter import ARGUMENT_ADAPTERS
from .argkeys import meta_key_or_none, remember, to_meta
from .cpu_fallback import _device_mismatch, cpu_fallback
from .decompositions import ADDED, DEVICE_ONLY
from .eligibility import why_not
from .kinds import ROUTED, kind
from .native import NativeKernel, Prepared
from .reasons import FAILED, Reason

aten = torch.ops.aten


class _Record(TorchDispatchMode):
    """Records the aten calls of a decomposition traced on meta tensors."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))

# Ops PyTorch lets mix an accelerator tensor with CPU tensors (indices, and
# the lengths / batch sizes of packed sequences and of CTC's inputs and
# targets, which live on the CPU).
_CPU_TENSOR_ARGS_OK = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                       aten._index_put_impl_.default, aten._pack_padded_sequence.default,
                       aten._pad_packed_sequence.default, aten._pack_padded_sequence_backward.default,
                       aten._ctc_loss.Tensor, aten._ctc_loss_backward.Tensor}
_ACTIVE = threading.local()
# how many decompositions deep the chain looks for ops the chip runs (an op
# whose decomposition's part decomposes into native ops, and so on)
MAX_DECOMPOSITION_DEPTH = 4
_DECISIONS_MAX = 1024   # entries per route's decision cache before it starts over


def _other_chip_device(args, kwargs, chip):
    """The device of an fl tensor among the arguments that is not on `chip`, else None."""
    for v in (*args, *(kwargs.values() if kwargs else ())):
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if type(t) is XPUTensor and t._st.chip is not chip:
                return t.device
    return None


def _decompositions_of(func) -> tuple:
    """Where a decomposition of `func` may come from, in order of preference:
    torch._decomp's table, flbridge's own (decompositions.ADDED), torch._refs
    (for the default overload), the op's CompositeImplicitAutograd kernel."""
    if func.namespace != "aten":
        # prims and other namespaces: the leaves decompositions end in, but
        # for flbridge's own (quantized::linear_dynamic)
        return (ADDED[func],) if func in ADDED else ()
    found = []
    for table in (decomposition_table, ADDED):
        d = table.get(func)
        if d is not None:
            found.append(d)
    if func._overloadname == "default":
        ref = getattr(torch._refs, func._schema.name.split("::")[-1], None)
        if callable(ref) and ref not in found:
            found.append(ref)
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        found.append(func.decompose)
    return tuple(found)


def _source_name(fn) -> str:
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith("torch._refs"):
        return "torch._refs"
    if getattr(fn, "__name__", "") == "decompose":
        return "its CompositeImplicitAutograd kernel"
    if mod.startswith("flbridge"):
        return "flbridge.routing.decompositions"
    return "torch._decomp"


def route(func, args, kwargs):
    """Runs func through its route on the chip of its fl arguments."""
    chip = chip_of(args, kwargs)
    if chip is None:
        raise RuntimeError("flbridge: dispatch without an fl tensor argument")
    r = chip.routes.get(func)
    if r is None:
        r = route_of(chip, func)
    return r(args, kwargs)


def route_of(chip, func) -> "OpRoute":
    """func's route on chip, made on first use and kept in chip.routes."""
    r = chip.routes.get(func)
    if r is None:
        r = chip.routes[func] = OpRoute(chip, func)
    return r


class OpRoute:
    def __init__(self, chip, func):
        self.chip = chip
        self.func = func
        self.opi = info(func)
        self.qualname = self.opi.qualname
        rt = chip.runtime
        self.forced = CONFIG.forced(self.qualname)
        self.bound = NativeKernel(self, rt.ops[func]) if func in rt.ops else None
        fb = chip.spec.op_specific.get(func)
        self.fb = fb
        self.fb_native = NativeKernel(self, rt.vendor_fallbacks[func]) if func in rt.vendor_fallbacks else None
        self.fb_python = None
        self.decomps = _decompositions_of(func) if chip.spec.decompose else ()
        self.decomp_ok_cache: dict = {}   # meta_key -> (the decomposition that runs on the chip or None, blocker)
        self.device_only = DEVICE_ONLY.get(func)
        self.adapt_args = ARGUMENT_ADAPTERS.get(func)
        self.adapt_cache: dict = {}   # meta_key of adapted arguments -> whether the kernel takes them
        self.seeded = torch.Tag.nondeterministic_seeded in func.tags
        self.mixed_device_ok = func in _CPU_TENSOR_ARGS_OK
        self.mutated_names = frozenset(self.opi.args[i].name for i in self.opi.mutated)
        self.arg_written = tuple(a.name in self.mutated_names for a in self.opi.args)
        self.nargs = len(self.opi.args)
        if self.forced:
            self.static_reason = Reason("forced", "forced to the CPU by FLBRIDGE_FORCE_FALLBACK",
                                        "unset FLBRIDGE_FORCE_FALLBACK")
        else:
            self.static_reason = Reason("no_kernel", f"{chip.device_type} has no kernel for it",
                                        f"add {self.qualname} to supported_ops in {chip.spec.file}")

    def __call__(self, args, kwargs):
        nat = self.bound
        if nat is not None and not self.forced:
            vals = normalize(self.opi, args, kwargs) if kwargs else args
            p = nat.decide(vals)
            if p.__class__ is Prepared:
                out = nat.run(vals, p)
                if out is not FAILED:
                    return out
                return self.fallback(args, kwargs, nat.failure)
            if self.adapt_args is not None:
                return self._adapted(args, kwargs, p)
            return self.fallback(args, kwargs, p)
        return self.fallback(args, kwargs, self.static_reason)

    def _adapted(self, args, kwargs, reason):
        """The kernel refused: run it on equivalent arguments it may take
        (adapter.ARGUMENT_ADAPTERS), else go down the chain."""
        fixed = self.adapt_args(args, kwargs, self._kernel_takes)
        if fixed is not None:
            vals = normalize(self.opi, *fixed)
            p = self.bound.decide(vals)
            if p.__class__ is Prepared:
                out = self.bound.run(vals, p)
                if out is not FAILED:
                    return out
                return self.fallback(args, kwargs, self.bound.failure)
        return self.fallback(args, kwargs, reason)

    def _kernel_takes(self, args, kwargs) -> bool:
        """Whether the kernel takes this call, decided on meta stand-ins and
        cached per geometry (an argument adapter asks before it runs anything)."""
        key = meta_key_or_none(args, kwargs)
        if key is None:
            return False
        hit = self.adapt_cache.get(key)
        if hit is None:
            hit = remember(self.adapt_cache, key, self.native_reason(to_meta(args), to_meta(kwargs)) is None,
                           _DECISIONS_MAX)
        return hit

    # ------------------------------------------------------------ chain

    def choose(self, args, kwargs, reason: Reason, meta: bool = False, vendor_failed: bool = False):
        """The fallback step for a call the native kernel does not take:
        (route, detail), route one of vendor_fallback, python_fallback,
        decomposed, device_decomposed, cpu, error.  The same decision serves
        eager dispatch and flbridge.coverage's prediction on meta tensors."""
        fb = self.fb
        if not self.forced and fb is not None:
            if fb.kind == "vendor" and self.fb_native is not None and not vendor_failed:
                p = self.fb_native.decide(normalize(self.opi, args, kwargs), meta=meta)
                if p.__class__ is Prepared:
                    return "vendor_fallback", f"{self.fb_native.impl} ({reason})"
            elif fb.kind == "python":
                return "python_fallback", f"{fb.target} ({reason})"
            elif fb.kind == "error":
                return "error", (f"the spec sets fallback_policy.op_specific to 'error' for it "
                                 f"({fb.file}:{fb.line})")
        # (not after the kernel failed on this call's data: a decomposition may read bad data
        # otherwise, embedding's wraps a negative index that embedding refuses; the CPU runs the
        # op's own checks and raises PyTorch's error, as for a CPU tensor)
        if (not self.forced and self.decomps and (fb is None or fb.kind != "cpu")
                and reason.kind != "vendor_error"
                and (id(self.chip), self.func) not in _ACTIVE.__dict__.get("running", ())):
            # (an op reached again while its own decomposition runs, through an
            # op flbridge implements itself, e.g. fill_ -> fill -> full_like ->
            # fill_, is a loop: that inner call goes on down the chain)
            fn = self.decomposition(args, kwargs)
            if fn is not None:
                return "decomposed", f"{_source_name(fn)} ({reason})"
        if self.device_only is not None and not self.forced:
            return "device_decomposed", f"flbridge.routing.decompositions ({reason})"
        if CONFIG.fallback and (self.chip.spec.fallback_default == "cpu" or (fb is not None and fb.kind == "cpu")):
            blocker = self.decomposition_blocker(args, kwargs) if not self.forced else ""
            return "cpu", f"{reason}; its decomposition needs {blocker}" if blocker else str(reason)
        return "error", ("FLBRIDGE_FALLBACK=0 disables the CPU fallback" if not CONFIG.fallback else
                         f"the spec's fallback_policy.default is 'error' ({self.chip.spec.file})")

    def predict(self, args, kwargs):
        """(route, detail, reason) this call would take, for arguments that
        are meta (or fake) tensors: no kernel runs and nothing is counted."""
        nat = self.bound
        reason = self.static_reason
        if nat is not None and not self.forced:
            p = nat.decide(normalize(self.opi, args, kwargs), meta=True)
            if p.__class__ is Prepared:
                return "native", nat.impl, None
            reason = p
        kind, detail = self.choose(args, kwargs, reason, meta=True)
        return ("decomposed" if kind == "device_decomposed" else kind), detail, reason

    def fallback(self, args, kwargs, reason: Reason, vendor_failed: bool = False):
        if reason.kind == "device":
            # a tensor of another fl device: an error, as for two CUDA devices (a decomposition
            # would move it across silently; the CPU fallback raises the same)
            other = _other_chip_device(args, kwargs, self.chip)
            if other is not None:
                raise _device_mismatch(self.chip.device, other)
        s = self.chip.stats
        kind, detail = self.choose(args, kwargs, reason, vendor_failed=vendor_failed)
        if kind == "vendor_fallback":
            vals = normalize(self.opi, args, kwargs)
            out = self.fb_native.run(vals, self.fb_native.decide(vals), count=False)
            if out is FAILED:
                return self.fallback(args, kwargs, self.fb_native.failure, vendor_failed=True)
            s.fallback_ops += 1
            s.vendor_fallback_ops += 1
            s.route(self.qualname, kind, reason.kind, detail)
            self._note(reason, f"running the vendor fallback {self.fb_native.impl}")
            return out
        if kind == "python_fallback":
            return self._python_fallback(args, kwargs, reason)
        if kind == "decomposed" or kind == "device_decomposed":
            s.fallback_ops += 1
            s.decomposed_ops += 1
            s.route(self.qualname, "decomposed", reason.kind, detail)
            if kind == "decomposed":
                self._note(reason, "decomposing it into ops the chip runs natively")
                fn = self.decomposition(args, kwargs)
                running = _ACTIVE.__dict__.setdefault("running", set())
                mine = (id(self.chip), self.func)
                running.add(mine)
                try:
                    return fn(*args, **kwargs)
                except IndexError:
                    # a part found an index out of range: the op itself on the CPU raises
                    # PyTorch's error for the op (which names what the part's error cannot)
                    if self.opi.mutated or not CONFIG.fallback:
                        raise
                    return cpu_fallback(self, args, kwargs)
                finally:
                    running.discard(mine)
            # no CPU kernel exists: flbridge's decomposition, whatever its parts' routes
            self._note(reason, "decomposing it (PyTorch has no CPU kernel for it)")
            return self.device_only(*args, **kwargs)
        if kind == "cpu":
            if launch.STATE.capture is not None:
                launch.STATE.capture.cpu_fallback(self, reason)
            s.fallback_ops += 1
            s.cpu_fallback_ops += 1
            s.route(self.qualname, "cpu", reason.kind, detail)
            self._note(reason, "running it on the CPU")
            return cpu_fallback(self, args, kwargs)
        raise self._unsupported(reason, detail)

    def explain(self, args, kwargs) -> tuple:
        """(kind, text, fix) of why this call did not run natively: the same
        Reason the route decided on (cached per argument key)."""
        reason = self.static_reason
        if self.bound is not None and not self.forced:
            try:
                p = self.bound.decide(normalize(self.opi, args, kwargs))
            except Exception:  # noqa: BLE001 - arguments a failed call left unusable: say what the route said
                p = None
            reason = p if isinstance(p, Reason) else (self.bound.failure or reason)
        blocker = self.decomposition_blocker(args, kwargs) if not self.forced else ""
        text = f"{reason.text}; its decomposition needs {blocker}" if blocker else reason.text
        return reason.kind, text, self.fix_for(reason, self.blocking_part(args, kwargs) if blocker else "")

    def fix_for(self, reason: Reason, part: str = "") -> str:
        """What would let this op run natively, for `reason`: the Reason's own
        fix, spelled out for a missing kernel or a dtype the chip cannot hold;
        `part`: the op that keeps its decomposition off the chip."""
        fix = reason.fix
        if reason.kind == "no_kernel" and not self.forced:
            fix = (f"{fix} (a vendor function that computes it), e.g. "
                   f"`- {{name: {self.qualname}, impl: <vendor function>}}`, or name one under "
                   f"fallback_policy.op_specific")
        elif not fix and reason.kind == "dtype":
            held = ", ".join(dtype_name(d) for d in self.chip.runtime.dtype_codes)
            fix = f"keep it in a dtype {self.chip.device_type} holds ({held}), or run it on the CPU tensors yourself"
        if part:
            fix = f"{fix}; or give the chip {part}, which is what keeps its decomposition off the chip"
        return fix

    def _note(self, reason: Reason, action: str) -> None:
        chip = self.chip
        if "fallback" in CONFIG.log:
            log.info("fallback %s on %s: %s; %s", self.qualname, chip.device_type, reason, action)
        if CONFIG.warn == "off":
            return
        key = (self.qualname, reason.kind)
        if CONFIG.warn == "once":
            if key in chip.warned:
                return
            chip.warned.add(key)
        warnings.warn(f"flbridge: {self.qualname} on {chip.device_type} ({chip.device}) does not run "
                      f"natively: {reason}; {action}", FallbackWarning, stacklevel=user_stacklevel())

    def _unsupported(self, reason: Reason, why: str) -> UnsupportedOpError:
        chip = self.chip
        nat = self.bound
        supported = [dtype_name(d) for d in nat.entry.dtypes] if nat else None
        text = f"{reason.text}; {why}"
        fix = reason.fix or ("enable the CPU fallback (unset FLBRIDGE_FALLBACK)" if not CONFIG.fallback
                             else f"add {self.qualname} to supported_ops in {chip.spec.file}")
        return UnsupportedOpError(self.qualname, chip.device_type, reason.dtype, text,
                                  reason.supported or supported, fix)

    def _python_fallback(self, args, kwargs, reason):
        active = _ACTIVE.__dict__.setdefault("python", set())
        key = (id(self.chip), self.func)
        if key in active:  # the Python fallback calls this op itself: go on down the chain
            return cpu_fallback(self, args, kwargs)
        if self.fb_python is None:
            mod, _, name = self.fb.target.partition(":")
            self.fb_python = getattr(importlib.import_module(mod), name)
        active.add(key)
        try:
            out = self.fb_python(*args, **kwargs)
        finally:
            active.discard(key)
        s = self.chip.stats
        s.fallback_ops += 1
        s.python_fallback_ops += 1
        s.route(self.qualname, "python_fallback", reason.kind, f"{self.fb.target} ({reason})")
        self._note(reason, f"running the Python fallback {self.fb.target}")
        return out

    # ---------------------------------------------------- decomposition

    def decomposition(self, args, kwargs):
        """The decomposition that runs this call on the chip, or None.  One
        qualifies when every op it calls runs natively, by a vendor fallback,
        or by a decomposition of its own that qualifies in turn (at most
        MAX_DECOMPOSITION_DEPTH levels).  Sources, in order: torch._decomp's
        table, torch._refs, the op's CompositeImplicitAutograd kernel.
        Decided once per geometry and scalar *types* (each part's own route
        re-checks its call, so a decision reused for another scalar value
        can cost a fallback but never an invalid call)."""
        if not self.decomps:
            return None
        return self._decomposition_decision(args, kwargs, 0)[0]

    def blocking_part(self, args, kwargs) -> str:
        """The op whose absence keeps this call's decomposition off the chip
        (its qualified name; "" if a decomposition runs or none exists)."""
        b = self.decomposition_blocker(args, kwargs)
        return b.split(" (", 1)[0] if "::" in b.split(" (", 1)[0] else ""

    def decomposition_blocker(self, args, kwargs) -> str:
        """Why no decomposition runs this call on the chip: the first part
        that kept it off, with why ("" if one runs, or the op has none)."""
        if not self.decomps:
            return ""
        return self._decomposition_decision(args, kwargs, 0)[1]

    def _decomposition_decision(self, args, kwargs, depth: int):
        """(the decomposition or None, the blocker, whether the depth bound
        decided it), from the cache or decided now; a call that cannot be
        keyed has none."""
        key = meta_key_or_none(args, kwargs)
        if key is None:
            return None, "", False
        hit = self.decomp_ok_cache.get(key)
        if hit is not None:
            return hit[0], hit[1], False
        return self._decide_decomposition(args, kwargs, key, depth)

    def _decide_decomposition(self, args, kwargs, key, depth: int):
        """(the decomposition or None, the blocker, whether the depth bound
        decided it); cached unless the bound did (a shallower caller may see
        further)."""
        visiting = _ACTIVE.__dict__.setdefault("decomposing", set())
        mine = (id(self.chip), self.func)
        if mine in visiting:
            return None, f"{self.qualname} again (a loop)", False
        visiting.add(mine)
        try:
            found, blocker, limited = None, "", False
            for fn in self.decomps:
                why, cut = self._trace_decomposition(fn, args, kwargs, depth)
                if why is None:
                    found = fn
                    break
                blocker, limited = blocker or why, limited or cut
        finally:
            visiting.discard(mine)
        if found is not None or not limited:
            remember(self.decomp_ok_cache, key, (found, "" if found is not None else blocker), _DECISIONS_MAX)
        return found, ("" if found is not None else blocker), limited and found is None

    def _trace_decomposition(self, fn, args, kwargs, depth: int):
        """Runs one decomposition on meta tensors, recording each op it
        calls, and checks each: (None if it qualifies, else the part that
        did not; whether the depth bound decided it)."""
        chip = self.chip
        rec = _Record()
        try:
            margs, mkwargs = to_meta(args), to_meta(kwargs)
            with rec:
                fn(*margs, **mkwargs)
        except Exception as e:  # noqa: BLE001 - a decomposition that does not trace does not qualify
            return f"a decomposition that does not trace ({type(e).__name__})", False
        if not rec.calls:
            return "a decomposition that calls no op", False
        for func, a, kw in rec.calls:
            if func is self.func:
                return f"{self.qualname} itself", False
            if kind(func) != ROUTED:
                continue  # views, allocation and other metadata ops
            part = route_of(chip, func)
            why = part.native_reason(a, kw)
            if why is None:
                continue
            if depth + 1 >= MAX_DECOMPOSITION_DEPTH:
                return f"{part.qualname} ({why}), more than {MAX_DECOMPOSITION_DEPTH} decompositions deep", True
            deeper, cut = "", False
            if part.decomps and not part.forced:
                found, deeper, cut = part._decomposition_decision(a, kw, depth + 1)
                if found is not None:
                    continue
            return f"{part.qualname} ({why})" + (f", whose decomposition needs {deeper}" if deeper else ""), cut
        return None, False

    def native_reason(self, args, kwargs):
        """None if this call (on meta stand-ins) runs on the chip itself, by
        its kernel or a vendor fallback; else why not (a short text)."""
        if self.forced:
            return "forced to the CPU"
        vals = normalize(self.opi, args, kwargs)
        if self.bound is not None:
            r = why_not(self.bound, vals, meta=True)
            if r is None:
                return None
        else:
            r = self.static_reason
        if self.fb_native is not None and why_not(self.fb_native, vals, meta=True) is None:
            return None
        return str(r)
