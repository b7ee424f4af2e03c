"""The distributed proof, with real processes: DDP with 2 ranks (spawned by
torch.multiprocessing and by torchrun) ends with identical parameters on
every rank, equal to a one-process CPU run on the global batch;
ZeroRedundancyOptimizer and FSDP2 too; bad setups fail fast and clearly."""
import datetime
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from flbridge.demos.ddp import DDPConfig, reference, run_ranks

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def check_proof(results, cfg, tol=1e-5):
    ref = reference(cfg)
    first = results[0]["params"]
    for res in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(first, res["params"])), "ranks disagree"
    diff = max((a - b).abs().max().item() for a, b in zip(first, ref))
    assert diff <= tol, f"largest difference from the one-process run: {diff:.2e}"
    losses = [r["losses"] for r in results]
    assert losses[0] != losses[1]          # each rank saw its own half of the batch
    return diff


CASES = [("cnn", "xpu:x1-v2"), ("gpt", "xpu:th1")]   # the demo's CNN, a small GPT


@pytest.mark.parametrize("model,device", CASES)
def test_ddp_spawned_by_torch_multiprocessing(model, device):
    cfg = DDPConfig(device=device, model=model, steps=3, batch=8, quiet=True)
    results = run_ranks(cfg, 2, timeout=600)
    check_proof(results, cfg)
    for r in results:
        assert r["checkpoint_ok"]
        assert r["collectives"]["vendor all_reduce"]["calls"] == cfg.steps   # one bucket per step
        assert "vendor collectives" in r["group"]


@pytest.mark.parametrize("model,device", CASES)
def test_ddp_launched_by_torchrun(tmp_path, model, device):
    cfg = DDPConfig(device=device, model=model, steps=3, batch=8)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "flbridge.demos.ddp", "--device", cfg.device, "--model", cfg.model,
           "--steps", str(cfg.steps), "--batch", str(cfg.batch), "--out", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-4000:]
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    check_proof(results, cfg)
    assert all(r["checkpoint_ok"] for r in results)
    assert results[0]["collectives"]["vendor all_reduce"]["calls"] == cfg.steps


def test_ddp_over_the_host_path_only_gives_the_same_result():
    cfg = DDPConfig(device="xpu:th1", model="cnn", steps=3, batch=8, vendor=False, quiet=True)
    results = run_ranks(cfg, 2, timeout=600)
    check_proof(results, cfg)
    assert not any(k.startswith("vendor") for k in results[0]["collectives"])
    assert results[0]["collectives"]["host all_reduce"]["calls"] == cfg.steps
    assert "host (gloo) only" in results[0]["group"]


def test_ddp_on_a_plain_gloo_group_stages_fl_tensors_through_the_host():
    cfg = DDPConfig(device="xpu:x1-v2", model="cnn", steps=3, batch=8, backend="gloo", quiet=True)
    results = run_ranks(cfg, 2, timeout=600)
    check_proof(results, cfg)
    assert results[0]["collectives"] == {}     # not flccl: PyTorch's own group, fl tensors staged
    assert "ProcessGroup" in results[0]["group"] and "FLProcessGroup" not in results[0]["group"]


def test_zero_redundancy_optimizer_matches_plain_sgd_on_the_global_batch():
    cfg = DDPConfig(device="xpu:x1-v2", model="cnn", steps=3, batch=8, zero=True, quiet=True)
    results = run_ranks(cfg, 2, timeout=600)
    check_proof(results, cfg)
    assert results[0]["zero_state_ok"]
    assert results[0]["collectives"]["vendor broadcast"]["calls"] > 0   # each rank's shard, sent to all


def test_fsdp2_fully_shard_trains_a_transformer_like_ddp():
    cfg = DDPConfig(device="xpu:th1", model="gpt", steps=3, batch=8, quiet=True)
    ddp = run_ranks(cfg, 2, timeout=600)
    fsdp = run_ranks(replace(cfg, fsdp=True), 2, timeout=600)
    check_proof(fsdp, cfg)
    assert [r["losses"] for r in fsdp] == [r["losses"] for r in ddp]
    assert any(k.endswith("reduce_scatter") for k in fsdp[0]["collectives"])
    assert fsdp[0]["collectives"]["vendor all_gather"]["calls"] > 0


# ------------------------------------------------------------- bad setups

def _rank(rank, world, init, chips, dies, dtype, queue):
    """Reports (rank, phase, seconds, error type, message) to the queue."""
    import flbridge
    flbridge.init()
    torch.fl.set_device(chips[rank])
    t0 = time.monotonic()
    try:
        dist.init_process_group("flccl", init_method=init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=20))
    except Exception as e:  # noqa: BLE001
        queue.put((rank, "init", time.monotonic() - t0, type(e).__name__, str(e)))
        return
    if rank == dies:
        os._exit(3)
    t = torch.ones(16, dtype=dtype).to(flbridge.torch_device(chips[rank]))
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        queue.put((rank, "all_reduce", time.monotonic() - t0, "", ""))
    except Exception as e:  # noqa: BLE001
        queue.put((rank, "all_reduce", time.monotonic() - t0, type(e).__name__, str(e)))


def run_two(chips, dies=-1, dtype=torch.float32):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        ps = [ctx.Process(target=_rank, args=(r, 2, f"file://{tmp}/rv", chips, dies, dtype, q)) for r in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(120)
        for p in ps:
            if p.is_alive():
                p.kill()
                pytest.fail("a rank hung")
        out = {}
        while not q.empty():
            r = q.get()
            out[r[0]] = r[1:]
        return out


def test_ranks_on_different_chip_types_fail_at_group_creation_on_every_rank():
    out = run_two(["xpu:x1", "xpu:th1"])
    for rank in (0, 1):
        phase, _, kind, msg = out[rank]
        assert (phase, kind) == ("init", "MixedChipsError")
        assert "rank 0 xpu:x1 (fl:1), rank 1 xpu:th1 (fl:0)" in msg


@pytest.mark.parametrize("dtype,path", [(torch.float32, "vendor"), (torch.int64, "host")])
def test_a_rank_that_dies_makes_the_other_fail_quickly_with_a_clear_error(dtype, path):
    out = run_two(["xpu:x1-v2", "xpu:x1-v2"], dies=1, dtype=dtype)
    phase, seconds, kind, msg = out[0]
    assert (phase, kind) == ("all_reduce", "CollectiveError"), out
    assert seconds < 20                                         # within the group's timeout
    if path == "vendor":
        assert "rank 1 (pid" in msg and "exited" in msg and "x1_ccl_all_reduce" in msg
    else:
        assert "over the host (gloo) failed on rank 0 of 2" in msg and "peer" in msg


# ------------------------------------------------------------- the C side

def test_collectives_libraries_are_clean_under_sanitizers():
    sys.path.insert(0, str(ROOT / "native_sim"))
    try:
        import build
        build.sanitize_test()
    finally:
        sys.path.pop(0)


def test_demo_nproc_2_shows_ddp(capsys):
    from flbridge.cli import main
    assert main(["demo", "--nproc", "2", "--steps", "3", "--device", "xpu:x1-v2"]) == 0
    out = capsys.readouterr().out
    assert "parameters identical on every rank: yes" in out
    assert "checkpoint saved by rank 0, loaded by every rank: identical" in out
    assert "all_reduce" in out and "vendor" in out
