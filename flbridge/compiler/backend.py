"""``torch.compile(model, backend="fl")``, and what the default backend does on fl.

The backend is registered through the ``torch_dynamo_backends`` entry point
(pyproject.toml), so the name resolves in a fresh process before anything
imported flbridge.  Dynamo traces the model (XPUTensor is a traceable
subclass, :mod:`flbridge.tensor.traceable`); AOTAutograd turns each graph into
forward and backward aten graphs on `fl:N`; each becomes a
:class:`~flbridge.compiler.lowering.CompiledGraph`: captured once per
argument key through flbridge's own eager path, replayed afterwards as a
flat list of prepared vendor calls.

The default ``torch.compile(model)`` (Inductor) cannot compile for a chip
whose only code is a vendor C library: Inductor generates Triton or C++
kernels and needs a device interface and a code generator for the device.
So graphs that read or make fl tensors go to this backend instead (see
:func:`install`); CPU and CUDA graphs go to Inductor untouched.

Dynamo never compiles flbridge's own Python: the package is on Dynamo's
skip list (a call into flbridge inside a compiled function runs eagerly).
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
import warnings
import weakref

import torch

from .._paths import PACKAGE_DIR
from ..devices import lazy_init
from . import guards, hops, rng_ops

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTIONS = {"capture": bool}   # capture=False: no replay, every call runs the graph through flbridge's eager path


def fl_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The `fl` Dynamo backend: AOTAutograd graphs lowered to replayed vendor calls."""
    if mode is not None and mode not in MODES:
        raise RuntimeError(f"flbridge: unknown torch.compile mode {mode!r} for backend 'fl'; use one of "
                           f"{', '.join(MODES)} (on fl they all replay captured vendor calls)")
    opts = dict(options or {})
    for k, v in opts.items():
        if k not in OPTIONS:
            raise RuntimeError(f"flbridge: unknown option {k!r} for backend 'fl'; known options: "
                               f"{', '.join(OPTIONS)}")
        if not isinstance(v, OPTIONS[k]):
            raise RuntimeError(f"flbridge: option {k!r} for backend 'fl' must be {OPTIONS[k].__name__}, "
                               f"got {type(v).__name__}")
    lazy_init()       # this module is imported (the entry point) before anything else may have
    _skip_flbridge_in_dynamo()
    guards.install()  # before Dynamo builds this frame's guards (after its backend returns)
    rng_ops.install()
    hops.install()
    from torch._dynamo.backends.common import aot_autograd
    from .lowering import CompiledGraph
    capture = opts.get("capture", True)

    def compiler(kind):
        def compile_graph(g, inputs):
            cg = CompiledGraph(g, kind=kind, capture=capture)
            _COMPILED.append(cg)
            return cg
        return compile_graph

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"), decompositions={},
                        keep_inference_input_mutations=True)(gm, example_inputs)


class _Graphs:
    """The graphs compiled with backend "fl" that are alive, oldest first.

    Held weakly: a graph lives as long as what PyTorch keeps of it (Dynamo's
    cache entry, the autograd graph of an output not yet backpropagated), and
    its programs' memory pools go with it.  Held strongly, every graph ever
    compiled kept its pools: a deleted model after ``torch._dynamo.reset()``
    still held its device memory."""

    def __init__(self):
        self._refs: list = []

    def append(self, cg) -> None:
        if len(self._refs) >= 64 and len(self._refs) % 64 == 0:
            self._refs = [r for r in self._refs if r() is not None]
        self._refs.append(weakref.ref(cg))

    def _live(self) -> list:
        return [g for g in (r() for r in self._refs) if g is not None]

    def __iter__(self):
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    def __getitem__(self, i):
        return self._live()[i]

    def clear(self) -> None:
        self._refs.clear()


_COMPILED = _Graphs()   # flbridge.compiler.backend.stats()


def stats() -> dict:
    """Counts over the graphs compiled with backend "fl" that are alive:
    graphs, capture runs, replays, recorded vendor calls, the nodes run
    eagerly with why, and the graphs run eagerly every call with why."""
    out = {"graphs": len(_COMPILED), "captures": 0, "replays": 0, "vendor_calls": 0, "eager_nodes": {},
           "eager_graphs": {}}
    for cg in _COMPILED:
        if cg.eager_why is not None:
            out["eager_graphs"][cg.eager_why] = out["eager_graphs"].get(cg.eager_why, 0) + 1
        out["captures"] += cg.captures
        out["replays"] += cg.replays
        for progs in cg.programs.values():
            for prog in progs:
                out["vendor_calls"] += prog.ncalls
                for op, why in prog.eager_reasons:
                    out["eager_nodes"][op] = why
    return out


def reset() -> None:
    """Forgets the graphs compiled so far (stats() starts from zero); the
    graphs themselves live as long as PyTorch keeps them."""
    _COMPILED.clear()


# ------------------------------------------------ the default backend on fl

def _on_fl(gm, inputs) -> bool:
    """The graph reads or makes an fl tensor: an input on fl, or a node whose
    value (Dynamo's example value) is on fl, as `torch.ones(n, device="fl")`
    or `cpu_tensor.to("fl")` in a function of CPU inputs (or of none)."""
    for a in inputs:
        if isinstance(a, torch.Tensor) and a.device.type == "fl":
            return True
    for n in gm.graph.nodes:
        v = n.meta.get("example_value")
        for t in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(t, torch.Tensor) and t.device.type == "fl":
                return True
    return False


def _route_inductor_on_fl() -> None:
    """torch.compile(model) with the default backend: graphs that read or
    make fl tensors go to the fl backend, others to Inductor."""
    cls = torch._TorchCompileInductorWrapper
    if getattr(cls.__call__, "_flbridge", False):
        return
    inductor_call = cls.__call__

    @functools.wraps(inductor_call)
    def __call__(self, model_, inputs_, **kwargs):
        if _on_fl(model_, inputs_):
            try:
                return fl_backend(model_, inputs_)
            except Exception as e:
                # Dynamo's message quotes str(e) as backend='inductor' failing: say which backend ran
                note = ("\n(flbridge: torch.compile's default backend handed this graph to flbridge's 'fl' "
                        "backend, as it reads or makes fl tensors, which Inductor cannot compile; the error "
                        "above is the 'fl' backend's)")
                if e.args and isinstance(e.args[0], str):
                    e.args = (e.args[0] + note, *e.args[1:])
                else:
                    e.add_note(note.strip())
                raise
        return inductor_call(self, model_, inputs_, **kwargs)
    __call__._flbridge = True
    cls.__call__ = __call__


# ------------------------------------------- fake tensors and fl constants

def _fake_mode_avoids_fl_init() -> None:
    """FakeTensorMode.avoid_device_init also for fl.

    Under fake tensors (Dynamo, AOTAutograd), ``torch.tensor(data,
    device="fl")`` and ``cpu_constant.to("fl")`` are constant-propagated by
    running them for real when a device is available, and the result must
    be a plain tensor to become a fake constant.  On fl it is an XPUTensor
    (a wrapper subclass), which FakeTensorMode cannot turn into a constant.
    With avoid_device_init (PyTorch's setting for a build whose device is
    absent) the constant stays on the CPU and its move to fl is traced as an
    ordinary op, which is all a compiled graph needs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    prop = FakeTensorMode.avoid_device_init
    if getattr(prop.fget, "_flbridge", False):
        return
    original = prop.fget

    def avoid_device_init(self) -> bool:
        return torch._C._get_privateuse1_backend_name() == "fl" or original(self)
    avoid_device_init._flbridge = True
    FakeTensorMode.avoid_device_init = property(avoid_device_init)


def _fake_cache_sees_current_fl_device() -> None:
    """FakeTensorMode's dispatch cache bypassed for ops given an fl device
    with no index (``torch.zeros(n, device="fl")``).

    The cache is shared by every FakeTensorMode in the process, and its key
    holds the device argument as written: ``fl``, whatever the current
    device.  A graph traced again after ``torch.fl.set_device(2)`` (Dynamo
    recompiling for an input now on fl:2) was handed the fake made under
    fl:1 and failed with "Tensor device mismatch ... fl:2 and fl:1".  Such
    ops are factories and moves, few per graph; the rest stay cached."""
    from torch._subclasses import fake_tensor
    cls = fake_tensor.FakeTensorMode
    if getattr(cls._cache_key, "_flbridge", False):
        return
    original = cls._cache_key
    bypass = fake_tensor._BypassDispatchCache

    def _cache_key(self, state, func, args, kwargs):
        for v in (*(kwargs.values() if kwargs else ()), *args):
            if v.__class__ is torch.device and v.index is None and v.type == "fl":
                raise bypass("an fl device with no index (the current device decides)")
        return original(self, state, func, args, kwargs)
    _cache_key._flbridge = True
    cls._cache_key = _cache_key


# ------------------------------------------------------- Dynamo skip list

# flbridge files Dynamo traces: the models (user code, for benches, tests and
# the demo) and the current-device wrappers of torch.tensor, Tensor.to, ...
# (which step aside while Dynamo traces; skipped, each call would break the graph)
_MODEL_FILES = ("demos/models.py", "devices/current.py")
# of those, the files Dynamo inlines into the code that calls them but never
# compiles as a frame of their own: Tensor.to called by flbridge's own code
# (autocast's casts, run eagerly after a graph break) was a new top-level
# frame each time, recompiled per tensor until a recompile failed
_INLINE_ONLY = ("devices/current.py",)


def _skip_flbridge_in_dynamo() -> None:
    """Every flbridge source file goes on Dynamo's skip list (file by file,
    so the model files stay compilable)."""
    trace_rules = sys.modules.get("torch._dynamo.trace_rules")
    if trace_rules is None:
        return
    import os

    root = str(PACKAGE_DIR)
    inline_when_called = getattr(trace_rules, "BUILTIN_INLINE_WHEN_CALLED", None)
    added = False
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = trace_rules._as_posix_path(os.path.join(dirpath, f))
            rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
            if rel in _INLINE_ONLY and isinstance(inline_when_called, set):
                inline_when_called.add(path)      # checked before the skip list, for inlined calls only
            elif rel in _MODEL_FILES:
                continue
            if path in trace_rules.SKIP_DIRS:
                continue
            trace_rules.SKIP_DIRS.append(path)
            added = True
    if added:
        trace_rules._recompile_re()


class _AfterDynamo(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Puts flbridge on Dynamo's skip list as soon as Dynamo is imported
    (importing Dynamo to do it would cost every flbridge user a second)."""

    def __init__(self):
        self.loader = None

    def find_spec(self, name, path, target=None):
        if name != "torch._dynamo.trace_rules" or self.loader is not None:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            _skip_flbridge_in_dynamo()
        except Exception as e:  # noqa: BLE001 - never break Dynamo's import over a skip entry
            warnings.warn(f"flbridge: could not put flbridge on Dynamo's skip list: {e}", stacklevel=2)


def install() -> None:
    """Called by flbridge.init(): the default backend's routing and the skip list."""
    _route_inductor_on_fl()
    _fake_mode_avoids_fl_init()
    _fake_cache_sees_current_fl_device()
    if "torch._dynamo.trace_rules" in sys.modules:
        _skip_flbridge_in_dynamo()
    elif not any(isinstance(f, _AfterDynamo) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamo())
