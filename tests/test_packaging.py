"""The wheel carries the whole package: every subpackage, the specs, the
headers and the compiled simulators, so an installed (not editable) flbridge
runs `flbridge doctor` and the demo."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_runs_doctor_and_the_demo(tmp_path):
    # built from a copy of the tracked files: a build writes flbridge.egg-info beside the sources, which
    # would shadow the installed metadata (entry points) for everything run from the checkout
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("flbridge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {f for f in files if f.startswith("flbridge/") and f.endswith(".py")}
    assert sources <= names, sorted(sources - names)
    assert any(n.endswith("device_specs/x1.yaml") for n in names)
    assert any(n.endswith(".so") for n in names)

    # a fresh venv that sees this machine's torch but installs flbridge from the wheel only
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLBRIDGE_")}
    where = subprocess.run([str(py), "-c", "import flbridge; print(flbridge.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=300)
    assert str(venv) in where.stdout, where.stdout + where.stderr     # the wheel's copy, not the checkout
    for cmd in (["doctor"], ["demo", "--device", "xpu:x1", "--steps", "2"]):
        r = subprocess.run([str(venv / "bin" / "flbridge"), *cmd], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=600)
        assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])


def _test_extra() -> list:
    import re
    import tomllib
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return [re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in extra]


def test_the_test_extra_leaves_out_torchvision():
    """torchvision's PyPI wheel cannot load its C extension beside the local
    CPU torch, and then breaks `import transformers`."""
    assert "torchvision" not in _test_extra()


@pytest.mark.slow   # imports DeepSpeed and Lightning, about 15 s
def test_every_package_of_the_test_extra_imports_beside_this_torch():
    """The test extra installs nothing that breaks other libraries: each
    package it names imports here."""
    from importlib import import_module
    from importlib.metadata import PackageNotFoundError, packages_distributions
    modules = {}
    for mod, dists in packages_distributions().items():
        for d in dists:
            modules.setdefault(d.lower().replace("_", "-"), []).append(mod)
    names = _test_extra()
    for name in names:
        mods = [m for m in modules.get(name.lower(), []) if not m.startswith("_")]
        if not mods:
            raise PackageNotFoundError(f"{name} (in the test extra) is not installed: pip install -e '.[test]'")
        import_module(sorted(mods, key=len)[0])
