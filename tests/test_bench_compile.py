"""bench/bench_compile.py and bench/bench_compile_floor.py still run: their
rows that take the compiled calls apart (vendor calls stubbed out or run back
to back, graphs that do nothing on fl, plain fl and CPU tensors) depend on
flbridge's compiler and stand-in internals, and no other test runs the
benches.  Slow: each compiles the GPT step several ways."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_compile_takes_the_gpt_step_apart():
    out = subprocess.run([sys.executable, "bench/bench_compile.py", "--gpt-only", "--chips", "xpu:x1",
                          "--rounds", "1", "--cpu-time"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    for row in ("fl replay", "fl compile=fl", "compile=fl, no kernels", "null graphs, cpu", "null graphs, fl",
                "beyond the kernels the compiled call costs"):
        assert row in out.stdout, out.stdout


@pytest.mark.slow
def test_bench_compile_floor_measures_plain_fl_tensors():
    """bench/bench_compile_floor.py builds plain PrivateUse1 tensors from
    flbridge's stand-in internals and runs Dynamo, AOTAutograd and autograd
    over them: it must keep running, and its compiled rows must keep
    matching the CPU (it checks them itself)."""
    out = subprocess.run([sys.executable, "bench/bench_compile_floor.py", "--chips", "xpu:x1", "--rounds", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    for row in ("encoder fwd", "gpt train step (loss only)", "kernels alone", "null graphs, plain fl",
                "kernels alone + null graphs, plain fl ="):
        assert row in out.stdout, out.stdout
    assert out.stdout.count("kernels alone + null graphs, plain fl =") == 2, out.stdout
