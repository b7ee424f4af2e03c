"""The op router: native kernels under their constraints, the tensor adapter,
the fallback chain, vendor-error recovery, knobs and messages.  The
simulators run in strict mode, so a call they cannot take would abort."""
import copy
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import flbridge
from flbridge import config
from flbridge.devices import chip_for
from tests.conftest import routes, sim_kernels

ROOT = Path(__file__).resolve().parents[1]


def close(fl_t, ref, **kw):
    assert fl_t.device.type == "fl"
    torch.testing.assert_close(fl_t.cpu(), ref, **kw)


@pytest.fixture
def knobs(monkeypatch):
    """Set FLBRIDGE_* variables for one test (routes are rebuilt)."""
    def set_(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        config.reload()
        for c in flbridge.chips():
            c.routes.clear()
    yield set_
    for k in list(os.environ):
        if k.startswith("FLBRIDGE_"):
            monkeypatch.delenv(k)
    config.reload()
    for c in flbridge.chips():
        c.routes.clear()


# --------------------------------------------------------------- native

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_elementwise_runs_natively_with_broadcast_and_scalars(x1, dtype):
    a, b = torch.randn(4, 5).to(dtype), torch.randn(5).to(dtype)
    fa, fb = a.to(x1), b.to(x1)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float16 else {}
    close(fa + fb, a + b, **tol)
    close(fa - 2 * fb, a - 2 * b, **tol)
    close(fa * 3.5, a * 3.5, **tol)
    close(fa / (fb.abs() + 1), a / (b.abs() + 1), **tol)
    close(torch.add(fa, fb, alpha=0.5), torch.add(a, b, alpha=0.5), **tol)
    close(fa * torch.tensor(2.0), a * 2, **tol)                     # CPU 0-dim scalar
    k = sim_kernels(x1)
    assert k["add"] == 3 and k["sub"] == 1 and k["mul"] == 3 and k["div"] == 1 and k["abs"] == 1
    assert flbridge.stats(x1)["cpu_fallback_ops"] == 0
    assert flbridge.stats(x1)["h2d_calls"] == 0          # x1 maps instead


def test_non_contiguous_and_transposed_inputs_run_natively(x1):
    a = torch.randn(6, 8)
    fa = a.to(x1)
    close(fa.t() + fa.t(), a.t() + a.t())
    close(fa[:, ::2] * fa[:, 1::2], a[:, ::2] * a[:, 1::2])
    close(torch.relu(fa.t()[1:]), torch.relu(a.t()[1:]))
    close(fa.t() @ fa, a.t() @ a, rtol=1e-5, atol=1e-5)
    assert all(r == "native" for (op, r) in routes(x1) if op in ("aten::add.Tensor", "aten::mm.default"))


def test_mixed_dtypes_are_cast_on_the_device(x1):
    a, b = torch.randn(8).half(), torch.randn(8)
    out = a.to(x1) + b.to(x1)
    assert out.dtype == torch.float32
    close(out, a.float() + b)
    assert routes(x1)[("aten::add.Tensor", "native")] == 1
    assert sim_kernels(x1)["copy"] >= 1                      # the float16 operand, cast on the chip


def test_empty_tensors(x1):
    e = torch.empty(0, 3).to(x1)
    assert (e + e).shape == (0, 3)
    assert (e @ torch.empty(3, 2).to(x1)).shape == (0, 2)
    assert sim_kernels(x1).get("add", 0) == 0


def test_reductions_norms_embedding_and_batchnorm_inference_native(x1):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 5)
    fx = x.to(x1)
    close(fx.sum((2, 3), keepdim=True), x.sum((2, 3), keepdim=True), rtol=1e-5, atol=1e-5)
    close(fx.mean(1), x.mean(1))
    close(fx.sum(), x.sum(), rtol=1e-5, atol=1e-4)
    ln = torch.nn.LayerNorm(5)
    ref = ln(x).detach()
    close(ln.to(x1)(fx), ref, rtol=1e-5, atol=1e-5)
    bn = torch.nn.BatchNorm2d(3).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    ref = bn(x).detach()
    close(bn.to(x1)(fx), ref, rtol=1e-5, atol=1e-5)
    emb = torch.nn.Embedding(10, 4)
    idx = torch.tensor([[1, 2], [9, 0]])
    ref = emb(idx).detach()
    close(emb.to(x1)(idx.to(x1)), ref)
    k = sim_kernels(x1)
    assert k["sum"] == 2 and k["mean"] == 1 and k["layer_norm"] == 1 and k["batch_norm"] == 1
    assert k["embedding"] == 1


def test_layout_adapter_converts_nchw_to_nhwc_on_the_device(x1v2):
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 9, 9), torch.randn(8, 4, 3, 3)
    fx, fw = x.to(x1v2), w.to(x1v2)
    flbridge.reset_stats(x1v2)
    y = F.conv2d(fx, fw, padding=1)
    k = sim_kernels(x1v2)
    assert k["conv2d"] == 1 and k["copy"] == 2         # input and weight made NHWC/OHWI by x1_copy
    s = flbridge.stats(x1v2)
    assert s["h2d_calls"] == 0 and s["d2h_calls"] == 0  # nothing went through the host
    assert y.is_contiguous()                             # written back as NCHW through strides
    close(y, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    # channels_last input is already NHWC in memory: no copy for it
    flbridge.reset_stats(x1v2)
    xcl = x.to(memory_format=torch.channels_last).to(x1v2)
    y2 = F.conv2d(xcl, fw, padding=1)
    assert sim_kernels(x1v2)["copy"] == 1               # only the weight
    close(y2, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)


def test_pools_run_natively_on_nhwc(x1v2):
    x = torch.randn(2, 3, 8, 9)
    fx = x.to(x1v2)
    close(F.max_pool2d(fx, 2), F.max_pool2d(x, 2))
    v, i = F.max_pool2d(fx, 3, 2, 1, return_indices=True)
    rv, ri = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    close(v, rv)
    assert torch.equal(i.cpu(), ri)
    close(F.avg_pool2d(fx, 3, 2, 1, count_include_pad=False), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False))
    close(F.adaptive_avg_pool2d(fx, (3, 4)), F.adaptive_avg_pool2d(x, (3, 4)))
    k = sim_kernels(x1v2)
    assert k["max_pool2d"] == 2 and k["avg_pool2d"] == 1 and k["adaptive_avg_pool2d"] == 1


def test_int8_gemm_through_the_uint8_kernel(x1):
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 16), dtype=torch.int8)
    out = torch._int_mm(a.to(x1), b.to(x1))
    assert out.dtype == torch.int32
    assert torch.equal(out.cpu(), torch._int_mm(a, b))
    k = sim_kernels(x1)
    assert k["gemm_u8"] == 1 and k["s8_to_u8"] == 2       # both operands shifted by 128 on the chip
    assert routes(x1)[("aten::_int_mm.default", "native")] == 1


# ---------------------------------------------------- constraints -> fallback

def test_conv_runs_natively_within_constraints_and_falls_back_outside(x1v2):
    x, w = torch.randn(1, 4, 12, 12), torch.randn(4, 4, 3, 3)
    fx, fw = x.to(x1v2), w.to(x1v2)
    close(F.conv2d(fx, fw, stride=2, padding=1), F.conv2d(x, w, stride=2, padding=1), rtol=1e-4, atol=1e-4)
    with pytest.warns(flbridge.FallbackWarning, match=r"aten::convolution.default on xpu:x1-v2 \(fl:2\) does "
                                                      r"not run natively: constraint stride=3 not in \[1, 2, 4\]"):
        y = F.conv2d(fx, fw, stride=3)
    close(y, F.conv2d(x, w, stride=3), rtol=1e-4, atol=1e-4)
    r = routes(x1v2)
    assert r[("aten::convolution.default", "native")] == 1 and r[("aten::convolution.default", "cpu")] == 1
    assert sim_kernels(x1v2)["conv2d"] == 1


def test_x1_revision1_convolves_float16_natively_and_float32_on_the_cpu(x1):
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    with pytest.warns(flbridge.FallbackWarning, match="input has dtype float32 \\(x1_conv2d takes float16\\)"):
        y32 = F.conv2d(x.to(x1), w.to(x1), padding=1)
    close(y32, F.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
    y16 = F.conv2d(x.half().to(x1), w.half().to(x1), padding=1)
    close(y16, F.conv2d(x.half(), w.half(), padding=1), rtol=1e-2, atol=1e-2)
    r = routes(x1)
    assert r[("aten::convolution.default", "cpu")] == 1 and r[("aten::convolution.default", "native")] == 1
    assert sim_kernels(x1)["conv2d"] == 1


def test_th1_matmul_sizes_not_multiples_of_16_are_padded_on_the_chip(th1):
    a, b = torch.randn(32, 16), torch.randn(16, 48)
    close(a.to(th1) @ b.to(th1), a @ b, rtol=1e-5, atol=1e-5)
    assert sim_kernels(th1) == {"mm": 1}                 # sizes fit: the kernel alone
    c = torch.randn(16, 50)
    close(a.to(th1) @ c.to(th1), a @ c, rtol=1e-5, atol=1e-5)
    k = sim_kernels(th1)
    # N=50 -> 64: c into a zeroed 16x64 buffer (fill, copy), the kernel, the 32x50 part copied out
    assert k["mm"] == 2 and k["fill"] == 1 and k["copy"] == 2
    for (m, kk, n) in ((3, 5, 7), (24, 12, 10), (17, 33, 1)):
        x, y, bias = torch.randn(m, kk), torch.randn(kk, n), torch.randn(n)
        close(torch.addmm(bias.to(th1), x.to(th1), y.to(th1)), torch.addmm(bias, x, y), rtol=1e-5, atol=1e-5)
        xb, yb = torch.randn(2, m, kk), torch.randn(2, kk, n)
        close(torch.bmm(xb.to(th1), yb.to(th1)), torch.bmm(xb, yb), rtol=1e-5, atol=1e-5)
        xt = torch.randn(kk, m).t()                       # a transposed operand, padded too
        close(xt.to(th1) @ y.to(th1), xt @ y, rtol=1e-5, atol=1e-5)
    xh, yh = torch.randn(24, 12).to(torch.bfloat16), torch.randn(12, 10).to(torch.bfloat16)
    close(xh.to(th1) @ yh.to(th1), (xh.float() @ yh.float()).to(torch.bfloat16), rtol=2e-2, atol=2e-2)
    r = routes(th1)
    assert all(route == "native" for (op, route) in r if op in ("aten::mm.default", "aten::addmm.default",
                                                                 "aten::bmm.default"))


def test_a_multiple_of_constraint_without_pad_falls_back_and_says_how_to_fix_it(th1, monkeypatch):
    a, c = torch.randn(32, 16), torch.randn(16, 50)
    close(a.to(th1) @ c.to(th1), a @ c, rtol=1e-5, atol=1e-5)     # makes the route
    kernel = chip_for(th1).routes[torch.ops.aten.mm.default].bound
    monkeypatch.setattr(kernel, "can_pad", False)                  # as for a spec without constraints.pad
    monkeypatch.setattr(kernel, "prepared", {})
    with pytest.warns(flbridge.FallbackWarning, match="constraint N=50 is not a multiple of 16"):
        close(a.to(th1) @ c.to(th1), a @ c, rtol=1e-5, atol=1e-5)
    row = [x for x in flbridge.stats(th1)["routes"] if x["op"] == "aten::mm.default" and x["route"] == "cpu"]
    assert len(row) == 1
    with pytest.raises(flbridge.UnsupportedOpError, match="declare constraints.pad"):
        monkeypatch.setattr(flbridge.config.CONFIG, "fallback", False)
        chip_for(th1).routes[torch.ops.aten.mm.default](( a.to(th1), c.to(th1)), {})


def test_too_many_dims_for_the_descriptor_falls_back(th1):
    a = torch.randn(1, 2, 1, 2, 1, 2, 2)                 # 7-D; th1 descriptors hold 6
    with pytest.warns(flbridge.FallbackWarning, match="has 7 dims \\(xpu:th1 descriptors hold at most 6\\)"):
        close(a.to(th1) + a.to(th1), a + a)


# ---------------------------------------------------------------- chain

def test_vendor_op_specific_fallback_runs_custom_softmax(x1):
    x = torch.randn(4, 10)
    with pytest.warns(flbridge.FallbackWarning, match="running the vendor fallback custom_softmax_x1"):
        y = F.softmax(x.to(x1), dim=-1)
    close(y, F.softmax(x, -1))
    assert sim_kernels(x1)["custom_softmax"] == 1
    s = flbridge.stats(x1)
    assert s["vendor_fallback_ops"] == 1 and s["cpu_fallback_ops"] == 0


def test_decomposition_into_native_ops(x1):
    x = torch.randn(50)
    with pytest.warns(flbridge.FallbackWarning, match="decomposing it into ops the chip runs natively"):
        y = F.glu(x.to(x1))                               # glu = a * sigmoid(b), two halves of x
    close(y, F.glu(x))
    k = sim_kernels(x1)
    assert k["sigmoid"] == 1 and k["mul"] == 1
    assert routes(x1)[("aten::glu.default", "decomposed")] == 1


def test_decomposition_with_a_non_native_part_goes_to_the_cpu_whole(th1):
    x = torch.randn(8, 16)
    y = F.softplus(x.to(th1))                             # needs log1p, which th1 lacks
    close(y, F.softplus(x))
    assert routes(th1) == {("aten::softplus.default", "cpu"): 1}


def test_the_cpu_route_names_the_part_that_kept_the_decomposition_off_the_chip(th1):
    F.softplus(torch.randn(8, 16).to(th1))
    (row,) = flbridge.stats(th1)["routes"]
    assert "its decomposition needs aten::log1p.default (xpu:th1 has no kernel for it)" in row["detail"]
    report = flbridge.coverage(torch.nn.Softplus(), (torch.randn(8, 16),), device="xpu:th1", backward=False)
    (cov,) = report.chips[0].rows
    assert "aten::log1p.default" in cov.detail and "give the chip aten::log1p.default" in cov.fix


def test_a_decomposition_whose_parts_decompose_natively_in_turn_runs_on_the_chip(th1):
    # dist -> norm.Scalar -> linalg_vector_norm -> pow, sum: th1 has none of the first three
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    d = torch.dist(a.to(th1), b.to(th1))
    close(d, torch.dist(a, b))
    r = routes(th1)
    assert r[("aten::dist.default", "decomposed")] == 1 and r[("aten::linalg_vector_norm.default", "decomposed")] == 1
    assert not [k for k in r if k[1] == "cpu"], r


def test_weight_norm_runs_on_the_chip_through_two_levels_of_decomposition(th1):
    torch.manual_seed(0)
    lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(8, 4))
    x = torch.randn(3, 8)
    ref = lin(x)
    ref.sum().backward()
    fl = copy.deepcopy(lin).to(th1)
    out = fl(x.to(th1))
    out.sum().backward()
    close(out, ref)
    for (name, p), (_, q) in zip(lin.named_parameters(), fl.named_parameters()):
        close(q.grad, p.grad)
    r = routes(th1)
    assert r.get(("aten::_weight_norm_interface.default", "decomposed")), r
    assert not [k for k in r if k[1] == "cpu"], r


def test_the_decomposition_depth_is_bounded(th1, monkeypatch):
    from flbridge.routing import route as route_mod
    monkeypatch.setattr(route_mod, "MAX_DECOMPOSITION_DEPTH", 1)     # the parts themselves must be native
    chip = flbridge.devices.chip_for(th1)
    r = route_mod.OpRoute(chip, torch.ops.aten.dist.default)
    meta = torch.empty(4, 8, device="meta")
    assert r.decomposition((meta, meta), {}) is None
    assert "decompositions deep" in r.decomposition_blocker((meta, meta), {})


def test_cat_skips_empty_inputs_so_the_kernel_takes_the_rest(anychip):
    x = torch.randn(3, 4)
    y = torch.cat([torch.empty(0).to(anychip), x.to(anychip), torch.empty(0, 4).to(anychip)])
    assert torch.equal(y.cpu(), x)
    assert list(routes(anychip)) == [("aten::cat.default", "native")]
    with pytest.raises(RuntimeError):     # a wrong rank that is not the legacy (0,) form: PyTorch's own error
        torch.cat([torch.empty(0, 2, 4).to(anychip), x.to(anychip)])


def test_unsupported_op_error_when_cpu_fallback_is_off(x1, knobs):
    knobs(FLBRIDGE_FALLBACK="0")
    x, w = torch.randn(1, 4, 8, 8).to(x1), torch.randn(4, 4, 3, 3).to(x1)
    with pytest.raises(flbridge.UnsupportedOpError) as ei:
        F.conv2d(x, w)
    e = ei.value
    assert e.op == "aten::convolution.default" and e.device_type == "xpu:x1" and e.dtype == "float32"
    assert e.supported_dtypes == ["float16"] and e.fix == "cast input to torch.float16"
    assert str(e).startswith("Op 'aten::convolution.default' not supported on device 'xpu:x1' with dtype "
                             "'float32'")
    assert "Available dtypes: ['float16']. Suggested fix: cast input to torch.float16." in str(e)
    with pytest.raises(flbridge.UnsupportedOpError, match="xpu:x1 has no kernel for it.*FLBRIDGE_FALLBACK=0"):
        torch.cumprod(x, 0)
    close(x + x, x.cpu() * 2)                            # native ops still run


def test_force_fallback_sends_matching_ops_to_the_cpu(x1, knobs):
    knobs(FLBRIDGE_FORCE_FALLBACK=r"aten::mm\b,relu")
    a = torch.randn(4, 4)
    with pytest.warns(flbridge.FallbackWarning, match="forced to the CPU by FLBRIDGE_FORCE_FALLBACK"):
        close(a.to(x1) @ a.to(x1), a @ a)
    close(torch.relu(a.to(x1)), torch.relu(a))
    close(a.to(x1) + a.to(x1), a + a)
    r = routes(x1)
    assert r[("aten::mm.default", "cpu")] == 1 and r[("aten::relu.default", "cpu")] == 1
    assert r[("aten::add.Tensor", "native")] == 1
    assert "mm" not in sim_kernels(x1)


def test_misspelt_knob_is_warned_about(monkeypatch):
    monkeypatch.setenv("FLBRIDGE_FALBACK", "0")
    with pytest.warns(config.ConfigWarning, match="unknown environment variable FLBRIDGE_FALBACK is ignored; "
                                                  "did you mean FLBRIDGE_FALLBACK?"):
        config.reload()
    monkeypatch.delenv("FLBRIDGE_FALBACK")
    config.reload()


def test_log_knob_logs_dispatch_fallback_and_transfers(th1, knobs, caplog):
    knobs(FLBRIDGE_LOG="dispatch,fallback,transfer")
    with caplog.at_level(logging.INFO, logger="flbridge"):
        y = torch.ones(16).to(th1) * 2.0
        y.cumprod(0).cpu()
    text = caplog.text
    assert "dispatch aten::mul.Tensor on xpu:th1: native th1Mul" in text
    assert "fallback aten::cumprod.default on xpu:th1: xpu:th1 has no kernel for it" in text
    assert "transfer h2d xpu:th1: 1 buffers, 64 bytes in one call" in text
    assert "transfer d2h xpu:th1: 64 bytes" in text


def test_fallback_warning_is_said_once_per_op_chip_and_reason(x1):
    x = torch.randn(5).to(x1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            x.cumprod(0)
        x.half().cumprod(0)
        torch.randn(5).to(flbridge.torch_device("xpu:x1-v2")).cumprod(0)
    msgs = [str(m.message) for m in w if issubclass(m.category, flbridge.FallbackWarning)]
    assert len([m for m in msgs if "cumprod" in m and "xpu:x1 " in m]) == 1     # same reason on x1: once
    assert len([m for m in msgs if "cumprod" in m and "xpu:x1-v2" in m]) == 1   # another chip: again
    assert all(m.startswith("flbridge: aten::cumprod.default on xpu:x1") for m in msgs if "cumprod" in m)


def test_fallback_warning_points_at_user_code(x1):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.randn(3).to(x1).cummax(0)
    assert any(m.filename == __file__ for m in w if issubclass(m.category, flbridge.FallbackWarning))


def test_vendor_calls_show_in_the_torch_profiler(x1v2):
    x, w = torch.randn(1, 4, 16, 16).to(x1v2), torch.randn(8, 4, 3, 3).to(x1v2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y = torch.relu(F.conv2d(x, w, padding=1))
    keys = {e.key: e for e in prof.key_averages()}
    assert "x1_conv2d [xpu:x1-v2]" in keys and "x1_relu [xpu:x1-v2]" in keys
    assert "aten::convolution" in keys                  # beside PyTorch's own op events
    assert keys["x1_conv2d [xpu:x1-v2]"].count == 1
    assert y.shape == (1, 8, 16, 16)


# ------------------------------------------------------- vendor failures

def _faults(device, spec: str):
    rt = chip_for(device).runtime
    setter = rt.lib.x1_debug_set_faults if hasattr(rt.lib, "x1_debug_set_faults") else rt.lib.th1DebugInjectFaults
    assert setter(spec.encode()) == rt.ok


def test_vendor_error_is_recovered_by_fallback_and_reported_once(x1v2):
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    fx, fw = x.to(x1v2), w.to(x1v2)
    _faults(x1v2, "conv2d:1")
    try:
        with pytest.warns(flbridge.FallbackWarning, match=r"aten::convolution.default on xpu:x1-v2 .* does not "
                                                          r"run natively: x1_conv2d failed with X1_ERR_DEVICE: "
                                                          r"x1_conv2d: device fault"):
            y = F.conv2d(fx, fw, padding=1)
        close(y, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
        close(fx, x)                                       # inputs untouched
        y2 = F.conv2d(fx, fw, padding=1)                   # the next call is native again
        close(y2, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    finally:
        _faults(x1v2, "")
    r = routes(x1v2)
    assert r[("aten::convolution.default", "cpu")] == 1 and r[("aten::convolution.default", "native")] == 1
    assert flbridge.stats(x1v2)["vendor_errors"] == 1


def test_a_kernel_that_keeps_failing_warns_once_and_keeps_one_route_row(x1v2):
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    fx, fw = x.to(x1v2), w.to(x1v2)
    _faults(x1v2, "conv2d:1+")                         # every launch from now on fails
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(5):
                close(F.conv2d(fx, fw, padding=1), F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    finally:
        _faults(x1v2, "")
    mine = [c for c in caught if issubclass(c.category, flbridge.FallbackWarning)]
    assert len(mine) == 1, [str(c.message) for c in mine]
    rows = [r for r in flbridge.stats(x1v2)["routes"] if r["op"] == "aten::convolution.default"]
    assert len(rows) == 1 and rows[0]["route"] == "cpu" and rows[0]["calls"] == 5
    assert "X1_ERR_DEVICE" in rows[0]["detail"]
    assert flbridge.stats(x1v2)["vendor_errors"] == 5


@pytest.mark.parametrize("bad", [[1, -3], [2, 50], [-53, 0]])
def test_an_index_the_kernel_finds_out_of_range_raises_pytorchs_error(anychip, bad):
    """embedding / index_select with an index out of range: the kernel fails
    on the data, and the chain goes to the CPU, which raises PyTorch's own
    IndexError.  It had gone to embedding's decomposition (indexing, which
    wraps negative indices) and returned row 47 for -3 and for -53, where the
    CPU raises."""
    w = torch.randn(50, 4)
    idx = torch.tensor(bad)
    fw, fidx = w.to(anychip), idx.to(anychip)
    for fn in (F.embedding, lambda i, t: torch.index_select(t, 0, i)):
        with pytest.raises(IndexError) as cpu_err:
            fn(idx, w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flbridge.FallbackWarning)
            with pytest.raises(IndexError) as fl_err:
                fn(fidx, fw)
        assert str(fl_err.value) == str(cpu_err.value)
        close(fw, w, rtol=0, atol=0)                               # inputs intact and usable
        assert fidx.cpu().tolist() == bad
    close(F.embedding(fidx.clamp(0, 49), fw), F.embedding(idx.clamp(0, 49), w), rtol=0, atol=0)


def test_vendor_error_in_an_inplace_op_leaves_correct_values(th1):
    t = torch.arange(16.0)
    ft = t.to(th1) * 1.0
    _faults(th1, "mul:1")
    try:
        with pytest.warns(flbridge.FallbackWarning, match="TH1_ERROR_HARDWARE"):
            ft.mul_(3.0)
    finally:
        _faults(th1, "")
    close(ft, t * 3)


# ------------------------------------------- python fallback, error policy

PY_FALLBACK = textwrap.dedent('''
    import torch
    CALLS = []

    def gelu_via_tanh(self, approximate="none"):
        CALLS.append(approximate)
        return 0.5 * self * (1 + torch.tanh(0.7978845608 * (self + 0.044715 * self * self * self)))
''')


@pytest.mark.slow  # interpreters with edited specs: 4 s
def test_python_op_specific_fallback_and_error_policy(tmp_path):
    (tmp_path / "myfb.py").write_text(PY_FALLBACK)
    specs = tmp_path / "specs"
    specs.mkdir()
    x1 = ROOT / "device_specs" / "x1.yaml"
    (specs / "edge.yaml").write_text(textwrap.dedent(f"""
        extends: "{x1}"
        device_type: "xpu:edge"
        supported_ops:
          - name: aten::gelu
            dtype_support: [float16]          # float32 gelu is not native here
        fallback_policy:
          default: error
          op_specific:
            "aten::gelu": "python:myfb:gelu_via_tanh"
            "aten::cumsum": cpu
    """))
    code = textwrap.dedent("""
        import torch, flbridge, myfb
        flbridge.init()
        d = flbridge.torch_device("xpu:edge")
        x = torch.linspace(-3, 3, 7)
        y = torch.nn.functional.gelu(x.to(d))
        torch.testing.assert_close(y.cpu(), torch.nn.functional.gelu(x, approximate="tanh"), rtol=1e-4, atol=1e-4)
        print("python fallback", myfb.CALLS, flbridge.stats(d)["python_fallback_ops"])
        print("cumsum", x.to(d).cumsum(0).cpu()[-1].item())
        try:
            x.to(d).cummax(0)
        except flbridge.UnsupportedOpError as e:
            print("ERR", e)
    """)
    env = dict(os.environ, FLBRIDGE_DEVICE_DIR=str(specs), PYTHONPATH=str(tmp_path), FLBRIDGE_WARN="off")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "python fallback ['none'] 1" in r.stdout
    assert "cumsum 0.0" in r.stdout
    assert "ERR Op 'aten::cummax.default' not supported on device 'xpu:edge'" in r.stdout
    assert "fallback_policy.default is 'error'" in r.stdout


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_integer_tensors_against_cpu_float_scalars_compare_as_pytorch_promotes(anychip, op):
    # a 0-dim CPU tensor of a higher kind promotes the comparison (int64 vs 2.5 compares in float):
    # the chip must not truncate the scalar to the tensor's dtype
    t = torch.tensor([1, 2, 3, -1])
    for s in (torch.tensor(2.5), torch.tensor(2.0), torch.tensor(-0.5), torch.tensor(2), 2.5, 2):
        want = getattr(torch, op)(t, s)
        got = getattr(torch, op)(t.to(anychip), s).cpu()
        assert torch.equal(got, want), (op, s)
    b = torch.tensor([True, False])
    assert torch.equal(getattr(torch, op)(b.to(anychip), torch.tensor(1)).cpu(), getattr(torch, op)(b, torch.tensor(1)))


@pytest.mark.parametrize("chip", ["th1", "x1"])
def test_an_op_reached_again_inside_its_own_decomposition_goes_on_down_the_chain(request, chip):
    """fill_ on a dtype the chip lacks decomposes into fill, whose
    decomposition calls full_like, which flbridge runs as empty_like + fill_:
    the inner fill_ must not decompose again (it recursed until Python's
    limit: torch.ones_like of a float64 tensor, the implicit gradient of a
    float64 loss)."""
    dev = request.getfixturevalue(chip)
    a = torch.zeros(3, dtype=torch.float64).to(dev)
    assert torch.equal(torch.ones_like(a).cpu(), torch.ones(3, dtype=torch.float64))
    assert torch.equal(a.fill_(2.5).cpu(), torch.full((3,), 2.5, dtype=torch.float64))
    x = torch.arange(4.0, dtype=torch.float64).to(dev).requires_grad_()
    (x * x).sum().backward()     # backward() starts from ones_like(loss)
    assert torch.equal(x.grad.cpu(), 2 * torch.arange(4.0, dtype=torch.float64))


def test_new_zeros_ones_full_are_made_on_the_chip(th1):
    """torch's decomposition of new_ones & co. ends in a factory prim no chip
    runs (HF models call new_ones every step): they allocate and fill there."""
    src = torch.ones(2, 3).to(th1)
    flbridge.reset_stats(th1)
    outs = (src.new_ones((2, 2)), src.new_zeros(3, dtype=torch.int64), src.new_full((2,), 2.5))
    assert flbridge.stats(th1)["cpu_fallback_ops"] == 0
    assert [o.device for o in outs] == [src.device] * 3
    assert outs[0].cpu().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert outs[1].dtype == torch.int64 and outs[1].cpu().tolist() == [0, 0, 0]
    assert outs[2].cpu().tolist() == [2.5, 2.5]


def test_a_padding_the_convolution_kernel_does_not_take_is_applied_explicitly(x1):
    """x1 pads at most 2: a 7x7 stem's padding 3 runs as constant_pad_nd on
    the chip, then the kernel with padding 0 (the same sums: equal to the
    kernel on an input padded by hand), and only where the kernel takes the
    padded call (float32 convolutions on x1 go to the CPU as before, no pad
    run for nothing)."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 20, 18, generator=g).half()
    w = torch.randn(8, 3, 7, 7, generator=g).half()
    b = torch.randn(8, generator=g).half()
    flbridge.reset_stats(x1)
    got = F.conv2d(x.to(x1), w.to(x1), b.to(x1), 2, 3)
    routes = {r["op"]: r["route"] for r in flbridge.stats(x1)["routes"]}
    assert routes == {"aten::constant_pad_nd.default": "native", "aten::convolution.default": "native"}, routes
    by_hand = F.conv2d(F.pad(x.to(x1), (3, 3, 3, 3)), w.to(x1), b.to(x1), 2, 0)
    assert torch.equal(got.cpu(), by_hand.cpu())
    ref = F.conv2d(x.float(), w.float(), b.float(), 2, 3)
    # float32 sums of 147 products, rounded once to float16
    torch.testing.assert_close(got.float().cpu(), ref, rtol=2 ** -10, atol=1e-2)
    flbridge.reset_stats(x1)
    F.conv2d(x.float().to(x1), w.float().to(x1), None, 1, 3)
    assert [(r["op"], r["route"]) for r in flbridge.stats(x1)["routes"]] == [("aten::convolution.default", "cpu")]
