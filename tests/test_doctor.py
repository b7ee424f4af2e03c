"""`flbridge doctor`: one table of what works and what to fix, on a healthy
setup and on each broken case (bad spec, missing library, a library that is
not one, undefined symbol, unparsable header, duplicate device_type, a
vendor init that fails, the spec folder naming a file)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flbridge.tools import doctor

ROOT = Path(__file__).resolve().parents[1]


def spec(name: str) -> str:
    return (ROOT / "device_specs" / name).read_text().replace('"../native_sim', f'"{ROOT}/native_sim')


def rows_of(rows, where_prefix):
    return {r.check: r for r in rows if r.where.startswith(where_prefix)}


def test_healthy_setup_has_no_problem_and_every_chip_passes_its_smoke_test(flchips, capsys):
    assert doctor.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["problems"] == 0
    checks = report["checks"]
    setup = {c["check"]: c for c in checks if c["where"] == "setup"}
    assert setup["torch"]["status"] == "ok" and "flbridge supports torch" in setup["torch"]["detail"]
    assert "FLBRIDGE_DEVICE_DIR is not set" in setup["spec folder"]["detail"]
    for chip in flchips.values():
        mine = [c for c in checks if c["where"] == f"fl:{chip.index} {chip.device_type}"]
        by = {c["check"]: c for c in mine}
        for name in ("spec", "header", "bindings", "library", "symbols", "fallbacks", "init", "memory"):
            assert by[name]["status"] == "ok", by[name]
        smoke = [c["detail"] for c in mine if c["check"] == "smoke"]
        assert any("round trip" in d and "exact" in d for d in smoke)
        assert any(d.startswith("add ran natively and matches the CPU") for d in smoke)
        assert any(d.startswith("mm ran natively and matches the CPU") for d in smoke)


def test_table_has_one_row_per_check_and_fixes_under_problems():
    rows = [doctor.Check("setup", "python", "ok", "3.11"),
            doctor.Check("fl:0 xpu:a", "library", "FAIL", "dlopen failed: boom", "install it")]
    text = doctor.render(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["WHERE", "CHECK", "STATUS", "DETAIL"]
    assert lines[2].split()[:4] == ["fl:0", "xpu:a", "library", "FAIL"] and lines[3].strip() == "-> fix: install it"
    assert lines[-1] == "1 problem found"


def test_spec_folder_naming_a_file_is_a_problem_with_its_fix(tmp_path, monkeypatch):
    f = tmp_path / "x1.yaml"
    f.write_text(spec("x1.yaml"))
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(f))
    row = next(r for r in doctor.setup_checks() if r.check == "spec folder")
    assert row.status == "FAIL" and "is a file, not a folder" in row.detail
    assert row.fix == f"set FLBRIDGE_DEVICE_DIR={tmp_path} (the folder holding it)"


def test_unknown_flbridge_variable_is_a_warning_with_the_right_name(monkeypatch):
    monkeypatch.setenv("FLBRIDGE_FALBACK", "0")
    row = next(r for r in doctor.setup_checks() if "FLBRIDGE_FALBACK" in r.detail)
    assert row.status == "warn" and row.fix == "did you mean FLBRIDGE_FALLBACK?"


def _broken_folder(tmp_path: Path) -> Path:
    d = tmp_path / "specs"
    d.mkdir()
    x1 = spec("x1.yaml")
    hdr = str(ROOT / "native_sim" / "x1" / "x1_runtime.h")
    (d / "a_typo.yaml").write_text(x1.replace('"xpu:x1"', '"xpu:typo"').replace("vendor:", "vendr:"))
    (d / "b_good.yaml").write_text(spec("th1.yaml"))
    (d / "c_nolib.yaml").write_text(x1.replace('"xpu:x1"', '"xpu:nolib"').replace("libx1sim.so", "libgone.so"))
    notelf = tmp_path / "libnotelf.so"
    notelf.write_text("not a shared library\n" * 8)
    (d / "d_notelf.yaml").write_text(x1.replace('"xpu:x1"', '"xpu:notelf"')
                                     .replace(f"{ROOT}/native_sim/build/libx1sim.so", str(notelf)))
    # declared in the header, not exported by the library
    extra = tmp_path / "x1_plus.h"
    extra.write_text(Path(hdr).read_text().replace(
        "#ifdef __cplusplus\n}", "X1_API x1_status_t x1_mmm(const x1_tensor_t *self, const x1_tensor_t *mat2, "
                                 "x1_tensor_t *out);\n#ifdef __cplusplus\n}"))
    (d / "e_nosym.yaml").write_text(x1.replace('"xpu:x1"', '"xpu:nosym"').replace(hdr, str(extra))
                                    .replace("impl: x1_mm,", "impl: x1_mmm,"))
    broken = tmp_path / "broken.h"
    broken.write_text(Path(hdr).read_text().replace("x1_status_t x1_free(x1_devptr_t ptr);",
                                                    "x1_status_t x1_free(x1_devptr_t ptr"))
    (d / "f_badhdr.yaml").write_text(x1.replace('"xpu:x1"', '"xpu:badhdr"').replace(hdr, str(broken)))
    (d / "g_dup.yaml").write_text(spec("th1.yaml"))
    (d / "h_init.yaml").write_text(x1)          # its init fails: X1SIM_CAPACITY is not a size
    return d


def _check_broken_rows(checks, live: bool):
    assert all(c.fix for c in checks if c.status == "FAIL")
    typo = rows_of(checks, "fl:0 ")["spec"]
    assert typo.status == "FAIL" and "a_typo.yaml:" in typo.detail and "did you mean 'vendor'" in typo.detail
    good = [c for c in checks if c.where == "fl:1 xpu:th1"]
    assert {c.check for c in good if c.status not in ("ok", "skip")} == set()
    nolib = rows_of(checks, "fl:2 xpu:nolib")["library"]
    assert nolib.status == "FAIL" and "libgone.so does not exist" in nolib.detail and "runtime_so" in nolib.fix
    notelf = rows_of(checks, "fl:3 xpu:notelf")["library"]
    assert notelf.status == "FAIL" and "dlopen failed:" in notelf.detail and "invalid ELF header" in notelf.detail
    assert notelf.fix == "runtime_so is not a shared library: point it at the vendor's .so"
    nosym = rows_of(checks, "fl:4 xpu:nosym")
    assert nosym["bindings"].status == "ok" and nosym["symbols"].status == "FAIL"
    assert "x1_mmm (named at" in nosym["symbols"].detail and "nm -D" in nosym["symbols"].fix
    badhdr = rows_of(checks, "fl:5 xpu:badhdr")
    assert badhdr["header"].status == "FAIL" and "broken.h:" in badhdr["header"].detail
    dup = rows_of(checks, "fl:6 ")["spec"]
    assert dup.status == "FAIL" and "also claimed by" in dup.detail and dup.fix == "give each spec its own device_type"
    if live:
        assert sum(c.check == "smoke" and "ran natively" in c.detail for c in good) == 2
        init = rows_of(checks, "fl:7 xpu:x1")["init"]
        assert init.status == "FAIL" and "X1SIM_CAPACITY='lots' is not a size" in init.detail


@pytest.mark.slow  # a doctor run per broken setup: 2 s
def test_each_broken_case_is_reported_with_its_fix(tmp_path, monkeypatch):
    """The rows that need no fresh process: everything up to init."""
    from flbridge.specs import discover, load_specs
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(_broken_folder(tmp_path)))
    checks = []
    for slot in load_specs(discover(), static=True):
        rows = doctor.static_checks(slot)
        header_ok = any(r.check == "header" and r.status == "ok" for r in rows)
        checks += rows + doctor.loading_checks(slot, None, smoke=False, header_ok=header_ok,
                                               static_ok=not any(r.status == "FAIL" for r in rows))
    _check_broken_rows(checks, live=False)


@pytest.mark.slow
def test_doctor_command_on_a_broken_folder_still_checks_the_good_chip(tmp_path):
    d = _broken_folder(tmp_path)
    # the x1 simulator in strict mode would abort on its own init failure, as a driver may
    env = dict(os.environ, FLBRIDGE_DEVICE_DIR=str(d), X1SIM_CAPACITY="lots", X1SIM_STRICT="0")
    r = subprocess.run([sys.executable, "-m", "flbridge.tools.doctor", "--json"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 1, r.stderr
    _check_broken_rows([doctor.Check(**c) for c in json.loads(r.stdout)["checks"]], live=True)


def test_text_table_from_the_command_line(tmp_path, monkeypatch, capsys):
    from flbridge.cli import main
    monkeypatch.setenv("FLBRIDGE_DEVICE_DIR", str(tmp_path / "nowhere"))
    assert main(["doctor"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["WHERE", "CHECK", "STATUS", "DETAIL"]
    assert any("spec folder" in ln and "FAIL" in ln and "does not exist" in ln for ln in lines)
    assert lines[-1] == "2 problems found"
