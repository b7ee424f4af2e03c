"""Autocompare: ops that ran on a chip are run again on the CPU and diffed.
The simulators' debug mode corrupts one kernel's output on purpose
(x1_debug_set_corrupt / th1DebugCorruptKernel): autocompare must name the
ops that kernel computes, and nothing else."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import flbridge
from flbridge.devices import chip_for
from flbridge.errors import AutocompareError, AutocompareWarning
from flbridge.demos.models import SmallCNN, TinyGPT, synthetic_batch, token_batch
from tests.conftest import routes

ROOT = Path(__file__).resolve().parents[1]


class corrupt:
    """The chip's simulator adds 1 to the first element of `kernel`'s output
    (a kernel name of the simulator's counters) while the block runs."""

    def __init__(self, device, kernel):
        self.rt = chip_for(device).runtime
        lib = self.rt.lib
        self.set = lib.x1_debug_set_corrupt if hasattr(lib, "x1_debug_set_corrupt") else lib.th1DebugCorruptKernel
        self.get = lib.x1_debug_get_corruptions if hasattr(lib, "x1_debug_get_corruptions") \
            else lib.th1DebugGetCorruptions
        self.kernel = kernel

    def corruptions(self) -> int:
        n = self.rt.ffi.new("uint64_t *")
        assert self.get(n) == self.rt.ok
        return int(n[0])

    def __enter__(self):
        assert self.set(self.kernel.encode()) == self.rt.ok
        self.before = self.corruptions()
        return self

    def __exit__(self, *exc):
        self.set(b"")
        self.done = self.corruptions() - self.before


def _step(model_name, device):
    """One training step (forward, backward, SGD) of the CNN or the transformer."""
    torch.manual_seed(0)
    if model_name == "cnn":
        model, (x, y) = SmallCNN().to(device), synthetic_batch(8)
        loss_of = lambda m, a, b: F.cross_entropy(m(a), b)          # noqa: E731
    else:
        model, (x, y) = TinyGPT(layers=1).to(device), token_batch()
        loss_of = lambda m, a, b: m(a, b)[1]                        # noqa: E731
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = x.to(device), y.to(device)

    def run():
        loss_of(model, x, y).backward()
        opt.step()
    return run


def _ops_of(device, c_function):
    """The aten overloads the chip's spec binds to `c_function`."""
    rt = chip_for(device).runtime
    return {b.entry.qualname for b in rt.ops.values() if b.entry.impl == c_function}


CASES = [("xpu:x1", "cnn"), ("xpu:x1", "gpt"), ("xpu:th1", "cnn"), ("xpu:th1", "gpt"),
         pytest.param("xpu:x1-v2", "cnn", marks=pytest.mark.slow),
         pytest.param("xpu:x1-v2", "gpt", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name, model", CASES)
def test_a_corrupted_kernel_is_named_and_nothing_else(flchips, name, model):
    device = flchips[name].device
    impl = {"xpu:th1": "th1Add"}.get(name, "x1_add")
    label = f"{impl} [{name}]"
    run = _step(model, device)
    with flbridge.autocompare(warn=False) as clean:
        run()
    assert clean.report() == [] and sum(clean.compared.values()) > 40
    with corrupt(device, "add") as c, flbridge.autocompare(warn=False) as ac:
        run()
    assert c.done > 0                                       # the simulator did corrupt outputs
    bad = {m["op"] for m in ac.report()}
    assert bad and bad <= _ops_of(device, impl)             # only ops that kernel computes
    for m in ac.report():
        assert m["device"] == name and label in m["kernels"]
        assert m["max_abs_err"] == pytest.approx(1.0, rel=1e-3)
        assert m["mismatching_calls"] >= 1


def test_mismatch_report_has_module_path_source_line_and_backward_phase(x1):
    """gelu_backward corrupted: the report names the backward op, the module
    the forward ran in and the user's forward line."""
    model = TinyGPT(layers=2).to(x1)
    x, y = (t.to(x1) for t in token_batch())
    with corrupt(x1, "gelu_backward"), flbridge.autocompare() as ac:
        logits, loss = model(x, y)  # the forward line
        with pytest.warns(AutocompareWarning, match=r"aten::gelu_backward.default on xpu:x1 differs"):
            loss.backward()
    (m,) = ac.report()
    assert m["op"] == "aten::gelu_backward.default" and m["mismatching_calls"] == 2
    assert m["phase"] == "backward (GeluBackward0)"
    assert m["module"] == "blocks.1.mlp.1"                  # the last block's GELU runs first in backward
    assert m["source"].startswith(f"{__file__}:") and "test_mismatch_report" in m["source"]
    assert m["shape"] == m["cpu_shape"] == [2, 12, 256] and m["dtype"] == "float32"
    assert m["kernels"] == ["x1_gelu_backward [xpu:x1]"]
    assert "aten::gelu_backward.default on xpu:x1 (backward (GeluBackward0)): 2 of 2 calls differ" in ac.table()
    d = json.loads(ac.to_json())
    assert d["mismatches"][0]["op"] == "aten::gelu_backward.default" and d["compared_calls"] > 50


def test_raise_on_mismatch_and_op_selection(x1):
    a, b = torch.randn(8).to(x1), torch.randn(8).to(x1)
    with corrupt(x1, "add"):
        with pytest.raises(AutocompareError, match=r"aten::add.Tensor on xpu:x1 \(forward\): 1 of 1 calls differ"):
            with flbridge.autocompare(raise_on_mismatch=True, warn=False):
                a + b
        with flbridge.autocompare(ops=["aten::mul"], raise_on_mismatch=True, warn=False) as ac:
            a + b                                          # not selected: not compared
            a * b
        assert set(ac.compared) == {("aten::mul.Tensor", "xpu:x1")}
        with flbridge.autocompare(tolerances={r"aten::add": (0.0, 2.0)}, raise_on_mismatch=True, warn=False):
            a + b                                          # within this op's own tolerance
    from flbridge.binding import launch
    assert not launch.WATCH.active


def test_inplace_ops_compare_the_written_argument_and_cpu_ops_are_skipped(x1):
    a, b = torch.randn(6).to(x1), torch.randn(6).to(x1)
    with corrupt(x1, "add"), flbridge.autocompare(warn=False) as ac:
        a.add_(b)
        torch.cat([a, b])                                  # no cat kernel: ran on the CPU, nothing to compare
    (m,) = ac.report()
    assert m["op"] == "aten::add_.Tensor" and m["output"] == "result"
    cat_native = ("aten::cat.default", "native") in routes(x1)
    assert (("aten::cat.default", "xpu:x1") in ac.compared) == cat_native


@pytest.mark.slow
def test_env_variable_compares_a_whole_program_and_reports_at_exit(tmp_path):
    report = tmp_path / "ac.json"
    script = textwrap.dedent("""
        import torch, flbridge
        flbridge.init()
        d = flbridge.torch_device("xpu:x1")
        a, b = torch.randn(4).to(d), torch.randn(4).to(d)
        (a + b).cpu(); (a * b).cpu()
    """)
    env = dict(os.environ, FLBRIDGE_AUTOCOMPARE="1", FLBRIDGE_AUTOCOMPARE_REPORT=str(report), X1SIM_CORRUPT="add",
               FLBRIDGE_WARN="off", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "flbridge autocompare: 2 calls of 2 ops compared with the CPU, 1 ops differ" in r.stderr
    assert "aten::add.Tensor on xpu:x1 (forward)" in r.stderr
    d = json.loads(report.read_text())
    assert [m["op"] for m in d["mismatches"]] == ["aten::add.Tensor"]
