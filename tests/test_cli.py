"""The `flbridge` command, init's refusal when PrivateUse1 is taken, and ops
from several threads at once."""
import os
import subprocess
import sys

import pytest
import torch

import flbridge
from flbridge.demos.train import run_demo
from tests.conftest import run_in_threads


def test_demo_prints_losses_routes_and_bytes(flchips):
    lines = []
    assert run_demo(steps=3, device="xpu:x1", batch=8, out=lines.append) == 0
    text = "\n".join(lines)
    assert "on fl:1 = xpu:x1 (SparkAI X1-Edge) beside the CPU" in text
    assert text.count("\n   ") >= 3                              # one line per step
    assert "What ran where on xpu:x1 (fl:1):" in text
    assert "aten::convolution.default" in text and "x1_add" in text
    assert "input has dtype float32 (x1_conv2d takes float16)" in text
    assert "Bytes moved:" in text and "mapped (zero-copy)" in text
    assert "largest parameter difference after training" in text


def test_demo_trains_the_small_gpt_fully_on_th1(flchips):
    lines = []
    assert run_demo(steps=2, device="xpu:th1", batch=2, out=lines.append, model="gpt") == 0
    text = "\n".join(lines)
    assert "TinyGPT" in text and "on fl:0 = xpu:th1" in text
    assert "(100.0%); fallbacks 0" in text                      # every op on the chip, padding included
    assert "th1Cat" in text and "th1Matmul" in text


def test_graph_demo_replays_bit_identically(flchips):
    from flbridge.demos.graph import run_graph_demo
    lines = []
    assert run_graph_demo(device="xpu:th1", batch=2, rounds=3, out=lines.append) == 0
    text = "\n".join(lines)
    assert "replay bit-identical to eager: True" in text and "follows a new input: True" in text
    assert "fl replay" in text and "CPU (torch)" in text


@pytest.mark.slow  # four interpreters run the demo and the device table: 6 s
def test_demo_and_devices_from_the_shell():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "flbridge.cli", "demo", "--device", "xpu:th1", "--steps", "2",
                        "--batch", "4"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "xpu:th1 (Tianhe Semiconductor TH1)" in r.stdout and "host -> device" in r.stdout
    assert "FallbackWarning" not in r.stderr                     # the table says it instead
    r = subprocess.run([sys.executable, "-m", "flbridge.cli", "devices"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("fl:0  xpu:th1") and lines[1].startswith("fl:1  xpu:x1 ")
    assert lines[2].startswith("fl:2  xpu:x1-v2") and "native ops" in lines[2]


@pytest.mark.slow  # an interpreter whose PrivateUse1 another backend took: 3 s
def test_init_refuses_when_privateuse1_is_taken():
    code = ("import torch; torch.utils.rename_privateuse1_backend('otherdev')\n"
            "import flbridge\n"
            "try:\n    flbridge.init()\n"
            "except flbridge.FlbridgeError as e:\n    print('ERR', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ERR PrivateUse1 is already taken by another library as 'otherdev'" in r.stdout


def test_ops_from_several_threads(flchips):
    dev = flbridge.torch_device("xpu:x1")
    results = {}

    def work(i):
        torch.manual_seed(i)
        a, b = torch.randn(64, 32), torch.randn(32, 16)
        fa, fb = a.to(dev), b.to(dev)
        for _ in range(20):
            y = torch.relu(fa @ fb) * 2.0 + 1.0                # native
            z = y.cumsum(0)                                   # CPU fallback
        results[i] = (z.cpu(), torch.relu(a @ b).mul(2).add(1).cumsum(0))

    errors = run_in_threads(work, 4)
    assert not errors, errors
    for got, want in results.values():
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def _cli(*args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "flbridge.cli", *args], capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=timeout)


def test_cli_errors_are_one_line_and_a_nonzero_exit(flchips, capsys):
    import pytest
    from flbridge.cli import main
    assert main(["demo", "--device", "xpu:nope"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["flbridge demo: error: unknown device 'xpu:nope'; registered chips: "
                                "xpu:th1 (fl:0), xpu:x1 (fl:1), xpu:x1-v2 (fl:2)"]
    for args, msg in ((("--batch", "0"), "argument --batch: must be at least 1, got 0"),
                      (("--steps", "-1"), "argument --steps: must be at least 1, got -1"),
                      (("--steps", "two"), "argument --steps: 'two' is not a whole number")):
        with pytest.raises(SystemExit) as ei:
            main(["demo", *args])
        assert ei.value.code == 2 and msg in capsys.readouterr().err


def test_run_demo_refuses_bad_arguments():
    import pytest
    for kw in ({"steps": 0}, {"batch": -1}, {"steps": 1.5}):
        with pytest.raises(ValueError, match="must be a whole number of at least 1"):
            run_demo(**kw, out=lambda *_: None)


@pytest.mark.slow
def test_compile_demo_trains_with_every_node_replayed(flchips):
    """`flbridge demo --compile`: compiled forward, backward and AdamW step
    (the step fused into the chip's kernel) beside the CPU."""
    from flbridge.demos.compile import run_compile_demo
    lines = []
    assert run_compile_demo(steps=2, device="xpu:th1", batch=4, out=lines.append) == 0
    text = "\n".join(lines)
    assert "3 graphs (forward, backward, optimizer step)" in text, text
    assert "every node replayed (nothing had to run eagerly)" in text, text
    assert "fl compiled" in text and "largest parameter difference after training" in text
