"""aten op names and schema facts.

Two jobs:

* :func:`resolve_name` turns a name written in a spec (``aten::add.Tensor``,
  or the article's friendlier ``aten::conv2d`` / ``aten::softmax``) into the
  :class:`torch._ops.OpOverload` that ``__torch_dispatch__`` actually sees,
  with the argument pins the friendly name implies.
* :func:`info` gives cached facts about an overload's schema (argument kinds,
  defaults, which arguments it writes, which inputs its outputs alias), used
  by the registry to bind C parameters and by the router on every call.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import torch

from ..errors import OpNameError

NO_DEFAULT = object()

# Names that never reach a device because autograd decomposes them first
# (CompositeImplicitAutograd) map to what the dispatcher really sees.
# value: (overload name, implied constraints, implied ignored args)
ALIASES: dict[str, tuple[str, dict, tuple]] = {
    "aten::conv2d": ("aten::convolution.default",
                     {"transposed": [False], "ndim": {"input": [4]},
                      "length": {"stride": 2, "padding": 2, "dilation": 2}}, ("output_padding",)),
    "aten::conv1d": ("aten::convolution.default",
                     {"transposed": [False], "ndim": {"input": [3]},
                      "length": {"stride": 1, "padding": 1, "dilation": 1}}, ("output_padding",)),
    "aten::softmax": ("aten::_softmax.default", {"half_to_float": [False]}, ()),
    "aten::log_softmax": ("aten::_log_softmax.default", {"half_to_float": [False]}, ()),
    "aten::layer_norm": ("aten::native_layer_norm.default", {}, ()),
    "aten::batch_norm": ("aten::native_batch_norm.default", {}, ()),
    "aten::max_pool2d": ("aten::max_pool2d_with_indices.default", {}, ()),
    "aten::adaptive_avg_pool2d": ("aten::_adaptive_avg_pool2d.default", {}, ()),
}

# Decomposed before dispatch, with no single replacement: tell the vendor what to list.
NEVER_DISPATCHED_HINTS = {
    "aten::linear": "aten::addmm.default, aten::mm.default and aten::t.default",
    "aten::matmul": "aten::mm.default and aten::bmm.default",
    "aten::dropout": "aten::native_dropout.default",
    "aten::relu6": "aten::hardtanh.default",
}


def _overload(qualname: str):
    ns, _, rest = qualname.partition("::")
    if not rest:
        raise OpNameError(f"'{qualname}' is not of the form namespace::op[.overload]")
    opname, _, ovl = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), opname)
    except (AttributeError, RuntimeError):
        raise OpNameError(_unknown_op_message(ns, opname)) from None
    if ovl:
        try:
            return getattr(packet, ovl)
        except (AttributeError, RuntimeError):
            names = [o for o in packet.overloads()]
            near = difflib.get_close_matches(ovl, names, 1)
            hint = f"; did you mean '{ns}::{opname}.{near[0]}'?" if near else ""
            raise OpNameError(f"'{qualname}': {ns}::{opname} has no overload '{ovl}' "
                              f"(it has {', '.join(sorted(names))}){hint}") from None
    return _pick_overload(ns, opname, packet)


def _unknown_op_message(ns: str, opname: str) -> str:
    msg = f"unknown op '{ns}::{opname}'"
    if ns == "aten":
        names = [n for n in dir(torch.ops.aten) if not n.startswith("_") or n.startswith("_s")]
        near = difflib.get_close_matches(opname, names, 1)
        if near:
            msg += f"; did you mean 'aten::{near[0]}'?"
    return msg


def _is_tensor_overload(op) -> bool:
    s = op._schema
    takes = any("Tensor" in str(a.type) for a in s.arguments)
    gives = any("Tensor" in str(r.type) for r in s.returns)
    return takes and gives


def _pick_overload(ns: str, opname: str, packet):
    """The overload a bare name means: `.default`, else `.Tensor`, else the
    only tensor overload; anything else must be named explicitly."""
    cands = []
    for name in packet.overloads():
        op = getattr(packet, name)
        if not _is_tensor_overload(op) or "out" in name or "Dimname" in name or "dimname" in name:
            continue
        cands.append(name)
    for pick in ("default", "Tensor"):
        if pick in cands:
            return getattr(packet, pick)
    if len(cands) == 1:
        return getattr(packet, cands[0])
    if not cands:
        raise OpNameError(f"'{ns}::{opname}' has no tensor overload; name one explicitly")
    raise OpNameError(f"'{ns}::{opname}' is ambiguous: name the overload, one of "
                      + ", ".join(f"{ns}::{opname}.{c}" for c in sorted(cands)))


def reaches_dispatch(op) -> bool:
    """False when autograd decomposes the op before any backend sees it (its
    AutogradPrivateUse1 kernel is the CompositeImplicitAutograd 'math' one)."""
    s = op._schema
    name = s.name + (f".{s.overload_name}" if s.overload_name else "")
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("AutogradPrivateUse1:"):
            return "[math kernel]" not in line
    return True


@dataclass(frozen=True)
class Resolved:
    op: object                   # torch._ops.OpOverload
    qualname: str                # e.g. "aten::add.Tensor"
    implied_constraints: dict = field(default_factory=dict)
    implied_ignore: tuple = ()
    alias_of: str | None = None  # the friendly name used, if any


def qualname(op) -> str:
    s = op._schema
    return f"{s.name}.{s.overload_name or 'default'}"


def resolve_name(name: str) -> Resolved:
    """Spec op name -> overload.  Raises OpNameError with a suggestion."""
    name = name.strip()
    if name in ALIASES:
        target, pins, ignore = ALIASES[name]
        op = _overload(target)
        return Resolved(op, qualname(op), dict(pins), tuple(ignore), name)
    if name in NEVER_DISPATCHED_HINTS:
        raise OpNameError(f"'{name}' never reaches a device: PyTorch decomposes it before "
                          f"dispatch; list {NEVER_DISPATCHED_HINTS[name]} instead")
    op = _overload(name)
    qn = qualname(op)
    if not reaches_dispatch(op):
        hint = NEVER_DISPATCHED_HINTS.get(op._schema.name, "the ops it decomposes into")
        raise OpNameError(f"'{name}' ({qn}) never reaches a device: PyTorch decomposes it "
                          f"before dispatch (CompositeImplicitAutograd); list {hint} instead")
    return Resolved(op, qn)


# ops whose written argument's old contents are not read (a write that
# covers the whole storage need not fetch the old bytes first)
WRITE_ONLY = frozenset({torch.ops.aten.copy_.default, torch.ops.aten.fill_.Scalar,
                        torch.ops.aten.fill_.Tensor, torch.ops.aten.zero_.default})


# ------------------------------------------------------------ schema facts

@dataclass(frozen=True)
class Arg:
    name: str
    index: int
    kind: str        # tensor | tensor? | tensor[] | int | float | bool | number | int[] | int[]? | str | dtype | other
    optional: bool
    default: object  # NO_DEFAULT when required
    kwarg_only: bool
    writes: bool     # schema marks it mutated (a!)
    fixed_len: int | None  # int[2] -> 2


@dataclass(frozen=True)
class Ret:
    kind: str
    alias_arg: int | None  # index of the input it aliases, if any
    writes: bool


@dataclass(frozen=True)
class OpInfo:
    op: object
    qualname: str
    args: tuple
    by_name: dict
    rets: tuple
    is_view: bool            # some output aliases an input without writing
    is_mutating: bool        # some input is written (in-place or out=)
    mutated: tuple           # indices of written args
    tensor_arg_indices: tuple


def _kind(t) -> tuple[str, bool]:
    s = str(t)
    optional = s.startswith("Optional[")
    if optional:
        s = s[len("Optional["):-1]
    table = {"Tensor": "tensor", "List[Tensor]": "tensor[]", "List[Optional[Tensor]]": "tensor[]",
             "int": "int", "SymInt": "int", "float": "float", "bool": "bool", "number": "number",
             "List[int]": "int[]", "List[SymInt]": "int[]", "str": "str", "List[float]": "float[]",
             "List[bool]": "bool[]"}
    k = table.get(s, "other")
    if k == "int" and "ScalarType" in repr(t):
        k = "dtype"
    if k == "tensor" and optional:
        k = "tensor?"
    return k, optional


_INFO: dict = {}


def info(op) -> OpInfo:
    """Schema facts for an overload (cached)."""
    got = _INFO.get(op)
    if got is not None:
        return got
    s = op._schema
    args = []
    alias_sets: dict[str, int] = {}
    for i, a in enumerate(s.arguments):
        k, opt = _kind(a.type)
        if str(a.type) in ("Optional[int]", "int") and a.name in ("dtype",):
            k = "dtype"
        writes = bool(a.alias_info is not None and a.alias_info.is_write)
        if a.alias_info is not None:
            for aset in a.alias_info.before_set:
                alias_sets.setdefault(aset, i)
        n = getattr(a, "N", None)
        args.append(Arg(a.name, i, k, opt, a.default_value if a.has_default_value() else NO_DEFAULT,
                        a.kwarg_only, writes, n))
    rets = []
    for r in s.returns:
        k, _ = _kind(r.type)
        alias = None
        if r.alias_info is not None:
            for aset in r.alias_info.before_set:
                if aset in alias_sets:
                    alias = alias_sets[aset]
            if alias is None and k == "tensor[]":
                # `Tensor(a)[]` (split, unbind, chunk): the alias set sits on
                # the list's elements, which the Python schema does not expose
                m = re.search(r"Tensor\((\w+)\)\[\]", str(s).rsplit(") -> ", 1)[-1])
                if m and m.group(1) in alias_sets:
                    alias = alias_sets[m.group(1)]
        rets.append(Ret(k, alias, bool(r.alias_info is not None and r.alias_info.is_write)))
    mutated = tuple(a.index for a in args if a.writes)
    got = OpInfo(op, qualname(op), tuple(args), {a.name: a for a in args}, tuple(rets),
                 any(r.alias_arg is not None and not r.writes for r in rets), bool(mutated), mutated,
                 tuple(a.index for a in args if a.kind in ("tensor", "tensor?", "tensor[]")))
    _INFO[op] = got
    return got


def normalize(opi: OpInfo, args, kwargs) -> list:
    """Full positional argument list: given values, then keyword values,
    then schema defaults (None where an argument has no default)."""
    vals = list(args)
    n = len(vals)
    if n < len(opi.args):
        for a in opi.args[n:]:
            if a.name in kwargs:
                vals.append(kwargs[a.name])
            elif a.default is not NO_DEFAULT:
                vals.append(a.default)
            else:
                vals.append(None)
    return vals
