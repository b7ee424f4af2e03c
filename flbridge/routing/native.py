"""Native execution: one vendor kernel bound to one aten overload on one chip.

:class:`NativeKernel` holds what the spec entry and the call plan
(:mod:`flbridge.binding.callplan`) fix once.  Per *argument key* it prepares a call
once (:mod:`flbridge.routing.prepare`: the spec's checks, the result shapes, the C
arguments as slots).  Each call then only allocates its results, makes its
inputs resident (one batched upload, or zero-copy mappings), fills the
tensor slots with descriptors (the adapter, :mod:`flbridge.routing.adapter`, where
the kernel needs a layout, cast, copy or padding) and calls the vendor
through :mod:`flbridge.binding.launch`.  A vendor error leaves every input untouched.
"""
from __future__ import annotations

import torch
import torch.autograd.profiler as _profiler

from ..config import CONFIG, log
from ..errors import DeviceError
from ..specs import NO_DEFAULT, WRITE_ONLY
from ..tensor import Storage, XPUTensor, covers_storage, make_resident, resize_for_output
from ..binding import callplan as B
from ..binding import launch
from ..binding.launch import WATCH
from .argkeys import remember
from .adapter import Temps, cached_desc, input_desc, output_desc, padded_input, padded_output, tensor_desc
from .prepare import (S_ADAPT, S_CONSTANT, S_CPU_SCALAR, S_DESC, S_DESCLIST, S_FIXED, S_FLOAT, S_FRESH, S_INT, S_NULL,
                      S_NUMBER, S_OFFSET, S_OUT, S_PAD_IN, S_PAD_OUT, S_SEED, Prepared, call_key, prepare)
from .reasons import FAILED, Reason
from .rng import resolve


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
        self.tensor_args = [(a, opi.args[a].name, b) for kind, a, b in plan.steps if kind == B.TENSOR]
        self.tensor_lists = [(a, opi.args[a].name) for kind, a, _ in plan.steps if kind == B.TENSORLIST]
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
        # float scalars whose value a check or the C call depends on beyond
        # the call itself: keyed by value; every other float by its type
        self.valued_floats = frozenset(
            [i for i, _, _ in self.value_checks] + [i for i, _, _ in self.range_checks]
            + [i for i, _, _ in self.mapped] + [i for i, _, _ in plan.unconsumed] + list(plan.expr_args))
        # tensor lists the kernel writes (the fused optimizers' and GradScaler's)
        self.written_lists = tuple(a for a, _ in self.tensor_lists if a in self.mutated)
        self.returns_none = not opi.rets
        self.route_key = (route.qualname, "native", e.impl)
        self.prepared: dict = {}
        # the vendor call as it appears in torch.profiler tables
        self.label = f"{e.impl} [{route.chip.device_type}]"
        self.defaults = tuple(None if a.default is NO_DEFAULT else a.default for a in opi.args)
        self.needs_copy = bool(e.layout or e.contiguous)
        # inputs the adapter never changes (unless broadcast or cast per call)
        self.plain_inputs = {n for _, n, _ in self.tensor_args
                             if n not in e.layout and n not in e.contiguous and n not in e.quirks}
        # per result: (layout, must be dense), keyed by the C parameter's name
        # (or "out" for the first result)
        self.out_layouts = {}
        params = self.rt.header.functions[e.impl].params
        for (kind, ri, _), p in zip(plan.steps, params):
            if kind == B.OUTPUT:
                lay = e.layout.get(p.name) or (e.layout.get("out") if ri == 0 else None)
                self.out_layouts[ri] = (lay, p.name in e.contiguous)
        self.writes_only = route.func in WRITE_ONLY
        # the spec lets the bridge zero-pad some dims (constraints.pad): needs the copy and fill kernels
        self.can_pad = bool(self.cons.pad) and self.rt.has_copy and self.rt.has_fill

    # -------------------------------------------------------- decisions

    def decide(self, vals, meta: bool = False):
        """The prepared call for these (normalized) arguments, or the Reason
        the kernel cannot take them; cached per argument key.  `meta`: the
        tensors are meta/fake stand-ins (a prediction, no device checks)."""
        key = call_key(vals, self.valued_floats)
        p = self.prepared.get(key)
        if p is None:
            p = remember(self.prepared, key, prepare(self, vals, meta), 4096)
        return p

    def run(self, vals, p: Prepared, count: bool = True):
        """Runs a prepared call; returns the op's result, or FAILED after a
        vendor error (self.failure says why) with every input untouched.
        `vals`: the arguments as decide() saw them.  `count`: record it as a
        native call (a vendor fallback's caller records it as a fallback)."""
        chip, rt = self.chip, self.rt
        outs = []
        for a, g in p.outs:
            if a is not None:
                if g is not None:
                    resize_for_output(vals[a], g[0], g[1])
                outs.append(vals[a])
            else:
                outs.append(_fresh(chip, g) if g is not None else None)
        # make current on the device: inputs read, and written arguments that
        # a partial write would otherwise corrupt (a write that covers the
        # whole storage and reads nothing needs no old bytes)
        need = None
        for i in p.read:
            st = vals[i]._st
            if not st.dev_valid and st.nbytes and not (i in self.mutated and self.writes_only
                                                       and covers_storage(vals[i])):
                need = [st] if need is None else need + [st]
        for i in p.read_lists:
            for t in vals[i]:
                st = t._st
                if not st.dev_valid and st.nbytes:
                    need = [st] if need is None else need + [st]
        written = None
        if self.mutated:
            written = []
            for a, _ in p.outs:
                if a is not None:
                    o = vals[a]
                    st = o._st
                    if not st.dev_valid and st.nbytes and not covers_storage(o):
                        need = [st] if need is None else need + [st]
            for i in self.mutated:
                v = vals[i] if i < len(vals) else None
                if type(v) is XPUTensor:
                    st = v._st
                    if not st.dev and st.nbytes:
                        st.alloc_device()
                    written.append(st)
            for i in self.written_lists:
                for t in vals[i]:       # read too (made current above): the kernel updates them in place
                    st = t._st
                    if not st.dev and st.nbytes:
                        st.alloc_device()
                    written.append(st)
        if need is not None:
            make_resident(chip, list(dict.fromkeys(need)))
        cap = launch.STATE.capture
        if cap is not None:
            cap.note_op(chip, self.route.qualname, [vals[i]._st for i in p.read] +
                        [vals[a]._st for a, _ in p.outs if a is not None] +
                        [t._st for i in p.read_lists for t in vals[i]],
                        [o._st for o in outs if type(o) is XPUTensor] + (written or []))
        if p.empty:
            return None if self.returns_none else outs[0] if p.single else tuple(outs)   # nothing to compute
        temps = copybacks = None
        cargs = []
        rng = p.rng
        if rng is not None:
            gen, seed, offset, intra = self._draw(vals, rng, cap)
        try:
            for code, a, b in p.slots:
                if code == S_DESC:
                    t = vals[a]                             # tensor_desc(), inlined
                    d = t.__dict__
                    if d.get("_dd") == t._st.dev:
                        cargs.append(d["_d"])
                    else:
                        cargs.append(tensor_desc(rt, t))
                elif code == S_FRESH:
                    t = outs[a]
                    cargs.append(cached_desc(rt, t, t._st.dev, 0, b[0], b[1], b[2]))
                elif code == S_FIXED:
                    cargs.append(a)
                elif code == S_CONSTANT:
                    cargs.append(chip.constant_desc(a, b[0], b[1]))
                elif code == S_NUMBER:
                    cargs.append(chip.constant_desc(vals[a], b[0], b[1]))
                elif code == S_FLOAT:
                    cargs.append(float(vals[a]))
                elif code == S_OUT:
                    cargs.append(tensor_desc(rt, outs[a]))
                elif code == S_INT:
                    cargs.append(int(vals[a]))
                elif code == S_NULL:
                    cargs.append(rt.ffi.NULL)
                elif code == S_CPU_SCALAR:
                    cargs.append(chip.constant_desc(vals[a].item(), b[0], b[1]))
                elif code == S_ADAPT:
                    if temps is None:
                        temps = Temps(chip.allocator)
                    cargs.append(input_desc(self, vals[a], b, p.ref, p.out_shape, temps))
                elif code == S_DESCLIST:
                    descs = [tensor_desc(rt, t) for t in vals[a]]
                    cargs.append(rt.ffi.new(b, descs))
                    if cap is not None:
                        cap.keep(descs)   # the array points at them: a replay needs them alive
                elif code == S_SEED:
                    cargs.append(seed)
                elif code == S_OFFSET:
                    cargs.append(offset)
                elif code == S_PAD_IN:
                    if temps is None:
                        temps = Temps(chip.allocator)
                    cargs.append(padded_input(self, vals[a], b, p.ref, temps))
                elif code == S_PAD_OUT:
                    if temps is None:
                        temps = Temps(chip.allocator)
                    if copybacks is None:
                        copybacks = []
                    cargs.append(padded_output(self, outs[a], b, temps, copybacks))
                else:  # S_OUT_ADAPT
                    if temps is None:
                        temps = Temps(chip.allocator)
                    if copybacks is None:
                        copybacks = []
                    cargs.append(output_desc(self, outs[a], a, temps, copybacks))
            if cap is None and not WATCH.active and not _profiler._is_profiler_enabled:
                status = self.cfn(*cargs)           # launch.kernel's fast path, inlined
            else:
                status = launch.kernel(chip, self.label, self.cfn, cargs)
            if status != rt.ok:
                raise rt.error(status, self.impl)
            if rng is not None and cap is not None:
                cap.note_rng(gen, rng[2], rng[3], intra)   # re-pointed at every replay
            if copybacks:
                for tmp_view, final in copybacks:
                    rt.copy_kernel(tmp_view.desc(rt), final.desc(rt))
        except DeviceError as err:
            if rng is not None and cap is None:
                gen.give_back(offset, rng[1])
            self._vendor_failed(err)
            return FAILED
        finally:
            if temps is not None:
                temps.release()
        if written:
            for st in written:
                st.wrote_device()
        if count:
            s = chip.stats
            s.native_ops += 1
            s.routes[self.route_key] += 1
            if CONFIG.log and "dispatch" in CONFIG.log:
                log.info("dispatch %s on %s: native %s", self.route.qualname, chip.device_type, self.impl)
        return None if self.returns_none else outs[0] if p.single else tuple(outs)

    def _draw(self, vals, rng, cap):
        """(generator, seed, offset, offset within a capture) for a random
        call consuming rng[1] words: eagerly the generator advances; under
        graph capture it does not (each replay advances it, as CUDA graphs do)."""
        i = rng[0]
        g = vals[i] if i is not None and i < len(vals) else None   # trailing defaults may be left out
        gen = resolve(self.chip, g)
        if cap is None:
            seed, offset = gen.take(rng[1])
            return gen, seed, offset, 0
        intra = cap.reserve_rng(gen, rng[1])
        return gen, gen.initial_seed(), gen.get_offset() + intra, intra

    def _vendor_failed(self, err: DeviceError) -> None:
        """Records why; the route's fallback says it once per (op, kind of
        reason), however the vendor's message varies from call to call."""
        self.chip.stats.vendor_errors += 1
        self.failure = Reason("vendor_error", f"{err.function} failed with {err.status_name}"
                                              f"{': ' + err.vendor_message if err.vendor_message else ''} "
                                              f"(inputs were not modified)")


def _fresh(chip, g) -> XPUTensor:
    """A new result tensor with device memory, for a kernel to write: its
    device side counts as current from the start (if the call fails, the
    tensor is dropped unseen).  g: (shape, strides, dtype, nbytes)."""
    st = Storage(chip, g[3])
    if g[3]:
        st.dev, st.dev_size = chip.allocator.alloc(g[3])
        st.dev_valid = True
        st.version = 1
    t = torch.Tensor._make_wrapper_subclass(XPUTensor, g[0], strides=g[1], dtype=g[2], device=chip.device)
    d = t.__dict__
    d["_st"] = st
    d["_k"] = (g[0], g[1], g[2], chip)
    return t
