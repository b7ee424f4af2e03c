"""bench/bench_compile.py still runs: its rows that take the compiled GPT step
apart (vendor calls stubbed out, graphs that do nothing on fl and on CPU
tensors) depend on flbridge's compiler internals, and the bench is not run
by any other test.  Slow: it compiles the step five ways."""
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
