"""The route of one op on one chip: native kernel or the fallback chain.

An :class:`OpRoute` is made once per (chip, op overload) and decides per
call between

1. the native kernel from the spec (:class:`~flbridge.native.NativeKernel`:
   checks, residency, adapter, vendor C call), and, when that cannot or does
   not work, the fallback chain:
2. the op-specific fallback from the spec (a vendor function or a Python one),
3. a torch._decomp decomposition whose parts the chip runs natively,
4. the CPU (:func:`~flbridge.cpu_fallback.cpu_fallback`), or
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

from .argkeys import meta_key, to_meta
from .chipstats import log
from .config import CONFIG
from .cpu_fallback import cpu_fallback
from .eligibility import why_not
from .errors import UnsupportedOpError
from .native import NativeKernel
from .opkinds import ROUTED, kind
from .ops import info, normalize
from .reasons import FAILED, FallbackWarning, Reason, user_stacklevel
from .registry import dtype_name
from .tensor import XPUTensor

aten = torch.ops.aten

# Ops PyTorch lets mix an accelerator tensor with CPU index tensors.
_CPU_TENSOR_ARGS_OK = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                       aten._index_put_impl_.default}
_ACTIVE = threading.local()


def chip_of(args, kwargs):
    """The chip of the first fl tensor among the arguments."""
    for a in (*args, *kwargs.values()):
        if type(a) is XPUTensor:
            return a._st.chip
        if isinstance(a, (list, tuple)):
            for b in a:
                if type(b) is XPUTensor:
                    return b._st.chip
    raise RuntimeError("flbridge: dispatch without an fl tensor argument")


def route(func, args, kwargs):
    """Runs func through its route on the chip of its fl arguments."""
    chip = chip_of(args, kwargs)
    r = chip.routes.get(func)
    if r is None:
        r = chip.routes[func] = OpRoute(chip, func)
    return r(args, kwargs)


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
        self.decomp = decomposition_table.get(func) if chip.spec.decompose else None
        self.decomp_ok_cache: dict = {}
        self.seeded = torch.Tag.nondeterministic_seeded in func.tags
        self.mixed_device_ok = func in _CPU_TENSOR_ARGS_OK
        if self.forced:
            self.static_reason = Reason("forced", "forced to the CPU by FLBRIDGE_FORCE_FALLBACK",
                                        "unset FLBRIDGE_FORCE_FALLBACK")
        else:
            self.static_reason = Reason("no_kernel", f"{chip.device_type} has no kernel for it",
                                        f"add {self.qualname} to supported_ops in {chip.spec.file}")

    def __call__(self, args, kwargs):
        nat = self.bound
        if nat is not None and not self.forced:
            if nat.fast:
                out = nat.run_fast(args if not kwargs else normalize(self.opi, args, kwargs))
                if out is not None and out is not FAILED:
                    return out
                if out is FAILED:
                    return self.fallback(args, kwargs, nat.failure)
            vals = normalize(self.opi, args, kwargs)
            reason, metas = nat.decide(vals)
            if reason is None:
                out = nat.run(vals, metas)
                if out is not FAILED:
                    s = self.chip.stats
                    s.native_ops += 1
                    s.routes[(self.qualname, "native", nat.impl)] += 1
                    if "dispatch" in CONFIG.log:
                        log.info("dispatch %s on %s: native %s", self.qualname, self.chip.device_type, nat.impl)
                    return out
                reason = nat.failure
            return self.fallback(args, kwargs, reason)
        return self.fallback(args, kwargs, self.static_reason)

    # ------------------------------------------------------------ chain

    def fallback(self, args, kwargs, reason: Reason):
        chip = self.chip
        s = chip.stats
        fb = self.fb
        if not self.forced and fb is not None:
            if fb.kind == "vendor" and self.fb_native is not None:
                vals = normalize(self.opi, args, kwargs)
                r2, metas = self.fb_native.decide(vals)
                if r2 is None:
                    out = self.fb_native.run(vals, metas)
                    if out is not FAILED:
                        s.fallback_ops += 1
                        s.vendor_fallback_ops += 1
                        s.routes[(self.qualname, "vendor_fallback", f"{self.fb_native.impl} ({reason})")] += 1
                        self._note(reason, f"running the vendor fallback {self.fb_native.impl}")
                        return out
            elif fb.kind == "python":
                return self._python_fallback(args, kwargs, reason)
            elif fb.kind == "error":
                raise self._unsupported(reason, f"the spec sets fallback_policy.op_specific to 'error' "
                                                f"for it ({fb.file}:{fb.line})")
        if not self.forced and self.decomp is not None and (fb is None or fb.kind != "cpu") \
                and self._decomposes_natively(args, kwargs):
            s.fallback_ops += 1
            s.decomposed_ops += 1
            s.routes[(self.qualname, "decomposed", f"torch._decomp ({reason})")] += 1
            self._note(reason, "decomposing it into ops the chip runs natively")
            return self.decomp(*args, **kwargs)
        if CONFIG.fallback and (chip.spec.fallback_default == "cpu" or (fb is not None and fb.kind == "cpu")):
            s.fallback_ops += 1
            s.cpu_fallback_ops += 1
            s.routes[(self.qualname, "cpu", str(reason))] += 1
            self._note(reason, "running it on the CPU")
            return cpu_fallback(self, args, kwargs)
        why = ("FLBRIDGE_FALLBACK=0 disables the CPU fallback" if not CONFIG.fallback else
               f"the spec's fallback_policy.default is 'error' ({chip.spec.file})")
        raise self._unsupported(reason, why)

    def _note(self, reason: Reason, action: str) -> None:
        chip = self.chip
        if "fallback" in CONFIG.log:
            log.info("fallback %s on %s: %s; %s", self.qualname, chip.device_type, reason, action)
        if CONFIG.warn == "off":
            return
        key = (self.qualname, str(reason))
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
        s.routes[(self.qualname, "python_fallback", f"{self.fb.target} ({reason})")] += 1
        self._note(reason, f"running the Python fallback {self.fb.target}")
        return out

    # ---------------------------------------------------- decomposition

    def _decomposes_natively(self, args, kwargs) -> bool:
        try:
            key = meta_key(args, kwargs)
        except TypeError:
            return False
        ok = self.decomp_ok_cache.get(key)
        if ok is None:
            ok = self.decomp_ok_cache[key] = self._trace_decomposition(args, kwargs)
        return ok

    def _trace_decomposition(self, args, kwargs) -> bool:
        """Runs the decomposition on meta tensors, recording each op it
        calls; it qualifies if the chip takes every one of them natively."""
        from torch.utils._python_dispatch import TorchDispatchMode
        chip = self.chip
        calls = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, a=(), kw=None):
                calls.append((func, a, kw or {}))
                return func(*a, **(kw or {}))

        try:
            margs, mkwargs = to_meta(args), to_meta(kwargs)
            with Record():
                self.decomp(*margs, **mkwargs)
        except Exception:  # noqa: BLE001 - a decomposition that does not trace does not qualify
            return False
        if not calls:
            return False
        for func, a, kw in calls:
            if func is self.func:
                return False
            if kind(func) != ROUTED:
                continue  # views, allocation and other metadata ops
            nat = chip.routes.get(func)
            if nat is None:
                nat = chip.routes[func] = OpRoute(chip, func)
            if nat.bound is None or nat.forced:
                return False
            if why_not(nat.bound, normalize(nat.opi, a, kw), meta=True) is not None:
                return False
        return True
