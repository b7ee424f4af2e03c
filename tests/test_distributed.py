"""torch.distributed on fl tensors (the "flccl" backend): collectives take the
chip's own library or the host, move as few bytes as they can, and say when
and why they fall back.  Single-rank groups run in this process; the
two-process tests spawn ranks (the long ones are in test_distributed_slow.py)."""
import copy
import datetime
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import flbridge
from flbridge import distributed as fldist
from flbridge.devices import chip_for, current_device, set_device
from flbridge.errors import IntegrationError, IntegrationWarning
from flbridge.binding.ccl import bind_ccl
from flbridge.tensor import HostStage
from flbridge.specs import load_spec

# (no imports from conftest or test_registry: spawned ranks import this module)
ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "device_specs"
X1_TEXT = (SPECS / "x1.yaml").read_text()


def spec_text(text: str) -> str:
    return text.replace('"../native_sim', f'"{ROOT}/native_sim')


def write(tmp_path, text, name="chip.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def sim_kernels(device) -> dict:
    from .conftest import sim_kernels as k
    return k(device)


@pytest.fixture
def group(flchips, tmp_path):
    """A one-rank flccl group on the chip given by the test's `chip` parameter."""
    opened = []

    def make(chip: str, backend: str = "flccl", vendor: bool = True):
        prev = current_device()
        set_device(chip)
        fldist.use_vendor_collectives(vendor)
        dist.init_process_group(backend, init_method=f"file://{tmp_path}/store{len(opened)}", rank=0,
                                world_size=1, timeout=datetime.timedelta(seconds=30))
        opened.append(prev)
        flbridge.reset_stats(chip)
        fldist.reset_stats()
        chip_for(chip).warned.clear()
        return flbridge.torch_device(chip)
    yield make
    if dist.is_initialized():
        dist.destroy_process_group()
    fldist.use_vendor_collectives(True)
    if opened:
        set_device(opened[0])


def bus(dev) -> dict:
    s = flbridge.stats(dev)
    return {k: s[k] for k in ("h2d_bytes", "h2d_calls", "d2h_bytes", "d2h_calls", "map_calls")}


def on_device(dev, n=8, dtype=torch.float32, value=1.0):
    """A tensor whose only current copy is in device memory (written by the fill kernel)."""
    return torch.full((n,), value, dtype=dtype, device=dev)


# ---------------------------------------------------------------- backend

def test_flccl_is_the_backend_of_the_fl_device(flchips):
    assert "flccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["fl"] == "flccl"
    assert dist.Backend.backend_capability["flccl"] == ["cpu", "fl"]


def test_group_has_a_name_and_serves_cpu_tensors_through_gloo(group):
    group("xpu:th1")
    pg = dist.group.WORLD
    assert isinstance(pg, fldist.FLProcessGroup) and pg.group_name
    assert "vendor collectives" in repr(pg)
    t = torch.arange(4.0)
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(4.0))
    assert fldist.stats() == {}  # CPU tensors are gloo's, not counted as fl collectives


@pytest.mark.parametrize("backend", [None, "cpu:gloo,fl:flccl"])
def test_no_backend_and_the_device_backend_string_both_give_flccl(group, backend):
    dev = group("xpu:x1-v2", backend=backend)   # None: fl is the accelerator, flccl its backend
    assert isinstance(dist.group.WORLD, fldist.FLProcessGroup)
    t = torch.ones(4).to(dev)
    dist.all_reduce(t)
    c = torch.ones(4)
    dist.all_reduce(c)
    assert fldist.stats()[("vendor", "all_reduce")]["calls"] == 1


# ------------------------------------------------------------ vendor path

def test_vendor_all_reduce_runs_on_device_memory_and_moves_nothing_over_the_bus(group):
    dev = group("xpu:th1")
    t = on_device(dev, value=3.0)
    flbridge.reset_stats(dev)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    assert bus(dev) == {"h2d_bytes": 0, "h2d_calls": 0, "d2h_bytes": 0, "d2h_calls": 0, "map_calls": 0}
    k = sim_kernels(dev)
    assert k.get("ccl_all_reduce") == 1 and k.get("ccl_broadcast") == 1
    assert fldist.stats()[("vendor", "all_reduce")] == {"calls": 1, "bytes": 32, "staged_d2h_bytes": 0}
    assert torch.equal(t.cpu(), torch.full((8,), 3.0))


def test_vendor_all_gather_avg_and_non_contiguous_tensors(group):
    dev = group("xpu:x1-v2")
    x = torch.arange(12.0).reshape(3, 4)
    t = x.to(dev).t()                      # non-contiguous: goes through a contiguous device copy
    dist.all_reduce(t, op=dist.ReduceOp.AVG)   # no native avg: sum, then divide by the world size
    assert torch.equal(t.cpu(), x.t())
    out = torch.empty(12, device=dev)
    dist.all_gather_into_tensor(out, x.reshape(-1).to(dev))
    outs = [torch.empty(3, 4, device=dev)]
    dist.all_gather(outs, x.to(dev))
    assert torch.equal(out.cpu(), x.reshape(-1)) and torch.equal(outs[0].cpu(), x)
    assert sim_kernels(dev).get("ccl_all_gather") == 2


def test_async_op_returns_a_work_whose_future_holds_the_tensors(group):
    dev = group("xpu:x1-v2")
    t = torch.ones(5).to(dev)
    w = dist.all_reduce(t, async_op=True)
    assert w.wait() is True and w.is_completed() and w.is_success()
    assert w.get_future().value()[0] is t


# -------------------------------------------------------------- host path

def test_host_path_downloads_once_and_uploads_lazily_once(group):
    dev = group("xpu:th1", vendor=False)
    t = on_device(dev, n=256, value=2.0)
    flbridge.reset_stats(dev)
    dist.all_reduce(t)
    assert bus(dev) == {"h2d_bytes": 0, "h2d_calls": 0, "d2h_bytes": 1024, "d2h_calls": 1, "map_calls": 0}
    y = t * 2                                  # the next kernel uploads the reduced values once
    assert bus(dev)["h2d_bytes"] == 1024 and bus(dev)["h2d_calls"] == 1
    assert torch.equal(y.cpu(), torch.full((256,), 4.0))
    assert fldist.stats()[("host", "all_reduce")] == {"calls": 1, "bytes": 1024, "staged_d2h_bytes": 1024}


def test_host_path_on_a_chip_that_maps_host_memory_copies_nothing(group):
    dev = group("xpu:x1-v2", vendor=False)
    t = torch.ones(256).to(dev)
    t.mul_(3)                                  # on the chip: the host buffer is mapped, not copied
    flbridge.reset_stats(dev)
    dist.all_reduce(t)
    t.mul_(2)
    b = bus(dev)
    assert b["h2d_bytes"] == 0 and b["d2h_bytes"] == 0
    assert torch.equal(t.cpu(), torch.full((256,), 6.0))


def test_output_covering_its_storage_is_not_downloaded_before_being_overwritten(flchips):
    dev = chip_for("xpu:th1").device
    src, dst = on_device(dev, value=5.0), on_device(dev, value=7.0)
    flbridge.reset_stats(dev)
    stage = HostStage()
    stage.read(src)
    stage.write(dst, read=False)
    assert bus(dev)["d2h_calls"] == 1 and bus(dev)["d2h_bytes"] == 32   # src only
    assert not dst._st.dev_valid and dst._st.host_valid


def test_dtype_the_vendor_library_lacks_takes_the_host_path_said_once(group):
    dev = group("xpu:x1-v2")
    t = torch.arange(6).to(dev)            # int64: x1 collectives run float32 and float16
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dist.all_reduce(t)
        dist.all_reduce(t)
    msgs = [str(x.message) for x in w if issubclass(x.category, fldist.CollectiveFallbackWarning)]
    assert len(msgs) == 1
    assert "all_reduce of int64 tensors on xpu:x1-v2 goes through the host" in msgs[0]
    assert "float32, float16" in msgs[0]
    assert torch.equal(t.cpu(), torch.arange(6))
    assert fldist.stats()[("host", "all_reduce")]["calls"] == 2


def test_collectives_without_a_vendor_path_run_through_gloo(group):
    dev = group("xpu:th1")
    x = torch.arange(4.0)
    out = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(out, x.to(dev))
    assert torch.equal(out.cpu(), x)
    out = torch.empty(4, device=dev)
    dist.all_to_all_single(out, x.to(dev))
    assert torch.equal(out.cpu(), x)
    outs = [torch.empty(4, device=dev)]
    dist.all_to_all(outs, [x.to(dev)])
    assert torch.equal(outs[0].cpu(), x)
    dist.barrier()
    assert {k for k in fldist.stats() if k[0] == "host"} == {("host", "reduce_scatter"), ("host", "all_to_all")}


def test_group_created_for_another_chip_uses_the_host_path_and_says_why(group):
    group("xpu:th1")
    x1 = chip_for("xpu:x1-v2").device
    t = torch.ones(4).to(x1)
    with pytest.warns(fldist.CollectiveFallbackWarning, match=r"created for fl:0 \(xpu:th1\).*set_device"):
        dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.ones(4))


# --------------------------------------------- functional, DeviceMesh, gloo

def test_functional_collectives_and_device_mesh_on_fl(group):
    dev = group("xpu:th1")
    pg = dist.group.WORLD
    r = funcol.all_reduce(torch.full((3,), 2.0).to(dev), "sum", pg)
    assert r.device == dev and torch.equal(r.cpu(), torch.full((3,), 2.0))
    g = funcol.all_gather_tensor(torch.arange(3.0).to(dev), 0, pg)
    assert torch.equal(g.cpu(), torch.arange(3.0))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("fl", (1,))
    dt = distribute_tensor(torch.arange(8.0).reshape(4, 2).to(dev), mesh, [Shard(0)])
    assert torch.equal((dt * 2).full_tensor().cpu(), torch.arange(8.0).reshape(4, 2) * 2)


def test_gloo_group_with_fl_tensors_is_staged_through_the_host(group):
    dev = group("xpu:th1", backend="gloo")
    t = on_device(dev, value=4.0)
    dist.all_reduce(t)
    outs = [torch.empty(8, device=dev)]
    dist.all_gather(outs, t)
    assert torch.equal(outs[0].cpu(), torch.full((8,), 4.0))
    # DDP's C++ reducer reads each bucket's result from the Work's future
    model = torch.nn.Linear(4, 2).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(torch.ones(3, 4).to(dev)).sum().backward()
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ref(torch.ones(3, 4)).sum().backward()
    assert torch.allclose(model.weight.grad.cpu(), ref.weight.grad)


def test_one_rank_ddp_on_flccl_matches_the_cpu(group):
    dev = group("xpu:x1-v2")
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model.to(dev))
    x = torch.randn(5, 8)
    ddp(x.to(dev)).square().mean().backward()
    ref(x).square().mean().backward()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(a.grad.cpu(), b.grad, atol=1e-6)
    assert fldist.stats()[("vendor", "all_reduce")]["calls"] >= 1


@pytest.mark.parametrize("flag", ["static_graph", "find_unused_parameters"])
def test_ddp_flags_needing_a_pinned_allocator_run_without_it_and_say_so(group, flag):
    """static_graph=True and find_unused_parameters=True: torch 2.13's reducer
    stages its used-parameter map in pinned host memory on a PrivateUse1
    device (the first backward failed with a message about
    PrivateUse1HooksInterface).  On fl DDP runs without them, said once, with
    the CPU's gradients over several steps."""
    dev = group("xpu:th1")
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(dev)
    with pytest.warns(IntegrationWarning, match=f"{flag}=True\\) runs as {flag}=False"):
        ddp = torch.nn.parallel.DistributedDataParallel(model, **{flag: True})
    for _ in range(3):
        x = torch.randn(5, 8)
        ddp(x.to(dev)).square().mean().backward()
        ref(x).square().mean().backward()
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-5, atol=1e-6)


def test_ddp_with_an_unused_parameter_names_it_and_the_fix(group):
    """find_unused_parameters=True runs as False on fl: a parameter the loss
    does not use gets flbridge's error naming it, not DDP's advice to pass
    the flag that was passed."""
    dev = group("xpu:th1")
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(8, 4), "spare": torch.nn.Linear(8, 4)}).to(dev)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m["used"](x)
    with pytest.warns(IntegrationWarning):
        ddp = torch.nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=True)
    x = torch.randn(5, 8).to(dev)
    ddp(x).sum().backward()
    ddp.zero_grad()        # every .grad None (set_to_none): the names come from DDP's own account
    with pytest.raises(IntegrationError, match=r"gradient: m\.spare\.weight, m\.spare\.bias\. .*requires_grad_\(False\)"):
        ddp(x)


# ---------------------------------------------------------- bad input

def test_ranks_on_different_chip_types_fail_at_group_creation(flchips):
    store = dist.HashStore()
    store.set("chip/1", "xpu:th1 (fl:0)")       # what rank 1 would have published
    prev = current_device()
    set_device("xpu:x1")
    try:
        with pytest.raises(fldist.MixedChipsError) as ei:
            fldist._agree_on_chip(store, 0, 2)
    finally:
        set_device(prev)
    msg = str(ei.value)
    assert "rank 0 xpu:x1 (fl:1), rank 1 xpu:th1 (fl:0)" in msg and "torch.fl.set_device" in msg


def test_untyped_storage_resize_frees_and_reallocates_like_fsdp2_does(flchips):
    dev = chip_for("xpu:th1").device
    t = on_device(dev, n=1024, value=1.0)
    view = t[:4]
    s = t.untyped_storage()
    assert isinstance(s, torch.UntypedStorage) and s.size() == 4096
    before = torch.fl.memory_allocated(dev)
    s.resize_(0)
    assert s.size() == 0 and view.untyped_storage().size() == 0
    assert torch.fl.memory_allocated(dev) < before
    s.resize_(4096)
    t.fill_(2.0)
    assert torch.equal(view.cpu(), torch.full((4,), 2.0))


# ------------------------------------------------------------ the spec

def _x1_with(tmp_path, old: str, new: str) -> Path:
    text = spec_text(X1_TEXT)
    assert old in text, old
    return write(tmp_path, text.replace(old, new))


@pytest.mark.parametrize("old,new,field,message", [
    ("  all_reduce: x1_ccl_all_reduce\n", "  all_reduce: {fn: x1_ccl_all_reduce, args: [comm, send]}\n",
     "collectives.all_reduce.args", "must list comm, send, recv, count, dtype, op"),
    ("  dtypes: [float32, float16]\n  ops:", "  dtypes: [float32, bfloat16]\n  ops:",
     "collectives.dtypes[1]", "bfloat16 has no code under runtime.dtypes"),
    ("  ops: {sum: X1_CCL_SUM, product: X1_CCL_PROD, max: X1_CCL_MAX, min: X1_CCL_MIN}\n", "",
     "collectives.ops", "all_reduce needs ops"),
    ("  destroy: x1_ccl_comm_destroy\n", "  destroi: x1_ccl_comm_destroy\n",
     "collectives.destroi", "did you mean 'destroy'"),
])
def test_collectives_section_mistakes_are_reported_with_file_line_and_field(tmp_path, old, new, field, message):
    p = _x1_with(tmp_path, old, new)
    with pytest.raises(flbridge.SpecError) as ei:
        load_spec(p)
    hits = [pr for pr in ei.value.problems if pr.field == field]
    assert hits and message in hits[0].message, ei.value.problems
    assert hits[0].file == str(p) and hits[0].line > 1


def test_collectives_binding_checks_symbols_parameters_and_constants(tmp_path):
    text = spec_text(X1_TEXT)
    for old, new in (("  all_gather: x1_ccl_all_gather\n", "  all_gather: x1_ccl_allgather\n"),
                     ("{sum: X1_CCL_SUM,", "{sum: X1_CCL_SUMM,"),
                     ("  init: {fn: x1_ccl_comm_init, args: [comm, key, nranks, rank, timeout_ms]}\n",
                      "  init: x1_ccl_comm_init\n")):
        assert old in text, old
        text = text.replace(old, new)
    ccl, problems = bind_ccl(load_spec(write(tmp_path, text)))
    assert ccl is None
    by_field = {pr.field: pr.message for pr in problems}
    assert "undefined symbol: x1_ccl_allgather" in by_field["collectives.all_gather"]
    assert "'X1_CCL_SUMM' is not a constant" in by_field["collectives.ops.sum"]
    # C names (comm, unique_key, ...) that are not the role's: the spec must list them under args
    assert "x1_ccl_comm_init(comm, unique_key, nranks, rank, timeout_ms) does not match the init role" \
        in by_field["collectives.init"]


def test_shipped_specs_bind_their_collectives(flchips):
    for name, dtypes in (("x1.yaml", {torch.float32, torch.float16}),
                         ("th1.yaml", {torch.float32, torch.bfloat16})):
        ccl, problems = bind_ccl(load_spec(SPECS / name))
        assert not problems and set(ccl.dtype_codes) == dtypes and set(ccl.ops) == {"sum", "product", "max", "min"}


# ----------------------------------------------------- two processes

def _smoke_rank(rank, world, init, out):
    flbridge.init()
    set_device("xpu:x1-v2")
    dist.init_process_group("flccl", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    dev = flbridge.torch_device("xpu:x1-v2")
    fldist.reset_stats()                                    # a forked rank starts with the parent's counts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = torch.full((4,), float(rank + 1)).to(dev)
        dist.all_reduce(f)                                  # vendor
        b = (torch.arange(3.0) * (rank + 1)).to(dev)
        dist.broadcast(b, src=1)                            # vendor
        i = torch.full((2,), rank + 1, dtype=torch.int64).to(dev)
        dist.all_reduce(i)                                  # host (gloo)
    stats = {" ".join(k): v for k, v in fldist.stats().items()}
    torch.save({"f": f.cpu(), "b": b.cpu(), "i": i.cpu(), "stats": stats},
               Path(out) / f"{rank}.pt")
    dist.destroy_process_group()


def test_two_processes_all_reduce_and_broadcast():
    from flbridge.demos.ddp import spawn
    with tempfile.TemporaryDirectory() as tmp:
        # forked: the ranks start with torch and flbridge already imported
        spawn(_smoke_rank, (2, f"file://{tmp}/rv", tmp), 2, timeout=60, start_method="fork")
        for r in range(2):
            res = torch.load(Path(tmp) / f"{r}.pt")
            assert torch.equal(res["f"], torch.full((4,), 3.0))
            assert torch.equal(res["b"], torch.arange(3.0) * 2)
            assert torch.equal(res["i"], torch.full((2,), 3))
            assert res["stats"]["vendor all_reduce"]["calls"] == 1
            assert res["stats"]["host all_reduce"]["calls"] == 1
