"""The `fl` device: registration, torch.fl, factories, moves, printing,
contexts and wrap()."""
import threading
import warnings

import pytest
import torch
import torch.nn as nn

import flbridge


def test_init_registers_fl_once_and_loads_all_shipped_specs(flchips):
    again = flbridge.init()
    assert [c.device_type for c in again] == ["xpu:th1", "xpu:x1", "xpu:x1-v2"]  # sorted by file name
    assert torch._C._get_privateuse1_backend_name() == "fl"
    assert torch.fl.is_available() and torch.fl.device_count() == 3
    assert torch.fl.is_initialized()


def test_device_module_reports_each_chip(flchips):
    assert torch.fl.get_device_name(1) == "SparkAI X1-Edge"
    assert torch.fl.get_device_name(flbridge.torch_device("xpu:th1")) == "Tianhe Semiconductor TH1"
    p = torch.fl.get_device_properties(2)
    assert p.device_type == "xpu:x1-v2" and p.vendor == "SparkAI" and p.chip_model == "X1-Edge-v2"
    assert p.total_memory == 8 << 30 and p.driver_version == "2.0.0"
    assert torch.float16 in p.dtypes and "zero_copy" in p.features
    assert p.compute["peak_tflops_fp16"] == 15.6  # overridden by x1_v2.yaml
    assert "X1-Edge-v2" in repr(p)


def test_current_device_set_device_and_device_context(flchips):
    assert torch.fl.current_device() == 0
    try:
        torch.fl.set_device(1)
        assert torch.fl.current_device() == 1
        assert torch.zeros(2, device="fl").device == torch.device("fl", 1)
        with torch.fl.device(2):
            assert torch.fl.current_device() == 2
        assert torch.fl.current_device() == 1
    finally:
        torch.fl.set_device(0)


def test_torch_device_by_spec_name(flchips):
    assert flbridge.torch_device("xpu:x1") == torch.device("fl", 1)
    assert flbridge.torch_device("xpu:x1-v2") == torch.device("fl", 2)
    with pytest.raises(flbridge.FlbridgeError, match="unknown device 'xpu:x9'.*xpu:x1 \\(fl:1\\)"):
        flbridge.torch_device("xpu:x9")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8,
                                   torch.uint8, torch.bool, torch.float64])
def test_round_trip_keeps_values_dtype_and_shape(anychip, dtype):
    src = (torch.randn(3, 4, 5) * 10).to(dtype)
    t = src.to(anychip)
    assert t.device == anychip and t.dtype == dtype and t.shape == src.shape
    back = t.cpu()
    assert back.device.type == "cpu" and torch.equal(back, src)


def test_round_trip_of_non_contiguous_empty_and_scalar(x1):
    src = torch.randn(6, 8).t()[::2]
    assert torch.equal(src.to(x1).cpu(), src)
    assert src.to(x1).stride() == src.clone().stride()  # preserve_format, as PyTorch does
    e = torch.empty(0, 3)
    assert torch.equal(e.to(x1).cpu(), e)
    s = torch.tensor(3.5)
    assert s.to(x1).item() == 3.5 and s.to(x1).dim() == 0


def test_to_string_forms_and_index(flchips):
    t = torch.ones(2)
    assert t.to("fl").device == torch.device("fl", 0)
    assert t.to("fl:1").device == torch.device("fl", 1)
    assert t.fl().device == torch.device("fl", 0)
    assert t.to("fl:2").is_fl and not t.is_fl
    assert t.to("fl:1").to("fl:2").device == torch.device("fl", 2)
    assert torch.equal(t.to("fl:1").to("fl:2").cpu(), t)


@pytest.mark.parametrize("factory", [
    lambda d: torch.zeros(2, 3, device=d), lambda d: torch.ones(2, 3, device=d),
    lambda d: torch.full((2, 3), 7.0, device=d), lambda d: torch.empty(2, 3, device=d).fill_(1),
    lambda d: torch.arange(6, device=d), lambda d: torch.arange(0.0, 1.0, 0.25, device=d),
    lambda d: torch.linspace(0, 1, 5, device=d), lambda d: torch.eye(3, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d), lambda d: torch.zeros_like(torch.ones(2).to(d)),
    lambda d: torch.ones(2, 2, device=d, dtype=torch.float16), lambda d: torch.empty_strided((2, 3), (1, 2), device=d).zero_(),
    lambda d: torch.empty(1, 3, 4, 4, device=d, memory_format=torch.channels_last).zero_(),
])
def test_factories_land_on_the_device_and_match_cpu(x1, factory):
    t = factory(x1)
    ref = factory("cpu")
    assert t.device == x1
    assert t.dtype == ref.dtype and t.shape == ref.shape and t.stride() == ref.stride()
    torch.testing.assert_close(t.cpu(), ref)


def test_random_factories_use_the_chip_generator(x1):
    torch.fl.manual_seed_all(123)
    a = torch.randn(5, device=x1).cpu()
    torch.fl.manual_seed_all(123)
    b = torch.randn(5, device=x1).cpu()
    assert torch.equal(a, b)
    with torch.fl.device(x1):  # manual_seed seeds the current device, as torch.cuda's does
        torch.fl.manual_seed(123)
    assert torch.equal(torch.randn(5, device=x1).cpu(), a)
    state = torch.fl.get_rng_state(x1)
    c = torch.rand(4, device=x1).cpu()
    torch.fl.set_rng_state(state, x1)
    assert torch.equal(torch.rand(4, device=x1).cpu(), c)
    r = torch.randint(0, 10, (100,), device=x1).cpu()
    assert r.min() >= 0 and r.max() < 10
    torch.manual_seed(5)  # seeds every device, as for CUDA
    d = torch.randn(3, device=x1).cpu()
    torch.manual_seed(5)
    assert torch.equal(torch.randn(3, device=x1).cpu(), d)


def test_dropout_draws_from_the_chip_generator(x1):
    x = torch.ones(1000, device=x1)
    torch.fl.manual_seed_all(7)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.fl.manual_seed_all(7)
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(a, b) and 300 < (a == 0).sum() < 700


def test_item_tolist_print_and_comparison(x1):
    t = torch.tensor([[1.5, -2.0], [3.0, 4.25]]).to(x1)
    assert t[1, 1].item() == 4.25
    assert t.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    assert repr(t) == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]], device='fl:1')"
    assert repr(t.half()) == ("tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]], device='fl:1', "
                              "dtype=torch.float16)")
    assert "requires_grad=True" in repr(t.clone().requires_grad_())
    assert "grad_fn=<MulBackward0>" in repr(t.clone().requires_grad_() * 2)
    assert str(torch.nn.Parameter(t)).startswith("Parameter containing:\ntensor(")
    assert torch.equal((t > 0).cpu(), torch.tensor([[True, False], [True, True]]))
    torch.testing.assert_close((t * 2).cpu(), t.cpu() * 2)


def test_numpy_fails_like_pytorch(x1):
    with pytest.raises(TypeError, match=r"can't convert fl:1 device type tensor to numpy. Use Tensor.cpu\(\)"):
        torch.ones(2).to(x1).numpy()


def test_mixing_devices_fails_with_pytorchs_message(x1, th1):
    a = torch.ones(3).to(x1)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at "
                                           "least two devices, fl:1 and cpu!"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3).to(th1)
    # a 0-dim CPU tensor is allowed beside any device, as in PyTorch
    torch.testing.assert_close((a * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))


def test_an_index_on_another_fl_device_fails_as_on_two_cuda_devices(x1, th1):
    """x[idx] / index_select / embedding with the index on another chip: an
    error, as with two CUDA devices.  A decomposition had moved the index
    across and answered (x_fl0[idx_fl1] gave tensor([0., 2.]))."""
    x = torch.arange(5.0).to(th1)
    idx = torch.tensor([0, 2])
    for f in (lambda t, i: t[i], lambda t, i: torch.index_select(t, 0, i),
              lambda t, i: torch.nn.functional.embedding(i, t.view(5, 1))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
                f(x, idx.to(x1))
    assert x[idx].cpu().tolist() == [0.0, 2.0]              # a CPU index is allowed, as on CUDA
    assert x[idx.to(th1)].cpu().tolist() == [0.0, 2.0]


def test_module_to_and_module_fl(flchips):
    m = nn.Linear(3, 2)
    ref = m(torch.ones(1, 3))
    m.to("fl:1")
    assert all(p.device == torch.device("fl", 1) for p in m.parameters())
    assert isinstance(m.weight, nn.Parameter) and m.weight.is_leaf and m.weight.requires_grad
    torch.testing.assert_close(m(torch.ones(1, 3).to("fl:1")).cpu(), ref)
    m2 = nn.Linear(3, 2).fl()
    assert m2.weight.device == torch.device("fl", 0)
    m.cpu()
    assert m.weight.device.type == "cpu" and type(m.weight) is nn.Parameter


def test_device_context_routes_xpu_strings_and_defaults(flchips):
    with flbridge.device("xpu:x1") as dev:
        assert dev == torch.device("fl", 1)
        assert torch.zeros(4).device == dev                      # default device
        assert torch.zeros(4, device="xpu").device == dev        # the article's 'xpu'
        assert torch.ones(2, device="xpu:th1").device == torch.device("fl", 0)
        assert torch.randn(2).to("xpu:x1-v2").device == torch.device("fl", 2)
        m = nn.Linear(2, 2).to("xpu")
        assert m.weight.device == dev
        assert torch.fl.current_device() == 1
        with flbridge.device("xpu:th1") as inner:               # nesting
            assert torch.zeros(1).device == inner == torch.device("fl", 0)
        assert torch.zeros(1).device == dev
    assert torch.zeros(1).device.type == "cpu"
    assert torch.fl.current_device() == 0


def test_device_context_is_thread_local(flchips):
    seen = {}

    def other():
        seen["dev"] = torch.zeros(1).device

    with flbridge.device("xpu:x1"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert torch.zeros(1).device == torch.device("fl", 1)
    assert seen["dev"].type == "cpu"


def test_wrap_places_model_lazily_and_moves_inputs(x1):
    import flbridge as fb
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():  # (a live CPU graph would hold the parameters: see docs/device.md)
        ref = m(torch.ones(3, 4))
    fb.reset_stats(x1)
    out = fb.wrap(m, device="xpu:x1")
    assert out is m and m[0].weight.device == x1
    s = fb.stats(x1)
    assert s["h2d_bytes"] == 0 and s["mapped_bytes"] == 0  # nothing moved yet
    y = m(torch.ones(3, 4))                                  # CPU input moved by the hook
    assert y.device == x1
    torch.testing.assert_close(y.cpu(), ref)
    assert fb.stats(x1)["mapped_bytes"] > 0                  # moved when a kernel needed it
