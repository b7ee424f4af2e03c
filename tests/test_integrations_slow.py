"""The training stacks people use, on fl, against the CPU: DeepSpeed ZeRO
(2 ranks, spawned, torchrun and the deepspeed launcher), HF Trainer and
accelerate, Lightning.  Each program is the library's ordinary script plus
`import flbridge` (and, for a chip other than fl:0, `torch.fl.set_device`).

No DeepSpeed op is compiled in these tests: the fl accelerator's fused Adam
is torch ops, the offload runs use torch's AdamW on the CPU, the shared
memory comm op is not asked for.  Every run builds into an empty
TORCH_EXTENSIONS_DIR, which must stay empty."""
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from flbridge.demos.deepspeed import DSConfig, compare, reference, run_ranks

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "integration_scripts"
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


@pytest.fixture
def no_builds(tmp_path, monkeypatch):
    """An empty folder for JIT-compiled ops; it must stay empty."""
    folder = tmp_path / "torch_extensions"
    folder.mkdir()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
    yield folder
    assert not any(folder.iterdir()), f"an op was compiled: {sorted(p.name for p in folder.iterdir())}"


def _env(**extra) -> dict:
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A script run several tests compare against (the CPU reference, the
    two-process Trainer) is made once per module: shared(_hf or _pl, opts, ...)."""
    base, done = tmp_path_factory.mktemp("shared"), {}

    def get(run, opts, **kw):
        key = (run.__name__, json.dumps(opts, sort_keys=True), tuple(sorted(kw.items())))
        if key not in done:
            done[key] = run(base, f"run{len(done)}", opts, **kw)
        return done[key]
    return get


def _run(cmd, timeout=900, **env):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env), cwd=str(ROOT))
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-6000:])
    return p


# ============================================================== DeepSpeed

@pytest.mark.parametrize("order", ["before", "after"])
def test_deepspeed_takes_fl_whether_flbridge_is_imported_before_or_after_it(order, no_builds):
    p = _run([sys.executable, str(SCRIPTS / "ds_probe.py"), order])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["accelerator"] == "FL_Accelerator" and got["installed"] == order
    assert got["stale"] == []                                   # nothing import bound stays on the CPU
    assert got["memory_reserved_owner"] == "FL_Accelerator"     # runtime/utils.py's import-time binding
    assert got["fused_adam"] == "flbridge.integrations.deepspeed_builders"
    assert got["cpu_adam"].startswith("deepspeed.ops.op_builder.cpu")   # host-side: the CPU's
    assert got["shm_builder"] == "None" and got["backend"] == "flccl" and got["device_name"] == "fl:0"
    assert (got["bf16"], got["fp16"], got["fp64"]) == (True, False, False)   # th1's spec
    assert '"type": "AdamW"' in got["refusal"] and "FusedLambBuilder" in got["refusal"]
    if order == "before":
        assert "Setting accelerator to CPU" not in p.stderr      # DeepSpeed never made its CPU accelerator
    else:
        assert got["rebound"] > 0


def test_set_accelerator_alone_would_leave_the_import_time_bindings_on_the_cpu():
    """Why the hook: installing fl's accelerator after `import deepspeed` with
    DeepSpeed's set_accelerator() leaves the op builders (FusedAdam's among
    them, which segfaults on fl tensors) and the memory functions bound to
    the CPU accelerator."""
    p = _run([sys.executable, str(SCRIPTS / "ds_probe.py"), "naive"])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["accelerator"] == "FL_Accelerator"
    assert any(s.startswith("deepspeed.ops.adam.fused_adam.FusedAdamBuilder") for s in got["stale"]), got["stale"]
    assert got["memory_reserved_owner"] == "CPU_Accelerator"


def test_ds_accelerator_names_another_accelerator_and_flbridge_leaves_it():
    p = _run([sys.executable, str(SCRIPTS / "ds_probe.py"), "before"], DS_ACCELERATOR="cpu")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["accelerator"] == "CPU_Accelerator" and got["installed"] is None


def _zero(cfg: DSConfig, tmp_path, nproc=2):
    cfg = replace(cfg, out=str(tmp_path / "out"), quiet=True)
    return cfg, run_ranks(cfg, nproc, timeout=900)


def _check_fp32(results, cfg, tol=1e-5):
    same, diff = compare(results, reference(cfg))
    assert same, "parameters differ between the ranks"
    assert diff <= tol, f"largest difference from the one-process CPU run: {diff:.2e}"
    print(f"ZeRO-{cfg.stage} on {cfg.device}: {diff:.2e} from the one-process CPU run (bound {tol:.0e}); "
          f"collectives on rank 0: {results[0]['collectives']}")      # the figures docs/distributed.md cites (-rP)
    assert results[0]["losses"] != results[1]["losses"]       # each rank saw its own half of the batch
    for r in results:
        assert r["accelerator"] == "FL_Accelerator" and r["param_device"].startswith("fl:")
        if cfg.checkpoint:
            assert r["checkpoint_loaded"] and r["checkpoint_resumed"]
    return diff


def test_zero2_with_fused_adam_overlap_comm_clipping_and_a_checkpoint_matches_the_cpu(tmp_path, no_builds):
    cfg, results = _zero(DSConfig(device="xpu:th1", model="cnn", stage=2, steps=3, overlap_comm=True,
                                  contiguous_gradients=True, clip=1.0), tmp_path)
    _check_fp32(results, cfg)
    r0 = results[0]
    assert (r0["optimizer"], r0["base_optimizer"]) == ("DeepSpeedZeroOptimizer", "FusedAdam")
    assert r0["collectives"]["vendor all_reduce"]["calls"] >= cfg.steps      # the chip's library carried them
    assert r0["collectives"]["vendor all_gather"]["calls"] >= cfg.steps
    assert "vendor collectives" in r0["group"]


def test_zero2_with_a_compiled_engine_matches_the_cpu(tmp_path, no_builds):
    """engine.compile(backend="fl"): ZeRO's flat parameter groups make the
    parameters share one Storage (each is `.data = flat[a:b]`), which the
    compile's fakeification had failed on."""
    cfg, results = _zero(DSConfig(device="xpu:th1", model="cnn", stage=2, steps=3, compile=True,
                                  checkpoint=False), tmp_path)
    _check_fp32(results, cfg)


def test_zero3_with_a_compiled_engine_matches_the_cpu_without_automatic_dynamic_shapes(tmp_path, no_builds,
                                                                                      monkeypatch):
    """engine.compile(backend="fl") under ZeRO-3 fails in Dynamo's guard building
    when ZeRO-3's module hooks are recompiled with dynamic sizes ("sources must
    not be empty for symbol s63", docs/compile.md); with automatic dynamic shapes
    off (read by the spawned ranks from the environment) it trains like the CPU."""
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES", "0")
    cfg, results = _zero(DSConfig(device="xpu:x1-v2", model="cnn", stage=3, steps=3, compile=True,
                                  checkpoint=False, optimizer="torch_adam"), tmp_path)
    _check_fp32(results, cfg)


def test_zero1_with_the_optimizer_offloaded_to_the_cpu_matches_the_cpu(tmp_path, no_builds):
    cfg, results = _zero(DSConfig(device="xpu:th1", model="cnn", stage=1, steps=3, offload=True,
                                  checkpoint=False), tmp_path)
    _check_fp32(results, cfg)
    assert results[0]["base_optimizer"] == "AdamW"     # torch's, on the CPU partitions


def test_zero3_partitions_parameters_and_matches_the_cpu(tmp_path, no_builds):
    cfg, results = _zero(DSConfig(device="xpu:x1-v2", model="cnn", stage=3, steps=3), tmp_path)
    _check_fp32(results, cfg)
    assert results[0]["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    assert results[0]["collectives"]["vendor all_gather"]["calls"] > 0


def _check_low_precision(results, cfg):
    """The float32 master weights against the float32 CPU run.  With SGD a
    parameter moves by lr x its gradient, so the two differ by lr x the
    gradients' rounding error, summed over the steps.  How large that error
    is for this model and precision is measured on the CPU: the reference
    computes each step's gradient again in the lower precision (rounding);
    the chip's rounding is of the same size, and the two may add: twice it."""
    assert cfg.optimizer == "SGD"
    skipped = results[0]["skipped_steps"]
    rounding = []
    ref = reference(cfg, cfg.steps - skipped, rounding=rounding)
    same, diff = compare(results, ref)
    assert same, "parameters differ between the ranks"
    tol = 2 * cfg.lr * sum(rounding)
    assert diff <= tol, f"{diff:.2e} > {tol:.2e}"
    print(f"ZeRO-{cfg.stage} {cfg.precision} on {cfg.device}: {diff:.2e} from the float32 CPU run (bound {tol:.2e}), "
          f"{skipped} steps skipped, loss scales {results[0].get('loss_scales')}")
    assert results[0]["param_dtype"] == str(torch.bfloat16 if cfg.precision == "bf16" else torch.float16)
    return diff, tol


def test_zero2_in_bf16_on_th1_matches_the_cpu_within_bf16_rounding(tmp_path, no_builds):
    cfg, results = _zero(DSConfig(device="xpu:th1", model="cnn", stage=2, steps=3, optimizer="SGD", lr=0.05,
                                  precision="bf16"), tmp_path)
    _check_low_precision(results, cfg)
    assert results[0]["checkpoint_loaded"] and results[0]["checkpoint_resumed"]


def test_zero2_in_fp16_on_x1_scales_the_loss_and_skips_overflowing_steps(tmp_path, no_builds):
    # the first loss scale (2^17) overflows float16: DeepSpeed skips steps and halves it until it fits
    cfg, results = _zero(DSConfig(device="xpu:x1", model="cnn", stage=2, steps=6, optimizer="SGD", lr=0.05,
                                  precision="fp16", loss_scale_power=17), tmp_path)
    r0 = results[0]
    assert r0["skipped_steps"] > 0 and r0["loss_scales"][-1] < 2.0 ** 17
    assert r0["loss_scales"] == results[1]["loss_scales"]
    _check_low_precision(results, cfg)


def test_zero2_under_torchrun_matches_the_cpu(tmp_path, no_builds):
    cfg = DSConfig(device="xpu:th1", model="cnn", stage=2, steps=3, checkpoint=False, out=str(tmp_path))
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
          str(SCRIPTS / "ds_rank.py"), "--device", cfg.device, "--model", cfg.model, "--stage", "2",
          "--steps", str(cfg.steps), "--no-checkpoint", "--out", str(tmp_path)])
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    _check_fp32(results, cfg)


def test_zero2_under_the_deepspeed_launcher_matches_the_cpu(tmp_path, no_builds):
    cfg = DSConfig(device="xpu:th1", model="cnn", stage=2, steps=3, checkpoint=False, out=str(tmp_path))
    launcher = Path(sys.executable).parent / "deepspeed"
    _run([str(launcher), "--num_gpus", "2", "--master_port", "29611", str(SCRIPTS / "ds_rank.py"),
          "--device", cfg.device, "--model", cfg.model, "--stage", "2", "--steps", str(cfg.steps),
          "--no-checkpoint", "--out", str(tmp_path)])
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    _check_fp32(results, cfg)


def test_a_deepspeed_kernel_without_an_fl_version_is_refused_with_the_config_fix(tmp_path, no_builds):
    code = ("import flbridge, torch, os, tempfile\n"
            "import deepspeed\n"
            "from flbridge.errors import IntegrationError\n"
            "d = tempfile.mkdtemp()\n"
            "os.environ.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1')\n"
            "deepspeed.init_distributed(init_method=f'file://{d}/s', rank=0, world_size=1, auto_mpi_discovery=False)\n"
            "m = torch.nn.Linear(4, 4)\n"
            "try:\n"
            "    deepspeed.initialize(model=m, model_parameters=m.parameters(), config={\n"
            "        'train_micro_batch_size_per_gpu': 1, 'optimizer': {'type': 'Lamb', 'params': {'lr': 0.1}}})\n"
            "except IntegrationError as e:\n"
            "    print('REFUSED', e)\n")
    p = _run([sys.executable, "-c", code])
    assert "REFUSED DeepSpeed's FusedLambBuilder ('fused_lamb' op) has no fl version" in p.stdout
    assert '"optimizer": {"type": "AdamW"' in p.stdout


# ======================================================= HF Trainer, accelerate

def _hf(tmp_path, name, opts, torchrun=0, **env):
    out = tmp_path / name
    cmd = [sys.executable, str(SCRIPTS / "hf_train.py"), json.dumps(opts), str(out)]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(torchrun),
               *cmd[1:]]
    _run(cmd, **env)
    ranks = max(torchrun, 1)
    results = [json.loads((out / f"result-rank{r}.json").read_text()) for r in range(ranks)]
    params = [torch.load(out / f"params-rank{r}.pt") for r in range(ranks)]
    return results, params


def _close_losses(a, b, tol=1e-3):
    assert a.keys() == b.keys() and len(a) >= 6
    worst = max(abs(a[k] - b[k]) for k in a)
    assert worst <= tol, f"loss curves differ by {worst:.2e}"
    print(f"loss curves within {worst:.2e} (bound {tol:.0e})")
    return worst


HF_CPU = {"args": {"use_cpu": True}}


def test_trainer_picks_fl_by_itself_trains_like_the_cpu_and_resumes_from_a_checkpoint(tmp_path, shared):
    fl, fl_params = _hf(tmp_path, "fl", {"args": {"save_strategy": "steps", "save_steps": 3}})
    cpu, _ = shared(_hf, HF_CPU)
    assert fl[0]["device"] == "fl:0" and fl[0]["param_device"] == "fl:0" and cpu[0]["device"] == "cpu"
    _close_losses(fl[0]["losses"], cpu[0]["losses"])
    ckpt = tmp_path / "fl" / "trainer" / "checkpoint-3"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "optimizer.pt").exists()
    resumed, resumed_params = _hf(tmp_path, "resumed", {"resume": str(ckpt)})
    assert resumed[0]["losses"] == fl[0]["losses"]                   # steps 1-3 from the checkpoint, 4-6 again
    for k, v in fl_params[0].items():
        assert torch.equal(resumed_params[0][k], v), k


def test_trainer_runs_bf16_on_th1_and_fp16_with_a_grad_scaler_on_x1(tmp_path, shared):
    cpu, _ = shared(_hf, HF_CPU)
    bf16, _ = _hf(tmp_path, "bf16", {"chip": "xpu:th1", "args": {"bf16": True}})
    fp16, _ = _hf(tmp_path, "fp16", {"chip": "xpu:x1", "args": {"fp16": True}})
    assert (bf16[0]["mixed_precision"], bf16[0]["native_amp"], bf16[0]["logits_dtype"]) == \
        ("bf16", True, "torch.bfloat16")
    assert (fp16[0]["mixed_precision"], fp16[0]["scaler"], fp16[0]["logits_dtype"]) == \
        ("fp16", "GradScaler", "torch.float16")
    assert fp16[0]["device"] == "fl:1"
    # the loss is computed in float32 from logits rounded to the lower precision: with logits of size
    # ~0.1 (an untrained model) it moves by about 2 x 0.1 x u, under the 1e-3 asked of a float32 run
    _close_losses(bf16[0]["losses"], cpu[0]["losses"])
    _close_losses(fp16[0]["losses"], cpu[0]["losses"])


def test_accelerate_picks_fl_and_refuses_a_precision_the_chip_lacks_with_the_fix(tmp_path):
    code = ("import flbridge, torch\n"
            "from flbridge.errors import IntegrationError\n"
            "from accelerate import Accelerator\n"
            "from accelerate.state import AcceleratorState\n"
            "acc = Accelerator()\n"
            "model, opt = acc.prepare(torch.nn.Linear(4, 2), None)\n"
            "print('DEVICE', acc.device, next(model.parameters()).device, acc.distributed_type)\n"
            "AcceleratorState._reset_state(reset_partial_state=True)\n"
            "try:\n"
            "    Accelerator(mixed_precision='fp16')\n"
            "except IntegrationError as e:\n"
            "    print('REFUSED', e)\n")
    p = _run([sys.executable, "-c", code])
    assert "DEVICE fl:0 fl:0 DistributedType.NO" in p.stdout
    assert "REFUSED fp16 mixed precision on fl:0 (xpu:th1): the chip runs float32, bfloat16" in p.stdout
    assert "mixed_precision='bf16'" in p.stdout


def test_accelerate_and_trainer_take_fl_as_their_torch_compile_backend(tmp_path):
    """Accelerator(dynamo_backend="fl") / TrainingArguments(torch_compile_backend="fl"):
    accelerate's closed list of backend names had refused it ("'FL' is not a
    valid DynamoBackend").  prepare() compiles with backend "fl", and two
    training steps give the CPU's losses and parameters."""
    code = ("import copy, flbridge, torch\n"
            "from accelerate import Accelerator\n"
            "from accelerate.state import AcceleratorState\n"
            "from transformers import TrainingArguments\n"
            "torch.manual_seed(0)\n"
            "ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))\n"
            "x, y = torch.randn(6, 8), torch.randn(6, 2)\n"
            "acc = Accelerator(dynamo_backend='fl')\n"
            "model, opt = acc.prepare(copy.deepcopy(ref), None)\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "ropt = torch.optim.SGD(ref.parameters(), lr=0.1)\n"
            "print('COMPILED', type(model).__name__, acc.state.dynamo_plugin.to_kwargs()['backend'])\n"
            "for _ in range(2):\n"
            "    for m, o, d in ((model, opt, acc.device), (ref, ropt, 'cpu')):\n"
            "        o.zero_grad(); loss = torch.nn.functional.mse_loss(m(x.to(d)), y.to(d))\n"
            "        acc.backward(loss) if m is model else loss.backward(); o.step()\n"
            "        print('LOSS', d, loss.item())\n"
            "for p, q in zip(model.parameters(), ref.parameters()):\n"
            "    torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)\n"
            "import flbridge.compiler.backend as cb\n"
            "print('GRAPHS', cb.stats()['graphs'] >= 2, cb.stats()['replays'] >= 1)\n"
            "AcceleratorState._reset_state(reset_partial_state=True)\n"
            f"args = TrainingArguments(output_dir={str(tmp_path)!r}, torch_compile=True, torch_compile_backend='fl', "
            "report_to=[])\n"
            "print('TRAINER', args.device, args.torch_compile_backend)\n")
    p = _run([sys.executable, "-c", code])
    assert "COMPILED OptimizedModule fl" in p.stdout, p.stdout + p.stderr
    losses = [line.split() for line in p.stdout.splitlines() if line.startswith("LOSS")]
    assert len(losses) == 4
    for (_, _, a), (_, _, b) in zip(losses[::2], losses[1::2]):
        assert abs(float(a) - float(b)) <= 1e-5 * max(1.0, abs(float(b)))
    assert "GRAPHS True True" in p.stdout
    assert "TRAINER fl:0 fl" in p.stdout


def test_trainer_on_two_processes_runs_ddp_over_flccl_like_two_cpu_processes(tmp_path, shared):
    fl, fl_params = shared(_hf, {}, torchrun=2)
    cpu, cpu_params = _hf(tmp_path, "cpu", {"args": {"use_cpu": True}}, torchrun=2)
    for r in fl:
        assert r["distributed_type"] == "DistributedType.MULTI_CPU" and r["device"] == "fl:0"
        assert "FLProcessGroup" in r["group"] and "vendor collectives" in r["group"]
        assert r["collectives"]["vendor all_reduce"]["calls"] >= 6
    _close_losses(fl[0]["losses"], cpu[0]["losses"])
    for k, v in fl_params[0].items():
        assert torch.equal(v, fl_params[1][k]), k                       # the ranks agree
        torch.testing.assert_close(v, cpu_params[0][k], rtol=0, atol=1e-4)   # AdamW, lr 1e-3, 6 steps


def test_trainer_with_a_deepspeed_config_runs_zero2_on_fl(tmp_path, no_builds, shared):
    ds = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e6, "allgather_bucket_size": 5e6},
          "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
          "gradient_clipping": "auto"}
    fl, fl_params = _hf(tmp_path, "fl", {"args": {"deepspeed": ds}}, torchrun=2)
    ddp, _ = shared(_hf, {}, torchrun=2)       # the Trainer's DDP on fl (the test above)
    for r in fl:
        assert r["distributed_type"] == "DistributedType.DEEPSPEED" and r["param_device"] == "fl:0"
        assert r["collectives"]["vendor all_reduce"]["calls"] > 0
    _close_losses(fl[0]["losses"], ddp[0]["losses"])
    for k, v in fl_params[0].items():
        assert torch.equal(v, fl_params[1][k]), k


# =============================================================== Lightning

def _pl(tmp_path, name, opts, ranks=1):
    out = tmp_path / name
    _run([sys.executable, str(SCRIPTS / "pl_train.py"), json.dumps(opts), str(out)])
    results = [json.loads((out / f"result-rank{r}.json").read_text()) for r in range(ranks)]
    params = [torch.load(out / f"params-rank{r}.pt") for r in range(ranks)]
    return results, params


PL_CPU = {"trainer": {"accelerator": "cpu"}, "epochs": 2}
PL_FL = {"trainer": {"accelerator": "fl", "devices": 1}, "epochs": 2}


def test_lightning_accelerator_fl_and_auto_train_on_fl_like_the_cpu(tmp_path, shared):
    cpu, cpu_params = shared(_pl, PL_CPU)
    for opts in (PL_FL, {"trainer": {}, "epochs": 2}):
        fl, fl_params = shared(_pl, opts)
        assert (fl[0]["accelerator"], fl[0]["strategy"], fl[0]["root_device"]) == \
            ("FLAccelerator", "SingleDeviceStrategy", "fl:0")
        assert max(abs(a - b) for a, b in zip(fl[0]["losses"], cpu[0]["losses"])) <= 1e-5
        for k, v in fl_params[0].items():
            torch.testing.assert_close(v, cpu_params[0][k], rtol=0, atol=1e-6)   # SGD: lr x float32 rounding


def test_lightning_mixed_precision_uses_fl_autocast(tmp_path, shared):
    cpu, _ = shared(_pl, PL_CPU)
    bf16, _ = _pl(tmp_path, "bf16", {"chip": "xpu:th1", "trainer": {"precision": "bf16-mixed"}, "epochs": 2})
    fp16, _ = _pl(tmp_path, "fp16", {"chip": "xpu:x1", "trainer": {"precision": "16-mixed"}, "epochs": 2})
    assert (bf16[0]["precision"], bf16[0]["autocast_device"], bf16[0]["dtypes"], bf16[0]["scaler"]) == \
        ("MixedPrecision", "fl", ["torch.bfloat16"], None)
    assert (fp16[0]["precision"], fp16[0]["autocast_device"], fp16[0]["dtypes"], fp16[0]["scaler"]) == \
        ("MixedPrecision", "fl", ["torch.float16"], "GradScaler")
    assert fp16[0]["root_device"] == "fl:1"
    # cross-entropy of ~1.4 from logits held in the lower precision
    for run, u in ((bf16, UNIT_ROUNDOFF["bf16"]), (fp16, UNIT_ROUNDOFF["fp16"])):
        assert max(abs(a - b) for a, b in zip(run[0]["losses"], cpu[0]["losses"])) <= 4 * 1.5 * u


def test_lightning_refuses_a_precision_the_chip_lacks(tmp_path):
    code = ("import flbridge, lightning as L\n"
            "from flbridge.errors import IntegrationError\n"
            "try:\n"
            "    L.Trainer(accelerator='fl', precision='16-mixed')\n"
            "except IntegrationError as e:\n"
            "    print('REFUSED', e)\n")
    p = _run([sys.executable, "-c", code])
    assert "REFUSED Trainer(precision='16-mixed') on fl:0 (xpu:th1)" in p.stdout
    assert "precision='bf16-mixed'" in p.stdout


def test_lightning_checkpoints_save_and_resume(tmp_path, shared):
    whole, whole_params = shared(_pl, PL_FL)          # two epochs at once (the first test's)
    first, _ = _pl(tmp_path, "first", {**PL_FL, "epochs": 1, "checkpoint": True})
    ckpt = sorted((tmp_path / "first" / "ckpt").glob("*.ckpt"))
    assert len(ckpt) == 1
    resumed, resumed_params = _pl(tmp_path, "resumed", {**PL_FL, "resume": str(ckpt[0])})
    assert first[0]["losses"] + resumed[0]["losses"] == whole[0]["losses"]
    for k, v in whole_params[0].items():
        assert torch.equal(resumed_params[0][k], v), k


def test_lightning_ddp_on_two_devices_runs_over_flccl_like_the_cpu(tmp_path):
    fl, fl_params = _pl(tmp_path, "fl", {"trainer": {"accelerator": "fl", "devices": 2, "strategy": "ddp"}}, ranks=2)
    cpu, cpu_params = _pl(tmp_path, "cpu", {"trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}},
                          ranks=2)
    for r, c in zip(fl, cpu):
        assert (r["accelerator"], r["strategy"]) == ("FLAccelerator", "DDPStrategy")
        assert "FLProcessGroup" in r["group"] and r["collectives"]["vendor all_reduce"]["calls"] >= 2
        assert max(abs(a - b) for a, b in zip(r["losses"], c["losses"])) <= 1e-5
    for k, v in fl_params[0].items():
        assert torch.equal(v, fl_params[1][k]), k
        torch.testing.assert_close(v, cpu_params[0][k], rtol=0, atol=1e-6)
