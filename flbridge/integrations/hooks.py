"""Post-import hooks: run a function when the program imports a module, or
at once when it already has.

A training library that binds its device choices while it is being
imported (DeepSpeed binds every op builder to its accelerator inside
`import deepspeed`) has to be told about fl at one precise moment: right
after the module that makes the choice has run, before anything reads it.
A finder placed first on `sys.meta_path` sees that module's import, lets
the ordinary finders locate it, and wraps its loader so the hook runs right
after the module's code.  Nothing is imported here ahead of the program.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading

_HOOKS: dict = {}          # module name -> [fn(module)], run once after it executes
_LOCK = threading.RLock()


def when_imported(name: str, fn) -> None:
    """Runs fn(module) right after `name` is imported (now, if it already is)."""
    with _LOCK:
        module = sys.modules.get(name)
        if module is None or _initializing(module):
            _HOOKS.setdefault(name, []).append(fn)
            _ensure_finder()
            return
    fn(module)


def _initializing(module) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _run(name: str, module) -> None:
    with _LOCK:
        fns = _HOOKS.pop(name, [])
    for fn in fns:
        fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path; answers only for the watched names, with the
    spec the other finders give and a loader that runs the hooks after the
    module's own code."""

    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, name)
        return spec


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, inner, name: str):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        # the module keeps its own loader (source lookups, reloads, pickling by reference)
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        _run(self._name, module)

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


_FINDER = _Finder()


def _ensure_finder() -> None:
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


# module -> (flbridge module, function): run when the program imports the module
INTEGRATIONS = (
    ("torch.nn.parallel.distributed", "ddp", "install"),
    ("deepspeed.accelerator.real_accelerator", "deepspeed", "on_import"),
    ("accelerate.state", "accelerate", "on_state"),
    ("accelerate.accelerator", "accelerate", "on_accelerator"),
    ("transformers.training_args", "accelerate", "on_training_args"),
    ("lightning.pytorch.trainer.connectors.accelerator_connector", "lightning", "on_connector"),
    ("pytorch_lightning.trainer.connectors.accelerator_connector", "lightning", "on_connector"),
)


def install() -> None:
    """Leaves the integrations' hooks (import flbridge calls this)."""
    for module, ours, fn in INTEGRATIONS:
        when_imported(module, _later(ours, fn))


def _later(ours: str, fn: str):
    def hook(module):
        import importlib
        getattr(importlib.import_module(f"{__package__}.{ours}"), fn)(module)
    hook.__qualname__ = f"{ours}.{fn}"
    return hook
