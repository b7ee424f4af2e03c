"""The integrations' own parts, without DeepSpeed, accelerate or Lightning
(those run in tests/test_integrations_slow.py): the import hook, DeepSpeed's
fused Adam step as flbridge runs it, and which chip a local rank gets."""
import ast
import sys
from pathlib import Path

import pytest
import torch

from flbridge.integrations import hooks, ranks, when_imported
from flbridge.integrations.fused_adam import multi_tensor_adam

PKG = Path(__file__).resolve().parents[1] / "flbridge"
LIBRARIES = ("deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning")


# ------------------------------------------------------------ import hook

def _module_file(tmp_path, name: str) -> None:
    (tmp_path / f"{name}.py").write_text("VALUE = 41\nVALUE += 1\n")


def test_a_hook_runs_once_right_after_the_module_executes_and_leaves_its_loader(tmp_path, monkeypatch):
    name = "flbridge_hook_probe_a"
    _module_file(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported(name, lambda m: seen.append((m.__name__, m.VALUE)))
    try:
        mod = __import__(name)
        __import__(name)
        assert seen == [(name, 42)]                       # after the module's code, once
        assert type(mod.__loader__).__name__ == "SourceFileLoader"
        assert mod.__spec__.loader is mod.__loader__
        assert name not in hooks._HOOKS
    finally:
        sys.modules.pop(name, None)


def test_a_hook_for_a_module_already_imported_runs_at_once(tmp_path, monkeypatch):
    name = "flbridge_hook_probe_b"
    _module_file(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        mod = __import__(name)
        seen = []
        when_imported(name, seen.append)
        assert seen == [mod]
    finally:
        sys.modules.pop(name, None)


def test_the_hook_ignores_modules_nobody_watches(tmp_path, monkeypatch):
    name = "flbridge_hook_probe_c"
    _module_file(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert hooks._FINDER.find_spec(name, None) is None
        assert __import__(name).VALUE == 42
    finally:
        sys.modules.pop(name, None)


def test_import_flbridge_imports_none_of_the_training_libraries():
    """What `import flbridge` runs of the integrations (the face and the hook
    module) names none of the libraries; the rest loads when they are imported."""
    for path in (PKG / "integrations" / "__init__.py", PKG / "integrations" / "hooks.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level]
        assert not [n for n in names if n.split(".")[0] in LIBRARIES], (path, names)
    root = ast.parse((PKG / "__init__.py").read_text())
    assert any(isinstance(n, ast.ImportFrom) and n.module == "integrations" for n in root.body)
    for module, ours, fn in hooks.INTEGRATIONS:
        assert module.split(".")[0] in (*LIBRARIES, "torch")   # torch's DDP (flbridge.integrations.ddp)
        assert f"def {fn}(" in (PKG / "integrations" / f"{ours}.py").read_text()


def test_every_library_module_the_integrations_wait_for_is_watched():
    import flbridge  # noqa: F401 - installs the hooks
    watched = set(hooks._HOOKS) | {m for m in sys.modules if m in {w for w, _, _ in hooks.INTEGRATIONS}}
    assert {w for w, _, _ in hooks.INTEGRATIONS} <= watched
    assert hooks._FINDER in sys.meta_path


# --------------------------------------------------------- fused Adam step

def _adam_reference(params, grads, steps, lr, betas, eps, wd, decoupled):
    ps = [p.detach().clone().double().requires_grad_(True) for p in params]
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls(ps, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for g_step in grads:
        for p, g in zip(ps, g_step):
            p.grad = g.double()
        opt.step()
    return ps


def _fused(params, grads, steps, lr, betas, eps, wd, mode, device="cpu", dtype=torch.float32):
    ps = [p.detach().clone().to(device=device, dtype=dtype) for p in params]
    m = [torch.zeros_like(p) for p in ps]
    v = [torch.zeros_like(p) for p in ps]
    for step, g_step in enumerate(grads, 1):
        gs = [g.to(device=device, dtype=dtype) for g in g_step]
        multi_tensor_adam(2048 * 32, None, [gs, ps, m, v], lr, betas[0], betas[1], eps, step, mode, 1, wd)
    return ps


def _problem(steps=3):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(7, 5, generator=gen), torch.randn(11, generator=gen)]
    grads = [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(steps)]
    return params, grads


@pytest.mark.parametrize("mode,decoupled", [(1, True), (0, False)])
def test_the_fused_adam_step_is_adamw_or_adam_with_l2(mode, decoupled):
    params, grads = _problem()
    kw = dict(steps=3, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, wd=0.1)
    ref = _adam_reference(params, grads, decoupled=decoupled, **kw)
    out = _fused(params, grads, mode=mode, **kw)
    # float32 against float64: each step moves a parameter by at most ~lr, computed
    # with a few float32 roundings (relative 6e-8 each) on values of size ~1
    for a, b in zip(out, ref):
        torch.testing.assert_close(a.double(), b.detach(), rtol=0, atol=1e-6)


def test_the_fused_adam_step_runs_on_the_chip_like_on_the_cpu(th1):
    params, grads = _problem()
    kw = dict(steps=3, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, wd=0.01, mode=1)
    cpu = _fused(params, grads, **kw)
    fl = _fused(params, grads, device=th1, **kw)
    assert all(type(p).__name__ == "XPUTensor" for p in fl)
    for a, b in zip(fl, cpu):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=1e-6)


def test_the_fused_adam_step_computes_half_precision_tensors_in_float32(x1):
    params, grads = _problem(steps=1)
    kw = dict(steps=1, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, wd=0.0, mode=1)
    ref = _fused(params, grads, **kw)
    out = _fused(params, grads, device=x1, dtype=torch.float16, **kw)
    assert all(p.dtype == torch.float16 for p in out)
    # one rounding of each result to float16 (half an ulp: 2^-11 relative) on values of size < 4
    for a, b in zip(out, ref):
        torch.testing.assert_close(a.cpu().float(), b.half().float(), rtol=0, atol=4 * 2 ** -11)


# ------------------------------------------------------- ranks and chips

def test_local_ranks_map_onto_the_chips_of_the_current_chip_type(flchips):
    prev = torch.fl.current_device()
    try:
        for name, chip in flchips.items():
            torch.fl.set_device(name)
            same = ranks.same_type_chips()
            assert [c.device_type for c in same] == [name] * len(same)
            assert ranks.fl_index(0) == chip.index
            assert ranks.fl_index("1") == same[1 % len(same)].index   # os.environ["LOCAL_RANK"] is a string
            assert ranks.local_index() == 0
    finally:
        torch.fl.set_device(prev)


def test_the_integration_errors_name_the_library_and_the_feature():
    from flbridge.errors import FlbridgeError, IntegrationError, IntegrationWarning
    e = IntegrationError("msg", library="deepspeed", feature="FusedLambBuilder")
    assert isinstance(e, FlbridgeError) and isinstance(e, RuntimeError)
    assert (e.library, e.feature, str(e)) == ("deepspeed", "FusedLambBuilder", "msg")
    assert issubclass(IntegrationWarning, UserWarning)


def test_the_module_docstrings_name_each_patched_place():
    """Each integration says in its docstring which of the library's names it
    wraps, and the code wraps exactly those (a reader finds every patch)."""
    acc = (PKG / "integrations" / "accelerate.py").read_text()
    for name in ("default_device", "_prepare_backend", "set_device", "Accelerator", "_setup_devices",
                 "is_torch_bf16_gpu_available", "DynamoBackend"):
        assert name in ast.get_docstring(ast.parse(acc)), name
    light = (PKG / "integrations" / "lightning.py").read_text()
    for name in ("_select_auto_accelerator", "_choose_strategy", "_check_and_init_precision",
                 "determine_ddp_device_ids"):
        assert name in ast.get_docstring(ast.parse(light)), name
    assert "deepspeed.accelerator.real_accelerator" in \
        ast.get_docstring(ast.parse((PKG / "integrations" / "deepspeed.py").read_text()))
