"""Broken or hostile specs and headers end in a SpecError / HeaderError with
file:line, quickly and in bounded memory: the cases found by hand, then a
property-based fuzz of the shipped specs and headers (tests/spec_fuzz.py,
run in a child process so a hang or a blow-up fails instead of stalling)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flbridge
from flbridge.binding import load_header
from flbridge.specs import load_spec
from flbridge.binding import check_static

ROOT = Path(__file__).resolve().parents[1]
X1_TEXT = (ROOT / "device_specs" / "x1.yaml").read_text().replace('"../native_sim', f'"{ROOT}/native_sim')
X1_HEADER = (ROOT / "native_sim" / "x1" / "x1_runtime.h").read_text()


def spec_error(path) -> flbridge.SpecError:
    t0 = time.process_time()
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(path)
    assert time.process_time() - t0 < 2.0
    return ei.value


def test_non_utf8_spec_names_file_line_and_byte(tmp_path):
    p = tmp_path / "chip.yaml"
    p.write_bytes(b'device_type: "xpu:a"\nvendor: "caf\xe9"\n')
    e = spec_error(p)
    assert (e.file, e.line, e.field) == (str(p), 2, "<file>")
    assert "not UTF-8: byte 0xe9 at offset 33 (column 13)" in e.message and "save the spec as UTF-8" in e.message


def test_yaml_alias_bomb_is_refused_within_budget(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    e = spec_error(p)
    assert e.file == str(p) and e.line >= 1 and "expands to more than 100000 values" in e.message


@pytest.mark.parametrize("text,needle", [
    ("a: " + "[" * 1000 + "]" * 1000 + "\n", "nested"),
    ("a: " + "9" * 5000 + "\n", "more digits than Python reads"),
    ("a: !!python/object/apply:os.system [echo hi]\n", "is not allowed in a spec"),
    ("device_type: \x07\n", "character U+0007"),
    ("<<: {a: 1}\n", "merge keys"),
], ids=["deep", "huge-int", "python-tag", "control-char", "merge-key"])
def test_hostile_yaml_values_are_spec_problems(tmp_path, text, needle):
    p = tmp_path / "chip.yaml"
    p.write_text(text)
    e = spec_error(p)
    assert e.file == str(p) and e.line >= 1 and needle in str(e)


@pytest.mark.parametrize("define,needle", [
    ("(9**9**9)", "not a valid C integer constant expression"),
    ("(1 << 40000000000)", "shift by 40000000000"),
    ("(0x7fffffffffffffff * 0x7fffffffffffffff)", "does not fit in 64 bits"),
    ("(1 / 0)", "division by zero"),
    ("(" * 500 + "1" + ")" * 500, "nested more than"),
], ids=["power", "huge-shift", "overflow", "div-zero", "deep"])
def test_header_constant_arithmetic_is_bounded(tmp_path, define, needle):
    hdr = tmp_path / "rt.h"
    hdr.write_text(X1_HEADER.replace("#define X1_MAX_DIMS 8", f"#define X1_MAX_DIMS 8\n#define BAD {define}"))
    line = hdr.read_text().split("\n").index(f"#define BAD {define}") + 1
    t0 = time.process_time()
    with pytest.raises(flbridge.HeaderError) as ei:
        load_header(hdr)
    assert time.process_time() - t0 < 2.0
    assert (ei.value.file, ei.value.line) == (str(hdr), line) and needle in ei.value.message
    # through a spec, the same problem is reported at the header's line
    spec = tmp_path / "chip.yaml"
    spec.write_text(X1_TEXT.replace(f'"{ROOT}/native_sim/x1/x1_runtime.h"', f'"{hdr}"'))
    result, problems = check_static(load_spec(spec, static=True))
    assert result is None and (problems[0].file, problems[0].line) == (str(hdr), line)


def test_macros_that_grow_without_end_are_refused(tmp_path):
    hdr = tmp_path / "rt.h"
    chain = "".join(f"#define M{i} M{i + 1} M{i + 1} M{i + 1} M{i + 1}\n" for i in range(12))
    hdr.write_text(chain + "int f(int M0);\n#define F(x) F(x) F(x) F(x)\nint g(int F(1));\n")
    t0 = time.process_time()
    with pytest.raises(flbridge.HeaderError, match="longer than"):
        load_header(hdr)
    assert time.process_time() - t0 < 2.0


def test_many_continuation_lines_stay_linear(tmp_path):
    hdr = tmp_path / "rt.h"
    hdr.write_text("#define LONG 1 \\\n" + "+ 1 \\\n" * 20000 + "\nint f(void);\n")
    t0 = time.process_time()
    h = load_header(hdr)
    assert time.process_time() - t0 < 2.0
    assert "LONG" not in h.constants and "f" in h.functions    # too long to be a constant a kernel takes


def _run_fuzz(examples: int, *extra, timeout: int) -> dict:
    env = dict(os.environ, X1SIM_STRICT="1", TH1SIM_STRICT="1")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "spec_fuzz.py"), "--examples", str(examples), *extra],
                       capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # an interpreter loads a hundred fuzzed specs: 5 s
def test_fuzzed_specs_and_headers_end_in_clear_errors():
    """Random mutations of the shipped specs and headers (repeatable): every
    one ends in success or an error naming file:line, each within 2 s of CPU
    and 200 MB."""
    got = _run_fuzz(8, timeout=300)
    kinds = {k.split(":")[1] for k in got["outcomes"]}
    assert {"SpecError", "HeaderError"} <= kinds       # the mutations do break things
    assert got["max_cpu_seconds"] < 2.0 and got["rss_growth_mb"] < 200


@pytest.mark.slow
def test_fuzz_long_run():
    got = _run_fuzz(300, "--random", timeout=3600)
    assert got["max_cpu_seconds"] < 2.0 and got["rss_growth_mb"] < 200
