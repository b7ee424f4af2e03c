"""docs/vendor-guide.md is executed: its sh and python blocks run in order in
an empty folder, against the x1 simulator playing a vendor's SDK (the
python blocks with FLBRIDGE_DEVICE_DIR=specs, as the guide says)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "vendor-guide.md"


def blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(sh|python)\n(.*?)```", GUIDE.read_text(), re.S)


def test_the_guide_has_the_steps_it_promises():
    kinds = [k for k, _ in blocks()]
    text = " ".join(code for _, code in blocks())
    assert kinds.count("python") >= 2 and kinds.count("sh") >= 4
    for step in ("flbridge scaffold", "flbridge validate --static", "flbridge validate specs", "flbridge doctor",
                 "flbridge coverage",
                 "op_db", "extends: ../scaffold/acme.yaml"):
        assert step in text, step


@pytest.mark.slow
def test_the_guide_runs_from_header_to_training(tmp_path):
    env = dict(os.environ, REPO=str(ROOT), X1SIM_STRICT="1", PYTHONWARNINGS="ignore")
    env.pop("FLBRIDGE_DEVICE_DIR", None)
    bin_dir = str(Path(sys.executable).parent)          # the `flbridge` command beside this python
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    for i, (kind, code) in enumerate(blocks()):
        if kind == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
            run_env = env
        else:
            script = tmp_path / f"block{i}.py"
            script.write_text(code)
            cmd = [sys.executable, str(script)]
            run_env = dict(env, FLBRIDGE_DEVICE_DIR="specs")
        r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=run_env, timeout=600)
        assert r.returncode == 0, (f"block {i} ({kind}):\n{code}\nstdout:\n{r.stdout[-3000:]}\n"
                                   f"stderr:\n{r.stderr[-3000:]}")
    assert (tmp_path / "scaffold" / "acme.yaml").is_file() and (tmp_path / "specs" / "acme.yaml").is_file()
