"""`flbridge doctor`: one table answering "why does my chip not work?".

    flbridge doctor [--json]        (or python -m flbridge.tools.doctor)

Rows, in order: Python, torch (against the range flbridge supports),
flbridge; which spec folder is used and why; every FLBRIDGE_* variable set;
the fallback policy.  Then, for each spec file in discovery order (its
position is its fl index): parsed, header parsed, library found and loadable
(with the loader's message), symbols the spec names, op bindings, python
fallback modules, the vendor's init, device memory, and a smoke test (a
native add and mm and a host<->device round trip, compared with the CPU).
Every problem comes with its fix.  The exit status is 1 when something is
broken (a FAIL row), 0 otherwise (warnings included).

The checks that load nothing run first for every spec, so a library that
crashes on load still leaves the rows above it printed.
"""
from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import platform
import re
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"


@dataclass
class Check:
    where: str         # "setup" or "fl:<i> <device_type>"
    check: str
    status: str        # ok | warn | FAIL | skip
    detail: str
    fix: str = ""


# ------------------------------------------------------------------ setup

def _version_tuple(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def _torch_range() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, requires
        reqs = requires("flbridge") or []
    except (ImportError, PackageNotFoundError):
        return None
    for r in reqs:
        m = re.match(r"torch\s*([<>=!~].*?)\s*(;|$)", r)
        if m:
            return m.group(1).replace(" ", "")
    return None


def _in_range(version: str, spec: str) -> bool:
    v = _version_tuple(version)
    for clause in spec.split(","):
        m = re.match(r"(>=|<=|==|!=|<|>|~=)(.*)", clause.strip())
        if not m:
            continue
        op, w = m.group(1), _version_tuple(m.group(2))
        n = max(len(v), len(w))
        a, b = v + (0,) * (n - len(v)), w + (0,) * (n - len(w))
        if not {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b,
                "~=": a >= b}[op]:
            return False
    return True


def setup_checks() -> list[Check]:
    import torch

    import flbridge

    from .. import config
    from ..specs import not_a_folder
    from ..specs import spec_dirs

    out = [Check("setup", "python", OK, f"{platform.python_version()} ({sys.executable})")]
    rng = _torch_range()
    if rng is None:
        out.append(Check("setup", "torch", WARN, f"{torch.__version__} (flbridge's supported range is unknown: "
                                                 f"flbridge is not installed as a package)",
                         "install it with `pip install -e .` so its requirements are known"))
    elif _in_range(torch.__version__, rng):
        out.append(Check("setup", "torch", OK, f"{torch.__version__} (flbridge supports torch{rng})"))
    else:
        out.append(Check("setup", "torch", FAIL, f"{torch.__version__}, but flbridge supports torch{rng}",
                         f"pip install 'torch{rng}'"))
    out.append(Check("setup", "flbridge", OK, f"{flbridge.__version__} ({Path(flbridge.__file__).parent})"))

    dirs, origin = spec_dirs()
    why = "FLBRIDGE_DEVICE_DIR is set" if origin == "FLBRIDGE_DEVICE_DIR" else "FLBRIDGE_DEVICE_DIR is not set"
    for d in dirs:
        problem = not_a_folder(d)
        if problem:
            fix = (f"set FLBRIDGE_DEVICE_DIR={d.parent} (the folder holding it)" if "is a file" in problem
                   else "set FLBRIDGE_DEVICE_DIR to the folder holding your spec files")
            out.append(Check("setup", "spec folder", FAIL, f"{d} {problem} ({why})", fix))
        else:
            n = sum(1 for p in d.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            out.append(Check("setup", "spec folder", OK if n else WARN, f"{d}: {n} spec files ({why})",
                             "" if n else "put the device spec (.yaml) files in it"))
    if not dirs:
        out.append(Check("setup", "spec folder", FAIL, "FLBRIDGE_DEVICE_DIR is set but names no folder",
                         "set it to the folder holding your spec files, or unset it"))

    seen = sorted(k for k in os.environ if k.startswith("FLBRIDGE_"))
    if not seen:
        out.append(Check("setup", "FLBRIDGE_* variables", OK, "none set (defaults)"))
    for k in seen:
        if k in config.KNOWN:
            out.append(Check("setup", "FLBRIDGE_* variables", OK, f"{k}={os.environ[k]} ({config.KNOWN[k]})"))
        else:
            from ..suggest import closest
            near = closest(k, config.KNOWN)
            out.append(Check("setup", "FLBRIDGE_* variables", WARN, f"{k}={os.environ[k]} is not a flbridge "
                                                                   f"setting and is ignored",
                             f"did you mean {near}?" if near else f"known: {', '.join(config.KNOWN)}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = config.load()
    policy = ("ops without a native kernel fall back (vendor, decomposition, CPU), each warned about "
              f"{cfg.warn}" if cfg.fallback else
              "FLBRIDGE_FALLBACK=0: an op without a native kernel raises UnsupportedOpError")
    if cfg.force_fallback:
        policy += f"; forced to the CPU: {', '.join(r.pattern for r in cfg.force_fallback)}"
    policy += "; a bad spec " + ("stops init() (FLBRIDGE_STRICT_SPECS=1)" if cfg.strict_specs
                                 else "makes only its chip unavailable")
    out.append(Check("setup", "fallback policy", OK, policy))
    return out


# ---------------------------------------------------------------- per spec

_DLOPEN_FIXES = (
    ("cannot open shared object file", "a library it depends on is missing: install it, or add its folder "
                                       "to LD_LIBRARY_PATH (`ldd {lib}` lists them)"),
    ("wrong ELF class", "the library is built for another architecture (32/64-bit): use the vendor's build "
                        "for this machine"),
    ("invalid ELF header", "runtime_so is not a shared library: point it at the vendor's .so"),
    ("file too short", "runtime_so is not a shared library (empty or truncated): reinstall the runtime"),
    ("undefined symbol", "the library needs a symbol from another library: load order or a version mismatch "
                         "of the vendor SDK (`ldd -r {lib}` shows it)"),
)


def _dlopen(path: Path) -> str | None:
    """The loader's message, or None if the library loads."""
    try:
        ctypes.CDLL(str(path), mode=getattr(ctypes, "RTLD_LOCAL", 0))
    except OSError as e:
        return str(e)
    return None


def _where(slot) -> str:
    return f"fl:{slot.index} {slot.device_type or '<' + slot.path.name + '>'}"


def static_checks(slot) -> list[Check]:
    """Rows for one discovered spec (a registry.SpecSlot) that load nothing:
    the spec parsed, its header parsed, its op bindings, its fallbacks' form."""
    from ..binding import check_static

    spec, where = slot.spec, _where(slot)
    rows: list[Check] = []

    def add(check, status, detail, fix=""):
        rows.append(Check(where, check, status, detail, fix))

    if slot.error is not None:
        dup = spec is not None and any("also claimed by" in p for p in slot.problems)
        add("spec", FAIL, "; ".join(slot.problems),
            "give each spec its own device_type" if dup else
            f"fix the spec at the lines shown (`flbridge validate --static {slot.path}` rechecks it)")
        return rows
    add("spec", OK, f"{slot.path}: {len(spec.ops)} op entries, {len(spec.op_specific)} op-specific fallbacks")
    static, sproblems = check_static(spec)
    hdr_problems = [p for p in sproblems if p.field == "runtime_header"]
    if hdr_problems:
        add("header", FAIL, "; ".join(str(p) for p in hdr_problems),
            f"fix the header at the line shown, or point runtime_header "
            f"({spec.file}:{spec.locations.get('runtime_header', ('', 0))[1]}) at the vendor's header")
        add("bindings", SKIP, "needs the header")
    else:
        from ..binding import load_header
        h = load_header(spec.runtime_header)
        add("header", OK, f"{spec.runtime_header}: {len(h.functions)} functions, "
                          f"{sum(len(m) for m in h.enums.values())} enum constants")
        if sproblems:
            add("bindings", FAIL, "; ".join(str(p) for p in sproblems),
                f"fix the spec at the lines shown (`flbridge validate --static {slot.path}` rechecks it)")
        else:
            add("bindings", OK, f"{len(static.ops)} native ops and {len(static.vendor_fallbacks)} vendor "
                                f"fallbacks bound to their C parameters")
    return rows


def loading_checks(slot, chip, smoke: bool = True, static_ok: bool = True, header_ok: bool = True) -> list[Check]:
    """Rows that load the library (its start-up code runs), import python:
    fallback modules and use the chip flbridge.init() made from the spec."""
    from ..specs import check_python_target
    from ..specs import is_file
    from ..binding import bind_runtime

    spec, where = slot.spec, _where(slot)
    rows: list[Check] = []

    def add(check, status, detail, fix=""):
        rows.append(Check(where, check, status, detail, fix))

    if spec is None or slot.error is not None:
        return rows
    so_line = spec.locations.get("runtime_so", ("", 0))[1]
    lib_ok = False
    if not is_file(spec.runtime_so):
        add("library", FAIL, f"{spec.runtime_so} does not exist",
            f"install or build the vendor runtime, or fix runtime_so ({spec.file}:{so_line})")
    else:
        msg = _dlopen(spec.runtime_so)
        if msg:
            fix = next((f.format(lib=spec.runtime_so) for k, f in _DLOPEN_FIXES if k in msg),
                       f"check runtime_so ({spec.file}:{so_line})")
            add("library", FAIL, f"dlopen failed: {msg}", fix)
        else:
            lib_ok = True
            add("library", OK, f"{spec.runtime_so} loads")
    if not lib_ok or not header_ok:
        add("symbols", SKIP, "needs the library and the header")
    else:
        rt, problems, load_errors = bind_runtime(spec)
        missing = [e for e in load_errors if e.reason == "undefined symbol"]
        if missing:
            add("symbols", FAIL, "; ".join(f"{e.symbol} (named at {e.file}:{e.line} by {e.field})" for e in missing)
                + f" not exported by {spec.runtime_so.name}",
                f"compare with `nm -D {spec.runtime_so}`: fix each name in the spec, or remove the entry")
        else:
            add("symbols", OK, f"every function the spec names is exported by {spec.runtime_so.name}")
    pys = [fb for fb in spec.op_specific.values() if fb.kind == "python"]
    bad_py = [(fb, why) for fb in pys for why in [check_python_target(fb.target)] if why]
    fb_detail = (f"default {spec.fallback_default}, decompositions {'on' if spec.decompose else 'off'}, "
                 f"{len(spec.op_specific)} op-specific")
    if bad_py:
        add("fallbacks", FAIL, fb_detail + "; " + "; ".join(f"{fb.file}:{fb.line}: {why}" for fb, why in bad_py),
            "install the module, or fix or remove the op_specific entry")
    else:
        add("fallbacks", OK, fb_detail + (f", {len(pys)} python fallback modules import" if pys else ""))
    broken = not static_ok or any(r.status == FAIL for r in rows)
    rows.extend(_live_checks(where, chip, smoke, broken))
    return rows


def _live_checks(where, chip, smoke: bool, broken: bool) -> list[Check]:
    rows: list[Check] = []

    def add(check, status, detail, fix=""):
        rows.append(Check(where, check, status, detail, fix))

    if chip is None:
        add("init", SKIP, "flbridge.init() did not load this spec in this process (it ran earlier with "
                          "other specs)")
        return rows
    if not chip.available:
        if broken:
            add("init", SKIP, "not initialised because of the problems above")
        else:
            add("init", FAIL, "; ".join(chip.problems),
                "the vendor's init failed: check runtime.init values and that the device is present")
        return rows
    add("init", OK, f"{chip.spec.runtime.roles['init'].fn} succeeded: the chip is {chip.device}")
    try:
        info = chip.runtime.mem_info()
        if info:
            add("memory", OK, f"{_gib(info[1])} total, {_gib(info[0])} free")
        else:
            total = chip.spec.capabilities.memory_total_bytes
            add("memory", OK, f"the runtime has no mem_info; the spec says {_gib(total) if total else 'nothing'}")
    except Exception as e:  # noqa: BLE001 - any vendor failure is this row's finding
        add("memory", FAIL, f"mem_info failed: {_one_line(e)}", "check the mem_info role in the spec")
    if smoke:
        rows.extend(Check(where, "smoke", s, d, f) for s, d, f in smoke_test(chip))
    return rows


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def smoke_test(chip) -> list[tuple[str, str, str]]:
    """A native add and mm and a host<->device round trip on `chip`, compared
    with the CPU, through public APIs only.  Returns (status, detail, fix)."""
    import torch

    import flbridge
    dev = chip.device
    floats = [d for d in (torch.float32, torch.float16, torch.bfloat16) if d in chip.spec.capabilities.dtypes]
    dtype = floats[0] if floats else torch.float32
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}[dtype]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=g).to(dtype)
    b = torch.randn(16, 16, generator=g).to(dtype)
    results = []
    layout_fix = ("wrong results usually mean a layout mistake in runtime.tensor (field names, strides in "
                  "elements, the data/offset fields) or in runtime.dtypes codes; compare with the header")
    try:
        back = a.to(dev).cpu()
        if torch.equal(back, a):
            results.append((OK, f"host -> device -> host round trip of {str(dtype)[6:]} is exact", ""))
        else:
            results.append((FAIL, "host -> device -> host changed the values", "check memcpy_h2d / memcpy_d2h "
                                  "argument order (dst, src, nbytes) and the mem_map role"))
    except Exception as e:  # noqa: BLE001 - a failure here is the finding
        results.append((FAIL, f"round trip failed: {_one_line(e)}", "check the memory roles in the spec"))
        return results
    for name, op, qual, fn in (("add", "aten::add.Tensor", "aten::add.Tensor", lambda x, y: x + y),
                               ("mm", "aten::mm", "aten::mm.default", lambda x, y: x @ y)):
        before = _native_calls(flbridge.stats(dev), qual)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = fn(a.to(dev), b.to(dev)).cpu()
        except Exception as e:  # noqa: BLE001 - UnsupportedOpError (FLBRIDGE_FALLBACK=0), DeviceError, ...
            results.append((WARN if isinstance(e, flbridge.UnsupportedOpError) else FAIL,
                            f"{name}: {_one_line(e)}", f"list {op} in supported_ops" if
                            isinstance(e, flbridge.UnsupportedOpError) else "see the vendor's message"))
            continue
        want = fn(a.float(), b.float())
        err = (got.float() - want).abs().max().item()
        native = _native_calls(flbridge.stats(dev), qual) > before
        scale = want.abs().max().item() or 1.0
        if err > tol * scale * (16 if name == "mm" else 1):
            results.append((FAIL, f"{name} differs from the CPU (max |diff| {err:.3g})", layout_fix))
        elif native:
            results.append((OK, f"{name} ran natively and matches the CPU (max |diff| {err:.2g})", ""))
        else:
            why = "; ".join(str(w.message) for w in caught)[:200] or "no native kernel"
            results.append((WARN, f"{name} matches the CPU but did not run natively: {why}",
                            f"list {op} for {dtype} in supported_ops to run it on the chip"))
    return results


def _native_calls(stats: dict, qualname: str) -> int:
    return sum(r["calls"] for r in stats.get("routes", []) if r["op"] == qualname and r["route"] == "native")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


# ----------------------------------------------------------------- driver

def collect(smoke: bool = True):
    """Every check, in table order (a generator: rows that load nothing come
    first).  Calls flbridge.init() (partial: a bad spec does not stop the
    others) for the rows that use the chips."""
    import flbridge

    from ..specs import discover, load_specs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the table reports what the warnings would say
        yield from setup_checks()
        slots = load_specs(discover(), static=True)
        if not slots:
            yield Check("setup", "specs", FAIL, "no spec files found",
                        "put spec files in the spec folder above, or set FLBRIDGE_DEVICE_DIR")
        static_ok, header_ok = {}, {}
        for slot in slots:
            rows = static_checks(slot)
            static_ok[slot.index] = not any(r.status == FAIL for r in rows)
            header_ok[slot.index] = any(r.check == "header" and r.status == OK for r in rows)
            yield from rows
        if not slots:
            return
        live = {}
        try:
            flbridge.init()
            live = {Path(c.spec.file if c.available else c.file).resolve(): c for c in flbridge.chips()}
        except flbridge.FlbridgeError as e:
            yield Check("setup", "init", FAIL, f"flbridge.init() raised: {_one_line(e)}",
                        "fix the spec it names, or unset FLBRIDGE_STRICT_SPECS to load the other chips")
        for slot in slots:
            yield from loading_checks(slot, live.get(slot.path.resolve()), smoke, static_ok[slot.index],
                                      header_ok[slot.index])


W_WHERE, W_CHECK, W_STATUS = 20, 20, 6


def render_row(r: Check) -> str:
    line = f"{r.where:{W_WHERE}}  {r.check:{W_CHECK}}  {r.status:{W_STATUS}}  {r.detail}"
    if r.fix and r.status in (FAIL, WARN):
        line += "\n" + " " * (W_WHERE + W_CHECK + W_STATUS + 6) + f"-> fix: {r.fix}"
    return line


def render(rows: list[Check]) -> str:
    broken = sum(r.status == FAIL for r in rows)
    return "\n".join([f"{'WHERE':{W_WHERE}}  {'CHECK':{W_CHECK}}  {'STATUS':{W_STATUS}}  DETAIL",
                      *map(render_row, rows), "", _summary(broken)])


def _summary(broken: int) -> str:
    return f"{broken} problem{'s' if broken != 1 else ''} found" if broken else "everything works"


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="flbridge doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the checks as JSON")
    a = ap.parse_args(argv)
    if not faulthandler.is_enabled():   # a vendor library that crashes still leaves a trace
        try:
            faulthandler.enable()
        except (ValueError, OSError):    # stderr is not a real file (captured)
            pass
    rows = []
    if not a.json:   # row by row: a crash while loading a library leaves the rows before it
        print(f"{'WHERE':{W_WHERE}}  {'CHECK':{W_CHECK}}  {'STATUS':{W_STATUS}}  DETAIL", flush=True)
    for r in collect():
        rows.append(r)
        if not a.json:
            print(render_row(r), flush=True)
    broken = sum(r.status == FAIL for r in rows)
    if a.json:
        print(json.dumps({"ok": not broken, "problems": broken, "checks": [asdict(r) for r in rows]}, indent=1))
    else:
        print("\n" + _summary(broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
