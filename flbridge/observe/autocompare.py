"""Autocompare: every op that ran on a chip, run again on the CPU and diffed.

    with flbridge.autocompare(rtol=1e-4, atol=1e-5) as ac:
        loss = model(x).sum(); loss.backward()
    print(ac.table())

or ``FLBRIDGE_AUTOCOMPARE=1`` (all ops) / ``FLBRIDGE_AUTOCOMPARE=<regex,...>``
for a whole program, with the report on stderr at exit (and as JSON in
``FLBRIDGE_AUTOCOMPARE_REPORT`` if set).

For each aten op that reaches flbridge and launches a vendor kernel (a native
kernel, a vendor fallback, a decomposition into native ops), its inputs are
copied to the CPU before it runs; afterwards PyTorch's CPU kernel runs on the
copies and every result and every written argument is compared with
per-dtype tolerances (overridable per op).  Ops that ran on the CPU anyway,
views and copies (no kernel), and random ops are not compared.

A mismatch is reported once per op (with a count of the calls that
mismatched): the largest absolute and relative errors, shapes and dtypes, the
vendor kernels that ran, the module path (``blocks.0.attn``) and the user's
source line.  Backward ops are compared too and say which forward line they
belong to (PyTorch's autograd sequence numbers link the two).  When a
decomposed op mismatches because one of its parts did, only the part is
reported.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import warnings
from collections import OrderedDict

import torch

from ..errors import AutocompareError, AutocompareWarning, user_frame, user_stacklevel
from ..routing import ROUTED, kind
from ..specs import info
from ..tensor import chip_of
from ..binding import launch

# (rtol, atol) per result dtype: the sim computes in float32 and rounds once,
# PyTorch's CPU kernels may accumulate in another order
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}



class Mismatch:
    """The first mismatching call of one op on one chip, and how many did."""

    def __init__(self, op, device, **first):
        self.op, self.device = op, device
        self.first = first
        self.calls = 0

    def as_dict(self) -> dict:
        return {"op": self.op, "device": self.device, "mismatching_calls": self.calls, **self.first}


class _Frame:
    __slots__ = ("kernels", "inner_mismatch")

    def __init__(self):
        self.kernels = None        # labels of vendor calls made inside this op
        self.inner_mismatch = False


class AutoCompare:
    """A launch observer comparing each op that ran on a chip with the CPU.

    ops: names or regexes of op names (``aten::add.Tensor``, ``add``,
    ``aten::conv.*``) to compare; None compares all.  rtol/atol: override the
    per-dtype defaults for every op.  tolerances: per op, ``{regex: (rtol,
    atol)}``.  raise_on_mismatch: stop() (the end of the ``with`` block)
    raises AutocompareError listing the mismatches.  warn: a warning at the
    first mismatch of each op."""

    def __init__(self, ops=None, rtol=None, atol=None, tolerances=None, raise_on_mismatch=False, warn=True):
        self.patterns = None if ops is None else [re.compile(p) for p in ([ops] if isinstance(ops, str) else ops)]
        self.rtol, self.atol = rtol, atol
        self.tolerances = [(re.compile(k), v) for k, v in (tolerances or {}).items()]
        self.raise_on_mismatch = raise_on_mismatch
        self.warn = warn
        self.mismatches: dict = {}      # (op, device) -> Mismatch
        self.compared: dict = {}        # (op, device) -> calls compared
        self.cpu_errors: dict = {}      # (op, device) -> message (the CPU could not run it)
        self._tls = threading.local()
        self._selected: dict = {}
        self._fwd: OrderedDict = OrderedDict()   # autograd sequence number -> (module, source)
        self._names: dict = {}                   # id(root module) -> {id(module): dotted name}
        self._hooks = []
        self._lock = threading.Lock()
        self.active = False

    # ---------------------------------------------------------- life

    def start(self) -> "AutoCompare":
        if not self.active:
            mm = torch.nn.modules.module
            self._hooks = [mm.register_module_forward_pre_hook(self._enter_module),
                           mm.register_module_forward_hook(self._leave_module, always_call=True)]
            launch.attach(self)
            self.active = True
        return self

    def stop(self) -> None:
        if self.active:
            launch.detach(self)
            for h in self._hooks:
                h.remove()
            self._hooks = []
            self.active = False
        if self.raise_on_mismatch and self.mismatches:
            raise AutocompareError("flbridge autocompare: ops differ from the CPU\n" + self.table())

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.raise_on_mismatch = False   # the block's own error comes first
        self.stop()
        return False

    # ------------------------------------------------------- modules

    def _modules(self) -> list:
        m = self._tls.__dict__.get("modules")
        if m is None:
            m = self._tls.modules = []
        return m

    def _enter_module(self, module, args):
        stack = self._modules()
        if not stack:
            names = self._names.get(id(module))
            if names is None:
                names = self._names[id(module)] = {id(m): n for n, m in module.named_modules()}
            stack.append((module, names))
        else:
            stack.append((module, stack[0][1]))

    def _leave_module(self, module, args, output):
        stack = self._modules()
        if stack and stack[-1][0] is module:
            stack.pop()

    def _module_path(self) -> str:
        stack = self._modules()
        if not stack:
            return ""
        module, names = stack[-1]
        name = names.get(id(module))
        return name if name else type(stack[0][0]).__name__

    # ------------------------------------------------------ observer

    def wrap_op(self, func, args, kwargs, run):
        if self._tls.__dict__.get("busy") or launch.STATE.capture is not None:
            return run      # our own CPU work; or a graph capture, which must not read device memory
        return _Compared(self, func, args, kwargs, run)

    def wrap_kernel(self, chip, label, run):
        stack = self._tls.__dict__.get("stack")
        if stack:
            f = stack[-1]
            if f.kernels is None:
                f.kernels = {label}
            else:
                f.kernels.add(label)
        return run

    def on_transfer(self, chip, kind, nbytes) -> None:
        pass

    def transfer_done(self, chip, kind) -> None:
        pass

    # ----------------------------------------------------- decisions

    def selects(self, func) -> bool:
        got = self._selected.get(func)
        if got is None:
            qn = info(func).qualname
            got = (kind(func) == ROUTED and torch.Tag.nondeterministic_seeded not in func.tags
                   and (self.patterns is None or any(p.search(qn) for p in self.patterns)))
            self._selected[func] = got
        return got

    def tolerance(self, qualname: str, dtype) -> tuple:
        for pat, tol in self.tolerances:
            if pat.search(qualname):
                return tol
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return (self.rtol if self.rtol is not None else rtol, self.atol if self.atol is not None else atol)

    # --------------------------------------------------------- report

    def report(self) -> list:
        return [m.as_dict() for m in self.mismatches.values()]

    def summary_dict(self) -> dict:
        return {"compared_ops": len(self.compared), "compared_calls": sum(self.compared.values()),
                "mismatches": self.report(),
                "cpu_errors": [{"op": op, "device": dev, "error": e} for (op, dev), e in self.cpu_errors.items()]}

    def to_json(self, path=None) -> str:
        text = json.dumps(self.summary_dict(), indent=2)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def table(self) -> str:
        d = self.summary_dict()
        lines = [f"flbridge autocompare: {d['compared_calls']} calls of {d['compared_ops']} ops compared with "
                 f"the CPU, {len(d['mismatches'])} ops differ"]
        for m in d["mismatches"]:
            lines.append(f"  {m['op']} on {m['device']} ({m['phase']}): {m['mismatching_calls']} of "
                         f"{self.compared.get((m['op'], m['device']), 0)} calls differ; {m['output']}: max abs err "
                         f"{m['max_abs_err']:.3g}, max rel err {m['max_rel_err']:.3g} (rtol {m['rtol']:g}, atol "
                         f"{m['atol']:g}), shape {m['shape']} {m['dtype']} vs CPU {m['cpu_shape']} {m['cpu_dtype']}")
            lines.append(f"      kernels: {', '.join(m['kernels'])}; module: {m['module'] or '-'}; "
                         f"at {m['source'] or '-'}")
        for e in d["cpu_errors"]:
            lines.append(f"  {e['op']} on {e['device']}: not compared, the CPU cannot run it ({e['error']})")
        return "\n".join(lines)

    # ------------------------------------------------------- internals

    def _context(self, func) -> tuple:
        """(phase, module path, source line) of the op being run."""
        if torch._C._current_graph_task_id() != -1:
            node = torch._C._current_autograd_node()
            if node is not None:
                fwd = self._fwd.get(node._sequence_nr())
                mod, src = fwd if fwd is not None else ("", "")
                return f"backward ({node.name()})", mod, src
            return "backward", "", ""
        return "forward", self._module_path(), _user_line()

    def _note_forward(self, args, kwargs) -> None:
        """Remembers where a forward op that autograd records came from, by
        the sequence number its backward node carries."""
        if not torch.is_grad_enabled() or torch._C._current_graph_task_id() != -1:
            return
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())):
            return
        seq = torch._C._autograd._get_sequence_nr() - 1
        with self._lock:
            self._fwd[seq] = (self._module_path(), _user_line())
            if len(self._fwd) > 100_000:
                self._fwd.popitem(last=False)


class _Compared:
    __slots__ = ("ac", "func", "args", "kwargs", "run")

    def __init__(self, ac, func, args, kwargs, run):
        self.ac, self.func, self.args, self.kwargs, self.run = ac, func, args, kwargs, run

    def __call__(self):
        ac, tls = self.ac, self.ac._tls
        stack = tls.__dict__.get("stack")
        if stack is None:
            stack = tls.stack = []
        selected = ac.selects(self.func)
        snap = None
        if kind(self.func) == ROUTED:
            # a backward op names its forward op's module and line, compared or not
            ac._note_forward(self.args, self.kwargs)
        if selected:
            tls.busy = True
            try:
                snap = (_to_cpu(self.args), _to_cpu(self.kwargs))
            finally:
                tls.busy = False
        frame = _Frame()
        stack.append(frame)
        try:
            out = self.run()
        finally:
            stack.pop()
            if stack:
                parent = stack[-1]
                if frame.kernels:
                    parent.kernels = set(frame.kernels) if parent.kernels is None else parent.kernels | frame.kernels
                parent.inner_mismatch |= frame.inner_mismatch
        if snap is not None and frame.kernels:
            tls.busy = True
            try:
                if self._compare(out, snap, frame):
                    frame.inner_mismatch = True
                    if stack:
                        stack[-1].inner_mismatch = True
            finally:
                tls.busy = False
        return out

    def _compare(self, out, snap, frame) -> bool:
        """True if this call differs from the CPU (reported unless a part of
        it already was)."""
        ac, func = self.ac, self.func
        opi = info(func)
        chip = chip_of(self.args, self.kwargs)
        key = (opi.qualname, chip.device_type if chip is not None else "?")
        cargs, ckwargs = snap
        try:
            with torch.no_grad():
                cpu_out = func(*cargs, **ckwargs)
        except Exception as e:  # noqa: BLE001 - the CPU has no kernel for this dtype, say
            ac.cpu_errors.setdefault(key, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            return False
        pairs = []
        outs = out if isinstance(out, (tuple, list)) else (out,)
        couts = cpu_out if isinstance(cpu_out, (tuple, list)) else (cpu_out,)
        for i, (d, c) in enumerate(zip(outs, couts)):
            if isinstance(d, torch.Tensor) and isinstance(c, torch.Tensor):
                pairs.append((f"result {i}" if len(outs) > 1 else "result", d, c))
        for i in opi.mutated:
            name = opi.args[i].name
            d = self.args[i] if i < len(self.args) else self.kwargs.get(name)
            c = cargs[i] if i < len(cargs) else ckwargs.get(name)
            if isinstance(d, torch.Tensor) and isinstance(c, torch.Tensor) and not any(d is p[1] for p in pairs):
                pairs.append((f"argument {name} (written)", d, c))
        with ac._lock:
            ac.compared[key] = ac.compared.get(key, 0) + 1
        for what, d, c in pairs:
            bad = _differs(d, c, ac.tolerance(opi.qualname, d.dtype))
            if bad is None:
                continue
            if frame.inner_mismatch:
                return True       # one of its parts differs: that one is reported
            self._record(key, what, d, c, bad, frame)
            return True
        return False

    def _record(self, key, what, d, c, bad, frame) -> None:
        ac = self.ac
        with ac._lock:
            m = ac.mismatches.get(key)
            first = m is None
            if first:
                phase, module, source = ac._context(self.func)
                max_abs, max_rel, (rtol, atol) = bad
                m = ac.mismatches[key] = Mismatch(
                    key[0], key[1], phase=phase, output=what, max_abs_err=max_abs, max_rel_err=max_rel,
                    rtol=rtol, atol=atol, shape=list(d.shape), dtype=str(d.dtype).replace("torch.", ""),
                    cpu_shape=list(c.shape), cpu_dtype=str(c.dtype).replace("torch.", ""),
                    kernels=sorted(frame.kernels or ()), module=module, source=source)
            m.calls += 1
        if first and ac.warn:
            f = m.first
            warnings.warn(AutocompareWarning(
                f"flbridge autocompare: {key[0]} on {key[1]} differs from the CPU ({f['phase']}): {what} max abs "
                f"err {f['max_abs_err']:.3g}, max rel err {f['max_rel_err']:.3g}; kernels {', '.join(f['kernels'])}; "
                f"module {f['module'] or '-'}; at {f['source'] or '-'}"), stacklevel=user_stacklevel())


def _differs(d, c, tol):
    """None if device result d matches CPU result c within tol, else
    (max abs err, max rel err, tol)."""
    from ..tensor import XPUTensor, host_copy
    h = host_copy(d) if type(d) is XPUTensor else d.detach()
    c = c.detach()
    rtol, atol = tol
    if tuple(h.shape) != tuple(c.shape):
        if h.numel() == 0 or c.numel() == 0:
            return None      # a result the kernel does not produce (empty, as PyTorch allows)
        return float("inf"), float("inf"), tol
    if h.numel() == 0:
        return None
    exact = lambda t: not (t.dtype.is_floating_point or t.dtype.is_complex)   # noqa: E731 - ints and bool
    if exact(h) and exact(c):
        if torch.equal(h.to(torch.int64), c.to(torch.int64)):
            return None
        diff = (h.to(torch.float64) - c.to(torch.float64)).abs()
        return float(diff.max()), float((diff / c.to(torch.float64).abs().clamp_min(1)).max()), (0.0, 0.0)
    a, b = h.to(torch.float64), c.to(torch.float64)
    if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    diff = (a - b).abs()
    same = (a == b) | (a.isnan() & b.isnan())
    diff = torch.where(same, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)
    rel = diff / b.abs()
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    return float(diff.max()), float(rel.max()), tol


def _to_cpu(v):
    """CPU copies of every fl tensor in v (the inputs as they were before the op)."""
    from ..tensor import XPUTensor, host_copy
    if type(v) is XPUTensor:
        return host_copy(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_to_cpu(x) for x in v)
    if isinstance(v, dict):
        return {k: _to_cpu(x) for k, x in v.items()}
    if isinstance(v, torch.device) and v.type == "fl":
        return torch.device("cpu")
    return v


def _user_line() -> str:
    f = user_frame()
    if f is None:
        return ""
    return f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})"


def autocompare(ops=None, rtol=None, atol=None, tolerances=None, raise_on_mismatch=False, warn=True) -> AutoCompare:
    """A context that compares every op run on a chip with the CPU (see the
    module docstring); its report: .table(), .report(), .to_json()."""
    return AutoCompare(ops=ops, rtol=rtol, atol=atol, tolerances=tolerances, raise_on_mismatch=raise_on_mismatch,
                       warn=warn)


# ------------------------------------------------------------------- env

_FROM_ENV = None


def from_env(value: str, report_path: str | None) -> AutoCompare | None:
    """FLBRIDGE_AUTOCOMPARE=1 (every op) or =<regex,...> (those ops): one
    process-wide AutoCompare; its table goes to stderr at exit, its JSON to
    FLBRIDGE_AUTOCOMPARE_REPORT if set."""
    global _FROM_ENV
    v = (value or "").strip()
    if not v or v.lower() in ("0", "false", "no", "off"):
        return None
    if _FROM_ENV is not None:
        return _FROM_ENV
    ops = None if v.lower() in ("1", "true", "yes", "on", "all") else [p.strip() for p in v.split(",") if p.strip()]
    ac = _FROM_ENV = AutoCompare(ops=ops).start()
    import atexit

    def _report():
        ac.stop()
        print(ac.table(), file=sys.stderr)
        if report_path:
            ac.to_json(report_path)
    atexit.register(_report)
    return ac
