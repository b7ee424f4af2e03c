"""Mixed precision on fl: PyTorch's autocast and GradScaler with CUDA's op
lists, each chip's lower precision from its spec, the weight-cast cache, and
real models against CPU autocast."""
import copy
import gc
import re
import sys
import types
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge import amp
from flbridge.demos.models import SmallCNN
from flbridge.specs import load_spec
from tests.conftest import routes, sim_kernels
from tests.test_registry import SPECS, X1_TEXT, line_of, problems, spec_text, write

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
HEADER = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"


# ------------------------------------------------ the op lists are PyTorch's

def header_lists() -> dict:
    """{macro: [entry, ...]} from the AT_FORALL_* macros of the installed header."""
    lines = HEADER.read_text().splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"#define (AT_FORALL_\w+)\(_\)", line)
        if not m:
            continue
        body = []
        for nxt in lines[i:]:
            body.append(nxt.rstrip("\\"))
            if not nxt.rstrip().endswith("\\"):
                break
        text = " ".join(body)
        if m.group(1) == "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE":
            out[m.group(1)] = re.findall(r'"([\w.]+)"', text)
        else:
            out[m.group(1)] = [f"{a}.{b}" if b else a
                               for a, b in re.findall(r"\b_\(\s*(\w+)\s*(?:,\s*(\w+)\s*)?\)", text)]
    return out


def test_policy_lists_are_the_installed_headers():
    h = header_lists()
    assert list(amp.LOWER_PRECISION_FP) == h["AT_FORALL_LOWER_PRECISION_FP"]
    assert list(amp.FP32) == h["AT_FORALL_FP32"]
    assert list(amp.FP32_SET_OPT_DTYPE) == h["AT_FORALL_FP32_SET_OPT_DTYPE"]
    assert list(amp.FP32_APPEND_DTYPE) == h["AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE"]
    assert list(amp.PROMOTE) == h["AT_FORALL_PROMOTE"]


def test_fl_has_an_autocast_kernel_for_every_op_cuda_has(flchips):
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    fl = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    assert {f"aten::{n}" for n in amp.policies()} == cuda
    assert fl == cuda
    # and every op not listed falls through to the next key
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "AutocastPrivateUse1") is False


def test_append_dtype_targets_take_the_registered_arguments_plus_dtype():
    for name, target in amp.FP32_APPEND_DTYPE.items():
        src, dst = amp._overload(name)._schema.arguments, amp._overload(target)._schema.arguments
        assert [a.name for a in dst] == [a.name for a in src] + ["dtype"], (name, target)


# --------------------------------------------------- torch.fl and its dtype

def test_torch_fl_amp_module(flchips):
    import torch.fl.amp as fl_amp
    assert fl_amp is torch.fl.amp
    assert torch.fl.get_amp_supported_dtype() == [F16, BF16, torch.float32]   # float32 as on CUDA
    assert issubclass(torch.fl.amp.autocast, torch.amp.autocast)
    s = torch.fl.amp.GradScaler(init_scale=8.0)
    assert isinstance(s, torch.amp.GradScaler) and s._device == "fl" and s.get_scale() == 8.0
    assert torch.fl.is_bf16_supported("xpu:th1") and not torch.fl.is_bf16_supported("xpu:x1")
    amp_dtypes = {name: c.spec.capabilities.amp_dtype for name, c in flchips.items()}
    assert amp_dtypes == {"xpu:x1": F16, "xpu:x1-v2": F16, "xpu:th1": BF16}  # x1-v2 inherits x1's


def test_default_dtype_is_the_current_chips(flchips):
    x1, th1 = flchips["xpu:x1"], flchips["xpu:th1"]
    prev = torch.fl.current_device()
    try:
        torch.fl.set_device(x1.index)
        assert torch.get_autocast_dtype("fl") == F16
        with torch.fl.device(th1.index):
            assert torch.get_autocast_dtype("fl") == BF16
            with flbridge.device("xpu:x1"):
                assert torch.get_autocast_dtype("fl") == F16
                with torch.autocast("fl"):
                    assert torch.get_autocast_dtype("fl") == F16
                    with torch.fl.device(th1.index):  # an enabled region keeps its dtype
                        assert torch.get_autocast_dtype("fl") == F16
            assert torch.get_autocast_dtype("fl") == BF16
        assert torch.get_autocast_dtype("fl") == F16
    finally:
        torch.fl.set_device(prev)


@pytest.mark.parametrize("chip, low", [("xpu:x1", F16), ("xpu:th1", BF16)])
def test_every_way_to_enter_autocast(flchips, chip, low):
    dev = flchips[chip].device
    a = torch.randn(4, 4, device=dev)
    with torch.fl.device(dev):
        for region in (torch.autocast("fl"), torch.autocast(device_type="fl", dtype=low),
                       torch.fl.amp.autocast(), torch.fl.amp.autocast(dtype=low)):
            with region:
                assert (a @ a).dtype == low and (a + a).dtype == F32
            assert (a @ a).dtype == F32

        @torch.autocast("fl")
        def f(x):
            return x @ x
        assert f(a).dtype == low


def test_nested_regions_and_enabled_false(x1):
    a = torch.randn(4, 4, device=x1)
    c = torch.randn(4, 4)
    with torch.autocast("fl", dtype=F16):
        assert (a @ a).dtype == F16
        with torch.autocast("fl", enabled=False):
            assert (a @ a).dtype == F32
            with torch.autocast("fl", dtype=F16):
                assert (a @ a).dtype == F16
            assert (a @ a).dtype == F32
        with torch.autocast("cpu", dtype=BF16):  # each device type autocasts its own tensors
            assert (a @ a).dtype == F16 and (c @ c).dtype == BF16
        assert (a @ a).dtype == F16 and (c @ c).dtype == F32


def test_a_new_thread_gets_the_default_of_the_chip_it_selects(flchips):
    import threading
    got = {}

    def work():
        for chip in ("xpu:th1", "xpu:x1"):
            dev = flchips[chip].device
            a = torch.randn(4, 4, device=dev)
            with torch.fl.device(dev), torch.autocast("fl"):
                got[chip] = (a @ a).dtype
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert got == {"xpu:th1": BF16, "xpu:x1": F16}


def test_custom_fwd_casts_inputs_and_runs_the_function_without_autocast(x1):
    seen = {}

    class Square(torch.autograd.Function):
        @staticmethod
        @torch.fl.amp.custom_fwd(cast_inputs=F16)
        def forward(ctx, x):
            seen["forward"] = (x.dtype, torch.is_autocast_enabled("fl"))
            return x * x

        @staticmethod
        @torch.fl.amp.custom_bwd
        def backward(ctx, g):
            seen["backward"] = torch.is_autocast_enabled("fl")
            return 2 * g

    x = torch.randn(4, 4, device=x1, requires_grad=True)
    with torch.autocast("fl", dtype=F16):
        y = Square.apply(x)
    y.float().sum().backward()
    assert y.dtype == F16 and x.grad.dtype == F32
    assert seen == {"forward": (F16, False), "backward": False}


# ----------------------------------------------------------- refusals

def test_a_dtype_the_chip_lacks_is_refused_naming_chip_spec_and_dtypes(th1, x1):
    a = torch.randn(4, 4, device=th1)
    with pytest.raises(amp.AmpDtypeError) as ei, torch.autocast("fl", dtype=F16):
        a @ a
    e = ei.value
    assert isinstance(e, flbridge.FlbridgeError)
    assert (e.device_type, e.dtype, e.supported, e.default) == ("xpu:th1", F16, [BF16], BF16)
    for text in ("xpu:th1", "th1.yaml", "float16", "bfloat16", "dtype=torch.bfloat16"):
        assert text in str(e), text
    with torch.autocast("fl", dtype=F16, enabled=False):  # nothing to refuse
        assert (a @ a).dtype == F32
    # the chip of the tensors decides, not the current one
    with torch.fl.device(x1), pytest.raises(amp.AmpDtypeError, match="xpu:th1"), torch.autocast("fl"):
        a @ a
    b = torch.randn(4, 4, device=x1)
    with torch.fl.device(th1):
        with pytest.raises(amp.AmpDtypeError, match=r"xpu:x1.*x1\.yaml.*torch\.float16"), torch.autocast("fl"):
            b @ b
        with pytest.raises(amp.AmpDtypeError, match="xpu:th1"):  # refused when the region is made
            torch.fl.amp.autocast(dtype=F16)


def test_binary_cross_entropy_is_refused_as_on_cuda(x1):
    p = torch.rand(4, device=x1)
    with torch.autocast("fl", dtype=F16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)
        assert F.binary_cross_entropy_with_logits(p, p).dtype == F32


# ------------------------------------------------------ output dtypes, op by op
# Each case: what CUDA autocast gives ("low": the region's dtype, "f32"), and
# what CPU autocast gives where its own lists differ (docs/amp.md).  fl must
# give CUDA's answer; CPU autocast must give CUDA's answer or the recorded one.

LOW, F32_ = "low", "f32"
CASES = [
    # lower precision
    ("matmul", lambda t: t.a @ t.b, LOW, None),
    ("matmul of float32 and low", lambda t: t.a @ t.lo, LOW, None),
    ("linear", lambda t: F.linear(t.a, t.b, t.bias), LOW, None),
    ("conv1d", lambda t: F.conv1d(t.seq, t.cw1), LOW, None),
    ("conv2d", lambda t: F.conv2d(t.img, t.cw, padding=1), LOW, None),
    ("bmm", lambda t: torch.bmm(t.b3, t.b3), LOW, None),
    ("addmm", lambda t: torch.addmm(t.bias, t.a, t.b), LOW, None),
    ("baddbmm", lambda t: torch.baddbmm(t.b3, t.b3, t.b3), LOW, None),
    ("einsum", lambda t: torch.einsum("ij,jk->ik", t.a, t.b), LOW, None),
    ("prelu", lambda t: F.prelu(t.img, t.w3), LOW, None),
    ("scaled_dot_product_attention", lambda t: F.scaled_dot_product_attention(t.b3, t.b3, t.b3), LOW, None),
    # float32 (inputs in the low dtype, as a previous op leaves them)
    ("softmax", lambda t: torch.softmax(t.lo, 1), F32_, LOW),
    ("softmax of float32", lambda t: torch.softmax(t.a, 1), F32_, None),
    ("softmax with an explicit dtype", lambda t: torch.softmax(t.lo, 1, dtype=t.low), LOW, None),
    ("log_softmax", lambda t: F.log_softmax(t.lo, 1), F32_, LOW),
    ("layer_norm", lambda t: F.layer_norm(t.lo, (4,)), F32_, LOW),
    ("group_norm", lambda t: F.group_norm(t.img_lo, 1), F32_, LOW),
    ("cross_entropy", lambda t: F.cross_entropy(t.lo, t.idx), F32_, None),
    ("nll_loss", lambda t: F.nll_loss(t.lo, t.idx), F32_, None),
    ("mse_loss", lambda t: F.mse_loss(t.lo, t.lo), F32_, None),
    ("l1_loss", lambda t: F.l1_loss(t.lo, t.a), F32_, None),
    ("smooth_l1_loss", lambda t: F.smooth_l1_loss(t.lo, t.lo), F32_, None),
    ("binary_cross_entropy_with_logits", lambda t: F.binary_cross_entropy_with_logits(t.lo, t.p), F32_, None),
    ("exp", lambda t: torch.exp(t.lo), F32_, LOW),
    ("log", lambda t: torch.log(t.lo.abs() + 1), F32_, LOW),
    ("rsqrt", lambda t: torch.rsqrt(t.lo.abs() + 1), F32_, LOW),
    ("pow", lambda t: torch.pow(t.lo, 2), F32_, LOW),
    ("softplus", lambda t: F.softplus(t.lo), F32_, LOW),
    ("sum", lambda t: t.lo.sum(), F32_, LOW),
    ("sum over a dim", lambda t: t.lo.sum(1), F32_, LOW),
    ("cumsum", lambda t: t.lo.cumsum(1), F32_, LOW),
    ("logsumexp", lambda t: t.lo.logsumexp(1), F32_, LOW),
    ("norm", lambda t: t.lo.norm(), F32_, LOW),
    ("norm over a dim", lambda t: torch.norm(t.lo, 2, 1), F32_, LOW),
    ("cosine_similarity", lambda t: F.cosine_similarity(t.lo, t.lo), F32_, LOW),
    ("interpolate bilinear", lambda t: F.interpolate(t.img_lo, scale_factor=2, mode="bilinear"), F32_, LOW),
    # promote: the widest floating dtype among the arguments
    ("addcmul of low", lambda t: torch.addcmul(t.lo, t.lo, t.lo), LOW, None),
    ("addcmul with a float32", lambda t: torch.addcmul(t.a, t.lo, t.lo), F32_, None),
    ("addcdiv with a float32", lambda t: torch.addcdiv(t.lo, t.a, t.lo.abs() + 1), F32_, None),
    ("atan2", lambda t: torch.atan2(t.lo, t.a), F32_, None),
    ("dot", lambda t: torch.dot(t.a[0], t.lo[0]), F32_, "error"),
    ("cross", lambda t: torch.cross(t.lo[:, :3], t.a[:, :3], dim=1), F32_, "error"),
    # not listed: PyTorch's own type promotion
    ("relu", lambda t: torch.relu(t.lo), LOW, None),
    ("gelu", lambda t: F.gelu(t.lo), LOW, None),
    ("add", lambda t: t.a + t.lo, F32_, None),
    ("cat", lambda t: torch.cat([t.a, t.lo]), F32_, None),
    ("stack", lambda t: torch.stack([t.a, t.lo]), F32_, None),
    ("mean", lambda t: t.lo.mean(1), LOW, None),
    ("var", lambda t: t.lo.var(1), LOW, None),
    ("max_pool2d", lambda t: F.max_pool2d(t.img_lo, 2), LOW, None),
    ("batch_norm", lambda t: F.batch_norm(t.img_lo, None, None, training=True), LOW, None),
    # banned on CUDA, run in float32 by CPU autocast
    ("binary_cross_entropy", lambda t: F.binary_cross_entropy(t.p, t.p), "error", F32_),
]


def case_inputs(device, low):
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g)
    t = types.SimpleNamespace(a=r(4, 4), b=r(4, 4), bias=r(4), seq=r(2, 3, 8), cw1=r(5, 3, 3),
                              img=r(2, 3, 6, 6), cw=r(5, 3, 3, 3), b3=r(2, 4, 4), w3=r(3).abs(),
                              p=torch.rand(4, 4, generator=g), idx=torch.tensor([1, 0, 3, 2]))
    t.lo, t.img_lo = t.a.to(low), t.img.to(low)
    for k, v in vars(t).items():
        setattr(t, k, v.to(device))
    t.low = low
    return t


def run_case(fn, device, low, autocast=True):
    t = case_inputs(device, low)
    try:
        with torch.autocast(device.type, dtype=low, enabled=autocast):
            out = fn(t)
    except RuntimeError as e:
        return "error", e
    return (LOW if out.dtype == low else F32_ if out.dtype == F32 else str(out.dtype)), out


@pytest.mark.parametrize("chip", ["xpu:x1", "xpu:th1"])
def test_output_dtypes_follow_cuda_autocast_and_values_match_the_cpu(flchips, chip):
    dev = flchips[chip].device
    low = flchips[chip].spec.capabilities.amp_dtype
    cpu = torch.device("cpu")
    wrong = []
    for name, fn, cuda, cpu_differs in CASES:
        got, out = run_case(fn, dev, low)
        ref_kind, ref = run_case(fn, cpu, low)
        if got != cuda:
            wrong.append(f"{name}: fl gives {got}, CUDA autocast {cuda} ({out})")
        if ref_kind != (cpu_differs or cuda):
            wrong.append(f"{name}: CPU autocast gives {ref_kind}, recorded {cpu_differs or cuda}")
        if got == "error" or got != cuda:
            continue
        if cpu_differs is not None:  # what CUDA computes: the op in float32 on the same inputs
            _, ref = run_case(lambda t, fn=fn: fn(types.SimpleNamespace(**{
                k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                for k, v in vars(t).items()})), cpu, low, autocast=False)
        # a few roundings in the region's dtype (unit roundoff: float16 4.9e-4, bfloat16 3.9e-3)
        tol = 2e-2 if low == BF16 else 2e-3
        try:
            torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=tol, atol=tol)
        except AssertionError as e:
            wrong.append(f"{name}: values differ from the CPU: {e}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------- autograd

def test_backward_gives_float32_gradients_matching_cpu_autocast(x1):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    fl = copy.deepcopy(cpu).to(x1)
    x = torch.randn(5, 8)
    for m, xx, dev in ((cpu, x, "cpu"), (fl, x.to(x1), "fl")):
        with torch.autocast(dev, dtype=F16):
            out = m(xx)
        assert out.dtype == F16
        out.float().pow(2).sum().backward()
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        assert b.grad.dtype == F32, name
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=2e-3, atol=2e-3, msg=name)


# -------------------------------------------------------- weight-cast cache

def casts(dev) -> int:
    return sum(n for (op, _), n in routes(dev).items() if op == "aten::_to_copy.default")


def test_weights_are_cast_once_per_region_unless_cache_is_disabled(x1):
    lin = nn.Linear(4, 4).to(x1)
    x = torch.randn(3, 4, device=x1)
    for cache, expected in ((True, 2 + 3), (False, 3 * 3)):  # weight+bias once, the input each call
        flbridge.reset_stats(x1)
        with torch.autocast("fl", dtype=F16, cache_enabled=cache):
            outs = [lin(x) for _ in range(3)]
        assert casts(x1) == expected, cache
        sum(o.float().sum() for o in outs).backward()
        torch.testing.assert_close(lin.weight.grad.cpu(), 3 * x.cpu().sum(0).expand(4, 4), rtol=2e-3, atol=2e-3)
        lin.weight.grad = lin.bias.grad = None


def test_a_write_to_the_weight_invalidates_its_cast(x1):
    lin = nn.Linear(4, 4, bias=False).to(x1)
    x = torch.eye(4, device=x1)
    with torch.autocast("fl", dtype=F16):
        first = lin(x)
        with torch.no_grad():
            lin.weight.mul_(2)                  # bumps the version counter
        second = lin(x)
        lin.weight.data.mul_(0.5)               # .data shares storage, not the version counter
        third = lin(x)
    w = lin.weight.detach().cpu()
    torch.testing.assert_close(second.float().cpu(), 2 * first.float().cpu())
    torch.testing.assert_close(third.float().cpu(), w.t().half().float())


def test_a_cast_made_without_grad_is_not_reused_where_a_gradient_must_flow(x1):
    lin = nn.Linear(4, 4).to(x1)
    x = torch.randn(2, 4, device=x1)
    with torch.autocast("fl", dtype=F16):
        with torch.no_grad():
            lin(x)
        lin(x).float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == F32


def test_the_cache_keeps_no_weight_alive(x1):
    lin = nn.Linear(4, 4).to(x1)
    ref = weakref.ref(lin.weight)
    with torch.autocast("fl", dtype=F16):
        out = lin(torch.randn(2, 4, device=x1))
        with torch.no_grad():
            lin(torch.randn(2, 4, device=x1))
    out.float().sum().backward()
    del lin, out
    gc.collect()
    assert ref() is None


def test_fl_amp_autocast_drops_the_cache_when_the_outermost_region_exits(x1):
    lin = nn.Linear(4, 4).to(x1)
    with torch.fl.device(x1):
        with torch.fl.amp.autocast():
            with torch.no_grad():
                lin(torch.randn(2, 4, device=x1))
            with torch.fl.amp.autocast(enabled=False):
                pass
            assert lin.weight in amp._CACHE.entries and lin.bias in amp._CACHE.entries
        assert len(amp._CACHE.entries) == 0


# ------------------------------------------------------------- GradScaler

def test_grad_scaler_skips_a_step_on_inf_or_nan_and_recovers(x1):
    torch.manual_seed(0)
    lin = nn.Linear(4, 2).to(x1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("fl", init_scale=256.0, growth_interval=1)
    x = torch.randn(3, 4, device=x1)
    history = []
    for bad in (float("inf"), float("nan"), None):
        before = [p.detach().cpu() for p in lin.parameters()]
        with torch.autocast("fl", dtype=F16):
            loss = lin(x).float().sum()
        scaler.scale(loss).backward()
        if bad is not None:
            with torch.no_grad():
                lin.weight.grad[0, 0] = bad
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        moved = any(not torch.equal(b, p.detach().cpu()) for b, p in zip(before, lin.parameters()))
        history.append((moved, scaler.get_scale()))
    assert history == [(False, 128.0), (False, 64.0), (True, 128.0)]


def test_float16_overflow_skips_the_same_steps_as_cpu_autocast(x1):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    fl = copy.deepcopy(cpu).to(x1)
    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    runs = []
    for m, dev, xx, yy in ((cpu, "cpu", x, y), (fl, "fl", x.to(x1), y.to(x1))):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(dev, init_scale=2.0 ** 20)  # float16 gradients overflow at first
        scales = []
        for _ in range(5):
            with torch.autocast(dev, dtype=F16):
                loss = F.cross_entropy(m(xx), yy)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        runs.append(scales)
    assert runs[0] == runs[1] == [2.0 ** 19, 2.0 ** 18, 2.0 ** 18, 2.0 ** 18, 2.0 ** 18]  # 2 skipped, 3 taken
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=2e-3, atol=2e-3, msg=name)


# ----------------------------------------------------------- real models

def train_cnn_with_amp(dev, steps, lr=0.05):
    """SmallCNN on the CPU (CPU autocast) and on dev (fl autocast), float16,
    SGD with a GradScaler each."""
    torch.manual_seed(0)
    cpu = SmallCNN()
    fl = copy.deepcopy(cpu).to(dev)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    losses = []
    sides = [(cpu, "cpu", x, y), (fl, "fl", x.to(dev), y.to(dev))]
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for m, *_ in sides]
    scalers = [torch.amp.GradScaler(d, init_scale=2.0 ** 10) for _, d, *_ in sides]
    for _ in range(steps):
        pair = []
        for (m, d, xx, yy), opt, scaler in zip(sides, opts, scalers):
            with torch.autocast(d, dtype=F16):
                out = m(xx)
                loss = F.cross_entropy(out, yy)
            assert out.dtype == F16
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            pair.append(loss.item())
        losses.append(pair)
    return cpu, fl, losses


def test_small_cnn_under_autocast_convolves_natively_in_float16_and_trains_like_cpu_autocast(x1):
    steps = 3
    cpu, fl, losses = train_cnn_with_amp(x1, steps)
    r = routes(x1)
    assert r[("aten::convolution.default", "native")] == 2 * steps      # both convolutions, every step
    assert sim_kernels(x1)["conv2d"] == 2 * steps
    # float16 keeps 11 significant bits (unit roundoff 4.9e-4); the logits come
    # out of float16 layers whose accumulation order differs between the
    # simulator and the CPU, so the two sides may round each logit differently
    for lc, lf in losses:
        assert abs(lc - lf) < 2e-3 * abs(lc), losses
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=2e-3, atol=2e-3, msg=name)


def transformer_pair(th1):
    torch.manual_seed(0)
    cpu = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return cpu, copy.deepcopy(cpu).to(th1), copy.deepcopy(cpu)


def test_transformer_layer_in_bfloat16_on_th1_is_as_close_to_float32_as_cpu_autocast(th1):
    cpu, fl, ref = transformer_pair(th1)
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 8, 32, generator=g), torch.randn(2, 8, 32, generator=g)
    outs = []
    for m, dev, xx in ((cpu, "cpu", x), (fl, "fl", x.to(th1))):
        with torch.autocast(dev, dtype=BF16):
            out = m(xx)
        (out.float() * w.to(out.device)).sum().backward()
        outs.append(out.detach().cpu().float())
    r = ref(x)
    (r * w).sum().backward()
    assert routes(th1)[("aten::addmm.default", "native")] > 0          # the bfloat16 matrix unit ran
    # bfloat16 keeps 8 significant bits (unit roundoff 3.9e-3): fl must be as
    # close to the float32 result as CPU autocast is, within a factor of two
    err_fl, err_cpu = (outs[1] - r).abs().max(), (outs[0] - r).abs().max()
    assert err_fl <= 2 * err_cpu + 1e-3, (err_fl, err_cpu)
    for (name, a), b, c in zip(cpu.named_parameters(), fl.parameters(), ref.parameters()):
        assert b.grad.dtype == F32, name
        e_fl, e_cpu = (b.grad.cpu() - c.grad).abs().max(), (a.grad - c.grad).abs().max()
        assert e_fl <= 2 * e_cpu + 1e-3 * c.grad.abs().max(), (name, e_fl, e_cpu)


@pytest.mark.slow
def test_small_cnn_trains_30_steps_under_autocast_like_cpu_autocast(x1):
    cpu, fl, losses = train_cnn_with_amp(x1, 30)
    assert losses[-1][1] < 0.5 * losses[0][1], losses                  # it learns
    for lc, lf in losses:                                               # float16 rounding, as above
        assert abs(lc - lf) < 2e-3 * abs(lc), losses
    for (name, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=5e-3, atol=5e-3, msg=name)
    assert routes(x1)[("aten::convolution.default", "native")] == 60


@pytest.mark.slow
def test_transformer_encoder_trains_in_bfloat16_on_th1_like_cpu_autocast(th1):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    cpu = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(32, 8))
    fl = copy.deepcopy(cpu).to(th1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, 32, generator=g), torch.randint(0, 8, (4, 8), generator=g)
    runs = []
    for m, dev, xx, yy in ((cpu, "cpu", x, y), (fl, "fl", x.to(th1), y.to(th1))):
        opt = torch.optim.Adam(m.parameters(), lr=3e-3)
        losses = []
        for _ in range(20):
            with torch.autocast(dev, dtype=BF16):
                loss = F.cross_entropy(m(xx).reshape(-1, 8), yy.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        runs.append(losses)
    assert runs[1][-1] < 0.5 * runs[1][0], runs                        # it learns
    for lc, lf in zip(*runs):                                           # a few bfloat16 roundings
        assert abs(lc - lf) < 2e-2 * abs(lc), runs


# ------------------------------------------------------ the spec field

@pytest.mark.parametrize("value, message", [
    ("int8", "int8 is not a lower-precision float dtype autocast can use"),
    ("bfloat16", "bfloat16 is not among capabilities.dtypes (float32, float16, int8)"),
    ("float17", "unknown dtype 'float17'"),
])
def test_amp_dtype_is_validated(tmp_path, value, message):
    text = spec_text(X1_TEXT).replace("amp_dtype: float16", f"amp_dtype: {value}")
    p = write(tmp_path, text)
    e = problems(p)
    assert e.field == "capabilities.amp_dtype" and message in e.message, e
    assert (e.file, e.line) == (str(p), line_of(p, "amp_dtype"))


def test_amp_dtype_defaults_to_float16_then_bfloat16_then_none(tmp_path):
    base = spec_text(X1_TEXT).replace("  amp_dtype: float16", "  # no amp_dtype")
    assert load_spec(write(tmp_path, base, "a.yaml")).capabilities.amp_dtype == F16
    no_half = base.replace("dtypes: [float32, float16, int8]", "dtypes: [float32, int8]").replace(
        "dtype_support: [float16]", "dtype_support: [float32]")
    no_half = re.sub(r"dtype_support: \[float32, float16\]", "dtype_support: [float32]", no_half)
    no_half = no_half.replace("float16, int8, uint8", "int8, uint8")
    assert load_spec(write(tmp_path, no_half, "b.yaml")).capabilities.amp_dtype is None
    th1 = spec_text((SPECS / "th1.yaml").read_text()).replace("  amp_dtype: bfloat16", "")
    assert load_spec(write(tmp_path, th1, "c.yaml")).capabilities.amp_dtype == BF16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
