"""A chip's collective communication library (the spec's `collectives:`
section), bound through cffi.

The library lives in the chip's runtime (`runtime_so`) and is declared by
its own header, which builds on the runtime header (device pointer and
dtype types); both go into one FFI of its own.  :func:`bind_ccl` checks every
function the section names against the header and the library, and every
constant, reporting all problems at once with the spec's file and line.

A :class:`Communicator` is one rank's handle on a communicator created by
every rank with the same rendezvous key; its calls take device addresses
and raise :class:`CollectiveError` with the vendor's status and message.
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import cffi
import torch

from ..errors import CollectiveError, HeaderError, SpecError, SpecProblem
from ..specs import CCL_ROLE_PARAMS, CollectivesSpec
from .header import parse_functions, preprocess


class VendorCCL:
    """The bound library of one chip: functions in canonical argument
    order, dtype and reduction codes."""

    def __init__(self, spec, cs: CollectivesSpec, ffi, lib, fns: dict, success: int, dtype_codes: dict,
                 ops: dict, status_names: dict, comm_out_type: str):
        self.spec, self.cs, self.ffi, self.lib = spec, cs, ffi, lib
        self.device_type = spec.device_type
        self._fns = fns                   # role -> callable taking canonical order
        self.success = success
        self.dtype_codes = dtype_codes    # torch.dtype -> int
        self.ops = ops                    # "sum" / "max" / ... -> int
        self.status_names = status_names
        self.comm_out_type = comm_out_type
        self.collectives = frozenset(r for r in cs.collectives if r in fns)

    def supports(self, collective: str, dtype: torch.dtype, op: str | None = None) -> bool:
        return collective in self.collectives and dtype in self.dtype_codes and (op is None or op in self.ops)

    def call(self, role: str, *args) -> None:
        st = self._fns[role](*args)
        if st != self.success:
            raise self.error(role, st)

    def error(self, role: str, status: int) -> CollectiveError:
        msg = self.ffi.string(self._fns["last_error"]()).decode("utf-8", "replace") \
            if self._fns.get("last_error") else ""
        fn = self.cs.roles[role].fn
        name = self.status_names.get(status, f"status {status}")
        return CollectiveError(f"{self.device_type}: collective {fn} failed with {name} ({status}): {msg}",
                               device_type=self.device_type, function=fn, status=status, status_name=name,
                               vendor_message=msg)

    def open(self, key: str, nranks: int, rank: int, timeout_ms: int) -> "Communicator":
        return Communicator(self, key, nranks, rank, timeout_ms)


class Communicator:
    """This rank's handle on one communicator.  Calls are serialized (a
    communicator's calls must come in the same order on every rank)."""

    def __init__(self, ccl: VendorCCL, key: str, nranks: int, rank: int, timeout_ms: int):
        self.ccl, self.key, self.nranks, self.rank = ccl, key, nranks, rank
        self._lock = threading.Lock()
        out = ccl.ffi.new(ccl.comm_out_type)
        ccl.call("init", out, key.encode(), nranks, rank, int(timeout_ms))
        self.handle = out[0]
        self.closed = False

    def all_reduce(self, send: int, recv: int, count: int, dtype: torch.dtype, op: str) -> None:
        c = self.ccl
        with self._lock:
            c.call("all_reduce", self.handle, send, recv, count, c.dtype_codes[dtype], c.ops[op])

    def broadcast(self, send: int, recv: int, count: int, dtype: torch.dtype, root: int) -> None:
        c = self.ccl
        with self._lock:
            c.call("broadcast", self.handle, send, recv, count, c.dtype_codes[dtype], root)

    def all_gather(self, send: int, recv: int, count: int, dtype: torch.dtype) -> None:
        c = self.ccl
        with self._lock:
            c.call("all_gather", self.handle, send, recv, count, c.dtype_codes[dtype])

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self.ccl.call("destroy", self.handle)


# ---------------------------------------------------------------- binding

_BOUND: dict = {}
_BIND_LOCK = threading.Lock()


def ccl_for(spec) -> VendorCCL | None:
    """The chip's bound library (cached), None if its spec has no
    collectives section; raises SpecError if the section does not bind."""
    if getattr(spec, "collectives", None) is None:
        return None
    with _BIND_LOCK:
        key = (spec.file, spec.device_type)
        if key not in _BOUND:
            ccl, problems = bind_ccl(spec)
            if problems:
                raise SpecError(problems)
            _BOUND[key] = ccl
        return _BOUND[key]


def bind_ccl(spec) -> tuple[VendorCCL | None, list[SpecProblem]]:
    """Binds `spec.collectives`; returns (library or None, problems)."""
    cs: CollectivesSpec = spec.collectives
    problems: list[SpecProblem] = []

    def prob(where, field, msg):
        problems.append(SpecProblem(where[0], where[1], f"collectives.{field}", msg))

    here = (cs.file, cs.line)
    if not cs.header.is_file():
        prob(here, "header", f"header {cs.header} does not exist")
        return None, problems
    # The collectives header builds on the runtime header's types and macros
    # (it #includes it): read them as one text, the runtime header first.
    try:
        rt_text = Path(spec.runtime_header).read_text(encoding="utf-8", errors="replace")
        text = cs.header.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        prob(here, "header", f"cannot read {e.filename}: {e.strerror}")
        return None, problems
    offset = rt_text.count("\n") + 1
    try:
        cdef, _ = preprocess(rt_text + "\n" + text, str(cs.header))
        functions, _ = parse_functions(cdef, str(cs.header))
        ffi = cffi.FFI()
        ffi.cdef(cdef)
    except HeaderError as e:
        where = f"{cs.header}:{e.line - offset}" if e.line > offset else f"{spec.runtime_header}:{e.line}"
        prob(here, "header", f"cannot parse {where}: {e.message}")
        return None, problems
    except cffi.CDefError as e:
        prob(here, "header", f"cffi cannot use {cs.header} after preprocessing: {e}")
        return None, problems
    try:
        lib = ffi.dlopen(str(spec.runtime_so))
    except OSError as e:
        prob(here, "header", f"cannot load the chip's runtime library {spec.runtime_so}: {e}")
        return None, problems
    try:
        symbols = ctypes.CDLL(str(spec.runtime_so), mode=getattr(ctypes, "RTLD_LOCAL", 0))
    except OSError:
        symbols = None

    def constant(value, where, field):
        if isinstance(value, int):
            return value
        try:
            return int(getattr(lib, value))
        except (AttributeError, TypeError):
            prob(where, field, f"'{value}' is not a constant in {cs.header.name}")
            return None

    fns, comm_out = {}, None
    for role, rf in cs.roles.items():
        where = (rf.file, rf.line)
        if symbols is None or not hasattr(symbols, rf.fn):
            prob(where, role, f"undefined symbol: {rf.fn} in {Path(spec.runtime_so).name}; the "
                              f"collectives must live in the chip's runtime library "
                              f"(check with: nm -D {spec.runtime_so} | grep {rf.fn[:6]})")
            continue
        decl = functions.get(rf.fn)
        if decl is None:
            prob(where, role, f"{rf.fn} is exported by {Path(spec.runtime_so).name} but not declared in "
                              f"{cs.header.name}")
            continue
        canon = CCL_ROLE_PARAMS[role]
        pnames = [p.name for p in decl.params]
        order = rf.args or tuple(pnames)
        if len(pnames) != len(canon) or sorted(order) != sorted(canon):
            prob(where, role, f"{rf.fn}({', '.join(str(n) for n in pnames)}) does not match the {role} role "
                              f"({', '.join(canon)}): list the role's names in C order under args, e.g. "
                              f"{{fn: {rf.fn}, args: [{', '.join(canon)}]}}")
            continue
        if role == "init":
            ctype = decl.params[order.index("comm")].ctype
            if not ctype.endswith("*"):
                prob(where, role, f"{rf.fn}: the comm parameter must be a pointer the library writes "
                                  f"the new communicator to (it is {ctype})")
                continue
            comm_out = ctype
        fns[role] = _ordered(getattr(lib, rf.fn), canon, tuple(order))
    success = constant(cs.success, here, "status.success")
    dtype_codes = {}
    for dt, code in cs.dtype_codes.items():
        v = constant(code, here, f"dtypes.{str(dt).replace('torch.', '')}")
        if v is not None:
            dtype_codes[dt] = v
    ops = {}
    for name, code in cs.ops.items():
        v = constant(code, here, f"ops.{name}")
        if v is not None:
            ops[name] = v
    if problems:
        return None, problems
    init_fn = functions[cs.roles["init"].fn]
    result = ffi.typeof(getattr(lib, init_fn.name)).result
    status_names = dict(result.elements) if result.kind == "enum" else {}
    return VendorCCL(spec, cs, ffi, lib, fns, success, dtype_codes, ops, status_names, comm_out), []


def _ordered(fn, canon: tuple, order: tuple):
    """fn as a callable taking the role's canonical argument order."""
    if order == canon:
        return fn
    perm = [order.index(c) for c in canon]  # C position of each canonical argument

    def call(*args):
        c = [None] * len(args)
        for ci, pos in enumerate(perm):
            c[pos] = args[ci]
        return fn(*c)
    return call
