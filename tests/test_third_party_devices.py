"""Device handling as third-party programs do it, on fl as on CUDA: the
current device (torch.fl.set_device / torch.fl.device / torch.accelerator),
`device=` on the *_like and new_* factories, streams that are torch.Streams,
torch.accelerator's memory and sync functions, and autocast in float32."""
import threading
import warnings

import pytest
import torch
import torch.nn as nn

from tests.conftest import routes


@pytest.fixture
def restore_current_device(flchips):
    prev = torch.fl.current_device()
    yield
    torch.fl.set_device(prev)


# ------------------------------------------------------ the current device

def _indexless_moves(x):
    """Every way a program names "the current fl device" without an index."""
    m = nn.Linear(2, 2)
    m.to("fl")
    return {
        "to_str": x.to("fl").device,
        "to_device": x.to(torch.device("fl")).device,
        "to_kw": x.to(device="fl", dtype=torch.float64).device,
        "tensor": torch.tensor([1.0, 2.0], device="fl").device,
        "as_tensor": torch.as_tensor([1.0], device="fl").device,
        "zeros": torch.zeros(2, device="fl").device,
        "module": m.weight.device,
        "fl_method": x.fl().device,
        "fl_to_fl": x.to("fl:0").to("fl").device,
    }


@pytest.mark.parametrize("how", ["set_device", "device_int", "device_torch_device", "device_str",
                                 "accelerator_set", "accelerator_context"])
def test_fl_without_an_index_is_the_current_device(flchips, restore_current_device, how):
    x = torch.randn(3)
    fl1 = torch.device("fl", 1)
    if how == "set_device":
        torch.fl.set_device(1)
        got = _indexless_moves(x)
        assert torch.accelerator.current_device_index() == 1 and torch.fl.current_device() == 1
    elif how == "accelerator_set":
        torch.accelerator.set_device_index(1)
        assert torch.fl.current_device() == 1
        got = _indexless_moves(x)
    else:
        ctx = {"device_int": lambda: torch.fl.device(1),
               "device_torch_device": lambda: torch.fl.device(fl1),
               "device_str": lambda: torch.fl.device("fl:1"),
               "accelerator_context": lambda: torch.accelerator.device_index(1)}[how]()
        with ctx:
            assert torch.accelerator.current_device_index() == 1
            got = _indexless_moves(x)
        assert torch.fl.current_device() == 0 and x.to("fl").device == torch.device("fl", 0)
    assert all(d == fl1 for d in got.values()), got


def test_current_device_is_per_thread_and_explicit_indices_win(flchips, restore_current_device):
    torch.fl.set_device(2)
    assert torch.randn(2).to("fl:0").device == torch.device("fl", 0)
    seen = {}

    def other():
        seen["dev"] = torch.randn(2).to("fl").device

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["dev"] == torch.device("fl", 0)          # another thread keeps its own current device
    torch.fl.set_device(0)
    assert torch.randn(2).to("fl").device == torch.device("fl", 0)


def test_torchscript_still_compiles_torch_tensor_after_a_device_change(flchips, restore_current_device):
    """torch.distributed.optim scripts its optimizers at import; TorchScript
    must keep resolving torch.tensor & co. as builtins."""
    torch.fl.set_device(1)

    @torch.jit.script
    def f(x: torch.Tensor):
        return torch.tensor([1.0, 2.0]) + torch.as_tensor(x).to(torch.float32)

    assert torch.equal(f(torch.ones(2)), torch.tensor([2.0, 3.0]))
    assert torch.tensor([1.0]).to("fl").device == torch.device("fl", 1)


def test_default_device_and_get_default_device(flchips, restore_current_device):
    torch.fl.set_device(1)
    with torch.device("fl"):
        assert torch.empty(2).device == torch.device("fl", 1)
        assert nn.Linear(2, 2).weight.device == torch.device("fl", 1)
        assert torch.get_default_device() == torch.device("fl", 1)
    assert torch.get_default_device() == torch.device("cpu")


# ------------------------------------------- device= on *_like and new_*

def test_new_tensor_and_legacy_new_stay_on_their_tensors_device(flchips, restore_current_device):
    """torch resolves these from the dispatch key alone (an index-less device):
    a tensor on fl:2 used to get its new_tensor/new on fl:0."""
    src = torch.ones(2, 3, dtype=torch.float64).to("fl:2")
    for out in (src.new_tensor([1.5, 2.5]), src.new(4), src.new((2, 2)), src.new(), src.new([1.0, 2.0])):
        assert out.device == src.device and out.dtype == src.dtype
    assert torch.equal(src.new_tensor([1.5, 2.5]).cpu(), torch.tensor([1.5, 2.5], dtype=torch.float64))
    assert src.new().shape == (0,)
    assert src.new_tensor([1], device="cpu").device.type == "cpu"      # an explicit device wins
    torch.fl.set_device(1)
    on0 = torch.ones(2).to("fl:0")
    assert on0.new_tensor([1.0]).device == torch.device("fl:0")           # its own device, not the current one
    assert on0.new_tensor([1.0], device="fl").device == torch.device("fl:1")   # index-less: the current one


@pytest.mark.parametrize("op", ["rand_like", "randn_like", "randint_like", "new_zeros", "new_ones", "new_full",
                                "new_empty", "zeros_like", "full_like", "empty_like"])
@pytest.mark.parametrize("target", ["cpu", "fl:1", "fl:0"])
def test_device_argument_of_like_and_new_factories_is_honoured(flchips, op, target):
    src = torch.ones(2, 3).to("fl:2")
    f = {"rand_like": lambda: torch.rand_like(src, device=target),
         "randn_like": lambda: torch.randn_like(src, device=target),
         "randint_like": lambda: torch.randint_like(src, 3, 7, device=target),
         "new_zeros": lambda: src.new_zeros(4, device=target),
         "new_ones": lambda: src.new_ones((4,), device=target),
         "new_full": lambda: src.new_full((4,), 2.5, device=target),
         "new_empty": lambda: src.new_empty(4, device=target),
         "zeros_like": lambda: torch.zeros_like(src, device=target),
         "full_like": lambda: torch.full_like(src, 2.5, device=target),
         "empty_like": lambda: torch.empty_like(src, device=target)}[op]
    out = f()
    assert out.device == torch.device(target) and out.dtype == src.dtype
    vals = out.cpu()
    if op == "randint_like":
        assert ((vals >= 3) & (vals < 7)).all() and torch.equal(vals, vals.round())
    elif op == "rand_like":
        assert ((vals >= 0) & (vals < 1)).all()
    elif op in ("new_zeros", "zeros_like"):
        assert torch.equal(vals, torch.zeros_like(vals))
    elif op == "new_ones":
        assert torch.equal(vals, torch.ones_like(vals))
    elif op in ("new_full", "full_like"):
        assert torch.equal(vals, torch.full_like(vals, 2.5))


def test_rand_like_on_another_chip_draws_from_that_chips_generator(flchips):
    src = torch.ones(64).to("fl:2")

    def seed():
        for index, s in ((1, 0), (2, 1)):
            with torch.fl.device(index):
                torch.fl.manual_seed(s)

    seed()
    a = torch.rand_like(src, device="fl:1").cpu()
    seed()
    b = torch.rand(64, device="fl:1").cpu()
    c = torch.rand(64, device="fl:2").cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)


# -------------------------------------------------------------- streams

def test_fl_streams_are_torch_streams_and_record_stream_works(x1, restore_current_device):
    s = torch.fl.Stream(x1)
    assert isinstance(s, torch.Stream) and s.device == x1 and s.device_index == x1.index
    t = torch.arange(4.0).to(x1)
    t.record_stream(s)
    t.record_stream(torch.fl.current_stream(x1))
    t.record_stream(torch.accelerator.current_stream(x1))
    assert not [k for k in routes(x1) if k[1] == "cpu"]     # nothing ran on the CPU for it
    with torch.fl.stream(s):
        assert torch.fl.current_stream(x1) is s
        assert torch.accelerator.current_stream(x1) is s
    torch.accelerator.set_stream(s)
    assert torch.fl.current_stream(x1) is s
    torch.accelerator.set_stream(torch.fl.default_stream(x1))
    assert s.query() and s.record_event().query()


def test_a_stream_made_current_makes_its_device_current(th1, x1, restore_current_device):
    """As torch.cuda: set_stream (fl's, torch.accelerator's) and `with
    torch.fl.stream(s)` make s's device current (factories given "fl" land
    there); leaving the context restores the device and stream before it."""
    torch.fl.set_device(th1.index)
    s = torch.fl.Stream(x1)
    with torch.fl.stream(s):
        assert torch.fl.current_device() == x1.index and torch.fl.current_stream() is s
        assert torch.empty(1, device="fl").device == x1
    assert torch.fl.current_device() == th1.index and torch.fl.current_stream(x1) is not s
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_device_index() == x1.index
    torch.fl.set_stream(torch.fl.default_stream(th1))
    assert torch.fl.current_device() == th1.index


# -------------------------------------------------------- torch.accelerator

def test_torch_accelerator_memory_and_sync_on_fl(th1, restore_current_device):
    torch.fl.set_device(th1.index)
    acc = torch.accelerator
    assert acc.current_accelerator() == torch.device("fl") and acc.device_count() == torch.fl.device_count()
    acc.synchronize()
    acc.synchronize(th1)
    acc.empty_cache()
    acc.reset_peak_memory_stats()
    base = acc.memory_allocated()
    assert base == torch.fl.memory_allocated(th1)
    x = torch.ones(1 << 16).to(th1)
    (x * 2).sum().item()                                  # a native op: device memory in use
    assert acc.memory_allocated() > base and acc.memory_allocated(th1.index) == torch.fl.memory_allocated(th1)
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_reserved() == torch.fl.memory_reserved(th1)
    assert acc.max_memory_reserved() >= acc.memory_reserved()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == acc.memory_allocated()
    assert stats == torch.fl.memory_stats(th1)
    assert acc.get_memory_info() == torch.fl.mem_get_info(th1)
    acc.reset_accumulated_memory_stats()
    assert acc.memory_stats()["num_device_alloc"] == 0
    cap = acc.get_device_capability(th1)
    assert torch.float32 in cap["supported_dtypes"] and torch.bfloat16 in cap["supported_dtypes"]
    acc.empty_host_cache()
    del x


# ------------------------------------------------------ autocast float32

def test_autocast_in_float32_runs_without_disabling_itself(th1):
    """nanoGPT's --dtype=float32: torch.autocast(device_type, dtype=float32)."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # "not supported, disabling autocast" would fail here
        with torch.autocast("fl", dtype=torch.float32):
            assert torch.is_autocast_enabled("fl")
            y = torch.mm(a.to(th1), b.to(th1))
            s = torch.softmax(y.to(torch.bfloat16), -1)       # an fp32 op still runs in float32
    assert y.dtype == torch.float32 and s.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), a @ b, rtol=1e-5, atol=1e-5)
