"""What a vendor header says about its runtime, found by name and signature:
the vendor's prefix, the dtype and status enums, the tensor descriptor
struct and its fields' roles, and the functions playing flbridge's runtime
roles (init, malloc, the copies, ...).  Used by :mod:`flbridge.tools.scaffold`;
nothing here knows any particular chip.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..specs import ROLE_PARAMS
from ..binding import Function, Header, classify_param

# ------------------------------------------------------------------- names


def tokens(name: str) -> list[str]:
    """snake_case and camelCase split into lower-case words."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return [t for t in s.lower().split("_") if t]


def norm(name: str) -> str:
    return "".join(tokens(name))


def vendor_prefix(names) -> str:
    """The word most function names start with (the vendor's prefix)."""
    firsts: dict[str, int] = {}
    for n in names:
        t = tokens(n)
        if len(t) > 1:
            firsts[t[0]] = firsts.get(t[0], 0) + 1
    best = max(firsts.items(), key=lambda kv: kv[1], default=("", 0))
    return best[0] if best[1] >= max(2, len(list(names)) // 3) else ""


def stem(name: str, prefix: str) -> list[str]:
    """The function's words without the vendor's prefix (wherever it is)."""
    return [t for t in tokens(name) if t != prefix] or tokens(name)


# ------------------------------------------------------------------ dtypes

_DTYPE_PATTERNS = [  # (regex on the enum member's words after the common prefix, dtype)
    (r"^(b(float)?16|bf16)$", torch.bfloat16),
    (r"^(f(loat)?16|fp16|half)$", torch.float16),
    (r"^(f(loat)?32|fp32|float|single|real)$", torch.float32),
    (r"^(f(loat)?64|fp64|double)$", torch.float64),
    (r"^(u(int)?8|byte|uchar)$", torch.uint8),
    (r"^(s?i(nt)?8|s8|char)$", torch.int8),
    (r"^(i(nt)?16|short)$", torch.int16),
    (r"^(i(nt)?32|int)$", torch.int32),
    (r"^(i(nt)?64|long)$", torch.int64),
    (r"^(bool|boolean|b8|pred)$", torch.bool),
]


def _dtype_of(member: str, common: str) -> torch.dtype | None:
    rest = member[len(common):] if member.startswith(common) else member
    words = tokens(rest)
    for cand in ("".join(words), words[-1] if words else ""):
        for pat, dt in _DTYPE_PATTERNS:
            if re.match(pat, cand):
                return dt
    return None


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    p = names[0]
    for n in names[1:]:
        while not n.startswith(p):
            p = p[:-1]
    return p[:p.rfind("_") + 1] if "_" in p else ""


def find_dtype_enum(header: Header) -> tuple[str, dict] | None:
    """(enum type, {torch.dtype: member}) for the enum that names dtypes."""
    best = None
    for ename, members in header.enums.items():
        names = list(members)
        common = _common_prefix(names)
        codes = {}
        for m in names:
            dt = _dtype_of(m, common)
            if dt is not None and dt not in codes:
                codes[dt] = m
        if len(codes) >= 2 and (best is None or len(codes) > len(best[1])):
            best = (ename, codes)
    return best


def find_status_enum(header: Header) -> tuple[str, str | None, str | None] | None:
    """(enum type, success member, out-of-memory member) of the type most
    functions return."""
    counts: dict[str, int] = {}
    for f in header.functions.values():
        counts[f.returns] = counts.get(f.returns, 0) + 1
    for ret, _ in sorted(counts.items(), key=lambda kv: -kv[1]):
        members = header.enums.get(ret)
        if not members:
            continue
        ok = next((m for m in members if re.search(r"SUCCESS|_OK$|^OK$", m)), None) \
            or next((m for m, v in members.items() if v == 0), None)
        oom = next((m for m in members if re.search(r"OUT_OF_MEMORY|OOM|NOMEM|NO_MEMORY|MEMORY_ALLOCATION", m)),
                   None)
        return ret, ok, oom
    return None


# --------------------------------------------------------- tensor struct

_FIELD_ROLES = {
    "data": r"^(data|ptr|addr|address|base|dev_?ptr|device_?ptr|buf|buffer|mem)$",
    "ndim": r"^(ndim|ndims|nb_?dims|rank|num_?dims|n_?dims|dim_?count|dims_?count)$",
    "shape": r"^(shape|dims|sizes|size|extent|extents|lens|lengths)$",
    "strides": r"^(strides?|steps?|pitch|pitches)$",
    "dtype": r"^(dtype|data_?type|type|kind|elem_?type|scalar_?type|format)$",
    "offset": r"^(offset|elem_?offset|element_?offset|start)$",
}


@dataclass
class StructGuess:
    type: str
    fields: dict          # role -> C field
    notes: list = field(default_factory=list)


def find_tensor_struct(header: Header, ffi) -> StructGuess | None:
    """The struct most functions take by pointer, with its fields' roles."""
    counts: dict[str, int] = {}
    for f in header.functions.values():
        for p in f.params:
            if p.pointer_depth == 1 and p.base in header.typedefs:
                counts[p.base] = counts.get(p.base, 0) + 1
    for tname, _ in sorted(counts.items(), key=lambda kv: -kv[1]):
        try:
            t = ffi.typeof(tname)
        except Exception:  # noqa: BLE001 - not a type cffi knows
            continue
        if t.kind != "struct" or not t.fields:
            continue
        fields = dict(t.fields)
        roles, notes = {}, []
        for role, pat in _FIELD_ROLES.items():
            for fname, f in fields.items():
                if fname in roles.values():
                    continue
                is_array = f.type.kind == "array"
                if role in ("shape", "strides") and not is_array:
                    continue
                if role not in ("shape", "strides") and is_array:
                    continue
                if re.match(pat, "_".join(tokens(fname))) or re.match(pat, fname.lower()):
                    roles[role] = fname
                    break
        if {"data", "shape", "strides"} <= set(roles):
            if "offset" in roles and "byte" in roles["offset"].lower():
                notes.append(f"{roles['offset']} looks like a byte offset; flbridge's offset field counts "
                             f"elements: remove it if the kernels take bytes")
            return StructGuess(tname, roles, notes)
    return None


# -------------------------------------------------------------------- roles

@dataclass
class RoleGuess:
    fn: str
    args: tuple | None      # canonical names in C order, when the C names differ
    values: dict            # init only
    note: str = ""


def kinds_of(f: Function, struct_types: set, enum_types: set) -> list[str]:
    """binding's kind of each C parameter (desc, int, float, intptr, ...)."""
    return [classify_param(p, struct_types, enum_types) for p in f.params]


def _is_text(f: Function) -> bool:
    return re.sub(r"\s", "", f.returns) in ("constchar*", "char*", "charconst*")


def _role_order(f: Function, canon: tuple, hints: dict) -> tuple | None:
    """Canonical role names in C parameter order, from name hints; None when
    the C names are the canonical ones already."""
    names = [p.name or "" for p in f.params]
    if tuple(names) == canon:
        return None
    out: list = [None] * len(names)
    for i, n in enumerate(names):
        if n in canon and n not in out:
            out[i] = n
    for i, n in enumerate(names):
        if out[i] is None:
            w = "_".join(tokens(n))
            for role_name in canon:
                if role_name not in out and re.search(hints.get(role_name, "^$"), w):
                    out[i] = role_name
                    break
    rest = [c for c in canon if c not in out]
    for i in range(len(out)):   # what the names do not say, the order does
        if out[i] is None and rest:
            out[i] = rest.pop(0)
    return tuple(out)


_COPY_HINTS = {"dst": r"dst|dest|to|target|out", "src": r"src|source|from|in", "nbytes": r"byte|size|count|len|^n$",
               "count": r"count|num|^n$"}


def find_roles(header: Header, prefix: str, struct_types: set, enum_types: set) -> dict[str, RoleGuess]:
    roles: dict[str, RoleGuess] = {}
    fns = sorted(header.functions.values(), key=lambda f: (len(f.name), f.name))

    def words(f):
        return "_".join(stem(f.name, prefix))

    def pick(role, pred):
        """The shortest-named function, not yet given a role, that `pred` accepts."""
        taken = {r.fn for r in roles.values()}
        for f in fns:
            if f.name not in taken and pred(f, words(f), kinds_of(f, struct_types, enum_types)):
                return f
        return None

    def add(role, f, hints=None):
        if f is None:
            return
        canon = ROLE_PARAMS[role]
        roles[role] = RoleGuess(f.name, _role_order(f, canon, hints or {}) if canon else None, {})

    f = pick("init", lambda f, w, k: re.search(r"(^|_)init(ialize)?($|_)", w)
             and not re.search(r"shut|fini|de_?init", w))
    if f is not None:
        roles["init"] = RoleGuess(f.name, None, {p.name: 0 for p in f.params if p.name},
                                  "check: " + ", ".join(f"what {p.name} means (0 is passed)" for p in f.params)
                                  if f.params else "")
    add("shutdown", pick("shutdown", lambda f, w, k: re.search(r"shutdown|finali[sz]e|de_?init|terminate", w)
                         and not f.params))
    add("last_error", pick("last_error", lambda f, w, k: _is_text(f) and not f.params and "error" in w))
    add("malloc", pick("malloc", lambda f, w, k: re.search(r"(^|_)(malloc|alloc|mem_?alloc|allocate)($|_)", w)
                       and len(k) == 2 and f.params[0].pointer_depth + f.params[1].pointer_depth == 1),
        {"ptr": r"ptr|addr|out|mem|buf|dev", "nbytes": r"byte|size|count|len|^n$"})
    add("free", pick("free", lambda f, w, k: re.search(r"(^|_)(free|dealloc|mem_?free|release)($|_)", w)
                     and len(k) == 1))
    copy_dirs = {"memcpy_h2d": r"h_?2_?d|hto_?d|host_?to_?dev|upload",
                 "memcpy_d2h": r"d_?2_?h|dto_?h|dev\w*_?to_?host|download",
                 "memcpy_d2d": r"d_?2_?d|dto_?d|dev\w*_?to_?dev"}
    for role, pat in copy_dirs.items():
        add(role, pick(role, lambda f, w, k, pat=pat: re.search(pat, w) and len(k) == 3 and "batch" not in w),
            _COPY_HINTS)
    add("memcpy_h2d_batch", pick("memcpy_h2d_batch", lambda f, w, k: re.search(copy_dirs["memcpy_h2d"], w)
                                 and "batch" in w and len(k) == 4),
        {"dst": r"dst|dest|to", "src": r"src|source|from", "nbytes": r"byte|size", "count": r"count|num|^n$"})
    add("mem_map", pick("mem_map", lambda f, w, k: re.search(r"(^|_)map($|_)|register_?host", w)
                        and "unmap" not in w and len(k) == 3),
        {"host_ptr": r"host|src|ptr$", "nbytes": r"byte|size", "ptr": r"dev|out|ptr"})
    add("mem_unmap", pick("mem_unmap", lambda f, w, k: re.search(r"unmap|unregister", w) and len(k) == 1))
    add("mem_info", pick("mem_info", lambda f, w, k: re.search(r"mem\w*_?info|info\w*mem", w) and len(k) == 2),
        {"free_bytes": r"free|avail", "total_bytes": r"total|cap"})
    add("synchronize", pick("synchronize", lambda f, w, k: re.search(r"sync", w) and not f.params))
    add("counters", pick("counters", lambda f, w, k: re.search(r"counter|stat", w) and "reset" not in w
                         and "kernel" not in w and len(k) == 1 and f.params[0].pointer_depth == 1))
    add("reset_counters", pick("reset_counters", lambda f, w, k: re.search(r"reset", w)
                               and re.search(r"counter|stat", w) and not f.params))
    add("kernel_timer", pick("kernel_timer", lambda f, w, k: "kernel" in w and re.search(r"(^|_)last($|_)", w)
                             and re.search(r"(^|_)(ns|time|nanoseconds?|elapsed)($|_)", w) and len(k) == 1
                             and f.params[0].pointer_depth == 1))
    add("copy", pick("copy", lambda f, w, k: re.search(r"(^|_)copy($|_)", w) and "memcpy" not in w
                     and k == ["desc", "desc"]),
        {"src": r"src|source|in|^x$|self|from", "dst": r"dst|dest|out|^y$|to"})
    add("fill", pick("fill", lambda f, w, k: re.search(r"(^|_)(fill|memset|set_?value)($|_)", w)
                     and sorted(k) == ["desc", "float"]),
        {"dst": r".", "value": r"val|scalar|^v$"})
    add("rng_words", pick("rng_words", lambda f, w, k: re.search(r"(^|_)(rng|random|philox)(_|$)", w)
                          and re.search(r"(^|_)words?($|_)", w) and len(f.params) == 3
                          and f.params[2].pointer_depth == 1 and not any(p.pointer_depth for p in f.params[:2])),
        {"numel": r"numel|num_?el|elements?$|count|^n$", "words_per_element": r"per", "words": r"^words?$|out"})
    if "fill" in roles:   # by type: the descriptor is dst, the number is value
        f = header.functions[roles["fill"].fn]
        order = tuple("dst" if classify_param(p, struct_types, enum_types) == "desc" else "value" for p in f.params)
        roles["fill"].args = None if order == tuple(p.name for p in f.params) else order
    return roles
