"""Vendor runtime binding through cffi in ABI mode.

:func:`bind_runtime` turns a checked :class:`~flbridge.specs.DeviceSpec`
into a :class:`Runtime`: it parses the vendor header (see
:mod:`flbridge.binding.header`), ``dlopen``s the library, resolves every function the
spec names, checks the descriptor struct and constants, and compiles a call
plan for every op entry (:mod:`flbridge.binding.callplan`).  Everything that can be
wrong is reported at once, with the spec's file and line.

A Runtime is a thin, typed face on the C API: allocation, copies (single and
batched), host mapping, synchronize, counters and the last error, raising
:class:`~flbridge.DeviceError` with the vendor's status code and message.
"""
from __future__ import annotations

import ctypes
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import cffi
import torch

from ..errors import BindError, DeviceError, DeviceOOM, HeaderError, RuntimeLoadError, SpecProblem
from ..specs import ROLE_PARAMS, DeviceSpec, OpEntry, dtype_name, is_file
from ..suggest import closest
from . import launch
from .callplan import Plan, plan_call, type_aliases
from .header import Header, load_header


@dataclass
class BoundOp:
    """An op entry bound to its C function."""
    entry: OpEntry
    plan: Plan
    cfn: object                  # cffi function
    quirk_fns: dict              # tensor arg -> cffi convert function


class Runtime:
    def __init__(self, spec: DeviceSpec, header: Header, ffi: cffi.FFI, lib):
        self.spec, self.header, self.ffi, self.lib = spec, header, ffi, lib
        self.device_type = spec.device_type
        self._lock = threading.Lock()
        self.ops: dict = {}          # OpOverload -> BoundOp
        self.desc_cache: dict = {}   # (addr, offset, shape, strides, dtype) -> descriptor
        self.vendor_fallbacks: dict = {}  # OpOverload -> BoundOp
        self.chip = None                  # set by the Chip that owns this runtime
        self.ok = 0                       # the vendor's success status (set when bound)

    # ------------------------------------------------------------ status

    def error(self, status: int, fn: str) -> DeviceError:
        msg = self.last_error()
        cls = DeviceOOM if status == self._oom else DeviceError
        return cls(self.device_type, fn, status, self._status_names.get(status, f"status {status}"), msg)

    def last_error(self) -> str:
        p = self._last_error()
        return self.ffi.string(p).decode("utf-8", "replace") if p != self.ffi.NULL else ""

    # ------------------------------------------------------------ memory

    def malloc(self, nbytes: int) -> int:
        out = self.ffi.new(self._ptr_out_type)
        st = self._malloc(out, nbytes)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["malloc"].fn)
        return int(out[0])

    def free(self, addr: int) -> None:
        st = self._free(addr)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["free"].fn)

    def h2d(self, dst: int, src_ptr: int, nbytes: int) -> None:
        st = self._h2d(dst, self.ffi.cast("void *", src_ptr), nbytes)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["memcpy_h2d"].fn)

    def d2h(self, dst_ptr: int, src: int, nbytes: int) -> None:
        st = self._d2h(self.ffi.cast("void *", dst_ptr), src, nbytes)
        if launch.WATCH.active:
            launch.transferred(self.chip, "d2h")
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["memcpy_d2h"].fn)

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        if self._d2d is None:
            raise DeviceError(self.device_type, "memcpy_d2d", -1, "unsupported",
                              "the runtime has no device-to-device copy")
        st = self._d2d(dst, src, nbytes)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["memcpy_d2d"].fn)

    @property
    def has_batch_copy(self) -> bool:
        return self._h2d_batch is not None

    def h2d_batch(self, items: list) -> None:
        """items: [(device dst, host src pointer, nbytes)], one submission."""
        if not items:
            return
        if self._h2d_batch is None or len(items) == 1:
            for d, s, n in items:
                self.h2d(d, s, n)
            if launch.WATCH.active:
                launch.transferred(self.chip, "h2d")
            return
        ffi = self.ffi
        dst = [d for d, _, _ in items]
        src = [ffi.cast("void *", s) for _, s, _ in items]
        nb = [n for _, _, n in items]
        st = self._h2d_batch(dst, src, nb, len(items))
        if launch.WATCH.active:
            launch.transferred(self.chip, "h2d")
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["memcpy_h2d_batch"].fn)

    @property
    def can_map(self) -> bool:
        return self._map is not None

    @property
    def can_d2d(self) -> bool:
        return self._d2d is not None

    def map(self, host_ptr: int, nbytes: int) -> int:
        out = self.ffi.new(self._map_out_type)
        st = self._map(self.ffi.cast("void *", host_ptr), nbytes, out)
        if launch.WATCH.active:
            launch.transferred(self.chip, "map")
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["mem_map"].fn)
        return int(out[0])

    def unmap(self, addr: int) -> None:
        st = self._unmap(addr)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["mem_unmap"].fn)

    def mem_info(self) -> tuple[int, int] | None:
        if self._mem_info is None:
            return None
        f, t = self.ffi.new(self._mem_info_types[0]), self.ffi.new(self._mem_info_types[1])
        st = self._mem_info(f, t)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["mem_info"].fn)
        return int(f[0]), int(t[0])

    def synchronize(self) -> None:
        if self._sync is not None:
            st = self._sync()
            if st != self.ok:
                raise self.error(st, self.spec.runtime.roles["synchronize"].fn)

    def counters(self) -> dict:
        """The runtime's own counters struct as a dict ({} if it has none)."""
        if self._counters is None:
            return {}
        c = self.ffi.new(self._counters_type)
        st = self._counters(c)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["counters"].fn)
        return {name: int(getattr(c, name)) for name, _ in self.ffi.typeof(self._counters_type).item.fields}

    def reset_counters(self) -> None:
        if self._reset_counters is not None:
            self._reset_counters()

    @property
    def has_kernel_timer(self) -> bool:
        return self._kernel_timer is not None

    def last_kernel_ns(self) -> int:
        """The runtime's device time of the calling thread's last kernel or
        copy, in nanoseconds (the spec's runtime.kernel_timer)."""
        out = self.ffi.new(self._kernel_timer_type)
        st = self._kernel_timer(out)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["kernel_timer"].fn)
        return int(out[0])

    def shutdown(self) -> None:
        if self._shutdown is not None:
            self._shutdown()

    # -------------------------------------------------------- descriptors

    def desc(self, addr: int, shape, strides, dtype: torch.dtype, offset_elems: int = 0):
        """A tensor descriptor for `addr` + `offset_elems` elements.  Built
        with one initializer list in the struct's own field order."""
        init = [0] * self._nfields
        pos = self._field_pos
        if pos[5] is not None:
            init[pos[0]] = addr
            init[pos[5]] = offset_elems
        else:
            init[pos[0]] = addr + offset_elems * _ITEMSIZE[dtype]
        init[pos[1]] = len(shape)
        init[pos[4]] = self.dtype_codes[dtype]
        init[pos[2]] = list(shape)
        init[pos[3]] = list(strides)
        return self.ffi.new(self._desc_ptr, init)

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in self.dtype_codes

    def copy_kernel(self, src, dst) -> None:
        args = (src, dst) if self._copy_order == ("src", "dst") else (dst, src)
        st = launch.kernel(self.chip, self._copy_label, self._copy, args)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["copy"].fn)

    def fill_kernel(self, dst, value: float) -> None:
        args = (dst, value) if self._fill_order == ("dst", "value") else (value, dst)
        st = launch.kernel(self.chip, self._fill_label, self._fill, args)
        if st != self.ok:
            raise self.error(st, self.spec.runtime.roles["fill"].fn)

    @property
    def has_copy(self) -> bool:
        return self._copy is not None

    @property
    def has_fill(self) -> bool:
        return self._fill is not None


_ITEMSIZE = {dt: dt.itemsize for dt in
             (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
              torch.int16, torch.int32, torch.int64, torch.bool)}


# ---------------------------------------------------------------- binding

def _lib_symbols(path: Path) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(str(path), mode=getattr(ctypes, "RTLD_LOCAL", 0))
    except OSError:
        return None


@dataclass
class StaticCheck:
    """What checking a spec against its header alone found (nothing loaded,
    no vendor code run): the call plan of every op entry it could bind."""
    spec: DeviceSpec
    header: Header
    ops: dict                    # OpOverload -> Plan
    vendor_fallbacks: dict       # OpOverload -> Plan
    roles: dict                  # role -> the header's Function


def bind_runtime(spec: DeviceSpec) -> tuple[Runtime | None, list[SpecProblem], list[RuntimeLoadError]]:
    """Loads and checks `spec`'s runtime.  Returns (runtime or None, spec
    problems, load errors); the runtime is None if anything is wrong."""
    return _bind(spec, load=True)


def check_static(spec: DeviceSpec) -> tuple[StaticCheck | None, list[SpecProblem]]:
    """Checks `spec` against its header without loading the library: the
    header parses, the descriptor struct and constants exist, role functions
    are declared with the role's parameters, every op entry binds to its C
    function's parameters.  Symbols and the library's start-up need
    :func:`bind_runtime`."""
    result, problems, _ = _bind(spec, load=False)
    return result, problems


def _bind(spec: DeviceSpec, load: bool):
    problems: list[SpecProblem] = []
    load_errors: list[RuntimeLoadError] = []
    loc = spec.locations
    rt = spec.runtime

    def prob(where, field, msg):
        problems.append(SpecProblem(where[0], max(1, where[1]), field, msg))

    # header
    hdr_where = loc.get("runtime_header", (spec.file, 1))
    if not is_file(spec.runtime_header):
        prob(hdr_where, "runtime_header", f"header {spec.runtime_header} does not exist")
        return None, problems, load_errors
    try:
        header = load_header(spec.runtime_header)
    except HeaderError as e:
        problems.append(SpecProblem(e.file, max(1, e.line), "runtime_header",
                                    f"cannot parse header (named at {hdr_where[0]}:{hdr_where[1]}): {e.message}"))
        return None, problems, load_errors
    ffi = cffi.FFI()
    try:
        ffi.cdef(header.cdef)
    except Exception as e:  # noqa: BLE001 - cffi's parser raises several types for C it cannot take
        m = re.search(r":(\d+):\d+: ", str(e))
        line = int(m.group(1)) if m else 1
        problems.append(SpecProblem(str(spec.runtime_header), line, "runtime_header",
                                    f"cffi cannot use the header after preprocessing (named at "
                                    f"{hdr_where[0]}:{hdr_where[1]}): {str(e).splitlines()[-1][:300]}"))
        return None, problems, load_errors

    # library
    lib = symbols = None
    if load:
        so_where = loc.get("runtime_so", (spec.file, 1))
        if not is_file(spec.runtime_so):
            load_errors.append(RuntimeLoadError(
                f"runtime library {spec.runtime_so} does not exist (build the simulators with "
                f"`pip install -e .` or `python native_sim/build.py`, or fix the path)",
                file=so_where[0], line=so_where[1], field="runtime_so", library=str(spec.runtime_so),
                reason="no such file"))
            return None, problems, load_errors
        try:
            lib = ffi.dlopen(str(spec.runtime_so))
        except OSError as e:
            load_errors.append(RuntimeLoadError(
                f"Failed to load {spec.runtime_so.name}: {e}", file=so_where[0], line=so_where[1],
                field="runtime_so", library=str(spec.runtime_so), reason=str(e)))
            return None, problems, load_errors
        symbols = _lib_symbols(spec.runtime_so)

    def has_symbol(name: str) -> bool:
        return symbols is not None and hasattr(symbols, name)

    def function(name: str, where, field):
        """The cffi function `name` (its header declaration when not
        loading), or None after recording why not."""
        if load and not has_symbol(name):
            exported = sorted(n for n in header.functions if has_symbol(n))
            near = closest(name, exported)
            load_errors.append(RuntimeLoadError(
                f"undefined symbol: {name} in {spec.runtime_so.name} (named by {field})"
                + (f"; did you mean {near}?" if near else "")
                + f" Check with: nm -D {spec.runtime_so} | grep {name.split('_')[0]}",
                file=where[0], line=where[1], field=field, library=str(spec.runtime_so), symbol=name,
                reason="undefined symbol"))
            return None
        if name not in header.functions:
            if load:
                prob(where, field, f"{name} is exported by {spec.runtime_so.name} but not declared in "
                                   f"{spec.runtime_header.name}; flbridge needs its declaration")
            else:
                near = closest(name, header.functions)
                prob(where, field, f"{name} is not declared in {spec.runtime_header.name}"
                                   + (f"; did you mean {near}?" if near else ""))
            return None
        return getattr(lib, name) if load else header.functions[name]

    def constant(value, where, field):
        if isinstance(value, int):
            return value
        v = header.constant(value)
        if load:
            try:
                v = int(getattr(lib, value))
            except (AttributeError, TypeError):
                v = None
        if v is None:
            known = list(header.constants) + [n for m in header.enums.values() for n in m]
            near = closest(value, known)
            prob(where, field, f"'{value}' is not a constant in {spec.runtime_header.name}"
                               + (f"; did you mean '{near}'?" if near else ""))
        return v

    # status codes
    ok = constant(rt.status_success, (rt.file, rt.line), "runtime.status.success")
    oom = constant(rt.status_oom, (rt.file, rt.line), "runtime.status.out_of_memory") \
        if rt.status_oom is not None else None

    # descriptor struct
    ts = rt.tensor
    struct_types = {ts.type}
    try:
        sty = ffi.typeof(ts.type)
        fields = dict(sty.fields) if sty.kind == "struct" and sty.fields is not None else None
    except Exception:  # noqa: BLE001 - ffi.error, CDefError, TypeError: not a type cffi knows
        fields = None
    if fields is None:
        prob((ts.file, ts.line), "runtime.tensor.type",
             f"'{ts.type}' is not a struct type declared in {spec.runtime_header.name}")
        return None, problems, load_errors
    for role, cname in ts.fields.items():
        if cname not in fields:
            near = closest(cname, fields)
            prob((ts.file, ts.line), f"runtime.tensor.{role}",
                 f"{ts.type} has no field '{cname}'" + (f"; did you mean '{near}'?" if near else
                                                      f" (fields: {', '.join(fields)})"))
    if problems:
        return None, problems, load_errors
    shape_t, strides_t = fields[ts.fields["shape"]].type, fields[ts.fields["strides"]].type
    if shape_t.kind != "array" or strides_t.kind != "array" or shape_t.length != strides_t.length \
            or not shape_t.length:
        prob((ts.file, ts.line), "runtime.tensor.shape",
             f"{ts.type}.{ts.fields['shape']} and .{ts.fields['strides']} must be arrays of the same length")
        return None, problems, load_errors
    order = [name for name, _ in sty.fields]
    # typedef names that denote the struct (x1_tensor_t / struct x1_tensor)
    struct_types |= type_aliases(ffi, header, ts.type)
    enum_types = {name for name in header.typedefs if _is_enum(ffi, name)}

    # dtype codes
    dtype_codes = {}
    for dt, code in rt.dtype_codes.items():
        v = constant(code, (rt.file, rt.line), f"runtime.dtypes.{dtype_name(dt)}")
        if v is not None:
            dtype_codes[dt] = v

    # roles
    role_fns = {}
    for role, rf in rt.roles.items():
        fn = function(rf.fn, (rf.file, rf.line), f"runtime.{role}")
        if fn is None:
            continue
        decl = header.functions[rf.fn]
        pnames = [p.name for p in decl.params]
        canon = ROLE_PARAMS[role]
        if role == "init":
            missing = [n for n in pnames if n not in rf.values]
            extra = [k for k in rf.values if k not in pnames]
            bad = [k for k, v in rf.values.items() if k in pnames and not _fits(ffi, decl, k, v)]
            if missing or extra or bad:
                prob((rf.file, rf.line), "runtime.init.values",
                     f"{rf.fn} takes ({', '.join(str(n) for n in pnames)}); give each a number under values"
                     + (f" (unknown: {', '.join(extra)})" if extra else "")
                     + (f" (does not fit the C type: {', '.join(bad)})" if bad else ""))
                continue
            role_fns[role] = (fn, decl, None)
            continue
        order_ = rf.args or tuple(pnames)
        if len(pnames) != len(canon) or sorted(map(str, order_)) != sorted(canon):
            prob((rf.file, rf.line), f"runtime.{role}",
                 f"{rf.fn}({', '.join(str(n) for n in pnames)}) does not match the {role} role "
                 f"({', '.join(canon)}): list the role's names in C order under args, e.g. "
                 f"{{fn: {rf.fn}, args: [{', '.join(canon)}]}}")
            continue
        role_fns[role] = (fn, decl, tuple(order_))
    if problems or load_errors:
        return None, problems, load_errors

    # ops
    ops, vendor_fallbacks = {}, {}
    for op, entry in spec.ops.items():
        bound = _bind_op(header, dtype_codes, entry, function, prob, struct_types, enum_types)
        if bound:
            ops[op] = bound
    for op, fb in spec.op_specific.items():
        if fb.kind == "vendor":
            bound = _bind_op(header, dtype_codes, fb.entry, function, prob, struct_types, enum_types)
            if bound:
                vendor_fallbacks[op] = bound
    if problems or load_errors:
        return None, problems, load_errors
    if not load:
        return StaticCheck(spec, header, {op: b.plan for op, b in ops.items()},
                           {op: b.plan for op, b in vendor_fallbacks.items()},
                           {role: v[1] for role, v in role_fns.items()}), problems, load_errors

    r = Runtime(spec, header, ffi, lib)
    r.ok, r._oom = ok, oom
    r.max_dims = shape_t.length
    r._desc_ptr = ffi.typeof(ts.type + " *")
    r._nfields = len(order)
    # positions in the initializer list of: data, ndim, shape, strides, dtype, offset
    r._field_pos = tuple(order.index(ts.fields[k]) if k in ts.fields else None
                         for k in ("data", "ndim", "shape", "strides", "dtype", "offset"))
    r.dtype_codes = dtype_codes
    for role in ROLE_PARAMS:
        setattr(r, "_role_" + role, None)
    _wire_roles(r, role_fns)
    r.ops, r.vendor_fallbacks = ops, vendor_fallbacks
    return r, problems, load_errors


def _fits(ffi, decl, pname: str, value) -> bool:
    """Whether `value` can be passed as parameter `pname` of `decl` (a number
    in range for an integer, a number for a float, null for a pointer)."""
    ctype = next(p.ctype for p in decl.params if p.name == pname)
    if value is not None and not isinstance(value, (int, float)):
        return False
    try:
        ffi.new(ctype + " *", value)
    except Exception:  # noqa: BLE001 - OverflowError, TypeError, ffi.error: it does not fit
        return False
    return True


def _is_enum(ffi, name: str) -> bool:
    try:
        return ffi.typeof(name).kind == "enum"
    except Exception:  # noqa: BLE001
        return False


def _wire_roles(r: Runtime, role_fns: dict) -> None:
    ffi = r.ffi

    def ordered(role):
        fn, decl, order = role_fns[role]
        canon = ROLE_PARAMS[role]
        if order == canon:
            return fn
        perm = [order.index(c) for c in canon]  # position in C of each canonical arg

        def call(*args, _fn=fn, _perm=perm):
            c = [None] * len(args)
            for ci, pos in enumerate(_perm):
                c[pos] = args[ci]
            return _fn(*c)
        return call

    def out_type(role, canon_name):
        fn, decl, order = role_fns[role]
        return decl.params[order.index(canon_name)].ctype

    fn, decl, _ = role_fns["init"]
    r._init = (fn, [r.spec.runtime.roles["init"].values[p.name] for p in decl.params])
    r._last_error = role_fns["last_error"][0]
    r._malloc = ordered("malloc")
    r._ptr_out_type = out_type("malloc", "ptr")
    r._free = ordered("free")
    r._h2d = ordered("memcpy_h2d")
    r._d2h = ordered("memcpy_d2h")
    r._d2d = ordered("memcpy_d2d") if "memcpy_d2d" in role_fns else None
    r._h2d_batch = ordered("memcpy_h2d_batch") if "memcpy_h2d_batch" in role_fns else None
    r._map = ordered("mem_map") if "mem_map" in role_fns else None
    r._map_out_type = out_type("mem_map", "ptr") if r._map else None
    r._unmap = ordered("mem_unmap") if "mem_unmap" in role_fns else None
    r._mem_info = ordered("mem_info") if "mem_info" in role_fns else None
    r._mem_info_types = (out_type("mem_info", "free_bytes"), out_type("mem_info", "total_bytes")) \
        if r._mem_info else None
    r._sync = role_fns["synchronize"][0] if "synchronize" in role_fns else None
    r._counters = role_fns["counters"][0] if "counters" in role_fns else None
    r._counters_type = out_type("counters", "counters") if r._counters else None
    r._reset_counters = role_fns["reset_counters"][0] if "reset_counters" in role_fns else None
    r._kernel_timer = ordered("kernel_timer") if "kernel_timer" in role_fns else None
    r._kernel_timer_type = out_type("kernel_timer", "ns") if r._kernel_timer else None
    r._shutdown = role_fns["shutdown"][0] if "shutdown" in role_fns else None
    r._copy = role_fns["copy"][0] if "copy" in role_fns else None
    r._copy_order = role_fns["copy"][2] if r._copy else None
    r._fill = role_fns["fill"][0] if "fill" in role_fns else None
    r._fill_order = role_fns["fill"][2] if r._fill else None
    # the adapter's copies and constant fills as they appear in profiles
    r._copy_label = f"{r.spec.runtime.roles['copy'].fn} [{r.device_type}]" if r._copy else ""
    r._fill_label = f"{r.spec.runtime.roles['fill'].fn} [{r.device_type}]" if r._fill else ""
    result = ffi.typeof(role_fns["malloc"][0]).result
    r._status_names = dict(result.elements) if result.kind == "enum" else {}


def _bind_op(header: Header, dtype_codes: dict, entry: OpEntry, function, prob, struct_types,
             enum_types) -> BoundOp | None:
    where = (entry.file, entry.line)
    field = f"{entry.path}.impl" if entry.path else "impl"
    fn = function(entry.impl, where, field)
    if fn is None:
        return None
    quirk_fns = {}
    for arg, q in entry.quirks.items():
        qf = function(q.convert, where, f"{entry.path}.dtype_quirks.{arg}.convert")
        if qf is None:
            continue
        decl = header.functions[q.convert]
        if len(decl.params) != 2 or any(p.base not in struct_types for p in decl.params):
            prob(where, f"{entry.path}.dtype_quirks.{arg}.convert",
                 f"{q.convert} must take (source descriptor, destination descriptor)")
            continue
        if q.pass_as not in dtype_codes:
            prob(where, f"{entry.path}.dtype_quirks.{arg}.pass_as",
                 f"dtype {dtype_name(q.pass_as)} has no code under runtime.dtypes")
            continue
        quirk_fns[arg] = qf
    try:
        plan = plan_call(entry, header.functions[entry.impl], struct_types, enum_types, header)
    except BindError as e:
        prob(where, f"{entry.path} ({entry.qualname} -> {entry.impl})", str(e))
        return None
    return BoundOp(entry, plan, fn, quirk_fns)


def load_runtime(spec: DeviceSpec) -> Runtime:
    """bind_runtime, raising SpecError / RuntimeLoadError."""
    from ..errors import SpecError
    rt, problems, load_errors = bind_runtime(spec)
    if problems:
        raise SpecError(problems)
    if load_errors:
        err = load_errors[0]
        err.problems = load_errors
        raise err
    return rt


def init_runtime(rt: Runtime) -> None:
    fn, values = rt._init
    st = fn(*values)
    if st != rt.ok:
        raise rt.error(st, rt.spec.runtime.roles["init"].fn)
