"""Lowering an AOTAutograd graph into a flat list of prepared vendor calls.

The backend (:mod:`flbridge.compiler.backend`) hands each forward, backward or
inference graph (aten ops on FakeTensors on `fl:N`) to a
:class:`CompiledGraph`.  Its first call for one argument key is a *capture
run*: the graph runs node by node through flbridge's eager path (the same
router, native kernels, adapters and fallback chain), and every vendor call
a node makes (kernel, adapter copy or conversion, constant fill) is recorded
with its prepared C arguments, as :class:`torch.fl.FLGraph` records a region.
Later calls with the same key replay those calls as a flat loop: no
dispatch, no routing, no argument checks, no wrappers for intermediates.

What a replay changes from one call to the next are addresses: every
descriptor that points into a graph input, a graph output or a value made by
an eager step is a private copy whose data field is re-pointed before the
calls run (and only when the address differs from the last call's:
parameters and the caching allocator's reused blocks usually don't).
Intermediates and adapter temporaries live in the graph's private memory
pool at fixed addresses, as in FLGraph.

A node whose work cannot be replayed (it runs on the CPU, reads device data
on the host, makes new host data, draws random numbers, or crosses
devices) is an *eager step*: it runs through flbridge on every call, and the
recorded calls around it are split into segments.  The program is keyed by
the argument key (Python ints and SymInts, tensor storage offsets, and the
aliasing of tensor arguments); a new key gets its own capture run, so a new
batch size or a dynamic shape costs one eager run, then replays.
"""
from __future__ import annotations

import collections
import threading

import torch
import torch.fx

from ..binding import launch
from ..tensor import GraphPool, Storage, XPUTensor, make_resident, next_serial
from ..tensor.traceable import unwrap_arg
from .addresses import Patcher, move_out_of_pool
from .fuse_adam import chip_runs_natively, fuse_adam_steps
from .nodes import data_dependent, fake_tensors, is_constant_fill, must_be_eager, symbolic
from .passes import fuse_foreach_lerp, reinplace_input_updates, remove_noop_clones

aten = torch.ops.aten

# how a replay makes each graph output (_Program.out_plan)
_OUT_FRESH, _OUT_INPUT, _OUT_CONST, _OUT_ARG, _OUT_NODE, _OUT_VIEW = range(6)
_make_wrapper = torch.Tensor._make_wrapper_subclass
_storage_offset = torch.Tensor.storage_offset


class _Recorder:
    """Stands where an FLGraph stands while a region is captured
    (launch.STATE.capture): sees every vendor call, every op's storages,
    transfers and CPU fallbacks.  Unlike FLGraph it refuses nothing: the
    node runs to the end (its result is right either way) and is marked an
    eager step if anything in it cannot be replayed."""

    def __init__(self, chip, pool):
        self.chip = chip
        self.mem_pool = pool
        self.kept = []
        self.begin(0)

    def begin(self, first_sid):
        self.calls = []        # (cfn, cargs, label, index of the op in self.notes)
        self.notes = []        # (reads, writes) storages of each op, as NativeKernel.run announces them
        self.refused = None
        self.first_sid = first_sid

    def _refuse(self, why):
        if self.refused is None:
            self.refused = why

    # the capture protocol (see flbridge.graphs.FLGraph)
    def record_call(self, chip, label, cfn, cargs):
        if chip is not self.chip:
            self._refuse(f"{label} runs on {chip.device}")
            return
        self.calls.append((cfn, tuple(cargs), label, len(self.notes) - 1))

    def note_op(self, chip, qualname, reads, writes):
        if chip is not self.chip:
            self._refuse(f"{qualname} runs on {chip.device}")
        # identity and address now (no reference: the blocks of dead values return to the pool)
        self.notes.append((tuple((st.sid, st.dev, st.nbytes) for st in reads),
                           tuple((st.sid, st.dev, st.nbytes) for st in writes)))

    def keep(self, obj):
        self.kept.append(obj)

    def on_transfer(self, chip, kind, nbytes, storages):
        if kind == "d2h":
            self._refuse("a read of device data on the host")
            return
        for st in storages:
            if st.sid >= self.first_sid:
                self._refuse("new host data uploaded by the node itself")

    def cpu_fallback(self, route, reason):
        self._refuse(f"{route.qualname} runs on the CPU ({reason})")


class _Segment:
    __slots__ = ("calls", "labels", "patches", "resident", "written", "n", "in_res", "eager_res", "in_written",
                 "kept_written", "eager_written", "after_eager", "last")

    def __init__(self):
        self.calls = []      # (cfn, cargs)
        self.labels = []
        self.patches = {}    # slot -> [(descriptor, byte delta)]
        self.resident = set()   # slots whose storages must be current on the device first
        self.written = set()    # slots the calls write (marked written on the device after)


class _Eager:
    __slots__ = ("node", "target", "args", "kwargs", "why")

    def __init__(self, node, why):
        self.node, self.target, self.why = node, node.target, why
        self.args, self.kwargs = node.args, node.kwargs


class _Program:
    """One capture of a graph for one argument key, ready to replay."""

    def __init__(self, graph, chip):
        self.graph = graph
        self.chip = chip
        self.steps = []          # _Segment or _Eager, in node order
        self.fresh = []          # (slot, nbytes) allocated per call
        self.values = {}         # node -> (slot, shape, strides, offset, dtype) of captured tensor values
        self.consts = {}         # node -> Python value fixed by the key (ints, None, ...)
        self.kept = []           # the recorder's kept objects (constants, descriptor arrays)
        self.input_slots = {}    # slot -> argument index
        self.pool = None
        self.ncalls = 0
        self.eager_reasons = []
        self.kept_by_id = {}     # sid -> Storage: pool values eager steps read (fixed addresses)

    def close(self):
        """Gives the private pool back (its free blocks join the shared cache)."""
        if self.pool is not None and self.chip is not None:
            self.chip.allocator.close_pool(self.pool)
            self.pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    # ---------------------------------------------- flat plan for replay

    def finalize(self, args, outputs, placeholders):
        """Turns the per-segment slot lists into flat, index-based plans:
        what a replay does before the first call (input residency, fresh
        outputs, re-pointing descriptors), per segment and after."""
        slots = list(self.input_slots)
        self.in_args = tuple(self.input_slots[s] for s in slots)
        pos = {s: k for k, s in enumerate(slots)}
        self.offsets = tuple(args[i].storage_offset() for i in self.in_args)
        # tensor arguments that shared a storage with an earlier one at capture
        first = {}
        self.aliases = []
        for i, a in enumerate(args):
            if type(a) is XPUTensor:
                j = first.setdefault(a._st.sid, i)
                if j != i:
                    self.aliases.append((j, i))
        self.has_alias = bool(self.aliases)
        fpos = {s: k for k, (s, _) in enumerate(self.fresh)}
        self.fresh_nbytes = tuple(n for _, n in self.fresh)
        in_patch, fresh_patch = {}, {}
        in_res, self.segments_after_eager = set(), []
        after_eager = False
        for step in self.steps:
            if step.__class__ is not _Segment:
                after_eager = True
                continue
            seg_patches = {}
            for slot, entries in step.patches.items():
                if slot[0] == "in":
                    in_patch.setdefault(pos[slot], []).extend(entries)
                elif slot[0] == "fresh":
                    fresh_patch.setdefault(fpos[slot], []).extend(entries)
                else:
                    seg_patches[slot] = entries
            step.patches = seg_patches            # eager results: re-pointed when the segment runs
            step.in_res = tuple(sorted(pos[s] for s in step.resident if s[0] == "in"))
            step.eager_res = tuple(s for s in step.resident if s[0] == "eager")
            in_res.update(step.in_res)
            step.in_written = tuple(sorted(pos[s] for s in step.written if s[0] == "in"))
            step.kept_written = tuple(self.kept_by_id[s[1]] for s in step.written if s[0] == "kept")
            step.eager_written = tuple(s for s in step.written if s[0] == "eager")
            step.after_eager = after_eager
            step.last = {}
        self.in_res = tuple(sorted(in_res))
        self.in_patch = tuple((k, tuple(v)) for k, v in in_patch.items())
        self.in_last = [None] * len(slots)
        self.fresh_patch = tuple((k, tuple(v)) for k, v in fresh_patch.items())
        self.fresh_last = [None] * len(self.fresh)
        self.slot_pos = pos
        self.fresh_pos = fpos
        self.placeholder_index = {n: i for i, n in enumerate(placeholders)}
        # how each output is made per call: most are new tensors over a fresh storage; one over an
        # input's storage, or over the storage of an earlier output, is a view of that tensor (a view
        # shares its base's version counter: autograd sees an in-place change of an output, or of an
        # input, that a saved tensor aliases, as eager autograd does)
        plan = []
        first_over = {}
        for o in outputs:
            if not isinstance(o, torch.fx.Node):
                plan.append((_OUT_CONST, o))
            elif o in self.placeholder_index:
                plan.append((_OUT_ARG, self.placeholder_index[o]))
            elif o in self.consts:
                plan.append((_OUT_CONST, self.consts[o]))
            else:
                d = self.values.get(o)
                if d is not None and d[0] not in ("const", "seq") and d[0][0] == "fresh":
                    j = first_over.get(d[0])
                    if j is None:
                        first_over[d[0]] = len(plan)
                        plan.append((_OUT_FRESH, fpos[d[0]], *d[1:]))
                    else:
                        plan.append((_OUT_VIEW, j, *d[1:]))
                elif d is not None and d[0] not in ("const", "seq") and d[0][0] == "in":
                    plan.append((_OUT_INPUT, d[0][1], *d[1:]))
                else:
                    plan.append((_OUT_NODE, o))
        self.out_plan = tuple(plan)

    def matches(self, args) -> bool:
        """This capture serves these arguments: same storage offsets (and the
        same sharing of storages where the capture had some)."""
        if tuple(map(_storage_offset, map(args.__getitem__, self.in_args))) != self.offsets:
            return False
        if self.has_alias:
            for j, i in self.aliases:
                if args[i].__dict__.get("_st") is not args[j].__dict__.get("_st"):
                    return False
        return True


class CompiledGraph:
    """The boxed callable AOTAutograd gets for one graph."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str = "forward", capture: bool = True,
                 max_programs: int = 8):
        # boxed calling convention; an instance attribute, so the functools.wraps
        # of AOTAutograd's torch._dynamo.disable around a backward copies it
        self._boxed_call = True
        # a graph over two fl devices (a pipeline compiled as a whole) runs through flbridge's eager
        # path every call: a program replays one chip's calls, from one chip's pool
        self.devices = sorted({str(v.device) for n in gm.graph.nodes for v in fake_tensors(n)
                               if v.device.type == "fl"})
        self.eager_why = None if capture else "options={'capture': False}"
        if capture and len(self.devices) > 1:
            capture, self.eager_why = False, f"spans {', '.join(self.devices)} (a replay runs one chip's calls)"
        if capture and data_dependent(gm):
            # nonzero, x[mask], a size read with .item() (capture_dynamic_output_shape_ops,
            # capture_scalar_outputs): the sizes differ from call to call, a replay repeats the capture's
            capture, self.eager_why = False, "data-dependent sizes (a replay would repeat the capture run's)"
        self.removed_clones = remove_noop_clones(gm) if capture else 0
        self.fused = fuse_foreach_lerp(gm) if capture else 0
        self.reinplaced = reinplace_input_updates(gm) if capture else 0
        self.fused_adam = fuse_adam_steps(gm, chip_runs_natively) if capture else 0
        self.gm = gm
        self.capture = capture
        self.kind = kind
        self.graph = gm.graph
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.output_node = next(n for n in reversed(self.nodes) if n.op == "output")
        self.outputs = list(self.output_node.args[0])
        self.programs = collections.OrderedDict()   # key -> programs; least recently used key first
        self.max_programs = max_programs
        self.captures = self.replays = 0
        # one call at a time: a program's descriptors are patched in place and its intermediates
        # sit at fixed addresses in its pool (two threads replaying it at once would share them)
        self._lock = threading.RLock()
        self._last_use = self._last_uses()
        self._must_be_eager = {n: why for n in self.nodes if (why := must_be_eager(n)) is not None}
        self._constant = {n for n in self.nodes if is_constant_fill(n, self.outputs)}
        # arguments that are not tensors (SymInts of a dynamic graph, ...): part of the program key
        self.scalar_pos = tuple(i for i, n in enumerate(self.placeholders)
                                if not isinstance(n.meta.get("val"), torch.Tensor))
        # tensor arguments of symbolic geometry: their sizes and strides are part of the key too.
        # A graph recompiled with dynamic shapes may get them with no SymInt argument at all (a
        # backward's saved tensors), and a program captured for one size must never replay another.
        self.shape_pos = tuple(i for i, n in enumerate(self.placeholders) if symbolic(n.meta.get("val")))

    # ----------------------------------------------------------- call

    def __call__(self, args):
        if not self.capture or launch.STATE.capture is not None:
            # capture=False, or a torch.fl.FLGraph is recording on this thread: the graph's ops run
            # through flbridge's dispatch, where the recording sees each vendor call
            out = self._run_eagerly([unwrap_arg(a) for a in args])
            args.clear()
            return out
        with self._lock:
            return self._call(args)

    def _call(self, args):
        key = tuple(args[i] for i in self.scalar_pos) if self.scalar_pos else ()
        if self.shape_pos:
            key += tuple((args[i].shape, args[i].stride()) for i in self.shape_pos)
        prog = None
        progs = self.programs.get(key)
        if progs:
            for p in progs:
                if p.matches(args):
                    prog = p
                    break
        if prog is None:
            real = [unwrap_arg(a) for a in args]
            out, prog = self._capture(real)
            if prog is not None:
                if sum(len(v) for v in self.programs.values()) >= self.max_programs:
                    # the oldest program of the least recently used key makes room
                    k, v = next(iter(self.programs.items()))
                    v.pop(0).close()
                    if not v:
                        del self.programs[k]
                self.programs.setdefault(key, []).append(prog)
                self.programs.move_to_end(key)
            self.captures += 1
            args.clear()
            return out
        self.programs.move_to_end(key)
        self.replays += 1
        out = self._replay(prog, args)
        args.clear()
        return out

    def _last_uses(self):
        last = {}
        for i, n in enumerate(self.nodes):
            for a in n.all_input_nodes:
                last[a] = i
        return last

    # -------------------------------------------------------- capture

    def _capture(self, args):
        """Runs the graph eagerly once, recording its vendor calls; returns
        (outputs, program) (program None if nothing in it can be replayed)."""
        chip = _chip_of(args)
        if chip is None or launch.STATE.capture is not None:
            return self._run_eagerly(args), None
        # inputs resident before recording: their uploads must not come from the graph's pool
        pending = [a._st for a in args if type(a) is XPUTensor and not a._st.dev_valid and a._st.nbytes
                   and a._st.chip is chip]
        if pending:
            make_resident(chip, list(dict.fromkeys(pending)))
        prog = _Program(self.graph, chip)
        pool = prog.pool = GraphPool(chip)
        pool.graphs += 1
        rec = _Recorder(chip, pool)
        env = {}
        slot_of = {}             # Storage.sid -> slot (inputs, eager results, outputs)
        for i, (n, a) in enumerate(zip(self.placeholders, args)):
            env[n] = a
            if type(a) is XPUTensor and a._st.chip is chip:
                if a._st.sid not in slot_of:
                    slot = ("in", i)
                    slot_of[a._st.sid] = slot
                    prog.input_slots[slot] = i
            elif not isinstance(a, torch.Tensor):
                prog.consts[n] = a
        captured = []            # (segment, recorded calls, notes) per captured node
        seg = None
        last_use = self._last_use
        outputs = set(o for o in self.outputs if isinstance(o, torch.fx.Node))
        kept = {}                # sid -> Storage of pool values eager steps read
        eager_nodes = set()
        host_valued = set()      # eager nodes whose results are numbers or CPU tensors: new every call
        for idx, n in enumerate(self.nodes):
            if n.op in ("placeholder", "output"):
                continue
            if n.op == "get_attr":       # a constant of the graph module: the same every call
                env[n] = prog.consts[n] = _run_node(n, env, self.gm)
                continue
            if n in self._constant:
                # a fill whose value and shape are fixed (AOTAutograd's full_like of a
                # scalar): made once, kept at its address; the recorder is on only around
                # the recorded nodes below, so its fill call is not replayed
                env[n] = out = _run_node(n, env, self.gm)
                if type(out) is XPUTensor and out._st.chip is chip:
                    out._st.fixed = True
                    rec.keep(out)
                    continue
                # not on this chip: an ordinary node after all (a fill is pure: running it again is harmless)
            why = self._must_be_eager.get(n)
            if why is None:
                rec.begin(next_serial())
                prev = launch.STATE.capture
                launch.STATE.capture = rec
                try:
                    out = _run_node(n, env, self.gm)
                finally:
                    launch.STATE.capture = prev
                why = rec.refused
                if why is None:
                    if any(type(t) is not XPUTensor or t._st.chip is not chip for t in _tensors_of(out)):
                        why = "makes a tensor that is not on the chip"
                    elif any(a in host_valued for a in n.all_input_nodes):
                        why = "reads a number or CPU tensor an eager step made"
            else:
                # what it reads from captured nodes must be described before it runs
                for a in n.all_input_nodes:
                    if a.op != "placeholder" and a not in prog.values and a not in prog.consts \
                            and a not in eager_nodes:
                        prog.values[a] = _describe(env[a], slot_of, kept)
                out = _run_node(n, env, self.gm)
            env[n] = out
            if why is not None:
                # an eager step: its calls (if any) are not replayed; its results are new every call
                if self._must_be_eager.get(n) is None:
                    for a in n.all_input_nodes:
                        if a.op != "placeholder" and a not in prog.values and a not in prog.consts \
                                and a not in eager_nodes:
                            prog.values[a] = _describe(env[a], slot_of, kept)
                prog.steps.append(_Eager(n, why))
                eager_nodes.add(n)
                if not isinstance(out, XPUTensor) and (not _has_tensor(out) or any(
                        type(t) is not XPUTensor for t in _tensors_of(out)) or isinstance(out, (list, tuple))
                        and len(_tensors_of(out)) != len(out)):
                    host_valued.add(n)
                prog.eager_reasons.append((str(n.target), why))
                seg = None
                for j, t in enumerate(_tensors_of(out)):
                    # (a value of a captured node the step hands back, as control_deps does, stays
                    # where the calls write it: kept, not new every call)
                    if type(t) is XPUTensor and t._st.sid not in slot_of and t._st.sid not in kept:
                        slot_of[t._st.sid] = ("eager", n, j)
            else:
                if seg is None:
                    seg = _Segment()
                    prog.steps.append(seg)
                captured.append((seg, rec.calls, rec.notes))
                if not _has_tensor(out):
                    prog.consts[n] = out
            # free values past their last use, as eager execution would (the pool reuses their blocks)
            for a in n.all_input_nodes:
                if last_use.get(a) == idx and a not in outputs and a.op != "placeholder":
                    env.pop(a, None)
        outs = [env[o] if isinstance(o, torch.fx.Node) else o for o in self.outputs]
        # graph outputs made by captured nodes: new storage every call
        for o, v in zip(self.outputs, outs):
            for t in _tensors_of(v):
                if type(t) is XPUTensor and t._st.chip is chip and t._st.sid not in slot_of:
                    slot = ("fresh", len(prog.fresh))
                    slot_of[t._st.sid] = slot
                    prog.fresh.append((slot, t._st.nbytes))
        for o, v in zip(self.outputs, outs):
            if isinstance(o, torch.fx.Node) and o.op != "placeholder" and o not in eager_nodes \
                    and o not in prog.consts:
                prog.values[o] = _describe(v, slot_of, kept)
        # a value an eager step read, described then at its capture-run address, whose storage turned
        # out to be an output's (the output a view of it: h.t() returned, h read by a dropout): its
        # storage is new every call, and the eager step must read that one
        moved = [sid for sid in kept if sid in slot_of]
        if moved:
            for sid in moved:
                del kept[sid]
            prog.values = {n: _reslot(d, slot_of) for n, d in prog.values.items()}
        # the recorded calls, with private descriptors and their patch lists
        patcher = Patcher(chip.runtime)
        for seg, calls, notes in captured:
            for cfn, cargs, label, op_i in calls:
                infos = notes[op_i][0] + notes[op_i][1] if op_i >= 0 else ()
                seg.calls.append((cfn, tuple(patcher.private(a, infos, slot_of, seg) for a in cargs)))
                seg.labels.append(label)
            for reads, writes in notes:
                for sid, _, _ in reads:
                    slot = slot_of.get(sid)
                    if slot is not None and slot[0] != "fresh":
                        seg.resident.add(slot)
                for sid, _, _ in writes:
                    slot = slot_of.get(sid)
                    if slot is not None and slot[0] != "fresh":
                        seg.written.add(slot)
                        seg.resident.add(slot)
                    elif sid in kept:
                        seg.written.add(("kept", sid))
        for step in prog.steps:
            if isinstance(step, _Segment):
                step.n = len(step.calls)
                prog.ncalls += step.n
        for st in kept.values():
            st.fixed = True       # eager steps read it where the calls wrote it: never moved
        prog.kept_by_id = kept
        prog.kept = rec.kept + patcher.keep
        if not prog.ncalls:
            prog.close()
            return outs, None
        prog.finalize(args, self.outputs, self.placeholders)
        move_out_of_pool(chip, pool, [t for v in outs for t in _tensors_of(v)])
        return outs, prog

    def _run_eagerly(self, args):
        env = {}
        for n, a in zip(self.placeholders, args):
            env[n] = a
        for n in self.nodes:
            if n.op in ("placeholder", "output"):
                continue
            env[n] = _run_node(n, env, self.gm)
        return [env[o] if isinstance(o, torch.fx.Node) else o for o in self.outputs]

    # --------------------------------------------------------- replay

    def _replay(self, prog, args):
        chip = prog.chip
        rt = chip.runtime
        ok = rt.ok
        sts = [args[i].__dict__["_st"] for i in prog.in_args]
        stale = None
        for k in prog.in_res:
            st = sts[k]
            if not st.dev_valid and st.nbytes:
                stale = [st] if stale is None else stale + [st]
        if stale is not None:
            make_resident(chip, stale)
        fresh = []
        alloc = chip.allocator.alloc
        # last call's blocks where they are free again: addresses already in the descriptors
        for nbytes, prev in zip(prog.fresh_nbytes, prog.fresh_last):
            st = Storage(chip, nbytes)
            if nbytes:
                st.dev, st.dev_size = alloc(nbytes, prev)
                st.dev_valid = True
                st.version = 1
            fresh.append(st)
        _repoint(prog.in_patch, prog.in_last, sts)
        _repoint(prog.fresh_patch, prog.fresh_last, fresh)
        env = None
        eager_st = None
        observed = launch.WATCH.active or torch.autograd.profiler._is_profiler_enabled
        replayed = 0
        for step in prog.steps:
            if step.__class__ is _Segment:
                if step.after_eager:
                    stale = [sts[k] for k in step.in_res if not sts[k].dev_valid and sts[k].nbytes]
                    stale += [eager_st[s] for s in step.eager_res
                              if not eager_st[s].dev_valid and eager_st[s].nbytes]
                    if stale:
                        # an eager step wrote on the host (a CPU fallback writing into an input):
                        # upload into the blocks the descriptors point at, not a new mapping
                        make_resident(chip, stale, keep_address=True)
                        _repoint(prog.in_patch, prog.in_last, sts)    # an input that had no block has one now
                    seg_last = step.last
                    for slot, entries in step.patches.items():
                        addr = eager_st[slot].dev
                        if seg_last.get(slot) != addr:
                            for desc, field, delta in entries:
                                setattr(desc, field, addr + delta)
                            seg_last[slot] = addr
                if observed:
                    for (cfn, cargs), label in zip(step.calls, step.labels):
                        s = launch.kernel(chip, label, cfn, cargs)
                        if s != ok:
                            raise rt.error(s, label)
                else:
                    for cfn, cargs in step.calls:
                        s = cfn(*cargs)
                        if s != ok:
                            raise rt.error(s, _label(step, cfn))
                replayed += step.n
                for k in step.in_written:
                    sts[k].wrote_device()
                for st in step.kept_written:
                    st.wrote_device()
                for slot in step.eager_written:
                    eager_st[slot].wrote_device()
            else:
                if env is None:
                    env, eager_st = {}, {}
                ctx = (prog, args, sts, fresh, eager_st, env)
                a = _conv(step.args, ctx)
                kw = {k: _conv(v, ctx) for k, v in step.kwargs.items()} if step.kwargs else {}
                out = _call(step.node, a, kw, self.gm)
                env[step.node] = out
                for j, t in enumerate(_tensors_of(out)):
                    if type(t) is XPUTensor:
                        eager_st[("eager", step.node, j)] = t._st
        chip.stats.replayed_kernels += replayed
        outs = []
        dev = chip.device
        ctx = None
        for item in prog.out_plan:
            kind = item[0]
            if kind == _OUT_FRESH:
                _, at, shape, strides, offset, dtype = item
                t = _make_wrapper(XPUTensor, shape, strides=strides, storage_offset=offset, dtype=dtype, device=dev)
                t.__dict__["_st"] = fresh[at]
                outs.append(t)
            elif kind == _OUT_VIEW:
                outs.append(_view_of(outs[item[1]], *item[2:]))
            elif kind == _OUT_INPUT:
                outs.append(_view_of(unwrap_arg(args[item[1]]), *item[2:]))
            elif kind == _OUT_CONST:
                outs.append(item[1])
            elif kind == _OUT_ARG:
                outs.append(unwrap_arg(args[item[1]]))
            else:
                if ctx is None:
                    ctx = (prog, args, sts, fresh, eager_st, env)
                outs.append(_value(item[1], ctx))
        return outs


def _repoint(patch, last, storages):
    """Sets the data fields of the descriptors that point into storages[k]
    (entries of `patch`: (k, ((descriptor, field, offset), ...))) whose
    address changed since `last[k]`."""
    for k, entries in patch:
        addr = storages[k].dev
        if last[k] != addr:
            for desc, field, delta in entries:
                setattr(desc, field, addr + delta)
            last[k] = addr


def _view_of(base, shape, strides, offset, dtype):
    """A view of `base` with this geometry, made through the dispatcher so
    that it shares base's version counter (as the capture run's did)."""
    if base.dtype is not dtype:
        base = base.view(dtype)
    return _as_strided(base, shape, strides, offset)


_as_strided = torch.ops.aten.as_strided.default


def _label(step, cfn):
    for (c, _), label in zip(step.calls, step.labels):
        if c is cfn:
            return label
    return "vendor call"


# ------------------------------------------------------------- values

def _describe(v, slot_of, kept):
    """How a replay rebuilds value v: (slot, shape, strides, offset, dtype),
    a ("seq", type, items) for a tuple or list, or ("const", v)."""
    if isinstance(v, (list, tuple)):
        return ("seq", type(v), [_describe(x, slot_of, kept) for x in v])
    if type(v) is XPUTensor:
        st = v._st
        slot = slot_of.get(st.sid)
        if slot is None:
            kept[st.sid] = st
            slot = ("kept", st.sid)
        return (slot, tuple(v.shape), v.stride(), v.storage_offset(), v.dtype)
    return ("const", v)


def _reslot(desc, slot_of):
    """desc with a ("kept", sid) slot replaced by the slot sid got since."""
    if desc[0] == "const":
        return desc
    if desc[0] == "seq":
        return ("seq", desc[1], [_reslot(d, slot_of) for d in desc[2]])
    slot = desc[0]
    if slot[0] == "kept" and slot[1] in slot_of:
        return (slot_of[slot[1]], *desc[1:])
    return desc


def _slot_storage(slot, ctx):
    prog, args, sts, fresh, eager_st, env = ctx
    kind = slot[0]
    if kind == "in":
        return sts[prog.slot_pos[slot]]
    if kind == "fresh":
        return fresh[prog.fresh_pos[slot]]
    if kind == "kept":
        return prog.kept_by_id[slot[1]]
    return eager_st[slot]


def _make(desc, ctx):
    if desc[0] == "const":
        return desc[1]
    if desc[0] == "seq":
        return desc[1](_make(d, ctx) for d in desc[2])
    slot, shape, strides, offset, dtype = desc
    st = _slot_storage(slot, ctx)
    t = torch.Tensor._make_wrapper_subclass(XPUTensor, shape, strides=strides, storage_offset=offset, dtype=dtype,
                                            device=st.chip.device)
    t.__dict__["_st"] = st
    return t


def _value(n, ctx):
    if not isinstance(n, torch.fx.Node):
        return n
    prog, args, sts, fresh, eager_st, env = ctx
    i = prog.placeholder_index.get(n)
    if i is not None:
        return unwrap_arg(args[i])
    if env is not None and n in env:
        return env[n]
    if n in prog.consts:
        return prog.consts[n]
    return _make(prog.values[n], ctx)


def _conv(a, ctx):
    if isinstance(a, torch.fx.Node):
        return _value(a, ctx)
    if isinstance(a, (list, tuple)):
        return type(a)(_conv(x, ctx) for x in a)
    return a


def _tensors_of(v):
    if isinstance(v, torch.Tensor):
        return (v,)
    if isinstance(v, (list, tuple)):
        return tuple(x for x in v if isinstance(x, torch.Tensor))
    return ()


def _has_tensor(v):
    return bool(_tensors_of(v))


def _chip_of(args):
    for a in args:
        if type(a) is XPUTensor:
            return a._st.chip
    return None


def _call(n, args, kwargs, gm):
    """Runs FX node n on concrete arguments."""
    if n.op == "call_function":
        return n.target(*args, **kwargs)
    if n.op == "call_method":
        return getattr(args[0], n.target)(*args[1:], **kwargs)
    if n.op == "call_module":
        return gm.get_submodule(n.target)(*args, **kwargs)
    if n.op == "get_attr":
        obj = gm
        for part in n.target.split("."):
            obj = getattr(obj, part)
        return obj
    raise RuntimeError(f"flbridge compile: cannot run FX node {n.format_node()}")


def _arg(a, env):
    # (a module-level function: a recursive closure over env would be a reference cycle,
    # keeping the capture run's intermediates on the device until the garbage collector ran)
    if isinstance(a, torch.fx.Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _arg(v, env) for k, v in a.items()}
    return a


def _run_node(n, env, gm):
    if n.op == "call_function":
        return n.target(*_arg(n.args, env), **_arg(n.kwargs, env))
    if n.op == "get_attr":
        obj = gm
        for part in n.target.split("."):
            obj = getattr(obj, part)
        return obj
    if n.op == "call_method":
        self_, *rest = _arg(n.args, env)
        return getattr(self_, n.target)(*rest, **_arg(n.kwargs, env))
    if n.op == "call_module":
        return gm.get_submodule(n.target)(*_arg(n.args, env), **_arg(n.kwargs, env))
    raise RuntimeError(f"flbridge compile: cannot run FX node {n.format_node()}")
