"""Property-based fuzzing of spec and header input (run in a child process
by tests/test_spec_fuzz.py, so a hang or a memory blow-up fails the test
instead of taking the test run down).

Random byte flips, truncations, deletions, duplications and insertions of
tokens that break parsers (YAML anchors, aliases, tags, huge numbers, C
preprocessor lines, shifts, unbalanced braces) are applied to the shipped
specs (device_specs/*.yaml) and headers (native_sim/*/*_runtime.h).

* A mutated spec goes through both paths: static (load_spec without
  imports, then check_static: nothing loaded) and full (load_spec, then
  bind_runtime: the library is dlopen-ed and symbols resolved, but no vendor
  function is called, so a wrong declaration can never be executed).
* A mutated header is only ever checked statically.

The property: every input ends, within 2 s and 200 MB, in success or in
SpecError / HeaderError / RuntimeLoadError whose problems all name a file and
a line >= 1.  Memory: after warming up, the process's address space is
capped at its size plus 200 MB (an example needing more fails with
MemoryError), and the growth of its peak RSS is reported.

    python tests/spec_fuzz.py --examples 200 [--random]
prints a JSON summary on stdout; exits 1 with Hypothesis' falsifying example
on stderr when the property fails.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flbridge  # noqa: E402
from flbridge.binding import load_header  # noqa: E402
from flbridge.specs import load_spec  # noqa: E402
from flbridge.binding import bind_runtime, check_static  # noqa: E402

TIME_LIMIT_S = 2.0
MEMORY_LIMIT_MB = 200
SPEC_NAMES = ("x1.yaml", "th1.yaml", "x1_v2.yaml")
HEADERS = {p.name: p.read_bytes() for p in sorted(ROOT.glob("native_sim/*/*_runtime.h"))}
WORK = Path(tempfile.mkdtemp(prefix="flbridge-fuzz-"))


def _absolute(text: bytes) -> bytes:
    return text.replace(b'"../native_sim', f'"{ROOT}/native_sim'.encode())


SPECS = {n: _absolute((ROOT / "device_specs" / n).read_bytes()) for n in SPEC_NAMES}
# x1_v2.yaml extends x1.yaml: a pristine parent lives beside every mutated child
(WORK / "x1.yaml").write_bytes(SPECS["x1.yaml"])

SPEC_TOKENS = [b"&a ", b"*a", b"&b [*a, *a, *a, *a]", b"[", b"]", b"{", b"}", b": ", b"- ", b"\n", b"\t", b"  ",
               b"!!python/object/apply:os.system", b"!!binary", b"!!set", b"<<: *a\n", b"? ", b"|", b">",
               b"\xff\xfe", b"\x00", b"\x1b", b"~", b"9" * 5000, b"1e999", b".inf", b".nan", b"-1", b"0x",
               b"extends: x1.yaml\n", b"extends: th1.yaml\n", b"aten::", b"python:os:system", b'"', b"'",
               b"$HOME", b"${NOPE}", b"2001-13-45", b"\xc3", b"\xe4\xb8\xad", "星火".encode(), b"#", b"a" * 300]
# names that make a mutated spec still load but bind wrongly (another
# function, parameter, constant, dtype, op)
WORDS = sorted({w for text in [*SPECS.values(), *HEADERS.values()]
                for w in re.findall(rb"[A-Za-z_][\w:.]{1,40}", text)})
SPEC_TOKENS += WORDS
HEADER_TOKENS = [b"#define X (9**9**9)\n", b"#define Y (1 << 40000000000)\n", b"#if ", b"#elif 1\n", b"#else\n",
                 b"#endif\n", b"#ifdef X\n", b"#define A A A A A A A A\n", b"#define F(x) F(x) F(x)\n",
                 b"(", b")", b"<<", b"40000000000", b"{", b"}", b";", b"/*", b"*/", b"//", b"\\\n", b"typedef ",
                 b"struct ", b"enum { Q = 1 << 70 };", b"x1_tensor_t", b"*", b"[99999999999999999999]",
                 b'extern "C" {', b"__attribute__((", b"#error boom\n", b"#include <x.h>\n", b"\xff", b"\x00",
                 b"int", b"const", b"...", b"=", b",", b"0x", b"'", b'"']


def mutations(tokens):
    kind = st.sampled_from(["flip", "truncate", "delete", "duplicate", "insert", "insert_random", "swap_lines",
                            "set_value", "set_value", "delete_line", "repeat_line"])
    return st.lists(st.tuples(kind, st.integers(0, 1 << 20), st.integers(0, 1 << 20), st.sampled_from(tokens),
                              st.binary(min_size=1, max_size=8)), min_size=1, max_size=4)


def mutate(data: bytes, muts) -> bytes:
    for kind, a, b, token, raw in muts:
        n = len(data)
        i = a % (n + 1)
        j = min(n, i + 1 + b % 64)
        if kind == "flip" and n:
            i = a % n
            data = data[:i] + bytes([data[i] ^ (1 + b % 255)]) + data[i + 1:]
        elif kind == "truncate":
            data = data[:i]
        elif kind == "delete":
            data = data[:i] + data[j:]
        elif kind == "duplicate":
            data = data[:j] + data[i:j] * (1 + b % 3) + data[j:]
        elif kind == "insert":
            data = data[:i] + token + data[i:]
        elif kind == "insert_random":
            data = data[:i] + raw + data[i:]
        elif kind in ("swap_lines", "set_value", "delete_line", "repeat_line"):
            # line-level edits keep most of the file well-formed, so the
            # checks behind the parser see the damage too
            lines = data.split(b"\n")
            x, y = a % len(lines), b % len(lines)
            if kind == "swap_lines":
                lines[x], lines[y] = lines[y], lines[x]
            elif kind == "set_value":
                cut = max(lines[x].find(b": ") + 2, lines[x].find(b" ") + 1, 0)
                lines[x] = lines[x][:cut] + token
            elif kind == "delete_line":
                del lines[x]
            else:
                lines.insert(x, lines[x])
            data = b"\n".join(lines)
    return data


OUTCOMES: collections.Counter = collections.Counter()
WORST = {"seconds": 0.0}


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung(f"an example used more than {TIME_LIMIT_S * 5:.0f} s of CPU time")


def _problems_of(err) -> list:
    if isinstance(err, flbridge.SpecError):
        return [(p.file, p.line) for p in err.problems]
    if isinstance(err, flbridge.RuntimeLoadError):
        return [(e.file, e.line) for e in getattr(err, "problems", [err])]
    return [(err.file, err.line)]


def _run(label: str, fn) -> None:
    """Runs one input through `fn`, checking outcome, time and memory."""
    # CPU time, not wall time: other processes on a busy machine do not count
    t0 = time.process_time()
    signal.setitimer(signal.ITIMER_VIRTUAL, TIME_LIMIT_S * 5)
    try:
        fn()
        outcome = "ok"
    except (flbridge.SpecError, flbridge.HeaderError, flbridge.RuntimeLoadError) as e:
        outcome = type(e).__name__
        for file, line in _problems_of(e):
            assert file and isinstance(line, int) and line >= 1, f"{label}: problem without file:line: {e}"
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    dt = time.process_time() - t0
    WORST["seconds"] = max(WORST["seconds"], dt)
    assert dt < TIME_LIMIT_S, f"{label}: took {dt:.2f} s of CPU time"
    OUTCOMES[f"{label}:{outcome}"] += 1


def check_spec_bytes(name: str, data: bytes) -> None:
    path = WORK / f"mutated_{name}"
    path.write_bytes(data)
    spec = []

    def parse():
        # static: a mutated `python:` target is never imported
        spec.append(load_spec(path, static=True))

    def static():
        check_static_or_raise(spec[0])

    def full():
        rt, problems, load_errors = bind_runtime(spec[0])
        if problems:
            raise flbridge.SpecError(problems)
        if load_errors:
            load_errors[0].problems = load_errors
            raise load_errors[0]
    _run("spec-parse", parse)
    if spec:
        _run("spec-static", static)
        _run("spec-full", full)


def check_static_or_raise(spec) -> None:
    result, problems = check_static(spec)
    if problems:
        raise flbridge.SpecError(problems)
    assert result is not None


def check_header_bytes(name: str, data: bytes) -> None:
    hdr = WORK / f"mutated_{name}"
    hdr.write_bytes(data)
    spec_name = "x1.yaml" if name.startswith("x1") else "th1.yaml"
    spec_path = WORK / f"for_{name}.yaml"
    text = SPECS[spec_name].replace(f"{ROOT}/native_sim/{name.split('_')[0]}/{name}".encode(), str(hdr).encode())
    spec_path.write_bytes(text)
    _run("header-parse", lambda: load_header(hdr))
    _run("header-static", lambda: check_static_or_raise(load_spec(spec_path, static=True)))


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100, help="examples per property")
    ap.add_argument("--random", action="store_true", help="random seed (default: derandomized, repeatable)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGVTALRM, _alarm)
    # warm up (torch op schemas, pycparser tables) before measuring
    check_spec_bytes(SPEC_NAMES[0], SPECS[SPEC_NAMES[0]])
    name = sorted(HEADERS)[0]
    check_header_bytes(name, HEADERS[name])
    OUTCOMES.clear()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    vm = _address_space()
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_LIMIT_MB * 2 ** 20, resource.RLIM_INFINITY))
    common = dict(max_examples=a.examples, deadline=None, derandomize=not a.random, database=None,
                  suppress_health_check=list(HealthCheck), print_blob=True)

    @settings(**common)
    @given(st.sampled_from(SPEC_NAMES), mutations(SPEC_TOKENS))
    def fuzz_specs(name, muts):
        check_spec_bytes(name, mutate(SPECS[name], muts))

    @settings(**common)
    @given(st.sampled_from(sorted(HEADERS)), mutations(HEADER_TOKENS))
    def fuzz_headers(name, muts):
        check_header_bytes(name, mutate(HEADERS[name], muts))

    t0 = time.perf_counter()
    fuzz_specs()
    fuzz_headers()
    rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    print(json.dumps({"outcomes": dict(OUTCOMES), "max_cpu_seconds": round(WORST["seconds"], 3),
                      "address_space_cap_mb": round(vm / 2 ** 20 + MEMORY_LIMIT_MB),
                      "rss_growth_mb": round(rss_growth_mb, 1),
                      "wall_seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
