"""Checking a spec, field by field: every problem is collected with its file,
line and field path (a SpecProblem), never just the first.  check_spec()
turns the YAML mapping into a DeviceSpec; checks that need the vendor
runtime (symbols, header, C parameter names) happen when the runtime is
bound (flbridge.binding.runtime)."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import torch

from ..errors import OpNameError, SpecProblem
from ..suggest import closest
from .aten import info, resolve_name
from .collectives import check_collectives
from .reader import LocDict, LocList, bad_path, expand_path
from .schema import (AMP_DTYPES, COMPUTE_KEYS, DEVICE_TYPE, DTYPE_NAMES, KNOWN_PATHS, LAYOUT_FAMILIES, OP_KEYS,
                     REQUIRED_ROLES, ROLE_PARAMS, TENSOR_FIELDS, TOP_KEYS, Capabilities, Constraints, DeviceSpec,
                     Fallback, OpEntry, Quirk, RngSpec, RoleFn, RuntimeSpec, TensorStruct, dtype_name)

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class Checker:
    """Collects problems while walking a spec."""

    def __init__(self):
        self.problems: list[SpecProblem] = []

    def err(self, where: tuple[str, int], field_path: str, message: str) -> None:
        self.problems.append(SpecProblem(where[0], where[1], field_path, message))

    def keys(self, d: LocDict, allowed, path: str, required=()) -> None:
        for k in d:
            if k in allowed:
                continue
            msg = f"unknown field '{k}'"
            near = closest(k, allowed)
            if near:
                msg += f"; did you mean '{near}'?"
            else:
                elsewhere = [p for p in KNOWN_PATHS if p.rsplit(".", 1)[-1] == k]
                if elsewhere:
                    msg += f"; did you mean '{elsewhere[0]}'? (it belongs there)"
                else:
                    msg += f" (known: {', '.join(allowed)})"
            self.err(d.loc(k), _p(path, k), msg)
        for k in required:
            if k not in d:
                self.err((d.file, d.line), _p(path, k), "required field is missing")

    def typed(self, d: LocDict, key: str, types, path: str, what: str):
        v = d.get(key)
        if v is None:
            return None
        if types is str and not isinstance(v, str):
            self.err(d.loc(key), _p(path, key), f"must be {what}, got {type(v).__name__} {v!r}")
            return None
        if types is not str and (not isinstance(v, types) or isinstance(v, bool) and bool not in
                                 (types if isinstance(types, tuple) else (types,))):
            self.err(d.loc(key), _p(path, key), f"must be {what}, got {type(v).__name__} {v!r}")
            return None
        return v

    def dtype(self, name, where, path) -> torch.dtype | None:
        if isinstance(name, str) and name.strip().lower() in DTYPE_NAMES:
            return DTYPE_NAMES[name.strip().lower()]
        msg = f"unknown dtype {name!r}"
        near = closest(str(name), DTYPE_NAMES)
        if near:
            msg += f"; did you mean '{near}'?"
        else:
            msg += f" (known: {', '.join(sorted(set(dtype_name(d) for d in DTYPE_NAMES.values())))})"
        self.err(where, path, msg)
        return None

    def dtype_list(self, v, where, path) -> tuple:
        if not isinstance(v, list):
            self.err(where, path, f"must be a list of dtype names, got {v!r}")
            return ()
        out = []
        for i, item in enumerate(v):
            dt = self.dtype(item, v.loc(i) if isinstance(v, LocList) else where, f"{path}[{i}]")
            if dt is not None:
                out.append(dt)
        return tuple(out)


def _p(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _str_list(ck: Checker, d: LocDict, key: str, path: str) -> tuple:
    v = d.get(key)
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        ck.err(d.loc(key), _p(path, key), f"must be a list of names, got {v!r}")
        return ()
    return tuple(v)


def _check_capabilities(ck: Checker, d, where, path="capabilities") -> Capabilities:
    if d is None:
        return Capabilities((), None, None, {}, ())
    if not isinstance(d, LocDict):
        ck.err(where, path, "must be a mapping")
        return Capabilities((), None, None, {}, ())
    ck.keys(d, ("dtypes", "amp_dtype", "memory", "compute", "features"), path, required=("dtypes",))
    dtypes = ck.dtype_list(d["dtypes"], d.loc("dtypes"), f"{path}.dtypes") if "dtypes" in d else ()
    amp = _check_amp_dtype(ck, d, dtypes, path)
    total, bw = None, None
    mem = d.get("memory")
    if mem is not None:
        if not isinstance(mem, LocDict):
            ck.err(d.loc("memory"), f"{path}.memory", "must be a mapping (total_gb, bandwidth_gbps)")
        else:
            ck.keys(mem, ("total_gb", "bandwidth_gbps"), f"{path}.memory")
            tg = ck.typed(mem, "total_gb", (int, float), f"{path}.memory", "a number of GiB")
            if tg is not None:
                if not 0 < tg < 1 << 30:
                    ck.err(mem.loc("total_gb"), f"{path}.memory.total_gb", "must be a positive number of GiB")
                else:
                    total = int(tg * (1 << 30))
            bw = ck.typed(mem, "bandwidth_gbps", (int, float), f"{path}.memory", "a number")
            if bw is not None and not 0 < bw < float("inf"):
                ck.err(mem.loc("bandwidth_gbps"), f"{path}.memory.bandwidth_gbps", "must be a positive number")
                bw = None
    compute = {}
    comp = d.get("compute")
    if comp is not None:
        if not isinstance(comp, LocDict):
            ck.err(d.loc("compute"), f"{path}.compute", "must be a mapping")
        else:
            ck.keys(comp, COMPUTE_KEYS, f"{path}.compute")
            for k in comp:
                if k in COMPUTE_KEYS:
                    v = ck.typed(comp, k, (int, float), f"{path}.compute", "a number")
                    if v is not None:
                        compute[k] = v
    features = _str_list(ck, d, "features", path)
    return Capabilities(dtypes, total, bw, compute, features, amp)


def _check_amp_dtype(ck: Checker, d: LocDict, dtypes: tuple, path: str) -> torch.dtype | None:
    """capabilities.amp_dtype: the dtype torch.autocast("fl") lowers to on this
    chip.  Default: float16 if the chip has it, else bfloat16, else none
    (autocast is refused on the chip)."""
    if d.get("amp_dtype") is None:
        return next((a for a in AMP_DTYPES if a in dtypes), None)
    where, field = d.loc("amp_dtype"), f"{path}.amp_dtype"
    dt = ck.dtype(d["amp_dtype"], where, field)
    if dt is None:
        return None
    if dt not in AMP_DTYPES:
        ck.err(where, field, f"{dtype_name(dt)} is not a lower-precision float dtype autocast can use; "
                             f"use one of {', '.join(dtype_name(a) for a in AMP_DTYPES)}")
        return None
    if dtypes and dt not in dtypes:
        ck.err(where, field, f"{dtype_name(dt)} is not among capabilities.dtypes "
                             f"({', '.join(dtype_name(x) for x in dtypes)}); add it there or pick one of those")
        return None
    return dt


def _role(ck: Checker, d: LocDict, role: str, path: str) -> RoleFn | None:
    v = d[role]
    where = d.loc(role)
    if isinstance(v, str):
        return RoleFn(v, None, {}, *where)
    if not isinstance(v, LocDict):
        ck.err(where, _p(path, role), "must be a function name or {fn: name, args: [...]}")
        return None
    allowed = ("fn", "values") if role == "init" else ("fn", "args")
    ck.keys(v, allowed, _p(path, role), required=("fn",))
    fn = ck.typed(v, "fn", str, _p(path, role), "a C function name")
    args = None
    if "args" in v:
        a = v["args"]
        canon = ROLE_PARAMS[role]
        if not isinstance(a, list) or sorted(map(str, a)) != sorted(canon):
            ck.err(v.loc("args"), _p(path, role) + ".args",
                   f"must list {', '.join(canon)} in the order the C function takes them")
        else:
            args = tuple(a)
    values = {}
    if "values" in v:
        if not isinstance(v["values"], LocDict):
            ck.err(v.loc("values"), _p(path, role) + ".values", "must map C parameter names to values")
        else:
            values = dict(v["values"])
    return RoleFn(fn, args, values, *where) if fn else None


def _check_runtime(ck: Checker, d, where, path="runtime") -> RuntimeSpec | None:
    if d is None:
        return None  # reported as a missing required field
    if not isinstance(d, LocDict):
        ck.err(where, path, "must be a mapping of roles (init, malloc, ...), status, tensor and dtypes")
        return None
    ck.keys(d, (*ROLE_PARAMS, "status", "tensor", "dtypes"), path,
            required=(*REQUIRED_ROLES, "status", "tensor", "dtypes"))
    roles = {}
    for r in ROLE_PARAMS:
        if r in d:
            rf = _role(ck, d, r, path)
            if rf:
                roles[r] = rf
    if "mem_map" in roles and "mem_unmap" not in roles:
        ck.err(d.loc("mem_map"), f"{path}.mem_unmap", "mem_map needs mem_unmap too")
    success, oom = 0, None
    st = d.get("status")
    if st is not None:
        if not isinstance(st, LocDict):
            ck.err(d.loc("status"), f"{path}.status", "must be a mapping (success, out_of_memory)")
        else:
            ck.keys(st, ("success", "out_of_memory"), f"{path}.status", required=("success",))
            for k in ("success", "out_of_memory"):
                if k in st and not isinstance(st[k], (str, int)):
                    ck.err(st.loc(k), f"{path}.status.{k}", "must be a constant name or an integer")
            success, oom = st.get("success", 0), st.get("out_of_memory")
    tensor = None
    t = d.get("tensor")
    if t is not None:
        if not isinstance(t, LocDict):
            ck.err(d.loc("tensor"), f"{path}.tensor", "must describe the descriptor struct")
        else:
            ck.keys(t, ("type", *TENSOR_FIELDS, "offset"), f"{path}.tensor", required=("type", *TENSOR_FIELDS))
            bad = [k for k in t if not isinstance(t[k], str)]
            for k in bad:
                ck.err(t.loc(k), f"{path}.tensor.{k}", "must be a C name")
            if "type" in t and not bad:
                tensor = TensorStruct(t["type"], {k: t[k] for k in (*TENSOR_FIELDS, "offset") if k in t},
                                      *d.loc("tensor"))
    codes = {}
    dc = d.get("dtypes")
    if dc is not None:
        if not isinstance(dc, LocDict):
            ck.err(d.loc("dtypes"), f"{path}.dtypes", "must map dtype names to the runtime's codes")
        else:
            for k, v in dc.items():
                dt = ck.dtype(k, dc.loc(k), f"{path}.dtypes.{k}")
                if dt is not None:
                    if not isinstance(v, (str, int)) or isinstance(v, bool):
                        ck.err(dc.loc(k), f"{path}.dtypes.{k}", "must be a constant name or an integer")
                    else:
                        codes[dt] = v
    if tensor is None:
        return None
    return RuntimeSpec(roles, success, oom, tensor, codes, d.file, d.line)


def _check_constraints(ck: Checker, c, opi, where, path, implied: dict) -> Constraints:
    merged = {k: v for k, v in implied.items()}
    if c is not None:
        if not isinstance(c, LocDict):
            ck.err(where, path, "must be a mapping")
            c = None
        else:
            merged.update(c)
    values, ndim, sizes, mult, mx, rng, present, length, pad = {}, {}, {}, {}, {}, {}, (), {}, ()
    numel, may_be_empty, require = {}, {}, ()
    locs = c.loc if isinstance(c, LocDict) else (lambda k: where)
    for k, v in merged.items():
        kp = _p(path, k)
        if k == "ndim":
            if not isinstance(v, dict):
                ck.err(locs(k), kp, "must map tensor arguments to allowed ranks")
                continue
            for a, ranks in v.items():
                if a not in opi.by_name:
                    ck.err(locs(k), f"{kp}.{a}", _no_arg(opi, a))
                ranks = ranks if isinstance(ranks, list) else [ranks]
                ndim[a] = tuple(ranks)
        elif k == "sizes":
            if not isinstance(v, dict):
                ck.err(locs(k), kp, "must map tensor arguments to lists of dim names, e.g. self: [M, K]")
                continue
            for a, dims in v.items():
                if a not in opi.by_name and a != "out":   # "out": the (first) result's dims
                    ck.err(locs(k), f"{kp}.{a}", _no_arg(opi, a))
                if not isinstance(dims, list) or not all(isinstance(x, str) for x in dims):
                    ck.err(locs(k), f"{kp}.{a}", "must be a list of dim names such as [M, K]")
                    continue
                sizes[a] = tuple(dims)
        elif k == "range":
            if not isinstance(v, dict):
                ck.err(locs(k), kp, "must map arguments to [min, max]")
                continue
            for a, mm in v.items():
                if a not in opi.by_name:
                    ck.err(locs(k), f"{kp}.{a}", _no_arg(opi, a))
                if not (isinstance(mm, list) and len(mm) == 2 and all(isinstance(x, (int, float)) for x in mm)):
                    ck.err(locs(k), f"{kp}.{a}", "must be [min, max]")
                    continue
                rng[a] = (mm[0], mm[1])
        elif k == "length":
            if not isinstance(v, dict):
                ck.err(locs(k), kp, "must map list arguments to the number of values the kernel reads")
                continue
            for a, n in v.items():
                if a not in opi.by_name or opi.by_name[a].kind != "int[]":
                    ck.err(locs(k), f"{kp}.{a}", f"'{a}' is not an int list argument of {opi.qualname}")
                elif not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    ck.err(locs(k), f"{kp}.{a}", "must be a positive integer")
                else:
                    length[a] = n
        elif k == "present":
            lst = v if isinstance(v, list) else [v]
            for a in lst:
                if a not in opi.by_name or opi.by_name[a].kind != "tensor?":
                    ck.err(locs(k), f"{kp}", f"'{a}' is not an optional tensor argument of {opi.qualname}")
            present = tuple(lst)
        elif k == "pad":
            lst = v if isinstance(v, list) else [v]
            if not all(isinstance(x, str) for x in lst):
                ck.err(locs(k), kp, "must list dim names, e.g. [M, N, K]")
                continue
            pad = tuple(lst)
        elif k == "numel":
            if not isinstance(v, dict):
                ck.err(locs(k), kp, "must map tensor (or tensor list) arguments to element counts")
                continue
            for a, n in v.items():
                if a not in opi.by_name or not opi.by_name[a].kind.startswith("tensor"):
                    ck.err(locs(k), f"{kp}.{a}", f"'{a}' is not a tensor argument of {opi.qualname}")
                elif not isinstance(n, int) or isinstance(n, bool) or n < 0:
                    ck.err(locs(k), f"{kp}.{a}", "must be a number of elements (0 or more)")
                else:
                    numel[a] = n
        elif k == "may_be_empty":
            items = v if isinstance(v, dict) else {a: "" for a in (v if isinstance(v, list) else [v])}
            for a, cond in items.items():
                if a not in opi.by_name or opi.by_name[a].kind != "tensor[]":
                    ck.err(locs(k), f"{kp}.{a}" if isinstance(v, dict) else kp,
                           f"'{a}' is not a tensor list argument of {opi.qualname}")
                elif not isinstance(cond, str):
                    ck.err(locs(k), f"{kp}.{a}", "must be an expression over the arguments, e.g. \"!amsgrad\"")
                else:
                    may_be_empty[a] = cond
        elif k == "require":
            lst = v if isinstance(v, list) else [v]
            if not all(isinstance(x, str) and x.strip() for x in lst):
                ck.err(locs(k), kp, "must be an expression over the arguments (or a list of them), "
                                    "e.g. \"from < to\"")
                continue
            require = tuple(lst)
        elif k in ("multiple_of", "max"):
            if not isinstance(v, dict) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                  for n in v.values()):
                ck.err(locs(k), kp, "must map dim names to positive integers")
                continue
            (mult if k == "multiple_of" else mx).update(v)
        else:
            if k not in opi.by_name:
                ck.err(locs(k), kp, _no_arg(opi, k))
                continue
            v = v if isinstance(v, list) else [v]
            values[k] = tuple(tuple(x) if isinstance(x, list) else x for x in v)
    named = {n for dims in sizes.values() for n in dims}
    for n in list(mult) + [m for m in mx if m != "numel"]:
        if n not in named:
            ck.err(locs("multiple_of" if n in mult else "max"), f"{path}.{n}",
                   f"dim '{n}' is not named under constraints.sizes")
    for n in pad:
        if n not in mult:
            ck.err(locs("pad"), f"{path}.pad", f"dim '{n}' has no multiple_of to pad to")
    if pad and "out" not in sizes:
        ck.err(locs("pad"), f"{path}.pad", "padding needs the result's dims: name them under "
                                           "constraints.sizes.out, e.g. out: [M, N]")
    return Constraints(values, ndim, sizes, mult, mx, rng, present, length, pad, numel, may_be_empty, require)


def _no_arg(opi, name) -> str:
    names = [a.name for a in opi.args]
    near = closest(name, names)
    msg = f"{opi.qualname} has no argument '{name}'"
    return msg + (f"; did you mean '{near}'?" if near else f" (it has: {', '.join(names)})")


def check_op(ck: Checker, e, where, path, caps: Capabilities, codes: dict,
              impl_required=True, names=None) -> list[OpEntry]:
    if not isinstance(e, LocDict):
        ck.err(where, path, "must be a mapping with name, impl, dtype_support, ...")
        return []
    keys = OP_KEYS if names is None else tuple(k for k in OP_KEYS if k != "name")
    ck.keys(e, keys, path, required=(("name",) if names is None else ()) + (("impl",) if impl_required else ()))
    if names is None:
        raw = e.get("name")
        names = raw if isinstance(raw, list) else [raw]
    impl = ck.typed(e, "impl", str, path, "a C function name")
    dtypes = ck.dtype_list(e["dtype_support"], e.loc("dtype_support"), f"{path}.dtype_support") \
        if "dtype_support" in e else tuple(caps.dtypes)
    for dt in dtypes:
        if codes and dt not in codes:
            ck.err(e.loc("dtype_support"), f"{path}.dtype_support",
                   f"dtype {dtype_name(dt)} has no code under runtime.dtypes")
    entries = []
    for n in names:
        if not isinstance(n, str):
            ck.err(e.loc("name"), f"{path}.name", f"must be an op name like 'aten::add.Tensor', got {n!r}")
            continue
        try:
            res = resolve_name(n)
        except OpNameError as err:
            ck.err(e.loc("name"), f"{path}.name", str(err))
            continue
        opi = info(res.op)
        arg_dtypes = {}
        ad = e.get("arg_dtypes")
        if ad is not None:
            if not isinstance(ad, LocDict):
                ck.err(e.loc("arg_dtypes"), f"{path}.arg_dtypes", "must map tensor arguments to dtype lists")
            else:
                for a, lst in ad.items():
                    if a not in opi.by_name:
                        ck.err(ad.loc(a), f"{path}.arg_dtypes.{a}", _no_arg(opi, a))
                    arg_dtypes[a] = ck.dtype_list(lst, ad.loc(a), f"{path}.arg_dtypes.{a}")
        args = {}
        if "args" in e:
            if not isinstance(e["args"], LocDict):
                ck.err(e.loc("args"), f"{path}.args", "must map C parameter names to aten arguments")
            else:
                args = dict(e["args"])
        bind = {}
        if "bind" in e:
            if not isinstance(e["bind"], LocDict):
                ck.err(e.loc("bind"), f"{path}.bind", "must map C parameter names to constants")
            else:
                bind = dict(e["bind"])
        outputs = None
        if "outputs" in e:
            o = e["outputs"]
            if not isinstance(o, list) or len(o) != len(opi.rets) or \
                    not all(x is None or isinstance(x, str) for x in o):
                ck.err(e.loc("outputs"), f"{path}.outputs",
                       f"must list one C parameter (or null) per return of {opi.qualname} "
                       f"({len(opi.rets)} returns)")
            else:
                outputs = list(o)
        elif len(opi.rets) > 1 and impl:
            ck.err(e.loc("name") if "name" in e else where, f"{path}.outputs",
                   f"{opi.qualname} returns {len(opi.rets)} tensors: list the C parameter receiving "
                   f"each (null for one the kernel does not produce)")
        layout = {}
        if "layout" in e:
            lay = e["layout"]
            if not isinstance(lay, LocDict):
                ck.err(e.loc("layout"), f"{path}.layout", "must map tensor arguments (or out) to layouts")
            else:
                for a, lname in lay.items():
                    if a != "out" and a not in opi.by_name and a not in (outputs or ()):
                        ck.err(lay.loc(a), f"{path}.layout.{a}", _no_arg(opi, a))
                    if not _layout_ok(lname):
                        ck.err(lay.loc(a), f"{path}.layout.{a}",
                               f"unknown layout {lname!r}: use a permutation of one of "
                               f"{', '.join(LAYOUT_FAMILIES)} (e.g. NHWC, OHWI)")
                    else:
                        layout[a] = lname
        contiguous = _str_list(ck, e, "contiguous", path)
        broadcast = _str_list(ck, e, "broadcast", path)
        for key, lst in (("contiguous", contiguous), ("broadcast", broadcast)):
            for a in lst:
                if a not in opi.by_name:
                    ck.err(e.loc(key), f"{path}.{key}", _no_arg(opi, a))
        quirks = {}
        if "dtype_quirks" in e:
            dq = e["dtype_quirks"]
            if not isinstance(dq, LocDict):
                ck.err(e.loc("dtype_quirks"), f"{path}.dtype_quirks", "must map tensor arguments to quirks")
            else:
                for a, q in dq.items():
                    qp = f"{path}.dtype_quirks.{a}"
                    if a not in opi.by_name:
                        ck.err(dq.loc(a), qp, _no_arg(opi, a))
                    elif opi.by_name[a].kind not in ("tensor", "tensor?"):
                        ck.err(dq.loc(a), qp, f"{a} is a {opi.by_name[a].kind} argument of {opi.qualname}; a "
                               f"dtype quirk converts a tensor the kernel reads")
                    if not isinstance(q, LocDict) or set(q) != {"pass_as", "convert"}:
                        ck.err(dq.loc(a), qp, "must be {pass_as: <dtype>, convert: <vendor function>}")
                        continue
                    dt = ck.dtype(q["pass_as"], q.loc("pass_as"), f"{qp}.pass_as")
                    if dt is not None and isinstance(q["convert"], str):
                        quirks[a] = Quirk(dt, q["convert"])
        ignore = _str_list(ck, e, "ignore_args", path) + res.implied_ignore
        for a in ignore:
            if a not in opi.by_name:
                ck.err(e.loc("ignore_args"), f"{path}.ignore_args", _no_arg(opi, a))
        cons = _check_constraints(ck, e.get("constraints"), opi, e.loc("constraints"),
                                  f"{path}.constraints", res.implied_constraints)
        rng = _check_rng(ck, e, opi, path) if "rng" in e else None
        if rng is None and "rng" not in e and impl and _draws_random(res.op):
            ck.err(e.loc("name") if "name" in e else where, f"{path}.rng",
                   f"{opi.qualname} draws random numbers: name the C parameters that take the chip "
                   f"generator's seed and offset, e.g. rng: {{seed: seed, offset: offset}}")
        entries.append(OpEntry(res.op, res.qualname, impl or "", dtypes, arg_dtypes, args, bind, outputs,
                               cons, layout, contiguous, broadcast, quirks, ignore, where[0], where[1],
                               res.alias_of, path, rng))
    return entries


def _draws_random(op) -> bool:
    return torch.Tag.nondeterministic_seeded in op.tags


def _check_rng(ck: Checker, e: LocDict, opi, path: str) -> RngSpec | None:
    """rng: {seed: <C parameter>, offset: <C parameter>, words_per_element: <int or expression>}"""
    v = e["rng"]
    where, rp = e.loc("rng"), f"{path}.rng"
    if not isinstance(v, LocDict):
        ck.err(where, rp, "must be a mapping {seed: <C parameter>, offset: <C parameter>} "
                          "(optionally words_per_element)")
        return None
    n = len(ck.problems)
    ck.keys(v, ("seed", "offset", "words_per_element"), rp, required=("seed", "offset"))
    seed = ck.typed(v, "seed", str, rp, "the C parameter that takes the generator's seed")
    offset = ck.typed(v, "offset", str, rp, "the C parameter that takes the generator's offset")
    if seed is not None and seed == offset:
        ck.err(v.loc("offset"), f"{rp}.offset", "seed and offset must be two different C parameters")
    w = v.get("words_per_element", 1)
    if isinstance(w, bool) or not isinstance(w, (int, str)) or (isinstance(w, int) and w < 0):
        ck.err(v.loc("words_per_element") if "words_per_element" in v else where, f"{rp}.words_per_element",
               f"must be a number of words (0 or more) or an expression over the arguments, got {w!r}")
    if not _draws_random(opi.op):
        ck.err(where, rp, f"{opi.qualname} draws no random numbers (it is not tagged "
                          f"nondeterministic_seeded): remove rng")
    if len(ck.problems) != n:
        return None
    return RngSpec(seed, offset, w)


def _layout_ok(name) -> bool:
    return isinstance(name, str) and any(sorted(name) == sorted(f) for f in LAYOUT_FAMILIES)


def _check_fallback(ck: Checker, d, where, caps, codes, imports: bool, path="fallback_policy"):
    default, decompose, specific = "cpu", True, {}
    if d is None:
        return default, decompose, specific
    if not isinstance(d, LocDict):
        ck.err(where, path, "must be a mapping")
        return default, decompose, specific
    ck.keys(d, ("default", "decompose", "op_specific"), path)
    if "default" in d:
        if d["default"] not in ("cpu", "error"):
            ck.err(d.loc("default"), f"{path}.default", f"must be 'cpu' or 'error', got {d['default']!r}")
        else:
            default = d["default"]
    if "decompose" in d:
        if not isinstance(d["decompose"], bool):
            ck.err(d.loc("decompose"), f"{path}.decompose", "must be true or false")
        else:
            decompose = d["decompose"]
    os_ = d.get("op_specific")
    if os_ is not None:
        if not isinstance(os_, LocDict):
            ck.err(d.loc("op_specific"), f"{path}.op_specific", "must map op names to fallbacks")
            return default, decompose, specific
        for name, v in os_.items():
            where = os_.loc(name)
            p = f"{path}.op_specific.{name}"
            try:
                res = resolve_name(name)
            except OpNameError as err:
                ck.err(where, p, str(err))
                continue
            if v in ("cpu", "error"):
                specific[res.op] = Fallback(v, file=where[0], line=where[1])
            elif isinstance(v, str) and v.startswith("python:"):
                target = v[len("python:"):]
                err = check_python_target(target, imports)
                if err:
                    ck.err(where, p, err)
                specific[res.op] = Fallback("python", target=target, file=where[0], line=where[1])
            elif isinstance(v, str):
                e = LocDict({"impl": v})
                e.file, e.line, e.key_locs = where[0], where[1], {"impl": where}
                entries = check_op(ck, e, where, p, caps, codes, names=[name])
                if entries:
                    specific[res.op] = Fallback("vendor", entries[0], file=where[0], line=where[1])
            elif isinstance(v, LocDict):
                entries = check_op(ck, v, where, p, caps, codes, names=[name])
                if entries:
                    specific[res.op] = Fallback("vendor", entries[0], file=where[0], line=where[1])
            else:
                ck.err(where, p, "must be a vendor function name, 'python:module:function', "
                                 "'cpu', 'error', or a mapping like a supported_ops entry")
    return default, decompose, specific


def check_python_target(target: str, imports: bool = True) -> str | None:
    """Why `target` is not a usable 'module:function', or None.  Without
    `imports` only its form is checked (importing runs the module's code)."""
    mod, sep, fn = target.partition(":")
    if not sep or not _DOTTED.match(mod) or not fn.isidentifier():
        return f"python fallback '{target}' must be 'module:function' (e.g. 'mypkg.fallbacks:gelu')"
    if not imports:
        return None
    try:
        m = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - report any import failure as a spec problem
        return f"python fallback module '{mod}' cannot be imported: {e}"
    if not callable(getattr(m, fn, None)):
        return f"python fallback '{target}': module '{mod}' has no function '{fn}'"
    return None




def check_spec(data: LocDict, path: Path, *, imports: bool = True) -> tuple[DeviceSpec | None, list[SpecProblem]]:
    """Checks every field.  `imports=False` leaves `python:` fallback modules
    unimported (their form is still checked)."""
    ck = Checker()
    ck.keys(data, TOP_KEYS, "", required=("device_type", "vendor", "chip_model", "runtime_so",
                                          "runtime_header", "capabilities", "runtime"))
    dt = ck.typed(data, "device_type", str, "", "a string like 'xpu:<name>'")
    if dt is not None and not DEVICE_TYPE.match(dt):
        ck.err(data.loc("device_type"), "device_type",
               f"{dt!r} must look like 'xpu:<name>' (lowercase letters, digits, '-', '_'; "
               f"the name starts with a letter)")
    strs = {k: ck.typed(data, k, str, "", "a string") for k in ("vendor", "chip_model", "description")}
    drv = data.get("driver_version")
    if drv is not None and not isinstance(drv, (str, int, float)):
        ck.err(data.loc("driver_version"), "driver_version", "must be a version string")
    paths = {}
    for k in ("runtime_so", "runtime_header"):
        v = ck.typed(data, k, str, "", "a path")
        if v is None:
            continue
        missing: list[str] = []
        where = data.loc(k)
        why = bad_path(v)
        if why:
            ck.err(where, k, f"the path {why}")
            continue
        p = expand_path(v, Path(where[0]).parent, missing)
        if missing:
            ck.err(where, k, f"environment variable {', '.join('$' + m for m in missing)} is not set "
                             f"(used in {v!r})")
        try:
            paths[k] = p.resolve()
        except (OSError, RuntimeError) as e:
            ck.err(where, k, f"cannot resolve {str(p)[:200]!r}: {e}")
    caps = _check_capabilities(ck, data.get("capabilities"), data.loc("capabilities"))
    rt = _check_runtime(ck, data.get("runtime"), data.loc("runtime"))
    codes = rt.dtype_codes if rt else {}
    for d_ in caps.dtypes:
        if codes and d_ not in codes:
            ck.err(data.loc("capabilities"), "capabilities.dtypes",
                   f"dtype {dtype_name(d_)} has no code under runtime.dtypes")
    ops: dict = {}
    so = data.get("supported_ops")
    if so is not None:
        if not isinstance(so, LocList):
            ck.err(data.loc("supported_ops"), "supported_ops", "must be a list of op entries")
        else:
            for i, e in enumerate(so):
                for entry in check_op(ck, e, so.loc(i), f"supported_ops[{i}]", caps, codes):
                    if entry.op in ops:
                        prev = ops[entry.op]
                        ck.err(so.loc(i), f"supported_ops[{i}].name",
                               f"{entry.qualname} is already listed at {prev.file}:{prev.line}")
                    ops[entry.op] = entry
    default, decompose, specific = _check_fallback(ck, data.get("fallback_policy"), data.loc("fallback_policy"),
                                                   caps, codes, imports)
    if rt is not None and "rng_words" not in rt.roles:
        for entry in list(ops.values()) + [f.entry for f in specific.values() if f.entry is not None]:
            if entry.rng is not None:
                ck.err((entry.file, entry.line), f"{entry.path}.rng",
                       f"{entry.qualname} takes the generator's state, so the runtime must say what a call "
                       f"consumes: add runtime.rng_words: {{fn: <function>, args: [numel, words_per_element, words]}}")
    coll = check_collectives(ck, data["collectives"], data.loc("collectives"), codes) \
        if "collectives" in data else None
    if ck.problems or rt is None or dt is None:
        return None, ck.problems or [SpecProblem(str(path), 1, "<top>", "incomplete spec")]
    spec = DeviceSpec(dt, strs["vendor"] or "", strs["chip_model"] or "", str(drv or ""),
                      paths["runtime_so"], paths["runtime_header"], caps, rt, ops, specific,
                      default, decompose, str(path), strs["description"] or "",
                      {k: data.loc(k) for k in data})
    spec.collectives = coll
    return spec, []
