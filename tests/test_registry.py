"""Device specs: every mistake is caught at load with file, line and field;
extends, environment variables, discovery order; the runtime binding."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flbridge
from flbridge.cli import validate
from flbridge.errors import SpecDirWarning
from flbridge.specs import check_unique, discover, load_spec
from flbridge.binding import load_runtime

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "device_specs"
X1_TEXT = (SPECS / "x1.yaml").read_text()


def spec_text(text: str) -> str:
    """x1.yaml with absolute runtime paths, so a copy works from anywhere."""
    return (text.replace('"../native_sim', f'"{ROOT}/native_sim'))


def write(tmp_path, text, name="chip.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def problems(path):
    with pytest.raises(flbridge.SpecError) as ei:
        load_runtime(load_spec(path))
    return ei.value


def test_shipped_specs_load_with_their_runtimes():
    for name in ("x1.yaml", "x1_v2.yaml", "th1.yaml"):
        spec = load_spec(SPECS / name)
        rt = load_runtime(spec)
        assert rt.ops and spec.device_type.startswith("xpu:")
    x1 = load_spec(SPECS / "x1.yaml")
    assert x1.vendor == "SparkAI" and x1.capabilities.memory_total_bytes == 4 << 30
    conv = next(e for e in x1.ops.values() if e.qualname == "aten::convolution.default")
    assert conv.alias_of == "aten::conv2d" and conv.layout == {"input": "NHWC", "weight": "OHWI", "out": "NHWC"}
    assert conv.constraints.values["stride"] == (1, 2, 4)
    assert conv.constraints.values["transposed"] == (False,)          # implied by the friendly name
    assert "output_padding" in conv.ignore_args


# ----------------------------------------------------------- validation

def test_unknown_field_with_did_you_mean(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace('vendor: "SparkAI"', 'vendr: "SparkAI"'))
    e = problems(p)
    first = next(x for x in e.problems if x.field == "vendr")
    assert first.file == str(p) and first.line == line_of(p, "vendr:")
    assert "unknown field 'vendr'; did you mean 'vendor'?" in first.message
    assert any(x.field == "vendor" and "required field is missing" in x.message for x in e.problems)


def test_misplaced_field_points_to_where_it_belongs(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT) + "\ncompute:\n  peak_tflops_fp16: 15.6\n")
    e = problems(p)
    assert [x.field for x in e.problems] == ["compute"]       # the only problem
    assert e.line == len(p.read_text().splitlines()) - 1    # the line of the top-level 'compute:'
    assert "unknown field 'compute'; did you mean 'capabilities.compute'? (it belongs there)" in e.message


def test_wrong_type(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("total_gb: 4.0", 'total_gb: "four"'))
    e = problems(p)
    assert (e.field, e.line) == ("capabilities.memory.total_gb", line_of(p, "total_gb"))
    assert "must be a number of GiB, got str 'four'" in e.message


def test_missing_required_field(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace('chip_model: "X1-Edge"\n', ""))
    e = problems(p)
    assert e.field == "chip_model" and "required field is missing" in e.message


def test_unknown_dtype(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("  dtypes: [float32, float16, int8]",
                                                   "  dtypes: [float32, flaot16, int8]"))
    e = problems(p)
    assert (e.field, e.line) == ("capabilities.dtypes[1]", line_of(p, "flaot16"))
    assert "unknown dtype 'flaot16'; did you mean 'float16'?" in e.message


@pytest.mark.parametrize("name,message", [
    ("aten::addd", "unknown op 'aten::addd'; did you mean 'aten::add'?"),
    ("aten::add.Tensr", "did you mean 'aten::add.Tensor'?"),
    ("aten::linear", "never reaches a device: PyTorch decomposes it before dispatch; list aten::addmm"),
    ("aten::div", None),  # bare names resolve (.Tensor) -- valid
    ("nonsense", "not of the form namespace::op"),
])
def test_unknown_or_undispatchable_op_names(tmp_path, name, message):
    text = spec_text(X1_TEXT).replace("  - {name: aten::mm, impl: x1_mm", f"  - {{name: {name}, impl: x1_mm")
    p = write(tmp_path, text)
    if message is None:
        if name == "aten::div":
            with pytest.raises(flbridge.SpecError, match="already listed"):
                load_spec(p)  # aten::div -> aten::div.Tensor, which x1.yaml lists already
        return
    e = problems(p)
    bad = next(x for x in e.problems if x.field.endswith(".name"))
    assert bad.line == line_of(p, name) and message in bad.message


def test_constraint_on_unknown_argument(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("      stride: [1, 2, 4]", "      strid: [1, 2, 4]"))
    e = problems(p)
    assert e.field.endswith("constraints.strid")
    assert "aten::convolution.default has no argument 'strid'; did you mean 'stride'?" in e.message


def test_extends_cycle_and_missing_parent(tmp_path):
    a = write(tmp_path, 'extends: "b.yaml"\ndevice_type: "xpu:a"\n', "a.yaml")
    write(tmp_path, 'extends: "a.yaml"\ndevice_type: "xpu:b"\n', "b.yaml")
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(a)
    assert ei.value.field == "extends" and "extends cycle: a.yaml -> b.yaml -> a.yaml" in ei.value.message
    c = write(tmp_path, 'extends: "nowhere.yaml"\ndevice_type: "xpu:c"\n', "c.yaml")
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(c)
    assert (ei.value.file, ei.value.line, ei.value.field) == (str(c), 1, "extends")
    assert "nowhere.yaml does not exist" in ei.value.message


def test_extends_overrides_field_by_field(tmp_path):
    write(tmp_path, spec_text(X1_TEXT), "base.yaml")
    child = write(tmp_path, 'extends: "base.yaml"\ndevice_type: "xpu:kid"\ndriver_version: "9.9"\n'
                            'capabilities:\n  memory: {total_gb: 1.0}\n'
                            'supported_ops:\n  - {name: aten::relu, dtype_support: [float32]}\n', "kid.yaml")
    s = load_spec(child)
    assert s.device_type == "xpu:kid" and s.driver_version == "9.9" and s.vendor == "SparkAI"
    assert s.capabilities.memory_total_bytes == 1 << 30 and s.capabilities.bandwidth_gbps == 64.0
    import torch
    relu = s.ops[torch.ops.aten.relu.default]
    assert relu.dtypes == (torch.float32,) and relu.impl == "x1_relu"   # impl inherited, dtypes overridden
    assert relu.file == str(child)
    assert s.runtime_so == (ROOT / "native_sim/build/libx1sim.so").resolve()


def test_environment_variables_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_PATH", str(ROOT / "native_sim" / "build"))
    monkeypatch.setenv("HDR", str(ROOT / "native_sim" / "x1"))
    text = (spec_text(X1_TEXT)
            .replace(f'"{ROOT}/native_sim/build/libx1sim.so"', '"$LIB_PATH/libx1sim.so"')
            .replace(f'"{ROOT}/native_sim/x1/x1_runtime.h"', '"${HDR}/x1_runtime.h"'))
    s = load_spec(write(tmp_path, text))
    assert s.runtime_so == ROOT / "native_sim/build/libx1sim.so"
    assert s.runtime_header == ROOT / "native_sim/x1/x1_runtime.h"
    monkeypatch.delenv("LIB_PATH")
    with pytest.raises(flbridge.SpecError, match="environment variable \\$LIB_PATH is not set"):
        load_spec(write(tmp_path, text, "again.yaml"))
    # relative paths resolve against the spec's own folder
    rel = tmp_path / "sub"
    rel.mkdir()
    (rel / "lib").symlink_to(ROOT / "native_sim" / "build")
    t2 = spec_text(X1_TEXT).replace(f'"{ROOT}/native_sim/build/libx1sim.so"', '"lib/libx1sim.so"')
    assert load_spec(write(rel, t2)).runtime_so == (ROOT / "native_sim/build/libx1sim.so").resolve()


def test_yaml_syntax_error_and_duplicate_keys(tmp_path):
    p = write(tmp_path, "device_type: xpu:a\nvendor: [unclosed\n")
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(p)
    assert ei.value.field == "<yaml>" and ei.value.line >= 2
    p = write(tmp_path, spec_text(X1_TEXT).replace('chip_model: "X1-Edge"', 'chip_model: "X1-Edge"\nchip_model: x'),
              "dup.yaml")
    with pytest.raises(flbridge.SpecError, match="duplicate key \\(also on line"):
        load_spec(p)


# ------------------------------------------------------ runtime binding

def test_impl_symbol_missing_from_the_library(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("init: {fn: x1_init,", "init: {fn: x1_init_v2,"))
    spec = load_spec(p)
    with pytest.raises(flbridge.RuntimeLoadError) as ei:
        load_runtime(spec)
    e = ei.value
    assert e.symbol == "x1_init_v2" and e.field == "runtime.init" and e.line == line_of(p, "x1_init_v2")
    assert e.library.endswith("libx1sim.so") and e.reason == "undefined symbol"
    assert "undefined symbol: x1_init_v2 in libx1sim.so" in str(e) and "did you mean x1_init?" in str(e)
    assert "nm -D" in str(e)


def test_op_impl_missing_from_the_library(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("impl: x1_conv2d", "impl: x1_conv3d"))
    with pytest.raises(flbridge.RuntimeLoadError) as ei:
        load_runtime(load_spec(p))
    assert ei.value.symbol == "x1_conv3d" and ei.value.line == line_of(p, "- name: aten::conv2d")


def test_library_that_cannot_be_loaded_gives_the_loaders_reason(tmp_path):
    bad = tmp_path / "libbroken.so"
    bad.write_bytes(b"this is not an ELF file")
    p = write(tmp_path, spec_text(X1_TEXT).replace(f'"{ROOT}/native_sim/build/libx1sim.so"', f'"{bad}"'))
    with pytest.raises(flbridge.RuntimeLoadError) as ei:
        load_runtime(load_spec(p))
    e = ei.value
    assert e.field == "runtime_so" and e.line == line_of(p, "runtime_so")
    assert "invalid ELF header" in e.reason or "file too short" in e.reason
    missing = write(tmp_path, spec_text(X1_TEXT).replace("libx1sim.so", "libnothere.so"), "m.yaml")
    with pytest.raises(flbridge.RuntimeLoadError, match="does not exist"):
        load_runtime(load_spec(missing))


def test_header_that_cannot_be_parsed(tmp_path):
    hdr = tmp_path / "broken.h"
    text = (ROOT / "native_sim/x1/x1_runtime.h").read_text()
    hdr.write_text(text.replace("x1_status_t x1_free(x1_devptr_t ptr);", "x1_status_t x1_free(x1_devptr_t ptr"))
    p = write(tmp_path, spec_text(X1_TEXT).replace(f'"{ROOT}/native_sim/x1/x1_runtime.h"', f'"{hdr}"'))
    e = problems(p)
    assert e.file == str(hdr) and e.field == "runtime_header"
    assert abs(e.line - line_of(hdr, "x1_free(x1_devptr_t ptr")) <= 2
    assert f"named at {p}:" in e.message


def test_c_parameter_that_matches_no_aten_argument(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("  - {name: aten::bmm, impl: x1_bmm,",
                                                   "  - {name: aten::bmm, impl: x1_bmm, args: {mat3: mat2},"))
    e = problems(p)
    assert e.line == line_of(p, "mat3") and "x1_bmm has no parameter 'mat3' (it has: self, mat2, out)" in e.message


def test_aten_argument_not_passed_and_not_pinned(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("      training: [false]\n", ""))
    e = problems(p)
    assert "argument 'training' is not passed to x1_batch_norm" in e.message
    assert "constraints: {training: [...]}" in e.message


def test_dtype_without_a_runtime_code(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("  - {name: aten::mm, impl: x1_mm, dtype_support: [float32, float16]}",
                                                   "  - {name: aten::mm, impl: x1_mm, dtype_support: [float32, bfloat16]}"))
    with pytest.raises(flbridge.SpecError, match="dtype bfloat16 has no code under runtime.dtypes"):
        load_spec(p)


def test_struct_field_and_constant_typos(tmp_path):
    p = write(tmp_path, spec_text(X1_TEXT).replace("    strides: strides", "    strides: stride")
              .replace("float16: X1_FLOAT16", "float16: X1_FLOAT61"))
    e = problems(p)
    msgs = [str(x) for x in e.problems]
    assert any("runtime.tensor.strides: x1_tensor_t has no field 'stride'; did you mean 'strides'?" in m for m in msgs)
    p2 = write(tmp_path, spec_text(X1_TEXT).replace("float16: X1_FLOAT16", "float16: X1_FLOAT61"), "c.yaml")
    e2 = problems(p2)
    assert "'X1_FLOAT61' is not a constant in x1_runtime.h; did you mean 'X1_FLOAT16'?" in e2.message


def test_role_function_with_unmatched_parameter_names(tmp_path):
    th1 = (SPECS / "th1.yaml").read_text().replace('"../native_sim', f'"{ROOT}/native_sim')
    p = write(tmp_path, th1.replace("malloc: {fn: th1MemAlloc, args: [ptr, nbytes]}", "malloc: th1MemAlloc"))
    e = problems(p)
    assert e.field == "runtime.malloc"
    assert "th1MemAlloc(devPtr, byteSize) does not match the malloc role (ptr, nbytes)" in e.message
    assert "{fn: th1MemAlloc, args: [ptr, nbytes]}" in e.message


def test_two_specs_claiming_the_same_device_type(tmp_path):
    a = load_spec(write(tmp_path, spec_text(X1_TEXT), "a.yaml"))
    b = load_spec(write(tmp_path, spec_text(X1_TEXT), "b.yaml"))
    with pytest.raises(flbridge.SpecError) as ei:
        check_unique([a, b])
    assert ei.value.file == str(tmp_path / "b.yaml") and ei.value.field == "device_type"
    assert "'xpu:x1' is also claimed by" in ei.value.message and "a.yaml" in ei.value.message


# ----------------------------------------------------------- discovery

def test_discovery_order_is_folders_then_file_names(tmp_path, monkeypatch):
    d1, d2 = tmp_path / "one", tmp_path / "two"
    d1.mkdir()
    d2.mkdir()
    for d, names in ((d1, ("zeta.yaml", "alpha.yml", "notes.txt")), (d2, ("beta.yaml",))):
        for n in names:
            (d / n).write_text("x: 1\n")
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", f"{d2}{os.pathsep}{d1}")
    assert [p.name for p in discover()] == ["beta.yaml", "alpha.yml", "zeta.yaml"]
    monkeypatch.delenv("FLBRIDGE_DEVICE_DIR")
    assert [p.name for p in discover()] == ["th1.yaml", "x1.yaml", "x1_v2.yaml"]  # the packaged ones


def test_missing_spec_folder_is_a_warning_naming_folder_and_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(tmp_path / "nope"))
    with pytest.warns(SpecDirWarning, match=r"device spec folder .*nope does not exist \(from "
                                            r"FLBRIDGE_DEVICE_DIR\).*Set FLBRIDGE_DEVICE_DIR"):
        assert discover() == []


def test_init_warns_when_two_specs_share_a_runtime_library(tmp_path):
    (tmp_path / "a.yaml").write_text(spec_text(X1_TEXT).replace('"xpu:x1"', '"xpu:alpha"'))
    (tmp_path / "b.yaml").write_text(spec_text(X1_TEXT).replace('"xpu:x1"', '"xpu:beta"'))
    code = "import flbridge; flbridge.init(); print('ok', len(flbridge.chips()))"
    env = dict(os.environ, FLBRIDGE_DEVICE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ok 2" in r.stdout
    assert "xpu:alpha, xpu:beta load the same runtime library" in r.stderr


def test_init_with_a_missing_folder_does_not_crash(tmp_path):
    code = "import torch, flbridge; flbridge.init(); print('avail', torch.fl.is_available(), torch.fl.device_count())"
    env = dict(os.environ, FLBRIDGE_DEVICE_DIR=str(tmp_path / "missing"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "avail False 0" in r.stdout and "does not exist" in r.stderr


# ------------------------------------------------------------------ CLI

def test_validate_cli_prints_file_line_field_message(tmp_path, capsys):
    bad = write(tmp_path, spec_text(X1_TEXT).replace('vendor: "SparkAI"', 'vendr: "SparkAI"'), "bad.yaml")
    good = write(tmp_path, spec_text(X1_TEXT).replace("xpu:x1", "xpu:good"), "good.yaml")
    assert validate([str(bad), str(good)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:{line_of(bad, 'vendr')}: vendr: unknown field 'vendr'; did you mean 'vendor'?" in out
    assert f"ok: {good}: xpu:good (SparkAI X1-Edge)" in out
    assert validate([str(good)]) == 0


@pytest.mark.slow  # several interpreters validate specs: 5 s
def test_validate_from_the_shell():
    r = subprocess.run([sys.executable, "-m", "flbridge.cli", "validate", str(SPECS)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok: ") == 3
    r = subprocess.run([sys.executable, "-m", "flbridge.cli", "validate", "/no/such/spec.yaml"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "no such file" in r.stdout


def test_no_chip_name_in_flbridge_python_code():
    """Specs are data: no string or identifier in flbridge's code (docstrings
    with usage examples aside) names a shipped chip or its runtime."""
    import ast
    names = ("x1", "th1", "sparkai", "tianhe", "x1sim", "th1sim")
    for f in (ROOT / "flbridge").glob("*.py"):
        tree = ast.parse(f.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                words = set(__import__("re").findall(r"[a-z0-9_]+", node.value.lower()))
                hit = [n for n in names if n in words or any(w.startswith(n + "_") for w in words)]
                assert not hit, (f.name, node.lineno, node.value)
            if isinstance(node, ast.Name) or isinstance(node, ast.Attribute):
                ident = (node.id if isinstance(node, ast.Name) else node.attr).lower()
                assert not any(ident == n or ident.startswith(n + "_") for n in names), (f.name, ident)


# ------------------------------------------------- partial init, strictness

PARTIAL_INIT = r"""
import torch, flbridge, warnings
from flbridge.devices import chip_for
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    usable = flbridge.init()
print("usable", [c.index for c in usable], "count", torch.fl.device_count(), "avail", torch.fl.is_available())
print("good", chip_for("xpu:good").index)
x = torch.ones(3).to("fl:1")
print("sum", (x + x).cpu().tolist())
try:
    torch.ones(3).to("fl:0") + 1
except flbridge.FlbridgeError as e:
    print("refused", type(e).__name__, str(e).splitlines()[0])
torch.fl.empty_cache(); torch.fl.synchronize(); torch.fl.manual_seed_all(0); flbridge.reset_stats()
for x in w:
    if isinstance(x.message, flbridge.errors.SpecWarning):
        print("warned", x.message.index, x.message.file.rsplit("/", 1)[-1], x.message.problems[0].rsplit("/", 1)[-1])
from flbridge.cli import devices
print("devices rc", devices())
"""


def _partial_folder(tmp_path):
    good = spec_text(X1_TEXT).replace('"xpu:x1"', '"xpu:good"')
    (tmp_path / "a_typo.yaml").write_text(good.replace('"xpu:good"', '"xpu:typo"').replace("vendor:", "vendr:"))
    (tmp_path / "b_good.yaml").write_text(good)
    (tmp_path / "c_pyfb.yaml").write_text(good.replace('"xpu:good"', '"xpu:pyfb"').replace(
        "  op_specific:\n", '  op_specific:\n    "aten::gelu": "python:no_such_module_anywhere:gelu"\n'))
    return tmp_path


@pytest.mark.slow  # interpreters start with broken spec folders: 4 s
def test_a_bad_spec_keeps_its_index_and_the_others_load(tmp_path):
    env = dict(os.environ, FLBRIDGE_DEVICE_DIR=str(_partial_folder(tmp_path)))
    r = subprocess.run([sys.executable, "-c", PARTIAL_INIT], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "usable [1] count 3 avail True" in out and "good 1" in out and "sum [2.0, 2.0, 2.0]" in out
    assert "refused DeviceUnavailableError fl:0 (xpu:typo) is unavailable" in out
    line = line_of(tmp_path / "a_typo.yaml", "vendr:")
    assert f"warned 0 a_typo.yaml a_typo.yaml:{line}: vendr: unknown field 'vendr'" in out
    # a python: fallback module that cannot be imported makes only its own chip unavailable
    assert "warned 2 c_pyfb.yaml c_pyfb.yaml:" in out and "no_such_module_anywhere" in r.stdout + r.stderr
    # `flbridge devices` lists every index, the unavailable ones with their problems, and exits with 1
    lines = out.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("fl:0")))
    assert lines[first].startswith("fl:0  xpu:typo     UNAVAILABLE")
    assert lines[first + 1].strip().startswith(f"{tmp_path}/a_typo.yaml:{line}: vendr:")
    assert any(ln.startswith("fl:1  xpu:good") and "native ops" in ln for ln in lines)
    assert any(ln.startswith("fl:2  xpu:pyfb") and "UNAVAILABLE" in ln for ln in lines)
    assert "devices rc 1" in out


def test_strict_specs_make_a_bad_spec_fatal(tmp_path, monkeypatch):
    """FLBRIDGE_STRICT_SPECS=1: init() raises one SpecError with every bad
    spec's problems (what init() does with the slots it loaded)."""
    from flbridge import config
    from flbridge.backend.bringup import _raise_if_strict
    from flbridge.specs import load_specs
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(_partial_folder(tmp_path)))
    monkeypatch.setenv("FLBRIDGE_STRICT_SPECS", "1")
    slots = load_specs(discover())
    assert config.load().strict_specs
    with pytest.raises(flbridge.SpecError) as ei:
        _raise_if_strict(slots, config.load().strict_specs)
    assert [p.file.rsplit("/", 1)[-1] for p in ei.value.problems] == ["a_typo.yaml", "a_typo.yaml", "c_pyfb.yaml"]
    _raise_if_strict(slots, False)                      # the default: no error, the slots say what is wrong
    monkeypatch.delenv("FLBRIDGE_STRICT_SPECS")
    assert not config.load().strict_specs


# ------------------------------------------------------- static validation

def test_static_validation_loads_nothing(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "imported"
    (tmp_path / "sidefx_fallbacks.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                                  f"def gelu(*a, **k):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = spec_text(X1_TEXT).replace("libx1sim.so", "libnotbuilt.so").replace(
        "  op_specific:\n", '  op_specific:\n    "aten::gelu": "python:sidefx_fallbacks:gelu"\n')
    p = write(tmp_path, text)
    assert validate([str(p)], static=True) == 0
    out = capsys.readouterr().out
    assert f"ok: {p}: xpu:x1" in out and "(static: library not loaded)" in out
    assert not marker.exists()                                  # the module was not imported
    assert validate([str(p)]) == 1                              # full: loads, imports
    assert "libnotbuilt.so does not exist" in capsys.readouterr().out and marker.exists()


def test_static_validation_still_binds_parameters(tmp_path, capsys):
    text = spec_text(X1_TEXT).replace("libx1sim.so", "libnotbuilt.so")
    p = write(tmp_path, text.replace("  - {name: aten::bmm, impl: x1_bmm,",
                                     "  - {name: aten::bmm, impl: x1_bmm, args: {mat3: mat2},"))
    assert validate([str(p)], static=True) == 1
    assert f"{p}:{line_of(p, 'mat3')}:" in capsys.readouterr().out


def test_validate_reports_a_duplicate_device_type_instead_of_ok(tmp_path, capsys):
    a = write(tmp_path, spec_text(X1_TEXT), "a.yaml")
    b = write(tmp_path, spec_text(X1_TEXT), "b.yaml")
    assert validate([str(tmp_path)], static=True) == 1
    out = capsys.readouterr().out
    assert f"ok: {a}: xpu:x1" in out and f"ok: {b}" not in out
    assert f"{b}:{line_of(b, 'device_type')}: device_type: 'xpu:x1' is also claimed by {a}:" in out


def test_device_dir_naming_a_file_says_so(tmp_path, monkeypatch):
    f = write(tmp_path, spec_text(X1_TEXT))
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(f))
    with pytest.warns(SpecDirWarning, match=rf"{f} is a file, not a folder; to load only this spec, set "
                                            rf"FLBRIDGE_DEVICE_DIR={tmp_path}"):
        assert discover() == []


def test_suggestions_prefer_the_one_keystroke_fix(tmp_path, capsys):
    from flbridge.suggest import closest
    assert closest("x1_mmm", ["x1_mem_map", "x1_mm", "x1_bmm", "x1_mean"]) == "x1_mm"
    assert closest("th1Matmull", ["th1Matmul", "th1MemAlloc"]) == "th1Matmul"
    assert closest("totally_else", ["x1_mm"]) is None
    p = write(tmp_path, spec_text(X1_TEXT).replace("impl: x1_mm,", "impl: x1_mmm,"))
    assert validate([str(p)], static=True) == 1
    assert "x1_mmm is not declared in x1_runtime.h; did you mean x1_mm?" in capsys.readouterr().out
