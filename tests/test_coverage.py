"""flbridge.coverage: the ops a model calls and the route each would take on
each chip, predicted on fake tensors without running a kernel, and checked
against the route table a real run records."""
import copy
import json

import pytest
import torch

import flbridge
from flbridge import cli
from flbridge.devices import chip_for
from flbridge.demos.models import example_cnn, example_gpt
from tests.conftest import routes

CHIPS = ["xpu:x1", "xpu:th1", "xpu:x1-v2"]
EXAMPLES = {"cnn": example_cnn, "gpt": example_gpt}


def _real_run(device, model, inputs, loss_fn, optimizer):
    """One training step on the chip; its route table {(op, route): calls}."""
    fl_model = copy.deepcopy(model).to(device)
    opt = optimizer(fl_model.parameters())
    fl_inputs = tuple(t.to(device) for t in inputs)
    flbridge.reset_stats(device)
    loss_fn(fl_model(*fl_inputs)).backward()
    opt.step()
    return routes(device)


@pytest.mark.parametrize("name, example", [
    (c, e) if (e == "cnn" or c == "xpu:x1") else pytest.param(c, e, marks=pytest.mark.slow)
    for e in ("cnn", "gpt") for c in CHIPS])
def test_prediction_equals_the_route_table_of_a_real_run(flchips, name, example):
    """Forward, backward and an Adam step (foreach, as PyTorch picks for fl
    tensors): every (op, route) with its call count."""
    torch.manual_seed(0)
    model, inputs, loss_fn = EXAMPLES[example]()
    adam = lambda p: torch.optim.Adam(p, lr=1e-3)      # noqa: E731
    predicted = flbridge.coverage(model, inputs, device=name, loss_fn=loss_fn, optimizer=adam)[name].routes()
    real = _real_run(flchips[name].device, model, inputs, loss_fn, adam)
    assert predicted == real
    assert any(route == "native" for _, route in real)


def test_coverage_runs_no_kernel_and_leaves_the_model_alone(x1):
    model, inputs, loss_fn = example_cnn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rt = chip_for(x1).runtime
    launches = rt.counters()["kernel_launches"]
    allocated = chip_for(x1).allocator.allocated
    rep = flbridge.coverage(model, inputs, device=x1, loss_fn=loss_fn, optimizer="sgd")
    assert rep["xpu:x1"].routed_calls > 20
    assert rt.counters()["kernel_launches"] == launches
    assert chip_for(x1).allocator.allocated == allocated
    assert flbridge.stats(x1)["native_ops"] == 0 and flbridge.stats(x1)["fallback_ops"] == 0
    for k, v in model.state_dict().items():
        assert v.device.type == "cpu"
        torch.testing.assert_close(v, before[k])
    assert all(p.grad is None for p in model.parameters())


def test_cpu_tensors_inside_a_model_take_the_route_eager_takes(x1):
    """A CPU index tensor made inside the model beside an fl tensor."""
    class Pick(torch.nn.Module):
        def forward(self, x):
            return (x[torch.tensor([0, 2])] * 2).sum()

    x = torch.randn(4, 3)
    predicted = flbridge.coverage(Pick(), (x,), device=x1, backward=False)["xpu:x1"].routes()
    flbridge.reset_stats(x1)
    Pick()(x.to(x1))
    assert predicted == routes(x1)


def test_prediction_checks_devices_as_eager_does(x1):
    """Meta tensors stand for the chip's; a CPU tensor (not 0-dim) is not
    the chip's, so the native kernel does not take it."""
    from flbridge.routing import OpRoute
    chip = chip_for(x1)
    r = OpRoute(chip, torch.ops.aten.mul.Tensor)
    meta = torch.empty(3, device="meta")
    assert r.predict((meta, torch.empty(3, device="meta")), {})[0] == "native"
    assert r.predict((meta, torch.tensor(2.0)), {})[0] == "native"           # a 0-dim CPU scalar is fine
    route, _, reason = r.predict((meta, torch.ones(3)), {})
    assert route != "native" and reason.kind == "device"


def test_report_puts_chips_side_by_side_in_markdown_and_json(flchips):
    model, inputs, loss_fn = example_cnn()
    rep = flbridge.coverage(model, inputs, device=["xpu:x1", "xpu:th1"], loss_fn=loss_fn)
    md = rep.markdown()
    assert "| op | xpu:x1 (fl:" in md and "| xpu:th1 (fl:" in md
    assert "native share of calls" in md
    assert "| `aten::convolution.default` |" in md
    for chip in (rep["xpu:x1"], rep["xpu:th1"]):
        assert chip.native_calls + sum(r.calls for r in chip.rows if r.route != "native") == chip.routed_calls
        assert chip.native_share == pytest.approx(chip.native_calls / chip.routed_calls)
    d = json.loads(rep.json())
    assert [c["device_type"] for c in d["chips"]] == ["xpu:x1", "xpu:th1"]
    row = next(r for r in d["chips"][0]["ops"] if r["op"] == "aten::convolution.default")
    assert row["route"] != "native" and row["reason"] and row["fix"]   # x1 rev 1: float16 convolution only
    assert any(r["route"] == "native" and r["detail"] == "x1_relu" for r in d["chips"][0]["ops"])


def test_cli_prints_the_coverage_of_a_file(tmp_path, capsys, flchips):
    f = tmp_path / "net.py"
    f.write_text("import torch\n"
                 "def example():\n"
                 "    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), (torch.randn(2, 8),)\n")
    assert cli.main(["coverage", f"{f}:example", "--device", "xpu:th1", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ops = {(r["op"], r["route"]): r["calls"] for r in d["chips"][0]["ops"]}
    assert ops[("aten::relu.default", "native")] == 1
    assert ("aten::threshold_backward.default", "native") in ops     # backward by default
    assert cli.main(["coverage", f"{f}:nothing"]) == 1
    assert "no callable 'nothing'" in capsys.readouterr().err
