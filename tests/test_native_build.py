"""native_sim/build.py rebuilds a simulator when its sources or its compiler
options change (FLSIM_PORTABLE=1 drops -march=native: the libraries a
machine-tuned build left behind must not be reused), and only then.
The compiler is replaced by a recorder: nothing is compiled here."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build_module():
    spec = importlib.util.spec_from_file_location("flsim_build_under_test", ROOT / "native_sim" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_change_of_options_rebuilds_and_the_same_options_do_not(tmp_path, monkeypatch):
    b = _build_module()
    compiled = []

    def fake_run(cmd):
        out = Path(cmd[cmd.index("-o") + 1])
        out.write_bytes(b"\x7fELF")
        compiled.append(cmd)

    monkeypatch.setattr(b, "_run", fake_run)
    monkeypatch.setattr(b, "_accepts", lambda cc, flags: True)   # a compiler that takes -march=native
    monkeypatch.delenv("FLSIM_PORTABLE", raising=False)

    b.build(tmp_path)
    assert len(compiled) == len(b.LIBRARIES) and all("-march=native" in c for c in compiled)
    compiled.clear()
    b.build(tmp_path)
    assert compiled == []                        # nothing changed: nothing compiled

    monkeypatch.setenv("FLSIM_PORTABLE", "1")
    b.build(tmp_path)
    assert len(compiled) == len(b.LIBRARIES) and not any("-march=native" in c for c in compiled)
    for name in b.LIBRARIES:
        assert "-march=native" not in (tmp_path / (name + ".options")).read_text()
    compiled.clear()
    b.build(tmp_path)
    assert compiled == []

    monkeypatch.delenv("FLSIM_PORTABLE")
    b.build(tmp_path)
    assert len(compiled) == len(b.LIBRARIES)     # back to the tuned build
