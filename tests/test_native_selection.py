"""Integer and bool ops, indexing, shaping and GradScaler's update run on
every chip natively (the kernels of native_sim's x1 and th1 runtimes, routed
by the shipped specs), with the CPU's values and gradients.  These are the
ops HF GPT-2 / Llama / BERT style code runs besides its matrix products:
masks built by comparing positions, sums of attention masks, argmax over
logits, gathers of labels, padding, triangles, top-k sampling."""
import pytest
import torch
import torch.nn.functional as F

import flbridge
from tests.conftest import routes

LOW = {"xpu:x1": torch.float16, "xpu:x1-v2": torch.float16, "xpu:th1": torch.bfloat16}


def chip_name(dev):
    return next(c.device_type for c in flbridge.chips() if c.device == dev)


def run_both(dev, fn, *tensors):
    """fn on CPU tensors and on their copies on dev: (cpu result, fl result)."""
    return fn(*tensors), fn(*[t.to(dev) for t in tensors])


def same(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.device.type == "fl" and g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g.cpu(), w, equal_nan=True)
        else:
            assert torch.equal(g.cpu(), w)


def native_only(dev, *ops):
    r = routes(dev)
    for op in ops:
        assert any(o == op and route == "native" for (o, route) in r), (op, r)
    bad = {k: v for k, v in r.items() if k[0] in ops and k[1] != "native"}
    assert not bad, bad


INT_CASES = {
    "aten::eq.Tensor": lambda i, b, x: i == i.flip(0),
    "aten::lt.Tensor": lambda i, b, x: torch.arange(6, device=i.device) < i[0],
    "aten::eq.Scalar": lambda i, b, x: i == 2,
    "aten::ge.Scalar": lambda i, b, x: i >= 2.5,
    "aten::ne.Scalar": lambda i, b, x: b != True,  # noqa: E712 - a bool tensor against a Python bool
    "aten::logical_and.default": lambda i, b, x: torch.logical_and(i, b),
    "aten::logical_or.default": lambda i, b, x: torch.logical_or(x, b),
    "aten::logical_not.default": lambda i, b, x: torch.logical_not(i),
    "aten::sum.default": lambda i, b, x: b.sum(),
    "aten::sum.dim_IntList": lambda i, b, x: i.sum(1),
    "aten::any.default": lambda i, b, x: b.any(),
    "aten::all.dim": lambda i, b, x: b.all(1),
    "aten::any.dims": lambda i, b, x: i.any(dim=(0, 1)),
    "aten::max.dim": lambda i, b, x: i.max(1),
    "aten::argmax.default": lambda i, b, x: x.argmax(-1),
    "aten::argmin.default": lambda i, b, x: i.argmin(0),
    "aten::clamp.default": lambda i, b, x: i.clamp(1, 3),
    "aten::clamp_min.default": lambda i, b, x: x.clamp_min(0.0),
    "aten::cumsum.default": lambda i, b, x: b.cumsum(1),
    "aten::isin.Tensor_Tensor": lambda i, b, x: torch.isin(i, i[0, :2]),
    "aten::topk.default": lambda i, b, x: x.topk(2),
}


@pytest.mark.parametrize("op", sorted(INT_CASES))
def test_integer_and_bool_ops_run_natively_like_the_cpu(anychip, op):
    torch.manual_seed(0)
    i = torch.randint(-1, 5, (4, 6))
    b, x = i > 1, torch.randn(4, 6)
    want, got = run_both(anychip, INT_CASES[op], i, b, x)
    same(got, want)
    native_only(anychip, op)


def test_attention_masks_and_labels_the_way_hf_models_build_them(anychip):
    """A causal mask from positions, a padding mask from input ids, the mask's
    per-row counts, the last real token's position, label gathering, and the
    next token by argmax: every op on the chip."""
    ids = torch.tensor([[5, 9, 2, 0, 0], [7, 7, 3, 1, 4]])
    logits = torch.randn(2, 5, 11)

    def prog(ids, logits):
        pos = torch.arange(ids.shape[1], device=ids.device)
        causal = pos[None, :] <= pos[:, None]
        pad = ids != 0
        mask = torch.logical_and(causal[None], pad[:, None, :])
        lengths = pad.sum(-1)
        last = torch.clamp(lengths - 1, min=0)
        picked = logits.gather(2, ids[..., None]).squeeze(-1)
        nxt = logits[torch.arange(2, device=ids.device), last].argmax(-1)
        return mask, lengths, picked, nxt, torch.triu(torch.ones(5, 5, device=ids.device), 1).bool()

    want, got = run_both(anychip, prog, ids, logits)
    same(got, want)
    r = routes(anychip)
    assert not [k for k in r if k[1] != "native"], r


GRAD_CASES = {
    "gather": (lambda x, i: x.gather(1, i[:, :3]), ("aten::gather.default", "aten::scatter_add.default")),
    "index_select": (lambda x, i: x.index_select(0, i[0, :3]), ("aten::index_select.default",
                                                                "aten::index_add.default")),
    "index": (lambda x, i: x[i[:2, 0]], ("aten::index.Tensor", "aten::index_put.default")),
    "max.dim": (lambda x, i: x.max(1).values, ("aten::max.dim", "aten::scatter.src")),
    "topk": (lambda x, i: x.topk(3, dim=0).values, ("aten::topk.default", "aten::scatter.src")),
    "clamp": (lambda x, i: x.clamp(-0.5, 0.5), ("aten::clamp.default", "aten::logical_and_.default")),
    "tril": (lambda x, i: x.tril(1), ("aten::tril.default",)),
    "pad": (lambda x, i: F.pad(x, (1, 2, 0, 1), value=0.5), ("aten::constant_pad_nd.default",)),
    "slice": (lambda x, i: x[1:4:2, 2:], ("aten::slice_backward.default",)),
    "upsample": (lambda x, i: F.interpolate(x.reshape(1, 2, 3, 5), scale_factor=2, mode="nearest"),
                 ("aten::upsample_nearest2d.default", "aten::upsample_nearest2d_backward.default")),
    "cumsum": (lambda x, i: x.cumsum(0), ("aten::cumsum.default",)),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_indexing_and_shaping_gradients_run_natively(anychip, case):
    fn, ops = GRAD_CASES[case]
    torch.manual_seed(1)
    x = torch.randn(6, 5)
    i = torch.randint(0, 5, (6, 5))
    xc, xf = x.clone().requires_grad_(), x.to(anychip).requires_grad_()
    yc, yf = fn(xc, i), fn(xf, i.to(anychip))
    g = torch.randn(yc.shape)
    yc.backward(g)
    yf.backward(g.to(anychip))
    same(yf.detach(), yc.detach())
    torch.testing.assert_close(xf.grad.cpu(), xc.grad)
    native_only(anychip, *ops)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_in_place_and_accumulating(anychip, accumulate):
    x = torch.zeros(5, 3)
    rows = torch.tensor([4, 0, 4])
    vals = torch.arange(9.0).reshape(3, 3)
    want = x.clone().index_put_((rows,), vals if accumulate else vals[:1].expand(3, 3), accumulate=accumulate)
    xf = x.to(anychip)
    xf.index_put_((rows.to(anychip),), (vals if accumulate else vals[:1].expand(3, 3)).to(anychip),
                  accumulate=accumulate)
    same(xf, want)
    native_only(anychip, "aten::index_put_.default")


def test_half_precision_selection_runs_natively(anychip):
    low = LOW[chip_name(anychip)]
    x = torch.randn(8, 16).to(low)
    want, got = run_both(anychip, lambda t: (t.topk(4), t.max(0), t.cumsum(1), t.clamp(-1, 1), t.tril(),
                                             F.pad(t, (2, 2))), x)
    for g, w in zip(got, want):
        same(g, w) if isinstance(w, torch.Tensor) else [same(a, b) for a, b in zip(g, w)]
    native_only(anychip, "aten::topk.default", "aten::max.dim", "aten::cumsum.default", "aten::clamp.default",
                "aten::tril.default", "aten::constant_pad_nd.default")


def test_grad_scaler_updates_its_scale_natively(anychip):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2).to(anychip)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("fl", init_scale=256.0, growth_interval=2)
    scales = []
    for bad in (None, float("inf"), None, None):
        loss = lin(torch.randn(3, 4, device=anychip)).sum()
        scaler.scale(loss).backward()
        if bad is not None:
            with torch.no_grad():
                lin.weight.grad[0, 0] = bad
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
    assert scales == [256.0, 128.0, 128.0, 256.0]     # growth every 2 clean steps, halved on inf
    native_only(anychip, "aten::_amp_update_scale_.default")


def test_integer_comparison_with_a_python_float_promotes_like_pytorch(anychip):
    """An int64 tensor against 2.5 compares in float (x < 2.5 holds for 2),
    a bool tensor against 2 in integers (never equal)."""
    i = torch.tensor([1, 2, 3, 2 ** 40])
    want, got = run_both(anychip, lambda t: (t < 2.5, t == 2.0, (t > 1) == 2, t.to(torch.int32) >= 3), i)
    same(got, want)
    native_only(anychip, "aten::lt.Scalar", "aten::eq.Scalar", "aten::ge.Scalar")
