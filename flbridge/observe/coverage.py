"""Op coverage: which aten ops a model calls and the route each would take on
each chip, without running a kernel.

    report = flbridge.coverage(model, (x,), device=["xpu:x1", "xpu:th1"], backward=True)
    print(report.markdown())

The model runs on fake tensors (torch's FakeTensorMode) whose device is the
chip's ``fl:N``, so PyTorch takes the paths it takes for a real fl run
(device-dependent kernels, attention's math path, foreach optimizers).  A
dispatch mode records each aten op and handles it as flbridge.routing.dispatch
would: ops that need a kernel ask their route (:meth:`OpRoute.predict`, the
eager decision code on meta arguments); a decomposition, a _foreach_ op, a
CompositeImplicit op and the *_like fills are expanded into the ops they
call, which are recorded in turn; views, allocation and copies between
devices need no kernel and are not listed.  The prediction is therefore the
route table a real run records in ``flbridge.stats()["routes"]`` (a test
checks this for a CNN and a transformer on every shipped chip), except for
what only data can decide: a vendor kernel that fails at run time.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode

from ..devices import chip_for, lazy_init
from ..devices import chips as all_chips
from ..errors import FlbridgeError
from ..routing import COMPOSITE, FOREACH, ROUTED, SPECIAL, SPECIAL_OPS, kind

aten = torch.ops.aten
_CEA = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
_LOCK = threading.Lock()   # one coverage run at a time (it patches the optimizers' foreach test)


class MixedDevicesError(FlbridgeError, RuntimeError):
    """The program itself mixes devices: a real run on the chip fails the same way."""

    def __init__(self, phase: str, op, devices, device_type: str):
        from ..specs.aten import qualname
        self.phase, self.devices = phase, tuple(str(d) for d in devices)
        self.op = qualname(op) if hasattr(op, "_schema") else str(op)
        super().__init__(
            f"the {phase} mixes devices: {self.op} got tensors on {' and '.join(self.devices)}, so a real run on "
            f"{device_type} ({self.devices[0]}) raises \"Expected all tensors to be on the same device\" too; "
            f"move the other tensor to the model's device (e.g. target.to(out.device) in the loss function)")


@dataclass
class Row:
    """One (op, route) of one chip: how many calls, and why."""
    op: str
    route: str            # native, vendor_fallback, python_fallback, decomposed, cpu, error
    detail: str           # the C function for native calls, else what runs instead
    reason: str = ""      # why not native
    fix: str = ""
    calls: int = 0


@dataclass
class ChipCoverage:
    device: str           # fl:N
    device_type: str      # xpu:x1
    rows: list = field(default_factory=list)

    @property
    def routed_calls(self) -> int:
        return sum(r.calls for r in self.rows)

    @property
    def native_calls(self) -> int:
        return sum(r.calls for r in self.rows if r.route == "native")

    @property
    def native_share(self) -> float:
        return self.native_calls / self.routed_calls if self.routed_calls else 0.0

    def routes(self) -> dict:
        """{(op, route): calls}, as flbridge.stats()['routes'] sums up a real run."""
        out: dict = {}
        for r in self.rows:
            out[(r.op, r.route)] = out.get((r.op, r.route), 0) + r.calls
        return out

    def as_dict(self) -> dict:
        return {"device": self.device, "device_type": self.device_type, "routed_calls": self.routed_calls,
                "native_calls": self.native_calls, "native_share": round(self.native_share, 4),
                "ops": [r.__dict__ for r in self.rows]}


class CoverageReport:
    """Per chip, every aten op the model calls that needs a kernel, with its
    predicted route, reason and fix."""

    def __init__(self, chips: list, what: str):
        self.chips = chips        # [ChipCoverage]
        self.what = what

    def __getitem__(self, device_type: str) -> ChipCoverage:
        for c in self.chips:
            if c.device_type == device_type or c.device == device_type:
                return c
        raise KeyError(f"{device_type!r} is not in this report ({', '.join(c.device_type for c in self.chips)})")

    def as_dict(self) -> dict:
        return {"what": self.what, "chips": [c.as_dict() for c in self.chips]}

    def json(self, indent: int = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent)

    def _ops(self) -> list:
        order: dict = {}
        for c in self.chips:
            for r in c.rows:
                order.setdefault(r.op, len(order))
        return sorted(order, key=lambda op: (all(self._cell_route(c, op) == "native" for c in self.chips),
                                             order[op]))

    @staticmethod
    def _cell_route(chip, op):
        routes = {r.route for r in chip.rows if r.op == op}
        return routes.pop() if len(routes) == 1 else ("mixed" if routes else "")

    @staticmethod
    def _cell(chip, op) -> str:
        rows = [r for r in chip.rows if r.op == op]
        if not rows:
            return "-"
        return "; ".join(f"{r.route} ({r.detail}) x{r.calls}" for r in rows)

    def markdown(self) -> str:
        heads = [f"{c.device_type} ({c.device})" for c in self.chips]
        out = [f"# Op coverage: {self.what}", "",
               "| | " + " | ".join(heads) + " |", "|---|" + "---|" * len(self.chips),
               "| native share of calls | " + " | ".join(
                   f"{100 * c.native_share:.0f}% ({c.native_calls} of {c.routed_calls})" for c in self.chips) + " |",
               "", "| op | " + " | ".join(heads) + " |", "|---|" + "---|" * len(self.chips)]
        for op in self._ops():
            out.append(f"| `{op}` | " + " | ".join(self._cell(c, op).replace("|", "\\|") for c in self.chips) + " |")
        fixes = [(c, r) for c in self.chips for r in c.rows if r.route != "native" and r.fix]
        if fixes:
            out += ["", "## Fixes", ""]
            for c, r in fixes:
                out.append(f"- {c.device_type} `{r.op}` ({r.route}, {r.calls} calls): {r.fix}")
        return "\n".join(out) + "\n"

    def table(self) -> str:
        lines = [f"op coverage: {self.what}"]
        for c in self.chips:
            lines.append(f"\n{c.device_type} ({c.device}): {100 * c.native_share:.0f}% of {c.routed_calls} calls "
                         f"native ({c.native_calls})")
            lines.append(f"  {'op':46s} {'route':16s} {'calls':>6s}  detail")
            for r in sorted(c.rows, key=lambda r: (r.route == "native", -r.calls, r.op)):
                lines.append(f"  {r.op:46s} {r.route:16s} {r.calls:6d}  {r.detail}")
                if r.route != "native" and r.fix:
                    lines.append(f"  {'':46s} {'':16s} {'':6s}  fix: {r.fix}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class _Predict(TorchDispatchMode):
    """Records each op a chip would need a kernel for, with its predicted
    route, while fake tensors compute every shape."""

    def __init__(self, chip):
        super().__init__()
        self.chip = chip
        self.rows: dict = {}          # (op, route, reason kind) -> Row

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _has_fl(args) and not _has_fl(kwargs.values()):
            d = kwargs.get("device")
            if d is not None and torch.device(d).type == "fl" and func.namespace == "aten":
                return self._factory(func, args, kwargs)
            return func(*args, **kwargs)
        if func.namespace == "prim":
            return func(*args, **kwargs)    # FakeTensorMode's own queries (prim::device): never an fl op
        k = kind(func)
        if k == ROUTED:
            return self._routed(func, args, kwargs)
        if k == FOREACH:
            from ..routing.foreach import foreach
            with self:
                return foreach(func, args, kwargs)
        if k == COMPOSITE:
            with self:
                out = func.decompose(*args, **kwargs)
            return self._routed(func, args, kwargs) if out is NotImplemented else out
        if k == SPECIAL:
            return self._special(func, SPECIAL_OPS[func], args, kwargs)
        return func(*args, **kwargs)    # views, aliases, collectives: no kernel

    def _factory(self, func, args, kwargs):
        """A factory for the fl device: PyTorch runs its device-generic
        kernel (empty, then an out= op on the new tensor) unless flbridge
        registered one of its own (allocation on the host)."""
        name = func.name()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1") or \
                not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
            return func(*args, **kwargs)
        with self:
            return func.redispatch(_CEA, *args, **kwargs)

    def _special(self, func, name, args, kwargs):
        from ..routing import SPECIAL_HANDLERS
        if name == "copy_":
            if _is_fl(args[0]) and _is_fl(args[1]) and args[0].device == args[1].device:
                return self._routed(func, args, kwargs)
            return func(*args, **kwargs)
        if name == "to_copy":
            dev = kwargs.get("device")
            dev = None if dev is None else torch.device(dev)
            if dev is None or (dev.type == "fl" and dev.index in (None, args[0].device.index)):
                return self._routed(func, args, kwargs)
            return func(*args, **kwargs)
        if name in ("full_like", "conj", "neg_view", "sdp_choice", "nothing"):
            with self:
                return SPECIAL_HANDLERS[name](func, args, kwargs)
        return func(*args, **kwargs)    # item, empty_like, identity, set_, resize_: no kernel

    def _routed(self, func, args, kwargs):
        from ..routing import route_of
        r = route_of(self.chip, func)
        # the decision code sees plain meta tensors, as when the route traces
        # a decomposition (fake tensors would record FakeTensorMode's own calls)
        with unset_fake_temporarily():
            margs, mkwargs = _plain(args), _plain(kwargs)
            route, detail, reason = r.predict(margs, mkwargs)
            how = r.choose(margs, mkwargs, reason, meta=True)[0] if route == "decomposed" else route
            decomposed = r.decomposition(margs, mkwargs) if how == "decomposed" else r.device_only
            part = r.blocking_part(margs, mkwargs) if route == "cpu" else ""
        row = self._count(r, route, detail, reason, part)
        if route == "decomposed":
            with self:
                return decomposed(*args, **kwargs)
        if route == "python_fallback":
            import importlib
            mod, _, fn = r.fb.target.partition(":")
            try:
                with self:
                    return getattr(importlib.import_module(mod), fn)(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a fallback that needs tensor values
                note = f" (it cannot run on fake tensors: {type(e).__name__}; the ops it calls are not all listed)"
                if not row.detail.endswith(note):
                    row.detail += note
        return func(*args, **kwargs)

    def _count(self, r, route, detail, reason, part="") -> None:
        key = (r.qualname, route, reason.kind if reason is not None else "")
        row = self.rows.get(key)
        if row is None:
            fix = r.fix_for(reason, part) if reason is not None else ""
            row = self.rows[key] = Row(r.qualname, route, detail, str(reason) if reason is not None else "", fix)
        row.calls += 1
        return row


def _plain(v):
    """Fake tensors as the decision code takes them: an fl tensor as a meta
    tensor, a CPU tensor as a CPU tensor (uninitialized: only its geometry
    and device matter)."""
    if isinstance(v, torch.Tensor):
        dev = "meta" if v.device.type == "fl" else v.device
        return torch.empty_strided(tuple(v.shape), v.stride(), dtype=v.dtype, device=dev)
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _is_fl(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "fl"


def _has_fl(vals) -> bool:
    for v in vals:
        if isinstance(v, torch.Tensor):
            if v.device.type == "fl":
                return True
        elif isinstance(v, (list, tuple)) and _has_fl(v):
            return True
    return False


def _default_loss(out):
    """The output if it is a scalar, the first scalar in a tuple output,
    else the sum of the first tensor output."""
    if isinstance(out, torch.Tensor):
        return out if out.dim() == 0 else out.sum()
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor) and o.dim() == 0:
                return o
        for o in out:
            if isinstance(o, torch.Tensor):
                return o.sum()
    raise TypeError(f"flbridge.coverage: cannot make a loss from a {type(out).__name__} output for backward=True; "
                    f"pass loss_fn=")


_OPTIMIZERS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.01), "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
               "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3)}


def _predict_one(chip, model, example_inputs, example_kwargs, backward, loss_fn, optimizer) -> ChipCoverage:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
    from torch.optim import optimizer as _opt

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    dev = chip.device
    fakes: dict = {}

    def fake(t):
        if not isinstance(t, torch.Tensor):
            return t
        got = fakes.get(id(t))
        if got is None:
            with unset_fake_temporarily():
                m = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")
            got = FakeTensor(mode, m, dev)
            if t.requires_grad:
                got.requires_grad_(True)
            fakes[id(t)] = got
        return got

    def tree(v):
        if isinstance(v, torch.Tensor):
            return fake(v)
        if isinstance(v, (list, tuple)):
            return type(v)(tree(x) for x in v)
        if isinstance(v, dict):
            return {k: tree(x) for k, x in v.items()}
        return v

    rec = _Predict(chip)
    state = {n: fake(p) for n, p in model.named_parameters(remove_duplicate=False)}
    state.update({n: fake(b) for n, b in model.named_buffers(remove_duplicate=False)})
    params = list({id(p): fake(p) for p in model.parameters() if p.requires_grad}.values())
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    # an fl run picks foreach optimizers (XPUTensor is in this list): so must the fake one
    added = FakeTensor not in _opt._foreach_supported_types
    if added:
        _opt._foreach_supported_types.append(FakeTensor)
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError
    phase = "model's forward"
    try:
        with mode:
            fargs, fkwargs = tree(args), tree(example_kwargs or {})
            with rec:
                out = torch.func.functional_call(model, state, fargs, fkwargs)
                if backward or optimizer is not None:
                    phase = "loss function" if loss_fn is not None else "loss (the output's sum)"
                    loss = (loss_fn or _default_loss)(out)
                    phase = "backward pass"
                    loss.backward()
                if optimizer is not None:
                    phase = "optimizer step"
                    make = _OPTIMIZERS[optimizer] if isinstance(optimizer, str) else optimizer
                    make(params).step()
    except FakeTensorDeviceMismatchError as e:
        raise MixedDevicesError(phase, e.func, (e.common_device, e.device), chip.device_type) from None
    finally:
        if added:
            _opt._foreach_supported_types.remove(FakeTensor)
    order = {}
    rows = sorted(rec.rows.values(), key=lambda r: order.setdefault(r.op, len(order)))
    return ChipCoverage(str(dev), chip.device_type, rows)


def coverage(model, example_inputs=(), device=None, backward=True, loss_fn=None, optimizer=None,
             example_kwargs=None) -> CoverageReport:
    """The aten ops `model(*example_inputs, **example_kwargs)` calls on each
    chip, with the route each would take (see the module docstring).

    device: a chip (spec name, fl:N, index) or a list of them; None: every
    usable chip.  backward: also the backward pass of `loss_fn(output)`
    (default: the output if it is a scalar, else its sum).  optimizer: also
    one optimizer step: "sgd", "adam", "adamw", or a callable
    params -> torch.optim.Optimizer.  The model and the inputs are not
    changed (the parameters are replaced by fake tensors for the run)."""
    lazy_init()
    if device is None:
        chips = all_chips()
    else:
        chips = [chip_for(d) for d in (device if isinstance(device, (list, tuple)) else [device])]
    if isinstance(optimizer, str) and optimizer not in _OPTIMIZERS:
        raise ValueError(f"flbridge.coverage: optimizer {optimizer!r} is not one of {', '.join(_OPTIMIZERS)} "
                         f"(or pass a callable params -> optimizer)")
    what = f"{type(model).__name__}" + (", forward and backward" if backward else ", forward") + \
        (", optimizer step" if optimizer is not None else "")
    with _LOCK:
        results = [_predict_one(c, model, example_inputs, example_kwargs, backward, loss_fn, optimizer)
                   for c in chips]
    return CoverageReport(results, what)


# ------------------------------------------------------------------- CLI

def load_target(target: str):
    """FILE.py[:NAME] or module[:NAME] -> the callable NAME (default `example`),
    which returns (model, example_inputs) or (model, example_inputs, loss_fn)."""
    import importlib
    import importlib.util
    from pathlib import Path
    path, _, name = target.partition(":") if not (len(target) > 1 and target[1] == ":") else (target, "", "")
    name = name or "example"
    if path.endswith(".py"):
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"{path}: no such file")
        spec = importlib.util.spec_from_file_location(p.stem, p)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(path)
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"{target}: no callable '{name}' (it must return (model, example_inputs) or "
                         f"(model, example_inputs, loss_fn))")
    return fn


def cli(target: str, devices, fmt: str, backward: bool, optimizer, out=None) -> int:
    import sys
    out = out or sys.stdout
    got = load_target(target)()
    if not isinstance(got, tuple) or len(got) not in (2, 3) or not isinstance(got[0], torch.nn.Module):
        raise ValueError(f"{target}: expected (model, example_inputs) or (model, example_inputs, loss_fn), "
                         f"got {type(got).__name__}")
    model, inputs = got[0], got[1]
    loss_fn = got[2] if len(got) == 3 else None
    rep = coverage(model, inputs, device=devices or None, backward=backward, loss_fn=loss_fn,
                   optimizer=None if optimizer == "none" else optimizer)
    text = {"json": rep.json, "markdown": rep.markdown, "text": rep.table}[fmt]()
    print(text.rstrip("\n"), file=out)
    return 0


