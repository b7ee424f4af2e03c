"""Graph capture and replay: torch.fl.FLGraph, with torch.cuda.graphs' API.

During capture the program runs eagerly as usual, and every vendor call it
makes (kernels, the adapter's copies and conversions, constant fills) is
recorded with its prepared C arguments, whose device addresses are fixed:
results come from the graph's private memory pool, inputs keep theirs.
Replay is then a flat loop over those calls: no dispatch, no decisions, no
allocation, and results bit-identical to eager ones (the same kernels on
the same arguments).

What cannot be replayed is refused at capture, naming the op and why: a host
read (.item(), .tolist(), print, .cpu()), an op that would run on the CPU
(its host computation is not recorded), new host data uploaded during the
capture (it would be frozen into the graph), ops on another chip.  Inputs
whose host copy changed between replays (a `static_x.copy_(cpu_batch)`) are
uploaded in place before the calls run.

Random ops draw new numbers at every replay, as in CUDA graphs: CUDA's
kernels read the philox seed and offset from device memory that each
replay refills from the generator (`replay_prologue`), adding the offset
each call had within the capture.  The vendor kernels here take them by
value, so the recorded calls are re-pointed instead: the capture notes each
random call's seed and offset arguments and its offset relative to the
capture's start (the generator does not advance while capturing); each
replay passes the generator's current seed and offset plus those, and then
advances the generator by what the whole graph consumed.
"""
from __future__ import annotations

import weakref

import torch

from .devices import chip_for, current_device
from .errors import GraphCaptureError
from .tensor import GraphPool, make_resident, next_serial
from .binding import launch


class FLGraph:
    """torch.fl.FLGraph(): a captured sequence of vendor calls on one chip."""

    def __init__(self, keep_graph: bool = False):
        self.chip = None
        self.mem_pool = None
        self._calls = []           # (cfn, C arguments) in capture order
        self._labels = []
        self._inputs = {}          # id -> Storage read before the graph wrote it (kept alive)
        self._addresses = ()       # (Storage, device address) checked at replay
        self._written = weakref.WeakValueDictionary()   # id -> Storage the graph writes
        self._produced = set()
        self._keep = []            # constants and other device objects the calls use
        self._first_sid = None
        self._captured = False
        self._capturing = False
        self._prog = ()
        self._rng_used = {}        # generator -> words its random calls consume per run of the graph
        self._rng_calls = []       # (call index, seed position, offset position, generator, offset in the graph)

    # ------------------------------------------------------------ capture

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        if self._capturing or self._captured:
            raise RuntimeError("this FLGraph already holds a capture; call reset() first")
        if launch.STATE.capture is not None:
            raise RuntimeError("another FLGraph is being captured on this thread")
        self.chip = chip_for(current_device())
        if pool is None:
            pool = GraphPool(self.chip)
        elif isinstance(pool, _PoolHandle):
            pool = pool.resolve(self.chip)
        elif isinstance(pool, GraphPool):
            if pool.chip is None:
                pool.chip = self.chip
        else:
            raise TypeError(f"pool must come from torch.fl.graph_pool_handle() or FLGraph.pool(), got {pool!r}")
        if pool.chip is not self.chip:
            raise RuntimeError(f"the pool belongs to {pool.chip.device}, the capture runs on {self.chip.device}")
        self.mem_pool = pool
        pool.graphs += 1
        self._first_sid = next_serial()
        self._capturing = True
        launch.STATE.capture = self

    def capture_end(self) -> None:
        if launch.STATE.capture is self:
            launch.STATE.capture = None
        self._capturing = False
        self._captured = True
        self._prog = tuple(self._calls)
        self._addresses = tuple((st, st.dev) for st in self._inputs.values())
        for st in self._inputs.values():
            st.fixed = True
        for st in self._written.values():
            st.fixed = True

    def _abort(self) -> None:
        if launch.STATE.capture is self:
            launch.STATE.capture = None
        self._capturing = False
        self.reset()

    # called by flbridge while capturing (launch, native, residency, chip)

    def record_call(self, chip, label, cfn, cargs) -> None:
        self._check_chip(chip, label)
        self._calls.append((cfn, tuple(cargs)))
        self._labels.append(label)

    def note_op(self, chip, qualname, reads, writes) -> None:
        self._check_chip(chip, qualname)
        produced = self._produced
        for st in reads:
            if id(st) not in produced and id(st) not in self._inputs:
                self._inputs[id(st)] = st
        for st in writes:
            produced.add(id(st))
            self._written[id(st)] = st

    def keep(self, obj) -> None:
        self._keep.append(obj)

    def reserve_rng(self, gen, words: int) -> int:
        """The offset, within the graph, of a random call consuming `words`
        of `gen`'s stream (the generator itself does not advance)."""
        used = self._rng_used.get(gen, 0)
        self._rng_used[gen] = used + words
        return used

    def note_rng(self, gen, seed_pos: int, offset_pos: int, intra: int) -> None:
        """The call recorded last takes gen's seed and offset at these argument positions."""
        self._rng_calls.append((len(self._calls) - 1, seed_pos, offset_pos, gen, intra))

    def on_transfer(self, chip, kind, nbytes, storages) -> None:
        if kind == "d2h":
            raise GraphCaptureError(
                f"a read of device data on the host ({nbytes} bytes from {chip.device}: .item(), .tolist(), "
                f"print, .cpu() or a CPU fallback) during graph capture; a graph replays device work only. "
                f"Read results after replay(), outside the captured region")
        for st in storages:
            if st.sid > self._first_sid:
                raise GraphCaptureError(
                    f"new host data uploaded to {chip.device} during graph capture (a tensor made from CPU data "
                    f"inside the captured region): replay would reuse the captured bytes. Create static inputs "
                    f"before capture and copy new data into them between replays")

    def cpu_fallback(self, route, reason) -> None:
        raise GraphCaptureError(
            f"{route.qualname} on {route.chip.device_type} would run on the CPU during graph capture ({reason}); "
            f"a graph replays device work only. Give the chip a kernel for it (supported_ops in "
            f"{route.chip.spec.file}) or run it outside the captured region")

    def _check_chip(self, chip, what) -> None:
        if chip is not self.chip:
            raise GraphCaptureError(f"{what} runs on {chip.device} while the graph is captured on "
                                    f"{self.chip.device}; a graph holds work for one chip")

    # ------------------------------------------------------------- replay

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("FLGraph.replay() before a capture ended (use `with torch.fl.graph(g): ...`)")
        chip = self.chip
        stale = None
        for st, addr in self._addresses:
            if st.dev != addr:
                raise RuntimeError("a static input of this graph no longer lives where the capture saw it "
                                   "(resized, set_() or freed?); capture the graph again")
            if not st.dev_valid:
                stale = [st] if stale is None else stale + [st]
        if stale is not None:
            make_resident(chip, stale, keep_address=True)
        rt = chip.runtime
        ok = rt.ok
        prog = self._prog if not self._rng_calls else self._repointed()
        if launch.WATCH.active or torch.autograd.profiler._is_profiler_enabled:
            for (cfn, args), label in zip(prog, self._labels):
                st = launch.kernel(chip, label, cfn, args)
                if st != ok:
                    raise rt.error(st, label)
        else:
            for i, (cfn, args) in enumerate(prog):
                st = cfn(*args)
                if st != ok:
                    raise rt.error(st, self._labels[i])
        for st in self._written.values():
            st.wrote_device()
        s = chip.stats
        s.graph_replays += 1
        s.replayed_kernels += len(self._prog)

    def _repointed(self) -> list:
        """The calls with this replay's seeds and offsets; each generator
        advances by what the graph consumes (CUDA's replay_prologue)."""
        base = {}
        for gen, words in self._rng_used.items():
            seed, offset = gen.take(words)
            base[gen] = (seed, offset)
        prog = list(self._prog)
        for idx, seed_pos, offset_pos, gen, intra in self._rng_calls:
            cfn, args = prog[idx]
            args = list(args)
            seed, offset = base[gen]
            args[seed_pos], args[offset_pos] = seed, offset + intra
            prog[idx] = (cfn, tuple(args))
        return prog

    def reset(self) -> None:
        """Drops the capture and gives its private memory back."""
        pool = self.mem_pool
        if pool is not None:
            pool.graphs -= 1
            if pool.graphs <= 0:
                self.chip.allocator.close_pool(pool)
        self.__init__()

    def pool(self):
        """A handle to share this graph's memory pool with a later capture."""
        return self.mem_pool

    # torch.cuda.CUDAGraph's debugging API
    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, path: str) -> None:
        with open(path, "w") as f:
            for label in self._labels:
                f.write(label + "\n")

    @property
    def num_calls(self) -> int:
        return len(self._prog)

    def __del__(self):
        try:
            if self._capturing:
                self._abort()
            elif self.mem_pool is not None:
                self.reset()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


class _PoolHandle:
    """torch.fl.graph_pool_handle(): a pool for graphs captured later, on
    whichever chip captures first."""

    def __init__(self):
        self.mem_pool = None

    def resolve(self, chip) -> GraphPool:
        if self.mem_pool is None:
            self.mem_pool = GraphPool(chip)
        return self.mem_pool


def graph_pool_handle() -> _PoolHandle:
    return _PoolHandle()


class graph:  # noqa: N801 - torch.cuda.graph's spelling
    """with torch.fl.graph(g, pool=None, stream=None): captures into g."""

    def __init__(self, fl_graph: FLGraph, pool=None, stream=None, capture_error_mode: str = "global"):
        self.fl_graph = fl_graph
        self.pool = pool
        self.stream = stream
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.fl.synchronize()
        self._stream_ctx = torch.fl.stream(self.stream) if self.stream is not None else None
        if self._stream_ctx is not None:
            self._stream_ctx.__enter__()
        self.fl_graph.capture_begin(pool=self.pool, capture_error_mode=self.capture_error_mode)
        return self.fl_graph

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                self.fl_graph._abort()
            else:
                self.fl_graph.capture_end()
        finally:
            if self._stream_ctx is not None:
                self._stream_ctx.__exit__(exc_type, exc, tb)
        return False


def is_current_stream_capturing() -> bool:
    return launch.STATE.capture is not None


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool=None):
    """torch.cuda.make_graphed_callables for fl: each callable's forward and
    backward become two captured graphs inside one autograd node, replayed
    in the training loop.  Same contract as CUDA's: arguments are tensors
    with the sample's shapes, dtypes and requires_grad; only parameters are
    trainable; no module hooks at capture time; several callables share one
    memory pool and must run in the order given."""
    from torch.utils import _pytree as pytree
    if torch.is_autocast_enabled("fl") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast cache: use "
                           "torch.autocast('fl', cache_enabled=False)")
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    flat_samples = []
    for c, args in zip(callables, sample_args):
        if isinstance(c, torch.nn.Module):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise RuntimeError("modules must not have hooks registered when they are passed to "
                                   "make_graphed_callables (registering them afterwards is allowed)")
            if any(b.requires_grad for b in c.buffers()):
                raise RuntimeError("only parameters may be trainable in a graphed module: buffers must have "
                                   "requires_grad=False")
        flat = pytree.arg_tree_leaves(*args)
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("sample_args must contain only tensors")
        flat_samples.append(tuple(flat))
    n_user = [len(a) for a in flat_samples]
    params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else () for c in callables]
    surfaces = [flat_samples[i] + params[i] for i in range(len(callables))]
    fwd_graphs = [FLGraph() for _ in callables]
    bwd_graphs = [FLGraph() for _ in callables]
    mempool = graph_pool_handle() if pool is None else pool

    # warm up eagerly (on a side stream, as with CUDA): caches, lazy uploads, decisions
    torch.fl.synchronize()
    with torch.fl.stream(torch.fl.Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outs = pytree.tree_leaves(func(*args))
                needs = tuple(o for o in outs if o.requires_grad)
                if needs:
                    torch.autograd.grad(needs, tuple(i for i in surface if i.requires_grad),
                                        tuple(torch.empty_like(o) for o in needs), only_inputs=True,
                                        allow_unused=allow_unused_input)
    torch.fl.synchronize()

    static_outputs, specs = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=mempool):
            outs = func(*args)
        flat, spec = pytree.tree_flatten(outs)
        static_outputs.append(tuple(flat))
        specs.append(spec)

    static_grad_outputs, static_grad_inputs = [], []
    for surface, outs, g in zip(reversed(surfaces), reversed(static_outputs), reversed(bwd_graphs)):
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outs)
        needs = tuple(o for o in outs if o.requires_grad)
        grads = None
        if needs:
            with graph(g, pool=mempool):
                grads = torch.autograd.grad(needs, tuple(i for i in surface if i.requires_grad),
                                            tuple(o for o in grad_outs if o is not None), only_inputs=True,
                                            allow_unused=allow_unused_input)
        it = iter(grads or ())
        static_grad_inputs.append(tuple(next(it) if (a.requires_grad and grads is not None) else None
                                        for a in surface))
        static_grad_outputs.append(grad_outs)
    static_grad_outputs.reverse()
    static_grad_inputs.reverse()

    def graphed(fwd, bwd, module_params, n, spec, surface, outs, grad_outs, grad_ins):
        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                for i in range(n):
                    if surface[i].data_ptr() != inputs[i].data_ptr():
                        surface[i].copy_(inputs[i])
                fwd.replay()
                return tuple(o.detach() for o in outs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx, *grads):
                for static, g in zip(grad_outs, grads):
                    if static is not None and g is not None and static.data_ptr() != g.data_ptr():
                        static.copy_(g)
                bwd.replay()
                return tuple(b.detach() if b is not None else None for b in grad_ins)

        def run(*user_args):
            flat = pytree.arg_tree_leaves(*user_args)
            return pytree.tree_unflatten(Graphed.apply(*(tuple(flat) + module_params)), spec)
        return run

    results = []
    for i, func in enumerate(callables):
        fn = graphed(fwd_graphs[i], bwd_graphs[i], params[i], n_user[i], specs[i], surfaces[i],
                     static_outputs[i], static_grad_outputs[i], static_grad_inputs[i])
        if isinstance(func, torch.nn.Module):
            def make_forward(func, graph_training_state, graphed_fn, orig_fwd):
                def forward(*user_args):
                    # replay only in the training state the graph was captured in
                    if func.training == graph_training_state:
                        return graphed_fn(*user_args)
                    return orig_fwd(*user_args)
                return forward
            func.forward = make_forward(func, func.training, fn, func.forward)
            results.append(func)
        else:
            results.append(fn)
    return results[0] if single else tuple(results)
