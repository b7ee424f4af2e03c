"""The op router: every aten op on an `fl` tensor comes through dispatch().

Per op overload a handler is chosen once (`_HANDLERS`): views and other
metadata ops, cross-device copies and a few housekeeping ops are handled
here; everything else goes to the chip's :class:`OpRoute`, which decides per
call between

1. the native kernel from the spec (dtype, constraint and argument checks,
   then residency -> adapter -> marshal -> vendor C call), and, when that
   cannot or does not work, the fallback chain:
2. the op-specific fallback from the spec (a vendor function or a Python one),
3. a torch._decomp decomposition whose parts the chip runs natively,
4. the CPU (correct for in-place, out= and views), or
5. UnsupportedOpError with what to change.

Each step is recorded in the chip's stats; fallbacks warn once per
(op, chip, reason).
"""
from __future__ import annotations

import importlib
import threading
import warnings

import torch
import torch.autograd.profiler as _profiler
from torch._decomp import decomposition_table

from . import binding as B
from .adapter import (Temps, View, broadcast_strides, convert_quirk, copy_to_dense, dense_strides,
                      is_contiguous, layout_perm)
from .config import CONFIG
from .errors import UnsupportedOpError
from .ops import NO_DEFAULT, info, reaches_dispatch
from .ops import normalize as _normalize
from .registry import dtype_name
from .residency import Storage, make_resident
from .runtime import DeviceError
from .chipstats import log
from .tensor import XPUTensor, _itemsize, host_view, new_tensor

aten = torch.ops.aten


class FallbackWarning(UserWarning):
    """An op did not run natively (said once per op, chip and reason)."""


class Reason:
    """Why an op cannot run natively, and what would fix it."""
    __slots__ = ("kind", "text", "fix", "dtype", "supported")

    def __init__(self, kind, text, fix="", dtype=None, supported=None):
        self.kind, self.text, self.fix, self.dtype, self.supported = kind, text, fix, dtype, supported

    def __str__(self):
        return self.text


# ======================================================================
# entry point


def dispatch(cls, func, types, args=(), kwargs=None):
    if not _THREAD.__dict__:
        _first_op_in_thread()
    h = _HANDLERS.get(func)
    if h is _route:
        # the common case, inlined: the chip of the first argument, its route
        a = args[0] if args else None
        if type(a) is XPUTensor:
            r = a._st.chip.routes.get(func)
            if r is not None:
                return r(args, kwargs or {})
    elif h is None:
        h = _HANDLERS[func] = _classify(func)
    return h(func, args, kwargs or {})


_THREAD = threading.local()


def _first_op_in_thread() -> None:
    """Backward must run on the calling thread: PyTorch's Python device guard
    reports one device, so autograd has a per-device worker queue only for
    fl:0.  Any thread that runs backward on fl tensors ran fl ops first."""
    _THREAD.seen = True
    torch._C._set_multithreading_enabled(False)


def _chip_of(args, kwargs):
    for a in (*args, *kwargs.values()):
        if type(a) is XPUTensor:
            return a._st.chip
        if isinstance(a, (list, tuple)):
            for b in a:
                if type(b) is XPUTensor:
                    return b._st.chip
    raise RuntimeError("flbridge: dispatch without an fl tensor argument")


def _route(func, args, kwargs):
    chip = _chip_of(args, kwargs)
    r = chip.routes.get(func)
    if r is None:
        r = chip.routes[func] = OpRoute(chip, func)
    return r(args, kwargs)


# ======================================================================
# the per-op route


class OpRoute:
    def __init__(self, chip, func):
        self.chip = chip
        self.func = func
        self.opi = info(func)
        self.qualname = self.opi.qualname
        rt = chip.runtime
        self.forced = CONFIG.forced(self.qualname)
        self.bound = _Native(self, rt.ops[func]) if func in rt.ops else None
        fb = chip.spec.op_specific.get(func)
        self.fb = fb
        self.fb_native = _Native(self, rt.vendor_fallbacks[func]) if func in rt.vendor_fallbacks else None
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
                out = nat.run_fast(args if not kwargs else _normalize(self.opi, args, kwargs))
                if out is not None and out is not _FAILED:
                    return out
                if out is _FAILED:
                    return self.fallback(args, kwargs, nat.failure)
            vals = _normalize(self.opi, args, kwargs)
            reason, metas = nat.decide(vals)
            if reason is None:
                out = nat.run(vals, metas)
                if out is not _FAILED:
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
                vals = _normalize(self.opi, args, kwargs)
                r2, metas = self.fb_native.decide(vals)
                if r2 is None:
                    out = self.fb_native.run(vals, metas)
                    if out is not _FAILED:
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
                      f"natively: {reason}; {action}", FallbackWarning, stacklevel=_user_stacklevel())

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
            key = _meta_key(args, kwargs)
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
            margs, mkwargs = _to_meta(args), _to_meta(kwargs)
            with Record():
                self.decomp(*margs, **mkwargs)
        except Exception:  # noqa: BLE001 - a decomposition that does not trace does not qualify
            return False
        if not calls:
            return False
        for func, a, kw in calls:
            if func is self.func:
                return False
            h = _HANDLERS.get(func) or _classify(func)
            if h is not _route:
                continue  # views, allocation and other metadata ops
            nat = chip.routes.get(func)
            if nat is None:
                nat = chip.routes[func] = OpRoute(chip, func)
            if nat.bound is None or nat.forced:
                return False
            if nat.bound.reason(_normalize(nat.opi, a, kw), meta=True) is not None:
                return False
        return True

    # ------------------------------------------------------------ meta

    def outputs_meta(self, vals):
        """Shapes, strides and dtypes of the results, from PyTorch's meta
        kernels (called once per argument key by _Native.decide); raises
        PyTorch's own error for invalid arguments."""
        pos, kw = _split_args(self.opi, [_to_meta(v) for v in vals])
        res = self.func(*pos, **kw)
        res = res if isinstance(res, (tuple, list)) else (res,)
        return tuple((tuple(r.shape), tuple(r.stride()), r.dtype) if isinstance(r, torch.Tensor) else None
                     for r in res)


_FAILED = object()
_ACTIVE = threading.local()
_PKG_DIR = __file__.rsplit("/", 1)[0]
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def _user_stacklevel() -> int:
    """stacklevel pointing warnings.warn at the first frame outside flbridge
    and torch (the user's line)."""
    import sys
    f, level = sys._getframe(1), 1
    while f is not None and (f.f_code.co_filename.startswith(_PKG_DIR) or
                             f.f_code.co_filename.startswith(_TORCH_DIR)):
        f, level = f.f_back, level + 1
    return level

# Ops PyTorch lets mix an accelerator tensor with CPU index tensors.
_CPU_TENSOR_ARGS_OK = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                       aten._index_put_impl_.default}


def _split_args(opi, vals):
    pos, kw = [], {}
    for a, v in zip(opi.args, vals):
        if a.kwarg_only:
            kw[a.name] = v
        else:
            pos.append(v)
    return pos, kw


def _arg_key(v, chip=None):
    """Cache key of one argument: tensors by geometry, dtype and device
    (whether it is `chip`'s), numbers with their type (2, 2.0 and True hash
    alike but may give different results), other values as they are."""
    if type(v) is XPUTensor:
        return (v.shape, v.stride(), v.dtype, v._st.chip is chip)
    if isinstance(v, torch.Tensor):
        return (v.shape, v.stride(), v.dtype, v.device.type)
    if isinstance(v, (list, tuple)):
        return tuple(_arg_key(x, chip) for x in v)
    if isinstance(v, (int, float, bool)):
        return (type(v), v)
    return v if isinstance(v, (str, type(None), torch.dtype, torch.device, torch.layout,
                                torch.memory_format)) else (type(v), id(v))


def _meta_key(args, kwargs):
    return (tuple(_arg_key(a) for a in args), tuple((k, _arg_key(v)) for k, v in sorted(kwargs.items())))


def _to_meta(v):
    if isinstance(v, torch.Tensor):
        if v.device.type == "cpu" and v.dim() == 0:
            return v  # a CPU scalar stays one (PyTorch allows it beside any device)
        m = torch.empty_strided(tuple(v.shape), v.stride(), dtype=v.dtype, device="meta")
        return m
    if isinstance(v, list):
        return [_to_meta(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_to_meta(x) for x in v)
    if isinstance(v, dict):
        return {k: _to_meta(x) for k, x in v.items()}
    if isinstance(v, torch.device) and v.type == "fl":
        return torch.device("meta")
    return v


# ======================================================================
# native execution


class _Native:
    """A bound vendor function and everything precomputed to call it."""

    def __init__(self, route: OpRoute, bound):
        self.route = route
        self.chip = route.chip
        self.rt = route.chip.runtime
        self.entry = e = bound.entry
        self.plan = plan = bound.plan
        self.cfn = bound.cfn
        self.quirk_fns = bound.quirk_fns
        self.impl = e.impl
        self.failure = None
        opi = route.opi
        self.opi = opi
        self.mutated = set(opi.mutated)
        # (aten index, arg name, nullable) of each tensor the kernel reads
        self.tensor_args = []
        for kind, a, b in plan.steps:
            if kind == B.TENSOR:
                self.tensor_args.append((a, opi.args[a].name, b))
        self.lengths = {a for kind, a, _ in plan.steps if kind == B.LENGTH}
        # values each list argument must have for the kernel (a single value is
        # broadcast, as PyTorch does): the spec's `length`, else the schema's int[N]
        self.list_len = {a: e.constraints.length.get(opi.args[a].name, opi.args[a].fixed_len)
                         for kind, a, _ in plan.steps if kind in (B.INTLIST, B.LENGTH)}
        self.list_args = [(a, opi.args[a].name, self.list_len[a]) for kind, a, _ in plan.steps
                          if kind == B.INTLIST]
        self.mapped = [(a, opi.args[a].name, m) for kind, a, m in plan.steps if kind == B.MAPPED]
        self.cons = e.constraints
        self.value_checks = [(opi.by_name[n].index, n, allowed) for n, allowed in self.cons.values.items()]
        self.range_checks = [(opi.by_name[n].index, n, lo_hi) for n, lo_hi in self.cons.range.items()]
        self.present = {opi.by_name[n].index for n in self.cons.present}
        self.arg_index = {a.name: a.index for a in opi.args}
        # Fast path: pointwise kernels without layout/contiguity/quirk needs or
        # constraints; when every tensor input has the same shape, dtype and a
        # contiguous layout, the result is a contiguous tensor of that shape
        # and dtype (TensorIterator's rule) and no meta call is needed.
        self.tensor_idx = tuple(a for a, _, _ in self.tensor_args)
        self.fast = (torch.Tag.pointwise in route.func.tags and not e.layout and not e.contiguous
                     and not e.quirks and not self.cons and len(opi.rets) == 1 and not self.mapped
                     and bool(self.tensor_idx))
        self.inplace_idx = opi.rets[0].alias_arg if opi.rets else None
        self.route_key = (route.qualname, "native", e.impl)
        self.decisions: dict = {}
        # the vendor call as it appears in torch.profiler tables
        self.profile_label = f"{e.impl} [{route.chip.device_type}]"
        # calls without keyword arguments skip normalization in the fast
        # path, which reads trailing arguments' defaults from here
        self.defaults = tuple(None if a.default is NO_DEFAULT else a.default for a in opi.args)
        self.needs_copy = bool(e.layout or e.contiguous)
        # inputs the adapter never changes (unless broadcast or cast per call)
        self.plain_inputs = {n for _, n, _ in self.tensor_args
                             if n not in e.layout and n not in e.contiguous and n not in e.quirks}
        # output C params by return index -> layout key
        # per result: (layout, must be dense), keyed by the C parameter's name
        # (or "out" for the first result)
        self.out_layouts = {}
        params = self.rt.header.functions[e.impl].params
        for (kind, ri, _), p in zip(plan.steps, params):
            if kind == B.OUTPUT:
                lay = e.layout.get(p.name) or (e.layout.get("out") if ri == 0 else None)
                self.out_layouts[ri] = (lay, p.name in e.contiguous)

    # -------------------------------------------------------- eligibility

    def decide(self, vals):
        """(None, result metas) if the kernel takes these arguments, else
        (Reason, None).  Both depend only on each argument's geometry, dtype
        and device and on the scalar values, so they are cached per key."""
        chip = self.chip
        key = tuple(_arg_key(v, chip) for v in vals)
        got = self.decisions.get(key)
        if got is None:
            reason = self.reason(vals)
            metas = self.route.outputs_meta(vals) if reason is None else None
            if metas is not None:
                for m in metas:
                    if m is not None and m[2] not in self.rt.dtype_codes:
                        reason, metas = Reason("dtype", f"the result would be {dtype_name(m[2])}, which "
                                                        f"{chip.device_type} descriptors cannot hold",
                                               dtype=dtype_name(m[2])), None
                        break
            got = (reason, metas)
            if len(self.decisions) > 4096:
                self.decisions.clear()
            self.decisions[key] = got
        return got

    def reason(self, vals, meta: bool = False):
        """None if the kernel can take these arguments, else a Reason."""
        e = self.entry
        chip = self.chip
        for idx, name, default in self.plan.unconsumed:
            v = vals[idx]
            if v is not default and v != default:
                return Reason("argument", f"{name}={_short(v)} ({e.impl} only takes the default {default!r})")
        max_dims = self.rt.max_dims
        for idx, name, _nullable in self.tensor_args:
            v = vals[idx]
            if v is None:
                if idx in self.present:
                    return Reason("argument", f"{name} is None ({e.impl} needs it)")
                continue
            if not isinstance(v, torch.Tensor):
                continue  # a Python number: passed as a device constant
            if not meta and v.device != chip.device:
                if v.device.type == "cpu" and v.dim() == 0:
                    continue
                return Reason("device", f"{name} is on {v.device}")
            allowed = e.arg_dtypes.get(name, e.dtypes)
            if v.dtype not in allowed:
                return Reason("dtype", f"{name} has dtype {dtype_name(v.dtype)} ({e.impl} takes "
                                       f"{', '.join(dtype_name(d) for d in allowed)})",
                              f"cast {name} to torch.{dtype_name(allowed[0])}", dtype_name(v.dtype),
                              [dtype_name(d) for d in allowed])
            if v.dim() > max_dims:
                return Reason("dims", f"{name} has {v.dim()} dims ({chip.device_type} descriptors hold "
                                      f"at most {max_dims})")
        for idx, name, allowed in self.value_checks:
            v = vals[idx]
            items = v if isinstance(v, (list, tuple)) else (v,)
            for x in items:
                if x not in allowed:
                    return Reason("constraint", f"constraint {name}={x!r} not in {list(allowed)}",
                                  f"use {name} in {list(allowed)}")
        for idx, name, (lo, hi) in self.range_checks:
            v = vals[idx]
            for x in (v if isinstance(v, (list, tuple)) else (v,)):
                if x is not None and not lo <= x <= hi:
                    return Reason("constraint", f"constraint {name}={x!r} not in [{lo}, {hi}]",
                                  f"use {name} between {lo} and {hi}")
        cons = self.cons
        if cons.ndim:
            for name, ranks in cons.ndim.items():
                v = vals[self.arg_index[name]]
                if isinstance(v, torch.Tensor) and v.dim() not in ranks:
                    return Reason("constraint", f"{name} is {v.dim()}-D ({e.impl} takes {list(ranks)}-D)")
        if cons.sizes:
            r = self._check_sizes(vals)
            if r is not None:
                return r
        for idx, name, n in self.list_args:
            v = vals[idx]
            if n and v is not None and len(v) not in (1, n) and idx not in self.lengths:
                return Reason("argument", f"{name} has {len(v)} values ({e.impl} takes {n})")
        for idx, name, m in self.mapped:
            if vals[idx] not in m:
                return Reason("constraint", f"{name}={vals[idx]!r} has no code for {e.impl} "
                                            f"(known: {', '.join(map(str, m))})")
        if self.needs_copy and not self.rt.has_copy:
            for name in list(e.layout) + list(e.contiguous):
                v = vals[self.arg_index[name]] if name in self.arg_index else None
                if isinstance(v, torch.Tensor):
                    return Reason("layout", f"{name} needs a layout/contiguity copy and {chip.device_type} "
                                            f"has no copy kernel (runtime.copy)")
        for name, layout in e.layout.items():
            v = vals[self.arg_index[name]] if name in self.arg_index else None
            if isinstance(v, torch.Tensor) and v.dim() != len(layout):
                return Reason("layout", f"{name} is {v.dim()}-D but {e.impl} takes it as {layout}")
        return None

    def _check_sizes(self, vals):
        e = self.entry
        cons = self.cons
        dims: dict = {}
        for name, names in cons.sizes.items():
            v = vals[self.arg_index[name]]
            if not isinstance(v, torch.Tensor):
                continue
            shape = tuple(v.shape)
            if len(shape) != len(names):
                return Reason("constraint", f"{name} is {len(shape)}-D ({e.impl} takes {list(names)})")
            for dn, s in zip(names, shape):
                if dims.setdefault(dn, s) != s:
                    return Reason("constraint", f"{dn} differs between arguments")
        for dn, m in cons.multiple_of.items():
            if dn in dims and dims[dn] % m:
                return Reason("constraint", f"constraint {dn}={dims[dn]} is not a multiple of {m}",
                              f"pad {dn} to a multiple of {m}")
        for dn, m in cons.max.items():
            if dn == "numel":
                for idx, name, _ in self.tensor_args:
                    v = vals[idx]
                    if isinstance(v, torch.Tensor) and v.numel() > m:
                        return Reason("constraint", f"{name} has {v.numel()} elements (max {m})")
            elif dn in dims and dims[dn] > m:
                return Reason("constraint", f"constraint {dn}={dims[dn]} exceeds the maximum {m}")
        return None

    # ------------------------------------------------------------ run

    def run_fast(self, vals):
        """The common case in a few steps; None when it does not apply."""
        chip = self.chip
        shape = dtype = strides = None
        tensors = []
        nv = len(vals)
        for idx in self.tensor_idx:
            v = vals[idx] if idx < nv else None
            if type(v) is XPUTensor:
                if v._st.chip is not chip:
                    return None
                if shape is None:
                    shape, dtype, strides = v.shape, v.dtype, v.stride()
                elif v.shape != shape or v.dtype != dtype or v.stride() != strides:
                    return None
                tensors.append(v)
            elif v.__class__ not in (int, float):
                return None
        if dtype is None or dtype not in self.entry.dtypes or not dtype.is_floating_point \
                or len(shape) > self.rt.max_dims or not is_contiguous(shape, strides):
            return None
        for idx, _name, default in self.plan.unconsumed:
            v = vals[idx] if idx < nv else default
            if v is not default and v != default:
                return None
        need = [t._st for t in tensors if not t._st.dev_valid]
        if need:
            make_resident(chip, need)
        rt = self.rt
        if self.inplace_idx is not None:
            out = vals[self.inplace_idx]
            if type(out) is not XPUTensor or out.shape != shape:
                return None
        else:
            out = _fresh(chip, shape, strides, dtype)
        if not out._st.nbytes:
            return out  # nothing to compute
        cargs = []
        if self.inplace_idx is None:
            out_desc = _cached_desc(rt, out, out._st.dev, 0, shape, strides, dtype)  # geometry known
        else:
            out_desc = _desc(rt, out)
        for kind, a, _b in self.plan.steps:
            if kind == B.TENSOR:
                v = vals[a]
                cargs.append(_desc(rt, v) if type(v) is XPUTensor else chip.constant_desc(v, dtype, shape))
            elif kind == B.OUTPUT:
                cargs.append(out_desc)
            elif kind == B.FLOAT:
                cargs.append(float(vals[a] if a < nv else self.defaults[a]))
            elif kind == B.INT:
                v = vals[a] if a < nv else self.defaults[a]
                cargs.append(0 if v is None else int(v))
            elif kind == B.BOOL:
                cargs.append(bool(vals[a] if a < nv else self.defaults[a]))
            elif kind == B.STRING:
                cargs.append((vals[a] if a < nv else self.defaults[a]).encode())
            elif kind == B.CONST:
                cargs.append(rt.ffi.NULL if a is None else a)
            else:
                return None
        st = self._invoke(cargs)
        if st != rt._ok:
            self._vendor_failed(rt.error(st, self.impl))
            return _FAILED
        ost = out._st
        ost.version += 1
        ost.dev_valid = True
        if not ost.mapped:
            ost.host_valid = False
        s = chip.stats
        s.native_ops += 1
        s.routes[self.route_key] += 1
        if "dispatch" in CONFIG.log:
            log.info("dispatch %s on %s: native %s", self.route.qualname, chip.device_type, self.impl)
        return out

    def run(self, vals, metas):
        """Runs the kernel; returns the op's result, or _FAILED after a vendor
        error (self.failure says why) with every input untouched."""
        chip, rt, e, plan, opi = self.chip, self.rt, self.entry, self.plan, self.opi
        # results: fresh tensors or the arguments an in-place/out= op writes
        outs = []
        for ri, ret in enumerate(opi.rets):
            if ret.alias_arg is not None:
                outs.append(vals[ret.alias_arg])
            elif plan.out_params[ri] is None:
                outs.append(_fresh(chip, (0,), (1,), metas[ri][2]))  # not produced: empty, as on the CPU
            else:
                m = metas[ri]
                outs.append(_fresh(chip, m[0], m[1], m[2]))
        ref = outs[0].dtype if outs and isinstance(outs[0], torch.Tensor) and outs[0].dtype in e.dtypes \
            else None
        # what must be resident: inputs read, and written arguments that a
        # partial write would otherwise corrupt
        resident = []
        seen = set()
        for idx, name, _ in self.tensor_args:
            v = vals[idx]
            if type(v) is XPUTensor:
                if ref is None and name not in e.arg_dtypes:
                    ref = v.dtype
                st = v._st
                if id(st) not in seen and not (idx in self.mutated and _covers(v) and not self._reads(idx)):
                    seen.add(id(st))
                    resident.append(st)
        for ri, o in enumerate(outs):
            if opi.rets[ri].alias_arg is not None and type(o) is XPUTensor:
                st = o._st
                if id(st) not in seen and not _covers(o):
                    seen.add(id(st))
                    resident.append(st)
        make_resident(chip, resident)
        written = []
        for o in outs:
            if type(o) is XPUTensor:
                if not o._st.dev:
                    o._st.alloc_device()
                written.append(o._st)
        for idx in self.mutated:
            v = vals[idx]
            if type(v) is XPUTensor and v._st not in written:
                v._st.alloc_device()
                written.append(v._st)
        if all(not st.nbytes for st in written):
            return self._result(outs)  # nothing to compute
        out_shape = tuple(outs[0].shape) if outs and isinstance(outs[0], torch.Tensor) else None
        temps = Temps(chip.allocator)
        copybacks = []
        try:
            cargs = []
            for kind, a, b in plan.steps:
                if kind == B.TENSOR:
                    v = vals[a]
                    cargs.append(rt.ffi.NULL if v is None else
                                 self._input_desc(v, opi.args[a].name, ref, out_shape, temps))
                elif kind == B.OUTPUT:
                    cargs.append(self._output_desc(outs[a], a, temps, copybacks))
                elif kind == B.INT:
                    v = vals[a]
                    cargs.append(0 if v is None else int(v))
                elif kind == B.FLOAT:
                    cargs.append(float(vals[a]))
                elif kind == B.BOOL:
                    cargs.append(bool(vals[a]))
                elif kind == B.INTLIST:
                    v = _int_list(vals[a], self.list_len[a], a in self.lengths)
                    cargs.append(rt.ffi.NULL if v is None else v)
                elif kind == B.LENGTH:
                    v = _int_list(vals[a], self.list_len[a], True)
                    cargs.append(0 if v is None else len(v))
                elif kind == B.STRING:
                    cargs.append(vals[a].encode())
                elif kind == B.MAPPED:
                    cargs.append(b[vals[a]])
                else:  # CONST
                    cargs.append(rt.ffi.NULL if a is None else a)
            st = self._invoke(cargs)
            if st != rt._ok:
                raise rt.error(st, e.impl)
            for tmp_view, final in copybacks:
                rt.copy_kernel(tmp_view.desc(rt), final.desc(rt))
        except DeviceError as err:
            self._vendor_failed(err)
            return _FAILED
        finally:
            temps.release()
        for st in written:
            st.wrote_device()
        return self._result(outs)

    def _invoke(self, cargs):
        """The vendor call (an event of its own under torch.profiler)."""
        if _profiler._is_profiler_enabled:
            with _profiler.record_function(self.profile_label):
                return self.cfn(*cargs)
        return self.cfn(*cargs)

    def _reads(self, idx: int) -> bool:
        """Whether a written argument's old values matter (in-place arithmetic
        reads self; copy_/fill_ only write)."""
        return self.route.func not in _WRITE_ONLY

    def _result(self, outs):
        opi = self.opi
        if len(opi.rets) == 1:
            return outs[0]
        return tuple(outs)

    def _vendor_failed(self, err: DeviceError) -> None:
        chip = self.chip
        chip.stats.vendor_errors += 1
        self.failure = Reason("vendor_error", f"vendor error {err.status_name} "
                                              f"({err.vendor_message or err.function})")
        key = (self.route.qualname, err.status_name)
        if key not in chip.reported_errors:
            chip.reported_errors.add(key)
            warnings.warn(f"flbridge: {err.function} failed on {chip.device_type} ({err.status_name}: "
                          f"{err.vendor_message}); running {self.route.qualname} through the fallback "
                          f"instead (inputs were not modified)", FallbackWarning, stacklevel=_user_stacklevel())

    def _input_desc(self, v, name, ref, out_shape, temps):
        e, rt, chip = self.entry, self.rt, self.chip
        if not isinstance(v, torch.Tensor) or v.device.type == "cpu":
            # a Python number or CPU scalar: a 0-dim constant on the device
            value = v.item() if isinstance(v, torch.Tensor) else v
            dt = ref or (v.dtype if isinstance(v, torch.Tensor) else torch.get_default_dtype())
            v = chip.constant(value, dt)
        shape, strides, dtype = tuple(v.shape), v.stride(), v.dtype
        if name in self.plain_inputs and (out_shape is None or shape == out_shape or name not in e.broadcast) \
                and (ref is None or dtype == ref or name in e.arg_dtypes):
            return _desc(rt, v)  # passed as it is
        view = View(v._st.dev, shape, strides, v.storage_offset(), dtype)
        if name in e.broadcast and out_shape is not None and shape != out_shape:
            view.strides = broadcast_strides(shape, strides, out_shape)
            view.shape = out_shape
        if ref is not None and dtype != ref and name not in e.arg_dtypes:
            view = copy_to_dense(rt, temps, view, ref, _itemsize(ref))
        lay = e.layout.get(name)
        if lay is not None:
            p = layout_perm(lay)
            view.shape = tuple(view.shape[i] for i in p)
            view.strides = tuple(view.strides[i] for i in p)
        if name in e.contiguous and not is_contiguous(view.shape, view.strides):
            view = copy_to_dense(rt, temps, view, view.dtype, _itemsize(view.dtype))
        q = e.quirks.get(name)
        if q is not None:
            view = convert_quirk(rt, temps, view, self.quirk_fns[name], q.pass_as, _itemsize(q.pass_as))
        return view.desc(rt)

    def _output_desc(self, o, ri, temps, copybacks):
        rt = self.rt
        lay, contiguous = self.out_layouts.get(ri, (None, False))
        if lay is None and not contiguous:
            return _desc(rt, o)
        view = View(o._st.dev, tuple(o.shape), o.stride(), o.storage_offset(), o.dtype)
        if lay is not None:
            p = layout_perm(lay)
            view.shape = tuple(view.shape[i] for i in p)
            view.strides = tuple(view.strides[i] for i in p)
        if contiguous and not is_contiguous(view.shape, view.strides):
            numel = o.numel()
            tmp = View(temps.take(numel * _itemsize(o.dtype)), view.shape, dense_strides(view.shape), 0, o.dtype)
            copybacks.append((tmp, view))
            return tmp.desc(rt)
        return view.desc(rt)


def _fresh(chip, shape, strides, dtype) -> XPUTensor:
    """A new result tensor with device memory."""
    numel = span = 1
    for d, stride in zip(shape, strides):
        numel *= d
        span += (d - 1) * stride
    st = Storage(chip, (span if numel else 0) * _itemsize(dtype))
    if st.nbytes:
        st.dev, st.dev_size = chip.allocator.alloc(st.nbytes)
    t = torch.Tensor._make_wrapper_subclass(XPUTensor, shape, strides=strides, dtype=dtype, device=chip.device)
    t._st = st
    return t


def _desc(rt, t):
    """t's descriptor.  Kept on the tensor while its device address holds
    (set_geometry() drops it when the geometry changes in place); otherwise
    looked up by address and geometry in the runtime's cache (the caching
    allocator hands the same block to the next result of the same size)."""
    d = t.__dict__
    dev = t._st.dev
    if d.get("_dd") == dev:
        return d["_d"]
    return _cached_desc(rt, t, dev, t.storage_offset(), t.shape, t.stride(), t.dtype)


def _cached_desc(rt, t, dev, offset, shape, strides, dtype):
    """The runtime's cached descriptor for this address and geometry, also
    kept on t (callers that know t's geometry skip asking the tensor)."""
    key = (dev, offset, shape, strides, dtype)
    desc = rt.desc_cache.get(key)
    if desc is None:
        desc = rt.desc(dev, shape, strides, dtype, offset)
        if len(rt.desc_cache) > 8192:
            rt.desc_cache.clear()
        rt.desc_cache[key] = desc
    d = t.__dict__
    d["_d"] = desc
    d["_dd"] = dev
    return desc


# ops whose written argument's old contents are not read
_WRITE_ONLY = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default}


def _covers(t) -> bool:
    """t is a dense, contiguous tensor spanning its whole storage."""
    st = t._st
    return t.storage_offset() == 0 and t.numel() * t.element_size() == st.nbytes and t.is_contiguous()


def _int_list(v, fixed_len, has_length):
    if v is None:
        return None
    v = [int(x) for x in v]
    if fixed_len and len(v) == 1 and fixed_len > 1:
        v = v * fixed_len
    return v or (None if has_length else v)


def _short(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"<tensor {list(v.shape)} {dtype_name(v.dtype)}>"
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return repr(v[0])
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


# ======================================================================
# CPU fallback


def cpu_fallback(route: OpRoute, args, kwargs):
    """Runs the op on host copies (CPUFallback.cpp's algorithm): arguments
    become views of their host bytes; written arguments are marked written on
    the host; results stay on the host side until a native op needs them;
    results that alias an argument share its storage."""
    chip = route.chip
    opi = route.opi
    func = route.func
    mutated_names = {opi.args[i].name for i in opi.mutated}
    host_to_xpu: dict = {}
    storages: dict = {}

    def conv(v, written):
        if type(v) is XPUTensor:
            st = v._st
            if st.chip is not chip:
                raise _device_mismatch(chip.device, v.device)
            if written and not st.host_valid and _covers(v) and func in _WRITE_ONLY:
                if st.host is None:
                    st.host = torch.empty(st.nbytes, dtype=torch.uint8)
                    st.typed = None
                st.host_valid = True  # every byte is about to be overwritten
            h = host_view(v)
            host_to_xpu[id(h)] = (h, v)
            if st.nbytes:
                storages[st.host.untyped_storage().data_ptr()] = st
            return h
        if isinstance(v, torch.Tensor):
            if v.device.type == "fl":  # an fl tensor that is not an XPUTensor: sparse, nested, ...
                raise NotImplementedError(f"flbridge: {v.layout} tensors are not supported on fl devices "
                                          f"(only strided ones); keep them on the CPU")
            # PyTorch lets a 0-dim CPU tensor stand beside any device's tensors
            if v.device.type != "cpu" or (v.dim() > 0 and not route.mixed_device_ok):
                raise _device_mismatch(chip.device, v.device)
            return v
        if isinstance(v, (list, tuple)):
            return type(v)(conv(x, written) for x in v)
        if isinstance(v, torch.device) and v.type == "fl":
            return torch.device("cpu")
        return v

    cargs = [conv(a, i < len(opi.args) and opi.args[i].name in mutated_names) for i, a in enumerate(args)]
    ckwargs = {k: conv(v, k in mutated_names) for k, v in kwargs.items()}
    if route.seeded:
        result = _run_seeded(route, cargs, ckwargs)
    else:
        result = func(*cargs, **ckwargs)
    # written arguments: host bytes are now the truth
    for i in opi.mutated:
        name = opi.args[i].name
        v = args[i] if i < len(args) else kwargs.get(name)
        targets = v if isinstance(v, (list, tuple)) else (v,)
        hosts = cargs[i] if i < len(args) else ckwargs.get(name)
        hosts = hosts if isinstance(hosts, (list, tuple)) else (hosts,)
        for t, h in zip(targets, hosts):
            if type(t) is XPUTensor:
                _after_host_write(t, h)
    return _wrap_results(chip, result, host_to_xpu, storages)


def _device_mismatch(a, b):
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"{a} and {b}!")


def _run_seeded(route, cargs, ckwargs):
    """Random ops draw from the chip's generator, not the CPU's."""
    chip = route.chip
    opi = route.opi
    g = opi.by_name.get("generator")
    if g is not None:
        if g.index < len(cargs):
            if cargs[g.index] is None:
                cargs[g.index] = chip.generator
        elif ckwargs.get("generator") is None:
            ckwargs["generator"] = chip.generator
        return route.func(*cargs, **ckwargs)
    saved = torch.default_generator.get_state()
    torch.default_generator.set_state(chip.generator.get_state())
    try:
        return route.func(*cargs, **ckwargs)
    finally:
        chip.generator.set_state(torch.default_generator.get_state())
        torch.default_generator.set_state(saved)


def _after_host_write(t: XPUTensor, h: torch.Tensor) -> None:
    st = t._st
    if h.untyped_storage().data_ptr() == (st.host.untyped_storage().data_ptr() if st.host is not None else -1) \
            and st.nbytes == h.untyped_storage().nbytes():
        st.wrote_host()
        if tuple(h.shape) != tuple(t.shape) or h.stride() != t.stride() or h.storage_offset() != t.storage_offset():
            set_geometry(t, tuple(h.shape), h.stride(), h.storage_offset())
        return
    # the CPU kernel resized the tensor into new memory: the tensor's storage
    # grows in place (views of it see the new memory, as in PyTorch)
    us = h.untyped_storage()
    st.host = torch.empty(0, dtype=torch.uint8).set_(us)
    st.typed = None
    st.drop_device()
    st.nbytes = us.nbytes()
    st.host_valid = True
    set_geometry(t, tuple(h.shape), h.stride(), h.storage_offset())


def _wrap_results(chip, result, host_to_xpu, storages):
    if isinstance(result, torch.Tensor):
        hit = host_to_xpu.get(id(result))
        if hit is not None and hit[0] is result:
            return hit[1]  # an in-place / out= result: the argument itself
        if result.device.type != "cpu":
            return result
        if result.layout != torch.strided:
            raise NotImplementedError(f"flbridge: {result.layout} tensors are not supported on fl devices "
                                      f"(only strided ones); do this on the CPU (.cpu()) and move the "
                                      f"dense result back")
        if result.is_conj() or result.is_neg():
            # a lazily conjugated/negated view: the bytes alone would lose the sign
            result = result.resolve_conj().resolve_neg()
        ptr = result.untyped_storage().data_ptr()
        st = storages.get(ptr) if ptr else None
        if st is None:
            # fresh bytes: adopt them (no copy); results sharing them share the storage
            st = Storage.adopt_host(chip, result)
            if ptr:
                storages[ptr] = st
        return new_tensor(chip, tuple(result.shape), result.stride(), result.dtype, storage=st,
                          offset=result.storage_offset())
    if isinstance(result, (list, tuple)):
        return type(result)(_wrap_results(chip, r, host_to_xpu, storages) for r in result)
    return result


# ======================================================================
# metadata ops: views, in-place views, set_/resize_


def set_geometry(t: XPUTensor, shape, strides, offset) -> None:
    """Rewrites t's size/stride/offset in place (PyTorch's own set_ on the
    wrapper's metadata, run with the meta kernel)."""
    t.__dict__.pop("_dd", None)
    src = torch.Tensor._make_wrapper_subclass(XPUTensor, shape, strides=strides, storage_offset=offset,
                                              dtype=t.dtype, device=t.device)
    with torch.utils._mode_utils.no_dispatch():
        prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            aten.set_.source_Tensor(t, src)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(prev)


_VIEW_GEOMETRY: dict = {}


def _view_geometry(func, base, args, kwargs):
    """Geometry of func's result(s) on `base`, from PyTorch's meta kernel."""
    key = (func, tuple(base.shape), base.stride(), base.storage_offset(), base.dtype, base._st.nbytes,
           tuple(_arg_key(a) for a in args[1:]), tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())))
    got = _VIEW_GEOMETRY.get(key)
    if got is None:
        mstorage = torch.UntypedStorage(base._st.nbytes, device="meta")
        m = torch.empty(0, dtype=base.dtype, device="meta").set_(mstorage, base.storage_offset(),
                                                                 tuple(base.shape), base.stride())
        res = func(m, *[_to_meta(a) for a in args[1:]], **{k: _to_meta(v) for k, v in kwargs.items()})
        many = isinstance(res, (list, tuple))
        rs = res if many else (res,)
        got = (many, tuple((tuple(r.shape), r.stride(), r.storage_offset(), r.dtype) for r in rs))
        if len(_VIEW_GEOMETRY) > 8192:
            _VIEW_GEOMETRY.clear()
        _VIEW_GEOMETRY[key] = got
    return got


def _view(func, args, kwargs):
    base = args[0]
    if type(base) is not XPUTensor:
        return _route(func, args, kwargs)
    many, geos = _view_geometry(func, base, args, kwargs)
    chip, st = base._st.chip, base._st
    outs = []
    for shape, stride, offset, dtype in geos:
        numel, span = 1, 1
        for d, sd in zip(shape, stride):
            numel *= d
            span += (d - 1) * sd
        need = (offset + span) * _itemsize(dtype) if numel else 0
        if need > st.nbytes:
            raise RuntimeError(f"setStorage: sizes {list(shape)}, strides {list(stride)}, storage offset {offset}, "
                               f"and itemsize {_itemsize(dtype)} requiring a storage size of {need} are out of "
                               f"bounds for storage of size {st.nbytes}")
        t = new_tensor(chip, shape, stride, dtype, storage=st, offset=offset)
        torch._functionalize_unsafe_set(t, base)
        outs.append(t)
    return outs if many else outs[0]


def _alias(func, args, kwargs):
    """detach / alias: same geometry, same storage."""
    base = args[0]
    t = new_tensor(base._st.chip, tuple(base.shape), base.stride(), base.dtype, storage=base._st,
                   offset=base.storage_offset())
    torch._functionalize_unsafe_set(t, base)
    return t


def _inplace_view(func, args, kwargs):
    """t_(), transpose_(), as_strided_(), ...: rewrite the wrapper's own
    metadata with the meta kernel."""
    args[0].__dict__.pop("_dd", None)
    with torch.utils._mode_utils.no_dispatch():
        prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            func(*args, **kwargs)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(prev)
    return args[0]


def _set(func, args, kwargs):
    self = args[0]
    if func is aten.set_.source_Tensor:
        src = args[1] if len(args) > 1 else kwargs["source"]
        if type(src) is not XPUTensor or src._st.chip is not self._st.chip:
            raise RuntimeError(f"set_: source must be on {self.device}, got {src.device}")
        self._st = src._st
        set_geometry(self, tuple(src.shape), src.stride(), src.storage_offset())
        return self
    if func is aten.set_.default:
        self._st = Storage(self._st.chip, 0)
        set_geometry(self, (0,), (1,), 0)
        return self
    raise NotImplementedError(f"flbridge: {func} on an fl tensor (set_ to a storage object) is not "
                              f"supported; use set_(other_fl_tensor)")


def _resize(func, args, kwargs):
    self, size = args[0], [int(s) for s in args[1]]
    memory_format = kwargs.get("memory_format") or (args[2] if len(args) > 2 else None)
    if memory_format is not None and memory_format != torch.contiguous_format:
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    else:
        strides = dense_strides(size)
    numel = 1
    for s in size:
        numel *= s
    need = (self.storage_offset() + (1 + sum((s - 1) * st for s, st in zip(size, strides)) if numel else 0)) \
        * self.element_size()
    st = self._st
    if need > st.nbytes:
        # grow the shared storage in place, keeping its bytes (PyTorch's resize_)
        old = st.nbytes
        st.ensure_host()
        host = torch.empty(need, dtype=torch.uint8)
        if old:
            host[:old].copy_(st.host)
        st.host, st.typed = host, None
        st.drop_device()
        st.nbytes = need
        st.host_valid = True
    set_geometry(self, tuple(size), tuple(strides), self.storage_offset())
    return self


# ======================================================================
# device crossings and housekeeping


def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if type(dst) is XPUTensor and type(src) is XPUTensor and dst._st.chip is src._st.chip:
        return _route(func, args, kwargs)
    if type(dst) is XPUTensor:
        src_cpu = host_view(src) if type(src) is XPUTensor else src
        st = dst._st
        if src_cpu.device.type != "cpu":
            src_cpu = src_cpu.cpu()
        if _covers(dst) and not st.host_valid and tuple(src_cpu.shape) == tuple(dst.shape):
            # every byte is replaced: no need to fetch the old ones
            if st.host is None:
                st.host = torch.empty(st.nbytes, dtype=torch.uint8)
                st.typed = None
            st.host_valid = True
        if st.nbytes:
            host_view(dst).copy_(src_cpu)
        st.wrote_host()
        return dst
    # dst is a CPU tensor, src on a chip
    dst.copy_(host_view(src))
    return dst


def _to_copy(func, args, kwargs):
    self = args[0]
    device = kwargs.get("device")
    if device is not None and not isinstance(device, torch.device):
        device = torch.device(device)
    if device is None or (device.type == "fl" and (device.index is None or device.index == self.device.index)):
        if device is not None and device.index is None:
            kwargs = dict(kwargs, device=self.device)
        return _route(func, args, kwargs)
    kw = {k: v for k, v in kwargs.items() if k != "device"}
    with torch.no_grad():
        cpu = aten._to_copy(host_view(self), **kw)
    if device.type == "cpu":
        return cpu
    if device.type == "fl":
        from . import backend as devmod
        chip = devmod.chip_for(device)
        st = Storage.adopt_host(chip, cpu)
        return new_tensor(chip, tuple(cpu.shape), cpu.stride(), cpu.dtype, storage=st, offset=cpu.storage_offset())
    return cpu.to(device)


def _local_scalar_dense(func, args, kwargs):
    return host_view(args[0]).item()


def _empty_like(func, args, kwargs):
    """empty_like / new_empty / new_empty_strided: allocate, no data."""
    self = args[0]
    device = kwargs.get("device")
    m = func(_to_meta(self), *[_to_meta(a) for a in args[1:]],
             **{k: _to_meta(v) for k, v in kwargs.items() if k not in ("device", "pin_memory")})
    if device is not None and torch.device(device).type == "cpu":
        return torch.empty_strided(tuple(m.shape), m.stride(), dtype=m.dtype)
    chip = self._st.chip
    if device is not None and torch.device(device).type == "fl":
        from . import backend as devmod
        chip = devmod.chip_for(torch.device(device))
    return new_tensor(chip, tuple(m.shape), m.stride(), m.dtype)


def _identity(func, args, kwargs):
    return args[0]


def _fused_sdp_choice(func, args, kwargs):
    # No fused attention kernel here: take PyTorch's math path, whose matmuls
    # and softmax route to the chip's own kernels.
    return int(torch._C._SDPBackend.math)


def _foreach(func, args, kwargs):
    """_foreach_* ops run element by element, each through the router."""
    opi = info(func)
    vals = _normalize(opi, args, kwargs)
    lists = [i for i, v in enumerate(vals) if isinstance(v, (list, tuple))]
    n = len(vals[lists[0]])
    results = []
    for k in range(n):
        elem = [vals[i][k] if i in lists else vals[i] for i in range(len(vals))]
        op, npos, kwnames = _per_element(func, elem)
        results.append(op(*elem[:npos], **dict(zip(kwnames, elem[npos:]))))
    return None if not opi.rets else results


_PER_ELEMENT: dict = {}


def _per_element(func, elem):
    """The plain op (overload) a _foreach_ op applies to each element, and how
    to pass it the element's values (positional count, keyword names)."""
    kinds = tuple(isinstance(v, torch.Tensor) for v in elem)
    key = (func, kinds)
    got = _PER_ELEMENT.get(key)
    if got is not None:
        return got
    name = func._schema.name[len("aten::_foreach_"):]
    packet = getattr(aten, name)
    for ovl in packet.overloads():
        if "out" in ovl:
            continue
        op = getattr(packet, ovl)
        oi = info(op)
        pos = [a for a in oi.args if not a.kwarg_only]
        kw = [a for a in oi.args if a.kwarg_only]
        npos = min(len(pos), len(elem))
        if any(a.default is NO_DEFAULT for a in pos[npos:]) or len(elem) - npos > len(kw):
            continue
        bound = pos[:npos] + kw[:len(elem) - npos]
        if all(_fits(a, v) for a, v in zip(bound, elem)):
            got = _PER_ELEMENT[key] = (op, npos, [a.name for a in kw[:len(elem) - npos]])
            return got
    raise NotImplementedError(f"flbridge: no aten::{name} overload takes the elements of {func}")


def _fits(arg, v) -> bool:
    if arg.kind == "tensor":
        return isinstance(v, torch.Tensor)
    if arg.kind == "tensor?":
        return v is None or isinstance(v, torch.Tensor)
    if arg.kind in ("int", "float", "number", "bool"):
        return isinstance(v, (int, float, bool)) or (arg.kind == "number" and isinstance(v, complex))
    return not isinstance(v, torch.Tensor)


def _full_like(func, args, kwargs):
    """zeros_like / ones_like / full_like: allocate on the chip, then fill
    there (the fill is routed like any op, natively when the chip has it)."""
    self = args[0]
    if func is aten.full_like.default:
        value = args[1] if len(args) > 1 else kwargs["fill_value"]
        rest = {k: v for k, v in kwargs.items() if k != "fill_value"}
    else:
        value = 1 if func is aten.ones_like.default else 0
        rest = kwargs
    t = aten.empty_like.default(self, **rest)
    return aten.fill_.Scalar(t, value)


_EXPLICIT = {
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.empty_like.default: _empty_like,
    aten.new_empty.default: _empty_like,
    aten.new_empty_strided.default: _empty_like,
    aten.zeros_like.default: _full_like,
    aten.ones_like.default: _full_like,
    aten.full_like.default: _full_like,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: _identity,
    aten._unsafe_view.default: _view,
    aten._reshape_alias.default: _view,
    aten.set_.source_Tensor: _set,
    aten.set_.default: _set,
    aten.set_.source_Storage: _set,
    aten.set_.source_Storage_storage_offset: _set,
    aten.resize_.default: _resize,
    aten._fused_sdp_choice.default: _fused_sdp_choice,
    # lazy conjugation/negation is a flag bit on the tensor, which fl tensors
    # do not carry: these "views" are computed (correct values; writes through
    # them do not reach the base)
    aten._conj.default: lambda f, a, k: aten.conj_physical.default(a[0]),
    aten._neg_view.default: lambda f, a, k: aten.neg.default(a[0]),
    aten.record_stream.default: lambda f, a, k: None,
}
_HANDLERS: dict = {}


def _composite(func, args, kwargs):
    """A CompositeImplicitAutograd op (reshape, flatten, contiguous, ...).
    Autograd decomposes these before dispatch; they reach here only from
    inside another op's decomposition, where PyTorch's own decomposition is
    the right answer (reshape, say, is a view or a copy depending on the
    strides, which its schema cannot say)."""
    out = func.decompose(*args, **kwargs)
    if out is NotImplemented:
        return _route(func, args, kwargs)
    return out


def _classify(func):
    h = _EXPLICIT.get(func)
    if h is not None:
        return h
    if not reaches_dispatch(func):
        return _composite
    name = func._schema.name
    if name.startswith("aten::_foreach_"):
        return _foreach
    if torch.Tag.inplace_view in func.tags:
        return _inplace_view
    opi = info(func)
    if opi.is_view and not opi.is_mutating:
        return _view
    return _route


XPUTensor.__torch_dispatch__ = classmethod(dispatch)
