"""C parameters <-> aten schema arguments.

For every op entry, :func:`plan_call` reads the vendor function's parameter
names from the header and decides, once, where each C argument comes from:

* a spec `bind:` constant, or an explicit `args:` mapping;
* a C parameter named like an aten argument (`input`, `weight`, `stride`...);
* `<name>_len` for the length of a list argument;
* `out` (or the names under `outputs:`) for the tensors the op returns.

A C integer may also come from an *expression* over the op's arguments
and the header's constants, in C syntax (``"(amsgrad ? TH1_ADAM_AMSGRAD : 0)
| TH1_ADAM_DECOUPLED"``); the same expressions state when a kernel takes a
call (``constraints.require``, ``constraints.may_be_empty``) and how many
random words an element takes (``rng.words_per_element``).  An op entry with
``rng`` names the C parameters that take the chip generator's seed and
offset, filled per call by the router (:mod:`flbridge.routing.rng`).

The result is a flat tuple of steps the router executes per call.  Every
aten argument must be consumed, ignored (`ignore_args`), pinned by a value
constraint, or have a default that the call is checked against at run time;
otherwise the spec is wrong and the problem is reported at load.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import BindError, CExprError, NotConstant
from ..specs import NO_DEFAULT, OpEntry, OpInfo, info
from .cexpr import evaluate, tokenize
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
EXPR, RNG_SEED, RNG_OFFSET = range(11, 14)

_LEN = re.compile(r"^len\((\w+)\)$")
_NAME = re.compile(r"^\s*\w+\s*$")
_LEN_IN = re.compile(r"\blen\(\s*(\w+)\s*\)")


class Missing(Exception):
    """An expression names an argument that is None in this call."""


# aten argument kinds an expression may name (a tensor list stands for its length)
EXPR_KINDS = ("int", "float", "bool", "number", "tensor[]")


@dataclass(frozen=True)
class ArgExpr:
    """An expression over an op's arguments and the header's constants, in
    C syntax (flbridge.binding.cexpr): bools are 0/1, a tensor list is its
    length, floats compare as numbers."""
    text: str
    args: tuple            # (name, aten index) of the arguments it names
    constants: tuple       # (name, value) of the header constants it names

    def value(self, vals):
        """Its value for these (normalized) arguments; raises Missing for
        an argument that is None, CExprError for one it cannot compute."""
        env = dict(self.constants)
        for name, i in self.args:
            v = vals[i]
            if v is None:
                raise Missing(name)
            env[name] = len(v) if isinstance(v, (list, tuple)) else int(v) if isinstance(v, bool) else v

        def ident(name):
            return env[name]
        try:
            return evaluate(self.text, ident)
        except TypeError as e:      # a float where C takes an integer (a shift, say)
            raise CExprError(f"{self.text!r}: {e}") from None


def compile_expr(text: str, opi, header, where: str) -> ArgExpr:
    """Checks `text` (its syntax, every name an argument of the op an
    expression can use, or a constant of the header) once, at bind time.
    `len(x)` of a tensor list is its length (as the list's name alone)."""
    given = text
    for m in _LEN_IN.finditer(given):
        a = opi.by_name.get(m.group(1))
        if a is None or a.kind != "tensor[]":
            raise BindError(f"{where}: {given!r}: len() takes a tensor list argument of {opi.qualname}, "
                            f"not '{m.group(1)}'")
    text = _LEN_IN.sub(r"\1", given)
    try:
        toks = tokenize(text)
    except CExprError as e:
        raise BindError(f"{where}: {given!r} is not an expression: {e}") from None
    args, consts = {}, {}
    for kind, val in toks:
        if kind != "ident" or val in args or val in consts:
            continue
        a = opi.by_name.get(val)
        if a is not None:
            if a.kind not in EXPR_KINDS:
                raise BindError(f"{where}: {given!r} names '{val}', a {a.kind} argument of {opi.qualname} "
                                f"(an expression takes numbers, bools and the lengths of tensor lists)")
            args[val] = a.index
            continue
        c = header.constant(val) if header is not None else None
        if c is None:
            names = ", ".join(a.name for a in opi.args if a.kind in EXPR_KINDS)
            raise BindError(f"{where}: {given!r} names '{val}', which is neither an argument of {opi.qualname} "
                            f"({names or 'it has none an expression can use'}) nor a constant of the header")
        consts[val] = c
    try:
        evaluate(text, lambda name: consts.get(name, 1))
    except NotConstant as e:
        raise BindError(f"{where}: {given!r}: {e}") from None
    except CExprError as e:
        msg = str(e)
        if "division by zero" not in msg and "shift" not in msg:   # fine for other values
            raise BindError(f"{where}: {given!r} is not an expression: {msg}") from None
    return ArgExpr(text, tuple(args.items()), tuple(consts.items()))


@dataclass(frozen=True)
class Plan:
    fn: str
    steps: tuple           # (kind, a, b) per C parameter, in C order
    out_params: tuple      # per aten return: index of its C parameter, or None
    unconsumed: tuple      # (aten index, name, default) checked at run time
    consumed: frozenset    # aten indices the kernel receives
    require: tuple = ()    # ArgExprs that must be nonzero for the kernel to take a call
    may_be_empty: dict = field(default_factory=dict)   # tensor list index -> ArgExpr or None (always)
    rng_words: object = None   # words per element: an int, or an ArgExpr (random ops)
    generator: int | None = None   # aten index of the op's `generator` argument (random ops)
    expr_args: frozenset = frozenset()   # aten indices any expression reads (keyed by value)


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


def plan_call(entry: OpEntry, fn: Function, struct_types: set[str], enum_types: set[str],
              header=None) -> Plan:
    """Binds `fn`'s parameters to `entry.op`'s schema; raises BindError.
    `header`: for the constants expressions name."""
    opi: OpInfo = info(entry.op)
    names = [p.name for p in fn.params]
    if any(n is None for n in names):
        raise BindError(f"{fn.name} has unnamed parameters in the header; flbridge matches C "
                        f"parameters to aten arguments by name, so name them")
    for key in list(entry.args) + list(entry.bind):
        if key not in names:
            raise BindError(f"{fn.name} has no parameter '{key}' (it has: {', '.join(names)})")
    rng = entry.rng
    if rng is not None:
        for role, pname in (("seed", rng.seed), ("offset", rng.offset)):
            if pname not in names:
                raise BindError(f"rng.{role}: {fn.name} has no parameter '{pname}' (it has: {', '.join(names)})")
            if pname in entry.args or pname in entry.bind:
                raise BindError(f"rng.{role}: {fn.name} parameter '{pname}' is also given under "
                                f"{'args' if pname in entry.args else 'bind'}")
            p = fn.params[names.index(pname)]
            if classify_param(p, struct_types, enum_types) != "int":
                raise BindError(f"rng.{role}: {fn.name} parameter '{pname}' ({p.ctype}) must be an integer "
                                f"(an unsigned 64-bit one holds every {role})")
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
    steps, consumed, exprs = [], set(), []
    for ci, p in enumerate(fn.params):
        kind = classify_param(p, struct_types, enum_types)
        if rng is not None and p.name in (rng.seed, rng.offset):
            steps.append((RNG_SEED if p.name == rng.seed else RNG_OFFSET, None, None))
            continue
        steps.append(_step(entry, opi, fn, p, kind, ci, out_params, consumed, header))
        if steps[-1][0] == EXPR:
            exprs.append(steps[-1][1])
    cons = entry.constraints
    require = tuple(compile_expr(t, opi, header, "constraints.require") for t in cons.require)
    may_be_empty = {}
    for name, cond in cons.may_be_empty.items():
        a = _arg(opi, name, "constraints.may_be_empty")
        may_be_empty[a.index] = compile_expr(cond, opi, header, f"constraints.may_be_empty.{name}") \
            if cond.strip() else None
    words = generator = None
    if rng is not None:
        w = rng.words_per_element
        words = compile_expr(w, opi, header, "rng.words_per_element") if isinstance(w, str) else int(w)
        g = opi.by_name.get("generator")
        if g is not None:
            generator = g.index
            consumed.add(g.index)      # the generator's state is what seed and offset receive
    checks = list(require) + [x for x in may_be_empty.values() if x is not None] + \
        ([words] if isinstance(words, ArgExpr) else [])
    expr_args = frozenset(i for x in exprs + checks for _, i in x.args)
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
    return Plan(fn.name, tuple(steps), tuple(out_params), tuple(unconsumed), frozenset(consumed),
                require, may_be_empty, words, generator, expr_args)


def _step(entry, opi, fn, p, kind, ci, out_params, consumed, header=None):
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
    if not _NAME.match(src) and not _LEN.match(src):
        # an expression over the arguments (and the header's constants): an integer per call
        if kind != "int":
            raise BindError(f"{where} ({p.ctype}) receives the expression {src!r}: it must be an integer")
        x = compile_expr(src, opi, header, f"args.{name}")
        consumed.update(i for _, i in x.args)
        return (EXPR, x, None)
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
