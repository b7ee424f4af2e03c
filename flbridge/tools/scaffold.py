"""`flbridge scaffold`: a starter spec from a vendor's header.

    flbridge scaffold --header acme.h --so libacme.so --name xpu:acme > acme.yaml

Reads the header (nothing is loaded) and writes a spec with:

* the runtime roles, found by name and signature (init, last error,
  malloc/free, the copies, host mapping, memory info, synchronize, counters,
  the device-side copy and fill);
* the tensor descriptor struct's fields and the dtype enum's codes;
* candidate supported_ops: each C function that takes descriptors is matched
  to aten overloads by its name (``acme_add`` -> ``aten::add``,
  ``acmeReduceSum`` -> ``aten::sum``) and its parameters to the schema's
  arguments by name (``self``, ``other``; vendor spellings such as ``x``,
  ``dy``, ``gamma``, ``numAxes``), then by order.  A candidate is kept only
  if flbridge's own binder accepts it, so every entry written binds.

Each entry carries a comment saying how sure the match is and what to check
(dtypes, constraints, layouts, guessed parameters).  The output is checked
with the static validator before it is written; what could not be filled is
listed at the end.  Nothing here knows any particular chip.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import FlbridgeError, SpecError
from ..specs import ROLE_PARAMS, dtype_name
from ..binding import Function, load_header, type_aliases
from .scaffold_header import find_dtype_enum, find_roles, find_status_enum, find_tensor_struct, vendor_prefix
from .scaffold_ops import find_ops, yaml_value

# ------------------------------------------------------------------- output

@dataclass
class Scaffold:
    text: str
    roles: dict
    ops: list
    left: list                  # what the vendor still has to fill in (messages)
    unplaced: dict = field(default_factory=dict)   # C function matched to no op -> why


def _confidence(score: float) -> str:
    return "high" if score >= 0.85 else "medium" if score >= 0.6 else "low"


def _comment_above(lines: list[str], line: int) -> str:
    """The header's comment just above (or beside) a declaration, on one line."""
    text = []
    i = line - 2
    same = lines[line - 1] if 0 < line <= len(lines) else ""
    m = re.search(r"/\*(.*?)\*/|//(.*)$", same)
    if m:
        text.append((m.group(1) or m.group(2) or "").strip())
    while i >= 0 and (lines[i].strip().startswith(("/*", "*", "//")) or lines[i].strip().endswith("*/")):
        text.insert(0, lines[i].strip().lstrip("/*").rstrip("*/").strip(" */"))
        if lines[i].strip().startswith(("/*", "//")) and not lines[i].strip().startswith("* "):
            break
        i -= 1
    s = " ".join(t for t in text if t and not set(t) <= set("-=*/ "))
    return re.sub(r"\s+", " ", s)[:160]


def scaffold(header_path: str | Path, so_path: str | Path, name: str, *, vendor: str | None = None,
             model: str | None = None, out_dir: Path | None = None) -> Scaffold:
    """A starter spec for the runtime `so_path` described by `header_path`.
    Paths in the spec are relative to `out_dir` when given, else absolute."""
    import cffi

    from ..specs import DEVICE_TYPE
    if not DEVICE_TYPE.match(name):
        raise FlbridgeError(f"--name {name!r} must look like 'xpu:<name>' (lowercase letters, digits, '-', '_')")
    header_path, so_path = Path(header_path).resolve(), Path(so_path).resolve()
    header = load_header(header_path)       # HeaderError with file:line when it cannot be read
    ffi = cffi.FFI()
    try:
        ffi.cdef(header.cdef)
    except Exception as e:  # noqa: BLE001 - cffi's parser errors
        raise FlbridgeError(f"{header_path}: cffi cannot use the header: {str(e).splitlines()[-1]}") from None
    lines = header_path.read_text(encoding="utf-8", errors="replace").split("\n")
    prefix = vendor_prefix(header.functions)
    left: list[str] = []

    struct = find_tensor_struct(header, ffi)
    denum = find_dtype_enum(header)
    status = find_status_enum(header)
    struct_types = {struct.type} if struct else set()
    if struct:
        struct_types |= type_aliases(ffi, header, struct.type)
    enum_types = {t for t in header.typedefs if t in header.enums}
    codes = {dt: m for dt, m in (denum[1].items() if denum else ())}
    floats = tuple(d for d in (torch.float32, torch.float16, torch.bfloat16) if d in codes) or \
        tuple(list(codes)[:1])
    roles = find_roles(header, prefix, struct_types, enum_types)
    ops, unmatched = find_ops(header, prefix, roles, floats, codes, struct_types, enum_types, lines) \
        if struct and codes else ([], [])

    def rel(p: Path) -> str:
        if out_dir is None:
            return str(p)
        try:
            return os.path.relpath(p, out_dir.resolve())
        except ValueError:
            return str(p)

    chip = name.split(":", 1)[1]
    out = [f"# Starter spec for {name}, written by `flbridge scaffold` from {header_path.name}.",
           "# Every guess says how sure it is and what to check.  Next steps:",
           "#   flbridge validate --static <this file>   (header only; nothing is loaded)",
           "#   flbridge validate <this file>            (loads the library: symbols, constants)",
           "#   FLBRIDGE_DEVICE_DIR=<its folder> flbridge doctor",
           f"device_type: {yaml_value(name)}",
           f"vendor: {yaml_value(vendor or chip.upper())}" + ("" if vendor else "          # check: the vendor's name"),
           f"chip_model: {yaml_value(model or chip.upper())}" + ("" if model else "      # check: the model's name"),
           'driver_version: "0"                # check: the runtime version',
           f"runtime_so: {yaml_value(rel(so_path))}",
           f"runtime_header: {yaml_value(rel(header_path))}",
           "",
           "capabilities:",
           f"  dtypes: {yaml_value([dtype_name(d) for d in floats])}   # check: the dtypes the chip computes in",
           "  # memory: {total_gb: ..., bandwidth_gbps: ...}   (optional; shown by get_device_properties)",
           "",
           "runtime:"]
    for role in ROLE_PARAMS:
        r = roles.get(role)
        if r is None:
            if role in ("init", "last_error", "malloc", "free", "memcpy_h2d", "memcpy_d2h"):
                left.append(f"runtime.{role}: no function found (required)")
                out.append(f"  # {role}: ???   # required: no function found; name the C function")
            continue
        if role == "init":
            v = f"{{fn: {r.fn}, values: {yaml_value(r.values)}}}" if r.values else r.fn
        elif r.args:
            v = f"{{fn: {r.fn}, args: {yaml_value(list(r.args))}}}"
        else:
            v = r.fn
        note = r.note or (f"high: named like {role}" if not r.args else
                          f"medium: parameters taken as {', '.join(r.args)} by name and order")
        out.append(f"  {role}: {v}   # {note}")
    if status:
        ok_line = f"success: {status[1]}" if status[1] else "success: 0"
        oom = f", out_of_memory: {status[2]}" if status[2] else ""
        out.append(f"  status: {{{ok_line}{oom}}}   # from {status[0]}" +
                   ("" if status[2] else "; check: which code means out of memory"))
    else:
        left.append("runtime.status: no status enum found (functions return it)")
        out.append("  status: {success: 0}   # check: no status enum found; 0 assumed to mean success")
    if struct:
        fields = ", ".join(f"{k}: {v}" for k, v in struct.fields.items())
        out.append(f"  tensor: {{type: {struct.type}, {fields}}}")
        for n in struct.notes:
            out.append(f"  # check: {n}")
        missing = [f for f in ("data", "ndim", "shape", "strides", "dtype") if f not in struct.fields]
        for f in missing:
            left.append(f"runtime.tensor.{f}: no field of {struct.type} found")
    else:
        left.append("runtime.tensor: no descriptor struct found (a struct the kernels take by pointer)")
        out.append("  # tensor: {type: ..., data: ..., ndim: ..., shape: ..., strides: ..., dtype: ...}")
    if codes:
        out.append(f"  dtypes: {{{', '.join(f'{dtype_name(d)}: {m}' for d, m in codes.items())}}}   "
                   f"# from {denum[0]}")
    else:
        left.append("runtime.dtypes: no dtype enum found")
        out.append("  # dtypes: {float32: ..., float16: ...}")
    out += ["", "# For every entry, check against the vendor's documentation: the dtypes the kernel takes",
            "# (dtype_support; default capabilities.dtypes), the shapes and values it refuses (constraints),",
            "# the memory layout it expects (layout, contiguous).  Then run `flbridge doctor` and the OpInfo",
            "# samples (docs/vendor-guide.md).",
            "supported_ops:"]
    if not ops:
        out.append("  []   # nothing matched: add entries (see docs/spec-format.md)")
    for g in ops:
        fn = header.functions[g.fn]
        conf = _confidence(g.score)
        hint = _comment_above(lines, fn.line)
        out.append(f"  # {conf}: {g.fn}{_sig(fn)}")
        if hint:
            out.append(f"  #   header: {hint}")
        checks = []
        if any(w in hint.lower() for w in ("nhwc", "nchw", "layout", "ohwi", "channels", "contiguous")):
            checks.append("the layout the header mentions (layout, contiguous)")
        if "broadcast" in g.mapping:
            checks.append("that the kernel reads stride-0 (broadcast) inputs")
        if checks:
            out.append(f"  #   check: {', '.join(checks)}")
        for n in g.notes:
            out.append(f"  #   {n}")
        nm = yaml_value(g.names[0]) if len(g.names) == 1 else yaml_value(g.names)
        out.append(f"  - name: {nm}")
        out.append(f"    impl: {g.fn}")
        for k, v in g.mapping.items():
            out.append(f"    {k}: {yaml_value(v)}")
    out += ["", "fallback_policy:", "  default: cpu      # ops the chip lacks run on the CPU (warned once each)"]
    if unmatched:
        out += ["", "# C functions taking descriptors that matched no aten op, each with why (map them by hand,",
                "# or use them under fallback_policy.op_specific):"]
        for f, why in unmatched:
            out += [f"#   {f}{_sig(header.functions[f])}", f"#     not placed: {why}"]
    text = "\n".join(out) + "\n"
    left += _self_check(text, out_dir)
    if left:
        text += "\n# Left to fill (the static validator says):\n" + "".join(f"#   {m}\n" for m in left)
    return Scaffold(text, roles, ops, left, dict(unmatched))


def _sig(fn: Function) -> str:
    return "(" + ", ".join(f"{p.ctype} {p.name}" if p.name else p.ctype for p in fn.params) + ")"


def _self_check(text: str, out_dir: Path | None) -> list[str]:
    """Problems the static validator finds in `text` (as it would be saved)."""
    import tempfile

    from ..specs import load_spec
    from ..binding import check_static
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(out_dir) if out_dir is not None else Path(tmp)
        path = Path(tempfile.mkstemp(suffix=".yaml", dir=where)[1]) if out_dir is not None else Path(tmp) / "s.yaml"
        try:
            path.write_text(text)
            try:
                _, problems = check_static(load_spec(path, static=True))
            except SpecError as e:
                problems = e.problems
            return [f"line {p.line}: {p.field}: {p.message}" for p in problems]
        finally:
            if out_dir is not None:
                path.unlink(missing_ok=True)


def scaffold_command(header: str, so: str, name: str, *, vendor=None, model=None, output=None) -> int:
    """`flbridge scaffold`: writes the spec to `output` or stdout; a summary
    goes to stderr.  Exit status 1 when something is left to fill."""
    import sys
    out_dir = Path(output).resolve().parent if output else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    s = scaffold(header, so, name, vendor=vendor, model=model, out_dir=out_dir)
    if output:
        Path(output).write_text(s.text)
    else:
        sys.stdout.write(s.text)
    nops = sum(len(g.qualnames) for g in s.ops)
    print(f"flbridge scaffold: {len(s.roles)} runtime roles, {nops} aten overloads in {len(s.ops)} entries"
          + (f"; {len(s.left)} things left to fill (listed at the end)" if s.left else
             "; passes `flbridge validate --static`"), file=sys.stderr)
    return 1 if s.left else 0
