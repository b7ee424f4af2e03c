"""Native execution: one vendor kernel bound to one aten overload on one chip.

:class:`NativeKernel` holds everything precomputed from the spec entry and
the call plan (:mod:`flbridge.binding`), decides per argument key whether the
kernel takes a call (:mod:`flbridge.eligibility`, cached with the result
shapes), then runs it: residency (inputs made current on the device, in one
batched upload), the adapter (:mod:`flbridge.adapter`: broadcast, casts,
layouts, quirks), marshalling of the C arguments in the plan's order, and the
cffi call.  A vendor error leaves every input untouched and is reported once.
"""
from __future__ import annotations

import warnings

import torch
import torch.autograd.profiler as _profiler

from . import binding as B
from .adapter import (Temps, View, broadcast_strides, convert_quirk, copy_to_dense, dense_strides,
                      is_contiguous, layout_perm)
from .argkeys import arg_key, result_metas
from .chipstats import log
from .config import CONFIG
from .eligibility import why_not
from .ops import NO_DEFAULT, WRITE_ONLY
from .reasons import FAILED, FallbackWarning, Reason, user_stacklevel
from .registry import dtype_name
from .residency import Storage, make_resident
from .runtime import DeviceError
from .tensor import XPUTensor, _itemsize, covers_storage



class NativeKernel:
    """A bound vendor function and everything precomputed to call it."""

    def __init__(self, route, bound):
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
        key = tuple(arg_key(v, chip) for v in vals)
        got = self.decisions.get(key)
        if got is None:
            reason = why_not(self, vals)
            metas = result_metas(self.route.func, self.opi, vals) if reason is None else None
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
            return FAILED
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
        """Runs the kernel; returns the op's result, or FAILED after a vendor
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
                if id(st) not in seen and not (idx in self.mutated and covers_storage(v) and not self._reads(idx)):
                    seen.add(id(st))
                    resident.append(st)
        for ri, o in enumerate(outs):
            if opi.rets[ri].alias_arg is not None and type(o) is XPUTensor:
                st = o._st
                if id(st) not in seen and not covers_storage(o):
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
            return FAILED
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
        return self.route.func not in WRITE_ONLY

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
                          f"instead (inputs were not modified)", FallbackWarning, stacklevel=user_stacklevel())

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


def _int_list(v, fixed_len, has_length):
    if v is None:
        return None
    v = [int(x) for x in v]
    if fixed_len and len(v) == 1 and fixed_len > 1:
        v = v * fixed_len
    return v or (None if has_length else v)
