"""The fused optimizer kernels of both chips (x1_fused_adam / x1_fused_sgd,
th1FusedAdam / th1FusedSgd) against PyTorch's own CPU kernels
(torch._fused_adam_, _fused_adamw_, _fused_sgd_): several parameters of
different shapes, every flag, a grad scale and a found-inf skip.  flbridge
cannot route them yet (they write tensor lists; docs/simulators.md)."""
import pytest
import torch

from .test_kernel_paths import ok


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def upload(chip, tensors):
    """(addresses, descriptor array, the descriptors kept alive)"""
    puts = [chip.put(t) for t in tensors]
    arr = chip.ffi.new(f"{chip.desc_type}[]", [d for _, d in puts])
    return [a for a, _ in puts], arr, puts


def state(n_steps=3):
    torch.manual_seed(n_steps)
    shapes = [(4, 5), (7,), (2, 3, 3)]
    return {k: [torch.randn(s) for s in shapes] for k in ("p", "g", "m")} | \
           {"v": [torch.rand(s) for s in shapes], "mx": [torch.rand(s) for s in shapes],
            "steps": [torch.tensor(float(n_steps)) for _ in shapes]}



@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("scaled", ["none", "scale", "inf"])
def test_fused_adam_matches_pytorch(chip, adamw, amsgrad, maximize, scaled):
    st = state()
    want = {k: [t.clone() for t in v] for k, v in st.items()}
    gscale = torch.tensor(4.0) if scaled != "none" else None
    finf = torch.tensor(1.0 if scaled == "inf" else 0.0) if scaled != "none" else None
    (torch._fused_adamw_ if adamw else torch._fused_adam_)(
        want["p"], want["g"], want["m"], want["v"], want["mx"] if amsgrad else [], want["steps"], lr=0.01,
        beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=amsgrad, maximize=maximize, grad_scale=gscale,
        found_inf=finf)
    got = {k: upload(chip, v) for k, v in st.items()}
    gs = chip.put(gscale)[1] if gscale is not None else chip.ffi.NULL
    fi = chip.put(finf)[1] if finf is not None else chip.ffi.NULL
    mx = got["mx"][1] if amsgrad else chip.ffi.NULL
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_fused_adam(got["p"][1], got["g"][1], got["m"][1], got["v"][1], mx, got["steps"][1], 3,
                                        0.01, 0.9, 0.99, 0.1, 1e-8, amsgrad, maximize, adamw, gs, fi))
    else:
        flags = (chip.lib.TH1_ADAM_AMSGRAD * amsgrad) | (chip.lib.TH1_ADAM_MAXIMIZE * maximize) | \
                (chip.lib.TH1_ADAM_DECOUPLED * adamw)
        ok(chip, chip.lib.th1FusedAdam(got["p"][1], got["g"][1], got["m"][1], got["v"][1], mx, got["steps"][1], 3,
                                       0.01, 0.9, 0.99, 0.1, 1e-8, flags, gs, fi))
    for k in ("p", "g", "m", "v") + (("mx",) if amsgrad else ()):
        for addr, w in zip(got[k][0], want[k]):
            torch.testing.assert_close(chip.get(addr, w.shape), w, rtol=1e-6, atol=1e-6, msg=k)


@pytest.mark.parametrize("momentum,nesterov,first", [(0.0, False, False), (0.9, False, True), (0.9, True, False),
                                                     (0.5, False, False)])
@pytest.mark.parametrize("maximize", [False, True])
def test_fused_sgd_matches_pytorch(chip, momentum, nesterov, first, maximize):
    st = state()
    want = {k: [t.clone() for t in v] for k, v in st.items()}
    torch._fused_sgd_(want["p"], want["g"], want["m"] if momentum else [], weight_decay=0.01, momentum=momentum,
                      lr=0.1, dampening=0.1, nesterov=nesterov, maximize=maximize, is_first_step=first,
                      grad_scale=torch.tensor(2.0))
    got = {k: upload(chip, v) for k, v in st.items()}
    bufs = got["m"][1] if momentum else chip.ffi.NULL
    gs = chip.put(torch.tensor(2.0))[1]
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_fused_sgd(got["p"][1], got["g"][1], bufs, 3, 0.01, momentum, 0.1, 0.1, nesterov,
                                       maximize, first, gs, chip.ffi.NULL))
    else:
        flags = (chip.lib.TH1_SGD_NESTEROV * nesterov) | (chip.lib.TH1_SGD_MAXIMIZE * maximize) | \
                (chip.lib.TH1_SGD_FIRST_STEP * first)
        ok(chip, chip.lib.th1FusedSgd(got["p"][1], got["g"][1], bufs, 3, 0.01, momentum, 0.1, 0.1, flags, gs,
                                      chip.ffi.NULL))
    for k in ("p", "g") + (("m",) if momentum else ()):
        for addr, w in zip(got[k][0], want[k]):
            torch.testing.assert_close(chip.get(addr, w.shape), w, rtol=1e-6, atol=1e-6, msg=k)


def test_shapes_that_differ_are_refused(chip):
    p, g = [torch.zeros(3)], [torch.zeros(4)]
    (pa, parr, _), (ga, garr, _) = upload(chip, p), upload(chip, g)
    bad = chip.lib.X1_ERR_INVALID_VALUE if chip.kind == "x1" else chip.lib.TH1_ERROR_INVALID_ARGUMENT
    if chip.kind == "x1":
        st = chip.lib.x1_fused_sgd(parr, garr, chip.ffi.NULL, 1, 0.0, 0.0, 0.1, 0.0, False, False, False,
                                   chip.ffi.NULL, chip.ffi.NULL)
    else:
        st = chip.lib.th1FusedSgd(parr, garr, chip.ffi.NULL, 1, 0.0, 0.0, 0.1, 0.0, 0, chip.ffi.NULL, chip.ffi.NULL)
    assert st == bad
