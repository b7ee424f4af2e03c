"""torch.distributed on fl tensors: the "flccl" backend.

After ``flbridge.init()``, ``dist.init_process_group("flccl")`` (or
``"cpu:gloo,fl:flccl"``, or no backend at all: fl is the accelerator) makes
a :class:`FLProcessGroup`.  It is a Python ``ProcessGroup``, so PyTorch's own
engines (DDP's C++ reducer, ZeroRedundancyOptimizer, functional collectives,
DeviceMesh) call it like any other group.  Every collective takes one of two
paths:

* **vendor**: when the chip's spec has a ``collectives:`` section that runs
  the collective, dtype and reduction, the chip's library moves device
  memory to device memory (:mod:`flbridge.binding.ccl`); nothing crosses the bus.
* **host**: otherwise the tensors go through a ProcessGroupGloo held inside,
  staged over their own host bytes (:mod:`flbridge.tensor.hoststage`): at most one
  download and one (lazy) upload per buffer, none on a chip that maps host
  memory.  CPU tensors always take this path.

A dtype or reduction the vendor library lacks falls back to the host path,
said once.  Ranks on different chip types fail at group creation; a peer
that dies makes the others fail within the timeout (at once on the vendor
path), with a message that says so.

Facts this relies on (torch 2.13): a Python ProcessGroup registered with
``Backend.register_backend`` replaces the whole group (so it serves CPU
tensors too); the C++ reducer reads each Work's future as the tensor list
(a future without it crashes DDP's backward); registering the inner gloo as
the CUSTOM backend of cpu and fl gives the group its name (functional
collectives, DeviceMesh) and a path for collectives this class does not
override (they reach ``XPUTensor.__torch_dispatch__``: :mod:`flbridge.c10d_ops`).
"""
from __future__ import annotations

import secrets
import threading
import warnings
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

from .config import CONFIG
from .devices import chip_at, current_device
from .errors import CollectiveError, CollectiveFallbackWarning, MixedChipsError, user_stacklevel
from .tensor import HostStage, XPUTensor, covers_storage, make_resident, new_tensor
from .binding import ccl_for

BACKEND = "flccl"
_REGISTERED = False
_LOCK = threading.Lock()

# collective counters: (path, collective, "calls" / "bytes" / "staged_d2h_bytes") -> n; see stats()
_COUNTS: Counter = Counter()
_WARNED: set = set()


def register() -> None:
    """Registers the "flccl" backend for the cpu and fl devices (flbridge.init does this)."""
    global _REGISTERED
    with _LOCK:
        if _REGISTERED:
            return
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "fl"])
        _REGISTERED = True


def _create(store, rank, size, timeout):
    return FLProcessGroup(store, rank, size, timeout)


def stats() -> dict:
    """{(path, collective): {"calls": n, "bytes": b, "staged_d2h_bytes": s}}
    since the last reset: path is "vendor" or "host"; bytes are this rank's
    payload; staged_d2h_bytes what staging for the host path downloaded
    (the matching uploads happen lazily, when a kernel next needs the data)."""
    out: dict = {}
    for (path, coll, what), n in _COUNTS.items():
        out.setdefault((path, coll), {"calls": 0, "bytes": 0, "staged_d2h_bytes": 0})[what] = n
    return out


def reset_stats() -> None:
    _COUNTS.clear()


def _count(path: str, coll: str, nbytes: int, stage: HostStage | None = None) -> None:
    if stage is not None and stage.chip is None:
        return  # CPU tensors only: gloo's business, not an fl collective
    _COUNTS[(path, coll, "calls")] += 1
    _COUNTS[(path, coll, "bytes")] += nbytes
    if stage is not None:
        _COUNTS[(path, coll, "staged_d2h_bytes")] += stage.downloaded


# ------------------------------------------------------------------ works

class _Work(dist.Work):
    """A completed Work over a future that holds the collective's tensors
    (DDP's reducer reads them from it).  Every collective of this group
    completes, or raises, before it returns its Work: the vendor library's
    calls are synchronous, and the host path waits for gloo (see _after)."""

    def __init__(self, fut):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None):
        return True

    def get_future(self):
        return self._fut

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None


def _done(result):
    """A completed Work whose future holds `result`."""
    fut = torch.futures.Future()
    fut.set_result(result)
    return _Work(fut)


def _after(work, stage: HostStage, result, what: str, group):
    """The Work to return for a host collective, complete: this waits for
    gloo's work here, on the calling thread (as the vendor path does).

    Chaining a Python callback on gloo's future instead (``fut.then``) lets a
    gloo worker thread free the Python value it holds, which needs the GIL; at
    interpreter exit that thread is then ended inside a destructor and the
    process aborts ("terminate called without an active exception", seen in
    about 1 of 50 rank exits under load; a core dump shows
    ``~ConcretePyObjectHolder`` -> ``take_gil`` -> ``pthread_exit`` on the
    gloo thread during ``Py_FinalizeEx``)."""
    _wait(work, what, group.rank(), group.size())
    stage.finish()
    return _done(result)


def _wait(work, what: str, rank: int, size: int) -> None:
    try:
        work.wait()
    except Exception as e:  # noqa: BLE001
        raise CollectiveError(_host_failure(what, rank, size, e)) from e


def _host_failure(what: str, rank: int, size: int, e) -> str:
    return (f"flccl: {what} over the host (gloo) failed on rank {rank} of {size}: {e}. "
            f"If a peer process exited, see its log; this group cannot be used any more.")


_REDUCE_NAMES = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "product", dist.ReduceOp.MIN: "min",
                 dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg", dist.ReduceOp.BAND: "band",
                 dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor"}


def _op_name(reduce_op) -> str | None:
    for k, v in _REDUCE_NAMES.items():
        if reduce_op == k:
            return v
    return None  # PREMUL_SUM: the host path (gloo) decides


# ------------------------------------------------------------------ group

class FLProcessGroup(dist.ProcessGroup):
    """The "flccl" process group (see the module docstring)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._timeout = timeout
        self._host = ProcessGroupGloo(dist.PrefixStore("host/", store), rank, size, timeout)
        for d in ("cpu", "fl"):
            self._register_backend(torch.device(d), dist.ProcessGroup.BackendType.CUSTOM, self._host)
        self.chip = _agree_on_chip(store, rank, size)
        self._comm = None
        ccl = ccl_for(self.chip.spec) if self.chip is not None and use_vendor_collectives() else None
        if ccl is not None and ccl.collectives:
            # a fresh rendezvous key per group, handed out by rank 0
            if rank == 0:
                store.set("ccl_key", f"{secrets.token_hex(6)}-{id(self) & 0xffff:x}")
            key = store.get("ccl_key").decode()
            ms = max(1, min(int(timeout.total_seconds() * 1000), 2 ** 31 - 1))
            self._comm = ccl.open(key, size, rank, ms)

    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    def __repr__(self) -> str:
        chip = f"{self.chip.device_type} ({self.chip.device})" if self.chip is not None else "no fl device"
        path = "vendor collectives" if self._comm is not None else "host (gloo) only"
        return f"<FLProcessGroup rank {self.rank()} of {self.size()}, {chip}, {path}>"

    def shutdown(self) -> None:
        self._close()
        super().shutdown()

    def __del__(self):
        try:
            self._close()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    def _close(self) -> None:
        comm, self._comm = getattr(self, "_comm", None), None
        if comm is not None:
            comm.close()

    # ---------------------------------------------------------- the paths

    def _vendor(self, coll: str, tensors, op: str | None = None) -> bool:
        """Whether the chip's library runs `coll` on these tensors (warns once
        when fl tensors have to take the host path instead)."""
        if self._comm is None or not tensors or any(type(t) is not XPUTensor for t in tensors):
            return False
        t0 = tensors[0]
        chip = t0._st.chip
        if chip is not self.chip or any(t._st.chip is not chip or t.dtype != t0.dtype for t in tensors):
            self._warn(("chip", chip.device_type),
                       f"flccl: {coll} of tensors on {chip.device} ({chip.device_type}) "
                       f"goes through the host (gloo): this group was created for {self.chip.device} "
                       f"({self.chip.device_type}), the current fl device at init_process_group. Call "
                       f"torch.fl.set_device('{chip.device_type}') before init_process_group to use the "
                       f"chip's collectives.")
            return False
        ccl = self._comm.ccl
        need = "sum" if op == "avg" and "avg" not in ccl.ops and t0.is_floating_point() else op
        if ccl.supports(coll, t0.dtype, need):
            return True
        if coll not in ccl.collectives:
            why = f"its collectives library has no {coll}"
        elif t0.dtype not in ccl.dtype_codes:
            why = (f"its collectives run {', '.join(str(d).replace('torch.', '') for d in ccl.dtype_codes)}, "
                   f"not {str(t0.dtype).replace('torch.', '')}")
        else:
            why = f"its collectives have no '{op}' reduction (they have {', '.join(ccl.ops)})"
        self._warn((coll, t0.dtype, op, chip.device_type),
                   f"flccl: {coll} of {str(t0.dtype).replace('torch.', '')} tensors on {chip.device_type} goes "
                   f"through the host (gloo): {why}. (Said once per collective, dtype and chip.)")
        return False

    def _warn(self, key, msg: str) -> None:
        if CONFIG.warn == "off" or (CONFIG.warn == "once" and key in _WARNED):
            return
        _WARNED.add(key)
        warnings.warn(msg, CollectiveFallbackWarning, stacklevel=user_stacklevel())

    def _run(self, what: str, fn, *args):
        try:
            fn(*args)
        except CollectiveError as e:
            raise CollectiveError(f"flccl: {what} on rank {self.rank()} of {self.size()} failed in the chip's "
                                  f"collectives library: {e}. This group cannot be used any more; when a peer "
                                  f"rank exited or stopped calling collectives, its log says why.",
                                  device_type=e.device_type, function=e.function, status=e.status,
                                  status_name=e.status_name, vendor_message=e.vendor_message) from None

    # ------------------------------------------------------- collectives

    def allreduce(self, tensors, opts=None):
        return self._allreduce(tensors, opts or dist.AllreduceOptions(), self._host.allreduce, "all_reduce")

    def allreduce_coalesced(self, tensors, opts=None):
        return self._allreduce(tensors, opts or dist.AllreduceCoalescedOptions(), self._host.allreduce_coalesced,
                               "all_reduce_coalesced")

    def _allreduce(self, tensors, opts, host_fn, what: str):
        op = _op_name(opts.reduceOp)
        if op is not None and self._vendor("all_reduce", tensors, op):
            for t in tensors:
                self._vendor_all_reduce(t, op)
            return _done(tensors)
        stage = HostStage()
        hs = [stage.write(t) for t in tensors]
        _count("host", "all_reduce", stage.nbytes, stage)
        return _after(host_fn(hs, opts), stage, tensors, what, self)

    def _host_to_lists(self, host_fn, outputs, inputs, opts, coll: str, what: str):
        """A host-path collective from a list of tensors into lists of
        tensors (all_gather, its coalesced form, gather)."""
        stage = HostStage()
        hi = [stage.read(t) for t in inputs]
        ho = [[stage.write(t, read=False) for t in lst] for lst in outputs]
        _count("host", coll, sum(t.numel() * t.element_size() for t in inputs), stage)
        return _after(host_fn(ho, hi, opts), stage, outputs, what, self)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        if self._vendor("broadcast", tensors):
            for t in tensors:
                self._vendor_broadcast(t, opts.rootRank)
            return _done(tensors)
        stage = HostStage()
        root = self.rank() == opts.rootRank
        hs = [stage.read(t) if root else stage.write(t, read=False) for t in tensors]
        _count("host", "broadcast", stage.nbytes, stage)
        return _after(self._host.broadcast(hs, opts), stage, tensors, "broadcast", self)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        if len(input_tensors) == 1 and self._vendor("all_gather", [*input_tensors, *output_tensors[0]]):
            self._vendor_all_gather_list(output_tensors[0], input_tensors[0])
            return _done(output_tensors)
        return self._host_to_lists(self._host.allgather, output_tensors, input_tensors, opts, "all_gather",
                                   "all_gather")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._host_to_lists(self._host.allgather_coalesced, output_lists, input_list, opts, "all_gather",
                                   "allgather_coalesced")

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        if self._vendor("all_gather", [input, output]):
            self._vendor_all_gather(output, input)
            return _done([output])
        stage = HostStage()
        hi = stage.read(input)
        ho = stage.write(output, read=False)
        _count("host", "all_gather", input.numel() * input.element_size(), stage)
        return _after(self._host._allgather_base(ho, hi, opts), stage, [output], "all_gather_into_tensor", self)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        for o, i in zip(outputs, inputs):
            self.all_gather_single(o, i, opts)        # each completes (or raises) before it returns
        return _done(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        stage = HostStage()
        hi = [[stage.read(t) for t in lst] for lst in input_tensors]
        ho = [stage.write(t, read=False) for t in output_tensors]
        _count("host", "reduce_scatter", sum(t.numel() * t.element_size() for lst in input_tensors for t in lst),
               stage)
        return _after(self._host.reduce_scatter(ho, hi, opts), stage, output_tensors, "reduce_scatter", self)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        stage = HostStage()
        hi = stage.read(input)
        ho = stage.write(output, read=False)
        _count("host", "reduce_scatter", input.numel() * input.element_size(), stage)
        return _after(self._host._reduce_scatter_base(ho, hi, opts), stage, [output], "reduce_scatter_tensor",
                      self)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        for o, i in zip(outputs, inputs):
            self.reduce_scatter_single(o, i, opts)
        return _done(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        stage = HostStage()
        hi = stage.read(input)
        ho = stage.write(output, read=False)
        _count("host", "all_to_all", input.numel() * input.element_size(), stage)
        w = self._host.alltoall_base(ho, hi, list(output_split_sizes), list(input_split_sizes), opts)
        return _after(w, stage, [output], "all_to_all_single", self)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        stage = HostStage()
        hi = [stage.read(t) for t in input_tensors]
        ho = [stage.write(t, read=False) for t in output_tensors]
        _count("host", "all_to_all", sum(t.numel() * t.element_size() for t in input_tensors), stage)
        return _after(self._host.alltoall(ho, hi, opts), stage, output_tensors, "all_to_all", self)

    def send(self, tensors, dst_rank, tag=0):
        stage = HostStage()
        hs = [stage.read(t) for t in tensors]
        _count("host", "send", stage.nbytes, stage)
        return _after(self._host.send(hs, dst_rank, tag), stage, tensors, "send", self)

    def recv(self, tensors, src_rank, tag=0):
        stage = HostStage()
        hs = [stage.write(t, read=False) for t in tensors]
        _count("host", "recv", stage.nbytes, stage)
        return _after(self._host.recv(hs, src_rank, tag), stage, tensors, "recv", self)

    def recv_anysource(self, tensors, tag=0):
        stage = HostStage()
        hs = [stage.write(t, read=False) for t in tensors]
        _count("host", "recv", stage.nbytes, stage)
        return _after(self._host.recv_anysource(hs, tag), stage, tensors, "recv", self)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        return self._host_to_lists(self._host.gather, output_tensors, input_tensors, opts, "gather", "gather")

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        stage = HostStage()
        hi = [[stage.read(t) for t in lst] for lst in input_tensors]
        ho = [stage.write(t, read=False) for t in output_tensors]
        _count("host", "scatter", sum(t.numel() * t.element_size() for t in output_tensors), stage)
        return _after(self._host.scatter(ho, hi, opts), stage, output_tensors, "scatter", self)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        stage = HostStage()
        hs = [stage.write(t) if self.rank() == opts.rootRank else stage.read(t) for t in tensors]
        _count("host", "reduce", stage.nbytes, stage)
        return _after(self._host.reduce(hs, opts), stage, tensors, "reduce", self)

    def barrier(self, opts=None):
        b = dist.BarrierOptions()
        if opts is not None:
            b.timeout = opts.timeout
        return _after(self._host.barrier(b), HostStage(), [], "barrier", self)

    # ------------------------------------------------------- vendor path

    def _vendor_all_reduce(self, t, op: str) -> None:
        ccl = self._comm.ccl
        native = op if op in ccl.ops else "sum"  # avg without a native avg: sum, then divide
        with _device_buffer(t, read=True, write=True) as addr:
            self._run("all_reduce", self._comm.all_reduce, addr, addr, t.numel(), t.dtype, native)
        if native != op:
            with torch.no_grad():
                t.div_(self.size())
        _count("vendor", "all_reduce", t.numel() * t.element_size())

    def _vendor_broadcast(self, t, root: int) -> None:
        is_root = self.rank() == root
        with _device_buffer(t, read=is_root, write=not is_root) as addr:
            self._run("broadcast", self._comm.broadcast, addr, addr, t.numel(), t.dtype, root)
        _count("vendor", "broadcast", t.numel() * t.element_size())

    def _vendor_all_gather(self, output, input) -> None:
        if output.numel() != input.numel() * self.size():
            raise ValueError(f"all_gather_into_tensor: the output has {output.numel()} elements; it needs "
                             f"{input.numel()} (the input's) x {self.size()} ranks")
        with _device_buffer(input, read=True, write=False) as src:
            with _device_buffer(output, read=False, write=True) as dst:
                self._run("all_gather", self._comm.all_gather, src, dst, input.numel(), input.dtype)
        _count("vendor", "all_gather", input.numel() * input.element_size())

    def _vendor_all_gather_list(self, outputs, input) -> None:
        if len(outputs) != self.size() or any(o.numel() != input.numel() for o in outputs):
            raise ValueError(f"all_gather: give {self.size()} output tensors of {input.numel()} elements "
                             f"each (the input's size)")
        flat = new_tensor(self.chip, (input.numel() * self.size(),), (1,), input.dtype)
        self._vendor_all_gather(flat, input)
        with torch.no_grad():
            for r, o in enumerate(outputs):
                o.copy_(flat[r * input.numel():(r + 1) * input.numel()].view(o.shape))


class _device_buffer:
    """The device address of an fl tensor's elements for the vendor library
    (contiguous); a non-contiguous tensor goes through a contiguous device
    copy.  `read`: its values are an input; `write`: the library writes it
    (marked written on the device on exit)."""

    def __init__(self, t, read: bool, write: bool):
        self.t, self.read, self.write = t, read, write
        self.tmp = None

    def __enter__(self) -> int:
        t = self.t
        if not t.is_contiguous():
            with torch.no_grad():
                self.tmp = t.contiguous() if self.read else \
                    torch.empty_like(t, memory_format=torch.contiguous_format)
            t = self.tmp
        st = t._st
        if self.read or not (covers_storage(t) and st.nbytes):
            make_resident(st.chip, [st])
        elif not st.dev_valid:
            st.alloc_device()  # every byte is about to be written: no upload
        return st.dev + t.storage_offset() * t.element_size()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None or not self.write:
            return False
        if self.tmp is not None:
            self.tmp._st.wrote_device()
            with torch.no_grad():
                self.t.copy_(self.tmp)
        else:
            self.t._st.wrote_device()
        return False


def _agree_on_chip(store, rank: int, size: int):
    """This rank's chip (the current fl device), after checking through the
    store that every rank's is of the same type."""
    chip = chip_at(current_device())
    mine = f"{chip.device_type} ({chip.device})" if chip is not None else "no fl device"
    store.set(f"chip/{rank}", mine)
    by_rank = {r: store.get(f"chip/{r}").decode() for r in range(size)}
    types = {v.split(" ")[0] for v in by_rank.values()}
    if len(types) > 1:
        raise MixedChipsError(by_rank, rank)
    return chip


_VENDOR = [True]


def use_vendor_collectives(enabled: bool | None = None) -> bool:
    """Whether new groups use the chips' collectives libraries (default
    True); False makes every collective take the host path (to compare the
    two, as bench/bench_ddp.py does).  Returns the setting."""
    if enabled is not None:
        _VENDOR[0] = bool(enabled)
    return _VENDOR[0]
