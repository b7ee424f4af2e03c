"""The `collectives:` section of a device spec: the vendor's collective
communication library (NCCL-style: all_reduce, broadcast, all_gather between
the chips of several processes, on device memory).

    collectives:
      header: acme_ccl.h                 # beside runtime_header; the functions live in runtime_so
      status: {success: ACME_CCL_OK}
      last_error: acme_ccl_last_error
      init: {fn: acme_ccl_init, args: [comm, key, nranks, rank, timeout_ms]}
      destroy: acme_ccl_destroy
      all_reduce: {fn: acme_ccl_all_reduce, args: [comm, send, recv, count, dtype, op]}
      broadcast: {fn: acme_ccl_broadcast, args: [comm, root, send, recv, count, dtype]}
      all_gather: acme_ccl_all_gather     # C parameters named like the role: no args needed
      dtypes: [float32, float16]          # codes from runtime.dtypes (or a mapping of its own)
      ops: {sum: ACME_CCL_SUM, max: ACME_CCL_MAX}

Checked here (form); the functions, their parameters and the constants are
checked when the library is bound (:mod:`flbridge.binding.ccl`).  The registry calls
:func:`check_collectives` with its checker, so problems come out with the
spec's file and line like every other field.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .reader import LocDict, bad_path, expand_path

# role -> canonical parameter names (the spec's `args` lists them in C order
# when the C names differ)
CCL_ROLE_PARAMS = {
    "init": ("comm", "key", "nranks", "rank", "timeout_ms"),
    "destroy": ("comm",),
    "last_error": (),
    "all_reduce": ("comm", "send", "recv", "count", "dtype", "op"),
    "broadcast": ("comm", "send", "recv", "count", "dtype", "root"),
    "all_gather": ("comm", "send", "recv", "count", "dtype"),
}
REQUIRED_ROLES = ("init", "destroy", "last_error")
COLLECTIVES = ("all_reduce", "broadcast", "all_gather")
# torch.distributed.ReduceOp names a vendor may implement
REDUCE_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")
KEYS = ("header", "status", *CCL_ROLE_PARAMS, "dtypes", "ops")


@dataclass(frozen=True)
class CclRole:
    fn: str
    args: tuple | None            # canonical names in C order, when the C names differ
    file: str
    line: int


@dataclass
class CollectivesSpec:
    header: Path
    roles: dict                   # role -> CclRole
    success: object               # constant name or int
    dtype_codes: dict             # torch.dtype -> constant name or int
    ops: dict                     # reduce op name (sum, max, ...) -> constant name or int
    file: str
    line: int

    @property
    def collectives(self) -> tuple:
        return tuple(c for c in COLLECTIVES if c in self.roles)


def check_collectives(ck, d, where, runtime_codes: dict, path: str = "collectives") -> CollectivesSpec | None:
    """Checks the section with the registry's checker `ck` (err, keys,
    typed, dtype); returns the spec, or None after recording problems."""
    if not isinstance(d, LocDict):
        ck.err(where, path, "must be a mapping: header, status, init, destroy, last_error, "
                            "all_reduce/broadcast/all_gather, dtypes, ops")
        return None
    n_before = len(ck.problems)
    ck.keys(d, KEYS, path, required=("header", "status", *REQUIRED_ROLES, "dtypes"))
    header = None
    h = ck.typed(d, "header", str, path, "a path to the collectives header")
    if h is not None:
        why = bad_path(h)
        missing: list[str] = []
        p = None if why else expand_path(h, Path(d.loc("header")[0]).parent, missing)
        if why:
            ck.err(d.loc("header"), f"{path}.header", f"the path {why}")
        elif missing:
            ck.err(d.loc("header"), f"{path}.header",
                   f"environment variable {', '.join('$' + m for m in missing)} is not set (used in {h!r})")
        else:
            header = p.resolve()
    success = None
    st = d.get("status")
    if st is not None:
        if not isinstance(st, LocDict) or "success" not in st:
            ck.err(d.loc("status"), f"{path}.status", "must be {success: <constant or integer>}")
        else:
            ck.keys(st, ("success",), f"{path}.status")
            if isinstance(st["success"], bool) or not isinstance(st["success"], (str, int)):
                ck.err(st.loc("success"), f"{path}.status.success", "must be a constant name or an integer")
            else:
                success = st["success"]
    roles = {}
    for role in CCL_ROLE_PARAMS:
        if role in d:
            r = _role(ck, d, role, path)
            if r is not None:
                roles[role] = r
    if "init" in d and not any(c in d for c in COLLECTIVES):
        ck.err((d.file, d.line), path, f"names no collective: give at least one of {', '.join(COLLECTIVES)}")
    codes = _dtypes(ck, d, runtime_codes, path)
    ops = {}
    o = d.get("ops")
    if "all_reduce" in d and o is None:
        ck.err(d.loc("all_reduce"), f"{path}.ops", "all_reduce needs ops: map reductions (sum, max, ...) "
                                                   "to the library's constants")
    if o is not None:
        if not isinstance(o, LocDict) or not o:
            ck.err(d.loc("ops"), f"{path}.ops", f"must map reductions ({', '.join(REDUCE_OPS)}) to constants")
        else:
            ck.keys(o, REDUCE_OPS, f"{path}.ops")
            for k, v in o.items():
                if k in REDUCE_OPS:
                    if isinstance(v, bool) or not isinstance(v, (str, int)):
                        ck.err(o.loc(k), f"{path}.ops.{k}", "must be a constant name or an integer")
                    else:
                        ops[k] = v
    if len(ck.problems) > n_before or header is None or success is None:
        return None
    return CollectivesSpec(header, roles, success, codes, ops, d.file, d.line)


def _role(ck, d: LocDict, role: str, path: str) -> CclRole | None:
    v = d[role]
    where = d.loc(role)
    rp = f"{path}.{role}"
    if isinstance(v, str):
        return CclRole(v, None, *where)
    if not isinstance(v, LocDict):
        ck.err(where, rp, "must be a function name or {fn: name, args: [...]}")
        return None
    ck.keys(v, ("fn", "args"), rp, required=("fn",))
    fn = ck.typed(v, "fn", str, rp, "a C function name")
    args = None
    if "args" in v:
        a = v["args"]
        canon = CCL_ROLE_PARAMS[role]
        if not isinstance(a, list) or sorted(map(str, a)) != sorted(canon):
            ck.err(v.loc("args"), f"{rp}.args",
                   f"must list {', '.join(canon) or 'nothing'} in the order the C function takes them")
        else:
            args = tuple(a)
    return CclRole(fn, args, *where) if fn else None


def _dtypes(ck, d: LocDict, runtime_codes: dict, path: str) -> dict:
    v = d.get("dtypes")
    if v is None:
        return {}
    where = d.loc("dtypes")
    if isinstance(v, LocDict):
        out = {}
        for k, code in v.items():
            dt = ck.dtype(k, v.loc(k), f"{path}.dtypes.{k}")
            if dt is None:
                continue
            if isinstance(code, bool) or not isinstance(code, (str, int)):
                ck.err(v.loc(k), f"{path}.dtypes.{k}", "must be a constant name or an integer")
            else:
                out[dt] = code
        return out
    if not isinstance(v, list) or not v:
        ck.err(where, f"{path}.dtypes", "must list dtype names (codes from runtime.dtypes), or map "
                                        "dtype names to the library's own codes")
        return {}
    out = {}
    for i, name in enumerate(v):
        loc = v.loc(i) if hasattr(v, "loc") else where
        dt = ck.dtype(name, loc, f"{path}.dtypes[{i}]")
        if dt is None:
            continue
        if dt not in runtime_codes:
            ck.err(loc, f"{path}.dtypes[{i}]", f"{name} has no code under runtime.dtypes: add it there, or "
                                               f"write dtypes as a mapping to the library's own codes")
        else:
            out[dt] = runtime_codes[dt]
    return out
