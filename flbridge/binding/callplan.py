"""C parameters <-> aten schema arguments.

For every op entry, :func:`plan_call` reads the vendor function's parameter
names from the header and decides, once, where each C argument comes from:

* a spec `bind:` constant, or an explicit `args:` mapping;
* a C parameter named like an aten argument (`input`, `weight`, `stride`...);
* `<name>_len` for the length of a list argument;
* `out` (or the names under `outputs:`) for the tensors the op returns.

The result is a flat tuple of steps the router executes per call.  Every
aten argument must be consumed, ignored (`ignore_args`), pinned by a value
constraint, or have a default that the call is checked against at run time;
otherwise the spec is wrong and the problem is reported at load.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BindError
from ..specs import NO_DEFAULT, OpEntry, OpInfo, info
from .header import Function

INT_TYPES = {"int", "long", "short", "long long", "unsigned", "unsigned int", "unsigned long",
             "unsigned long long", "unsigned short", "signed", "signed int", "size_t", "ssize_t",
             "ptrdiff_t", "intptr_t", "uintptr_t", "int8_t", "int16_t", "int32_t", "int64_t",
             "uint8_t", "uint16_t", "uint32_t", "uint64_t", "long int", "long long int",
             "unsigned long int", "unsigned long long int", "short int", "unsigned short int"}
FLOAT_TYPES = {"float", "double"}
BOOL_TYPES = {"bool", "_Bool"}

# step kinds
TENSOR, OUTPUT, INT, FLOAT, BOOL, INTLIST, LENGTH, STRING, MAPPED, CONST, TENSORLIST = range(11)

_LEN = re.compile(r"^len\((\w+)\)$")


@dataclass(frozen=True)
class Plan:
    fn: str
    steps: tuple           # (kind, a, b) per C parameter, in C order
    out_params: tuple      # per aten return: index of its C parameter, or None
    unconsumed: tuple      # (aten index, name, default) checked at run time
    consumed: frozenset    # aten indices the kernel receives


def type_aliases(ffi, header, ctype: str) -> set:
    """The header's typedef names that denote the C type `ctype` (for a
    tensor struct: x1_tensor_t beside struct x1_tensor)."""
    out = set()
    for name in header.typedefs:
        try:
            if ffi.typeof(name) is ffi.typeof(ctype):
                out.add(name)
        except Exception:  # noqa: BLE001 - not a type cffi knows
            pass
    return out


def classify_param(p, struct_types: set[str], enum_types: set[str]) -> str:
    base = p.base
    if p.pointer_depth == 1 and base in struct_types:
        return "desc"
    if p.pointer_depth == 2 and base in struct_types:
        return "desclist"   # an array of descriptor pointers (a Tensor[] argument)
    if p.pointer_depth == 1 and base == "char":
        return "str"
    if p.pointer_depth == 1 and (base in INT_TYPES):
        return "intptr"
    if p.pointer_depth == 0 and base in BOOL_TYPES:
        return "bool"
    if p.pointer_depth == 0 and (base in INT_TYPES or base in enum_types):
        return "int"
    if p.pointer_depth == 0 and base in FLOAT_TYPES:
        return "float"
    return "other"


def plan_call(entry: OpEntry, fn: Function, struct_types: set[str], enum_types: set[str]) -> Plan:
    """Binds `fn`'s parameters to `entry.op`'s schema; raises BindError."""
    opi: OpInfo = info(entry.op)
    names = [p.name for p in fn.params]
    if any(n is None for n in names):
        raise BindError(f"{fn.name} has unnamed parameters in the header; flbridge matches C "
                        f"parameters to aten arguments by name, so name them")
    for key in list(entry.args) + list(entry.bind):
        if key not in names:
            raise BindError(f"{fn.name} has no parameter '{key}' (it has: {', '.join(names)})")
    outputs = entry.outputs
    if outputs is None:
        outputs = [None] * len(opi.rets)
        if len(opi.rets) == 1:
            ret = opi.rets[0]
            explicit_out = [k for k, v in entry.args.items() if v == "out" and "out" not in opi.by_name]
            if explicit_out:
                outputs[0] = explicit_out[0]
            elif ret.alias_arg is None and "out" in names and "out" not in entry.args:
                outputs[0] = "out"
            elif ret.alias_arg is not None and "out" in names and "out" not in entry.args:
                outputs[0] = "out"  # in-place: the kernel's out is the mutated argument
    out_params: list = [None] * len(opi.rets)
    for ri, pname in enumerate(outputs):
        if pname is None:
            continue
        if pname not in names:
            raise BindError(f"outputs: {fn.name} has no parameter '{pname}' (it has: {', '.join(names)})")
        out_params[ri] = names.index(pname)
    steps, consumed = [], set()
    for ci, p in enumerate(fn.params):
        kind = classify_param(p, struct_types, enum_types)
        steps.append(_step(entry, opi, fn, p, kind, ci, out_params, consumed))
    # every return must be produced by the kernel, alias an input it writes,
    # or be declared as not produced (null in outputs)
    for ri, ret in enumerate(opi.rets):
        if out_params[ri] is None and ret.alias_arg is None and entry.outputs is None:
            raise BindError(f"{fn.name} produces no result for {opi.qualname}: name the C parameter "
                            f"that receives it (a parameter called 'out', or `outputs:`)")
        if ret.alias_arg is not None and out_params[ri] is None and ret.alias_arg not in consumed:
            raise BindError(f"{opi.qualname} writes '{opi.args[ret.alias_arg].name}' but {fn.name} "
                            f"takes no parameter for it")
    unconsumed = []
    pinned = set(entry.constraints.values) | set(entry.ignore_args)
    for a in opi.args:
        if a.index in consumed or a.name in pinned:
            continue
        if any(r.alias_arg == a.index for r in opi.rets) and a.writes:
            continue  # the mutated argument is the output the kernel writes
        if a.default is NO_DEFAULT:
            raise BindError(f"{opi.qualname} argument '{a.name}' is not passed to {fn.name}: map it to a "
                            f"parameter (args:), pin the values the kernel assumes "
                            f"(constraints: {{{a.name}: [...]}}), or list it under ignore_args if it "
                            f"does not change the result")
        unconsumed.append((a.index, a.name, a.default))
    return Plan(fn.name, tuple(steps), tuple(out_params), tuple(unconsumed), frozenset(consumed))


def _step(entry, opi, fn, p, kind, ci, out_params, consumed):
    name = p.name
    where = f"{fn.name} parameter '{name}'"
    if ci in out_params:
        if kind != "desc":
            raise BindError(f"{where} receives a result but is not a tensor descriptor ({p.ctype})")
        return (OUTPUT, out_params.index(ci), None)
    if name in entry.bind:
        v = entry.bind[name]
        if kind == "intptr" and isinstance(v, list):
            return (CONST, list(v) if v else None, None)
        if kind in ("int", "bool", "float") and isinstance(v, (int, float, bool)):
            return (CONST, v, None)
        if kind == "str" and isinstance(v, str):
            return (CONST, v.encode(), None)
        raise BindError(f"bind: {v!r} does not fit {where} ({p.ctype})")
    src = entry.args.get(name, name)
    if isinstance(src, dict):
        if set(src) != {"from", "map"} or not isinstance(src["map"], dict):
            raise BindError(f"args.{name}: a mapped argument is {{from: <aten arg>, map: {{value: code}}}}")
        a = _arg(opi, src["from"], where)
        if kind != "int":
            raise BindError(f"{where}: mapped values need an integer parameter, it is {p.ctype}")
        consumed.add(a.index)
        return (MAPPED, a.index, dict(src["map"]))
    if not isinstance(src, str):
        raise BindError(f"args.{name}: {src!r} is not an aten argument name (use bind: for constants)")
    m = _LEN.match(src)
    if m:
        a = _arg(opi, m.group(1), where)
        if a.kind not in ("int[]", "tensor[]", "float[]", "bool[]"):
            raise BindError(f"{where}: len({a.name}) needs a list argument, {a.name} is {a.kind}")
        if kind != "int":
            raise BindError(f"{where} receives a length but is {p.ctype}")
        consumed.add(a.index)  # the values themselves are fixed by the tensors' shapes
        return (LENGTH, a.index, None)
    if src not in opi.by_name and src.endswith("_len") and src[:-4] in opi.by_name:
        a = opi.by_name[src[:-4]]
        if a.kind in ("int[]", "float[]", "bool[]", "tensor[]") and kind == "int":
            return (LENGTH, a.index, None)
    if src == "out" and "out" not in opi.by_name:
        raise BindError(f"{where} is mapped to the output, but {opi.qualname} has "
                        f"{len(opi.rets)} results: list them under outputs")
    a = _arg(opi, src, where)
    consumed.add(a.index)
    if a.kind == "tensor[]":
        if kind != "desclist":
            raise BindError(f"{where} ({p.ctype}) receives the tensor list '{a.name}': it must be an array of "
                            f"descriptor pointers (const desc_t *const *) with its length in another parameter")
        return (TENSORLIST, a.index, None)
    if a.kind in ("tensor", "tensor?"):
        if kind != "desc":
            raise BindError(f"{where} ({p.ctype}) receives tensor '{a.name}': it must be a pointer "
                            f"to the tensor descriptor struct")
        return (TENSOR, a.index, a.kind == "tensor?")
    if a.kind in ("int[]", "bool[]"):
        if kind != "intptr":
            raise BindError(f"{where} ({p.ctype}) receives the list '{a.name}': it must be an integer pointer")
        return (INTLIST, a.index, None)   # flags (an output_mask) pass as 0/1
    if a.kind == "str":
        if kind != "str":
            raise BindError(f"{where} ({p.ctype}) receives the string '{a.name}': it must be const char *")
        return (STRING, a.index, None)
    if a.kind == "bool":
        if kind not in ("bool", "int"):
            raise BindError(f"{where} ({p.ctype}) receives the bool '{a.name}'")
        return (BOOL, a.index, None)
    if a.kind in ("int", "dtype") and kind != "desc":
        if kind not in ("int", "float"):
            raise BindError(f"{where} ({p.ctype}) receives the integer '{a.name}'")
        return (INT, a.index, None)
    if a.kind in ("float", "number", "int") and kind == "desc":
        # a scalar where the kernel takes a tensor: passed as a 0-dim device
        # constant (x.mul_(2.0) runs on the same kernel as x.mul_(y))
        return (TENSOR, a.index, False)
    if a.kind in ("float", "number"):
        if kind == "float":
            return (FLOAT, a.index, None)
        if kind == "int":
            return (INT, a.index, None)
        raise BindError(f"{where} ({p.ctype}) receives the number '{a.name}'")
    raise BindError(f"{where}: aten argument '{a.name}' of kind {a.kind} cannot be passed to C")


def _arg(opi, name, where):
    a = opi.by_name.get(name)
    if a is None:
        raise BindError(f"{where}: {opi.qualname} has no argument '{name}' "
                        f"(it has: {', '.join(x.name for x in opi.args)})")
    return a
