"""C functions -> aten overloads, for :mod:`flbridge.tools.scaffold`.

A function taking tensor descriptors is matched to aten overloads by its
name (the longest run of its words naming an aten op: ``acme_add`` ->
``aten::add``, ``acmeReduceSum`` -> ``aten::sum``, in-place variants
included), and its parameters to each overload's arguments by name (vendor
spellings included: ``x``, ``dy``, ``gamma``, ``numAxes`` -> ``len(dim)``),
then, for tensors with names that say nothing (``a``, ``b``), by order.  A
candidate is kept only if the registry's checker and the binder accept it,
and each aten overload goes to the function that matches it best.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..errors import BindError, OpNameError
from ..specs import (ALIASES, NO_DEFAULT, Capabilities, Checker, LocDict, LocList, check_op, dtype_name, info,
                    resolve_name)
from ..binding import Function, Header, classify_param, plan_call
from .scaffold_header import kinds_of, norm, stem, tokens


def yaml_value(v) -> str:
    """`v` as a YAML flow value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    return s if re.fullmatch(r"[A-Za-z_][\w.:()\-]*", s) and s not in ("true", "false", "null", "yes", "no") \
        else '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'



# vendor spellings of aten argument names (after normalisation)
SYNONYMS = {
    "x": ["self", "input"], "a": ["self", "input", "mat1"], "b": ["other", "mat2", "exponent", "end"],
    "in": ["self", "input"], "src": ["self", "input", "src"], "input": ["self"], "self": ["input"],
    "y": ["out"], "c": ["out"], "dst": ["out", "self"], "output": ["out", "output"], "result": ["out"],
    "res": ["out"], "z": ["out"],
    "w": ["weight"], "gamma": ["weight"], "scale": ["weight", "value", "alpha"], "beta": ["bias", "beta"],
    "bias": ["self"], "table": ["weight"], "filter": ["weight"], "kernel": ["weight", "kernel_size"],
    "eps": ["eps"], "epsilon": ["eps"],
    "axis": ["dim"], "axes": ["dim"], "dims": ["dim"], "keep_dims": ["keepdim"], "keepdims": ["keepdim"],
    "dy": ["grad_output", "grad_out", "grad"], "grad": ["grad_output", "grad_out"], "d_loss": ["grad_output"],
    "grad_output": ["grad_out"], "grad_out": ["grad_output"], "dout": ["grad_output"],
    "dx": ["out"], "grad_input": ["out"], "d_table": ["out"],
    "cond": ["condition"], "mask": ["mask", "condition"], "labels": ["target"], "label": ["target"],
    "window": ["kernel_size"], "ksize": ["kernel_size"], "kernel_shape": ["kernel_size"], "pads": ["padding"],
    "pad": ["padding"], "strides": ["stride"], "dilations": ["dilation"], "num_rows": ["num_weights"],
    "scale_by_freq": ["scale_grad_by_freq"], "running_mean": ["running_mean"], "running_var": ["running_var"],
    "exp": ["exponent"], "power": ["exponent"], "threshold": ["threshold"], "value": ["value", "other"],
    "inputs": ["tensors"], "tensors": ["tensors"], "idx": ["indices", "index"], "base": ["self"],
    "set": ["test_elements"], "values": ["values"],
    "lo": ["min"], "low": ["min"], "lower": ["min"], "hi": ["max"], "high": ["max"], "upper": ["max"],
}
# words naming an aten packet differently (after the vendor's prefix is removed)
OP_SYNONYMS = {
    "matmul": ["mm", "bmm"], "gemm": ["mm"], "batch_matmul": ["bmm"], "bmatmul": ["bmm"],
    "equal": ["eq"], "not_equal": ["ne"], "less": ["lt"], "less_equal": ["le"], "greater": ["gt"],
    "greater_equal": ["ge"], "relu_backward": ["threshold_backward"], "conv2d": ["conv2d"],
    "convolution_forward": ["conv2d"], "batch_norm_inference": ["batch_norm"], "multiply": ["mul"],
    "divide": ["div"], "subtract": ["sub"], "max": ["maximum"], "min": ["minimum"], "power": ["pow"],
    "select": ["where"], "conv2d_backward": ["convolution_backward"], "conv_backward": ["convolution_backward"],
    "conv_forward": ["conv2d"], "conv2d_forward": ["conv2d"],
}
QUANTIZED = {"u8", "s8", "i8", "int8", "uint8", "q8", "quant", "quantized"}
# words dropped from aten packet names when indexing them (helper spellings)
_ATEN_NOISE = {"native", "with", "indices", "dense", "data", "default"}
# what the copy role runs (flbridge's copy converts dtypes and strides on the device)
COPY_OPS = {"aten::copy_": ["non_blocking"], "aten::clone": ["memory_format"],
            "aten::_to_copy": ["dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"]}
FILL_OPS = {"aten::fill_.Scalar": {}, "aten::zero_": {"value": 0}}
# aten ops whose `self` is broadcast to the result (beta * self + ...)
BROADCAST_SELF = {"addmm", "baddbmm", "addbmm", "addmv", "addr"}
INDEX_ARGS = {"indices": [torch.int64, torch.int32], "index": [torch.int64, torch.int32],
              "target": [torch.int64, torch.int32], "mask": [torch.bool], "condition": [torch.bool]}


def _aten_index() -> dict[str, list[str]]:
    """normalised packet name -> aten qualnames (every overload), plus the
    friendly names specs may use."""
    idx: dict[str, list[str]] = {}
    for qn in torch._C._dispatch_get_all_op_names():
        if not qn.startswith("aten::"):
            continue
        packet, _, ovl = qn[6:].partition(".")
        if "out" in ovl or "dimname" in ovl.lower() or "names" in ovl or ovl.endswith("_out"):
            continue
        words = [w for w in packet.strip("_").split("_") if w]
        plain = [w for w in words if w not in _ATEN_NOISE]
        # helper words dropped (native_batch_norm -> batchnorm), unless that
        # leaves a scrap (_to_dense -> "to")
        key = "".join(plain) if len(plain) > 1 or len("".join(plain)) > 3 else "".join(words)
        idx.setdefault(key, []).append(f"aten::{packet}.{ovl or 'default'}")
    for friendly in ALIASES:
        idx.setdefault(norm(friendly[6:]), []).insert(0, friendly)
    return idx


_INDEX: dict | None = None


def candidate_ops(fn: Function, prefix: str) -> list[str]:
    """aten names a C function's name may implement: the longest run of its
    words that names an aten packet (in-place variants included)."""
    global _INDEX
    if _INDEX is None:
        _INDEX = _aten_index()
    return _ops_of_words(stem(fn.name, prefix))


def _ops_of_words(words: list[str]) -> list[str]:
    return _ops_and_extra(words)[0]


def _ops_and_extra(words: list[str]) -> tuple[list[str], int]:
    """The aten names the longest run of `words` names, and how many of the
    words are not in that run (``any_dim`` names ``any`` with one word to
    spare: a worse match for ``any.default`` than a function named ``any``)."""
    global _INDEX
    if _INDEX is None:
        _INDEX = _aten_index()
    quant = bool(QUANTIZED & set(words))
    words = [w for w in words if w not in QUANTIZED] or words
    for size in range(len(words), 0, -1):
        found: list[str] = []
        for i in range(len(words) - size + 1):
            run = words[i:i + size]
            keys = ["".join(run)]
            syn = OP_SYNONYMS.get("_".join(run))
            if syn:
                keys = [norm(s) for s in syn] + keys
            if quant and keys[0] in ("mm", "gemm", "matmul"):
                keys = ["intmm"]
            for k in keys:
                found += [q for q in _INDEX.get(k, []) if q not in found]
        if found:
            return found, len(words) - size
    return [], 0


# C parameters that select what a multiplexed function computes
_MODE_PARAM = re.compile(r"(mode|op|kind|type|which|flags?|opcode|operation|func|upper|lower|variant)")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+\(?\s*(-?\d+)")


def define_runs(lines: list[str]) -> list[tuple]:
    """Runs of adjacent integer #defines sharing a name prefix (a mode
    enumeration written as macros): (last line, prefix words, [(suffix word, value)])."""
    runs, cur = [], None
    for i, text in enumerate(lines, 1):
        m = _DEFINE.match(text)
        if not m:
            if cur is not None and text.strip() and not text.strip().startswith(("/*", "*", "//")):
                runs.append(cur)
                cur = None
            continue
        w = [x.lower() for x in m.group(1).split("_") if x]
        if len(w) < 2:
            continue
        if cur is not None and cur[1] == tuple(w[:-1]) and i - cur[0] <= 2:
            cur = (i, cur[1], cur[2] + [(w[-1], int(m.group(2)))])
        else:
            if cur is not None:
                runs.append(cur)
            cur = (i, tuple(w[:-1]), [(w[-1], int(m.group(2)))])
    if cur is not None:
        runs.append(cur)
    return [r for r in runs if len(r[2]) > 1 and len({v for _, v in r[2]}) == len(r[2])]


def mode_candidates(fn: Function, prefix: str, kinds: list, runs: list) -> list[tuple]:
    """(aten name, {mode parameter: value}) for a function that selects its
    op by a code (``int op`` with ``#define ACME_LOGICAL_AND 0`` ... just
    above it): each code's words name the op (LOGICAL_AND -> logical_and,
    REDUCE_ANY -> any, SOFTMAX_LOG -> log_softmax) or replace their
    alternatives in the function's name (ArgMinMax + REDUCE_MAX -> argmax);
    a bit-flag set (1, 2, 4...) also gives the function's own op with 0."""
    params = [p.name for p, k in zip(fn.params, kinds) if k == "int" and _MODE_PARAM.fullmatch("_".join(tokens(p.name)))]
    if len(params) != 1:
        return []
    near = [r for r in runs if 0 < fn.line - r[0] <= 12]
    if not near:
        return []
    _, group, members = near[-1]
    fwords = stem(fn.name, prefix)
    group = tuple(w for w in group if w != prefix)
    sufs = {sfx for sfx, _ in members}
    if not (set(group) & set(fwords) or sufs & set(fwords)):
        return []
    out = []
    for sfx, v in members:
        if sfx in fwords:
            orders = [[w for w in fwords if w not in sufs or w == sfx]]
        else:
            orders = [[*group, sfx], [sfx, *group], [sfx]]
        for words in orders:
            names = _ops_of_words(words)
            if names and all(norm(n.split("::")[1].split(".")[0]) in ("".join(words), sfx) or
                             sfx in norm(n) for n in names[:1]):
                out += [(n, {params[0]: v}) for n in names]
                break
    flags = sorted(v for _, v in members)
    if flags and flags[0] > 0 and all(v & (v - 1) == 0 for v in flags):
        out += [(n, {params[0]: 0}) for n in _ops_of_words(fwords)]
    return out


@dataclass
class OpGuess:
    fn: str
    names: list                 # aten names (friendly or qualnames)
    qualnames: list
    mapping: dict               # the entry's fields (args, bind, outputs, ...)
    score: float
    notes: list


def _arg_kind_ok(ckind: str, akind: str) -> float:
    """How well a C parameter kind takes an aten argument kind (0 = not at all)."""
    table = {("desc", "tensor"): 1.0, ("desc", "tensor?"): 1.0, ("desc", "float"): 0.5, ("desc", "number"): 0.5,
             ("desclist", "tensor[]"): 1.0,
             ("intptr", "int[]"): 1.0, ("int", "int"): 1.0, ("int", "dtype"): 0.8, ("int", "bool"): 0.8,
             ("bool", "bool"): 1.0, ("float", "float"): 1.0, ("float", "number"): 1.0, ("float", "int"): 0.6,
             ("int", "number"): 0.6, ("str", "str"): 1.0}
    return table.get((ckind, akind), 0.0)


def _name_score(cname: str, aname: str) -> float:
    c, a = "_".join(tokens(cname)), aname
    if c == a or norm(cname) == norm(aname):
        return 1.0
    if a in SYNONYMS.get(c, ()):
        return 0.9 - 0.02 * SYNONYMS[c].index(a)
    from ..suggest import edit_distance
    if len(a) > 3 and edit_distance(norm(cname), norm(aname)) <= 1:
        return 0.75
    return 0.0


def _length_of(cname: str, list_args: list[str]) -> str | None:
    """The list argument a C length parameter counts: numAxes -> dim (axes),
    numStride -> stride, normDims -> normalized_shape."""
    w = tokens(cname)
    if len(w) < 2:
        return None
    if w[0] in ("num", "n", "nb", "count"):
        core = w[1:]
    elif w[-1] in ("len", "count", "num", "size", "length", "dims", "axes", "rank"):
        core = w[:-1]
    else:
        return None
    joined = "_".join(core)
    for a in list_args:
        if _name_score(joined, a) >= 0.75 or norm(joined).rstrip("s") == norm(a).rstrip("s") \
                or len(norm(joined)) >= 3 and norm(a).startswith(norm(joined)):
            return a
    return None


# C names that say nothing about which argument they are: matched by order
_GENERIC = re.compile(r"(x|y|z|a|b|c|t|u|v|p|q|in|src|input|lhs|rhs)\d*")


def map_params(fn: Function, opi, struct_types: set, enum_types: set,
               preset: dict | None = None) -> tuple[dict, float, list] | None:
    """A spec entry's fields binding `fn` to `opi`, its score and notes; None
    when they cannot match.  `preset`: C parameters given a constant."""
    kinds = [classify_param(p, struct_types, enum_types) for p in fn.params]
    if any(p.name is None for p in fn.params) or "other" in kinds or "str" in kinds and not any(
            a.kind == "str" for a in opi.args):
        return None
    if any(getattr(a, "is_out", False) for a in opi.op._schema.arguments):
        return None                     # out= overloads: flbridge routes the functional one
    notes: list[str] = []
    args, bind, ignore, pins = {}, {}, [], {}
    # outputs: the descriptors the function writes (not const)
    outs = [p.name for p, k in zip(fn.params, kinds) if k == "desc" and not p.const_target]
    if not outs or len(outs) > len(opi.rets) or any(r.kind != "tensor" for r in opi.rets):
        return None
    outputs = outs + [None] * (len(opi.rets) - len(outs))   # results the kernel does not produce: null
    written = {a.name for a in opi.args if a.writes and any(r.alias_arg == a.index for r in opi.rets)}
    taken: dict[str, str] = {}          # C param -> aten arg (or "len(x)")
    scores: dict[str, float] = {}
    inputs = [(p, k) for p, k in zip(fn.params, kinds) if p.name not in outs and p.name not in (preset or {})]
    used: set = set()
    if preset:
        bind.update(preset)
    # 1. by name (vendor spellings included)
    pairs = sorted(((_name_score(p.name, a.name) * _arg_kind_ok(k, a.kind), p.name, a.name)
                    for p, k in inputs for a in opi.args), key=lambda t: -t[0])
    for sc, c, a in pairs:
        if sc > 0 and c not in taken and a not in used:
            taken[c], scores[c] = a, sc
            used.add(a)
    # 2. lengths of list arguments
    lists = [a.name for a in opi.args if a.kind in ("int[]", "float[]", "tensor[]")]
    for p, k in inputs:
        if p.name not in taken and k == "int":
            target = _length_of(p.name, lists)
            if target is not None:
                taken[p.name], scores[p.name] = f"len({target})", 0.9
                used.add(target)   # the kernel reads the list's values from the tensors' shapes
    # 3. tensors with generic names, by order
    for p, k in inputs:
        if p.name in taken or k != "desc" or not _GENERIC.fullmatch("_".join(tokens(p.name))):
            continue
        a = next((a for a in opi.args if a.name not in used and a.kind in ("tensor", "tensor?")
                  and not a.kwarg_only), None)
        if a is not None:
            taken[p.name], scores[p.name] = a.name, 0.6
            used.add(a.name)
            notes.append(f"{p.name} -> {a.name} guessed from the order")
    # 4. what is left of the C function gets a constant: a mode or flag (0),
    # an empty list and its length (0); a tensor or a number the op does not
    # have means this is not the op
    for p, k in inputs:
        if p.name in taken:
            continue
        const = {"int": 0, "bool": False, "intptr": []}.get(k)
        if const is None:
            return None
        bind[p.name] = const
        scores[p.name] = 0.3
        notes.append(f"check: what {p.name} means ({yaml_value(const)} is passed)")
    for c, a in taken.items():
        if c != a and not (a.startswith("len(") and c == a[4:-1] + "_len"):
            args[c] = a
    # 5. aten arguments the kernel does not take
    backward = opi.qualname.split(".")[0].endswith("_backward")
    for a in opi.args:
        if a.name in used or a.name in written or a.default is not NO_DEFAULT:
            continue
        if a.kind == "tensor?":
            ignore.append(a.name)
            notes.append(f"check: the kernel has no parameter for {a.name}; it must not change the result")
        elif a.kind == "tensor" and backward and a.name in ("self", "input"):
            ignore.append(a.name)
            notes.append(f"check: the kernel does not read {a.name} (only its shape, which the result has)")
        elif a.kind == "bool":
            pins[a.name] = [False]
            notes.append(f"check: the kernel has no parameter for {a.name}: only calls with {a.name}=False")
        elif a.kind == "bool[]":
            pins[a.name] = [True]
            notes.append(f"check: the kernel computes every result selected by {a.name}: only calls with "
                         f"all true")
            twin = next((c for c in bind if _name_score(c, a.name) >= 0.75 and isinstance(bind[c], list)), None)
            if twin is not None and a.fixed_len:   # the kernel's own mask, all set
                bind[twin] = [1] * a.fixed_len
                notes[:] = [n for n in notes if not n.startswith(f"check: what {twin} means")]
        elif a.kind in ("float", "number", "int[]", "dtype") or a.kind == "int" and "dtype" in a.name:
            ignore.append(a.name)
            notes.append(f"check: {a.name} is ignored; it must not change the result")
        else:
            return None
    if len(opi.rets) > 1:
        mapping_outputs = outputs
    else:
        mapping_outputs = None
        if outs[0] != "out":
            args[outs[0]] = "out"
    mapping: dict = {}
    if args:
        mapping["args"] = args
    if bind:
        mapping["bind"] = bind
    if mapping_outputs is not None:
        mapping["outputs"] = mapping_outputs
    if pins:
        mapping["constraints"] = pins
    if ignore:
        mapping["ignore_args"] = ignore
    idx = {a: [dtype_name(d) for d in dts] for a, dts in INDEX_ARGS.items() if a in used}
    if idx:   # index and mask tensors have their own dtypes
        mapping["arg_dtypes"] = idx
    # inputs PyTorch broadcasts: expanded (stride 0) to the result's shape,
    # since a kernel taking descriptors reads strides
    tensors = [a.name for a in opi.args if a.kind in ("tensor", "tensor?") and a.name in used]
    if torch.Tag.pointwise in opi.op.tags and len(tensors) > 1:
        mapping["broadcast"] = tensors
    elif opi.qualname[6:].split(".")[0].strip("_") in BROADCAST_SELF and "self" in used:
        mapping["broadcast"] = ["self"]
    score = sum(scores.values()) / max(1, len(inputs)) - 0.1 * (len(pins) + len(ignore))
    ignored = [n.split(" ")[1] for n in notes if n.endswith("is ignored; it must not change the result")]
    if len(ignored) > 1:
        notes = [n for n in notes if not n.endswith("is ignored; it must not change the result")]
        notes.append(f"check: ignored, so they must not change the result: {', '.join(ignored)}")
    return mapping, score, notes


def misfit(fn: Function, opi, kinds: list) -> str:
    """Why `fn`'s parameters cannot take `opi`'s arguments, in a few words."""
    odd = [p.name or "?" for p, k in zip(fn.params, kinds) if k in ("other",) or p.name is None]
    if odd:
        return f"parameter {', '.join(odd)} has a type flbridge does not pass (a list of descriptors or a struct)"
    if any(getattr(a, "is_out", False) for a in opi.op._schema.arguments):
        return "an out= overload"
    outs = [p.name for p, k in zip(fn.params, kinds) if k == "desc" and not p.const_target]
    if not outs:
        return "no non-const descriptor to write the result into"
    if len(outs) > len(opi.rets) or any(r.kind != "tensor" for r in opi.rets):
        return f"writes {len(outs)} descriptors ({', '.join(outs)}); the op returns {len(opi.rets)}"
    names = {a.name for a in opi.args}
    extra = [p.name for p, k in zip(fn.params, kinds) if k in ("desc", "float") and p.name not in outs
             and not any(_name_score(p.name, a) > 0 for a in names)]
    if extra:
        return f"the op has no argument for {', '.join(extra)}"
    return "its parameters do not map onto the op's arguments"


def _to_loc(v, file="<scaffold>", line=1):
    if isinstance(v, dict):
        d = LocDict({k: _to_loc(x, file, line) for k, x in v.items()})
        d.file, d.line, d.key_locs = file, line, {k: (file, line) for k in v}
        return d
    if isinstance(v, list):
        lst = LocList(_to_loc(x, file, line) for x in v)
        lst.file, lst.line, lst.item_locs = file, line, [(file, line)] * len(v)
        return lst
    return v


def try_entry(fn: Function, name: str, mapping: dict, header: Header, dtypes: tuple, codes: dict,
              struct_types: set, enum_types: set):
    """(OpEntry, None) when flbridge's checker and binder accept the entry,
    else (None, why)."""
    ck = Checker()
    e = _to_loc({"name": name, "impl": fn.name, **mapping})
    caps = Capabilities(dtypes, None, None, {}, ())
    entries = check_op(ck, e, ("<scaffold>", 1), "entry", caps, codes)
    if ck.problems or not entries:
        return None, "; ".join(p.message for p in ck.problems)
    try:
        plan_call(entries[0], fn, struct_types, enum_types)
    except BindError as err:
        return None, str(err)
    return entries[0], None


def find_ops(header: Header, prefix: str, roles: dict, dtypes: tuple, codes: dict, struct_types: set,
             enum_types: set, lines: list[str] | None = None) -> tuple[list[OpGuess], list[str]]:
    """The best C function for each aten overload, grouped per function;
    and the descriptor-taking functions that matched nothing."""
    best: dict[str, tuple] = {}         # qualname -> (score, fn, name, mapping, notes)
    role_fns = {r.fn: role for role, r in roles.items()}
    unmatched = []
    rank_of: dict[str, float] = {}
    runs = define_runs(lines or [])
    for fn in header.functions.values():
        kinds = kinds_of(fn, struct_types, enum_types)
        if "desc" not in kinds or role_fns.get(fn.name) not in (None, "copy", "fill"):
            continue
        modes = dict()      # aten name -> {mode param: code}
        for n, code in mode_candidates(fn, prefix, kinds, runs):
            modes.setdefault(n, code)
        names, spare = _ops_and_extra(stem(fn.name, prefix))
        if modes:
            names, spare = list(modes), 0
        extra_ignore: dict = {}
        if role_fns.get(fn.name) == "copy":
            names, extra_ignore = list(COPY_OPS), COPY_OPS
        elif role_fns.get(fn.name) == "fill":
            names = list(FILL_OPS)
        hit = False
        whys: list[str] = []
        if not names:
            whys.append(f"its name ({' '.join(stem(fn.name, prefix))}) names no aten op")
        for name in names:
            try:
                res = resolve_name(name)
            except OpNameError as e:
                whys.append(f"{name}: {str(e).splitlines()[0][:100]}")
                continue
            opi = info(res.op)
            preset = dict(modes[name]) if name in modes else None
            if FILL_OPS.get(name):    # zero_: the fill kernel with value 0
                preset = {p.name: 0 for p, k in zip(fn.params, kinds) if k == "float"}
            got = map_params(fn, opi, struct_types, enum_types, preset)
            if got is None:
                whys.append(f"{opi.qualname}: {misfit(fn, opi, kinds)}")
                continue
            mapping, score, notes = got
            if extra_ignore.get(name):
                mapping.setdefault("ignore_args", [])
                mapping["ignore_args"] = [a for a in extra_ignore[name] if a in opi.by_name and
                                          a not in mapping["ignore_args"]] + mapping["ignore_args"]
            if name in ALIASES:   # what the friendly name implies need not be written
                implied = set(res.implied_constraints) | set(res.implied_ignore)
                cons = {k: v for k, v in mapping.pop("constraints", {}).items() if k not in implied}
                ign = [a for a in mapping.pop("ignore_args", []) if a not in implied]
                if cons:
                    mapping["constraints"] = cons
                if ign:
                    mapping["ignore_args"] = ign
                notes = [n for n in notes if not any(f" {a} " in f" {n} ".replace(":", " ").replace(";", " ")
                                                     for a in implied)]
            # a C tensor parameter fed from a Scalar first argument is not this op
            if opi.args and opi.args[0].kind in ("float", "number") and any(k == "desc" for k in kinds[:1]):
                whys.append(f"{opi.qualname}: its first argument is a number where the function takes a tensor")
                continue
            entry, why = try_entry(fn, name, mapping, header, dtypes, codes, struct_types, enum_types)
            if entry is None:
                whys.append(f"{opi.qualname}: {why}")
                continue
            hit = True
            old = best.get(entry.qualname)
            rank = score - 0.1 * spare      # words the op's name does not explain count against
            if old is None or rank > rank_of[entry.qualname]:
                best[entry.qualname] = (score, fn.name, name, mapping, notes)
                rank_of[entry.qualname] = rank
        if not hit:
            unmatched.append((fn.name, "; ".join(dict.fromkeys(whys[:3]))))
    # group overloads sharing a function and identical fields into one entry
    groups: dict[tuple, OpGuess] = {}
    for qn, (score, fname, name, mapping, notes) in best.items():
        key = (fname, repr(sorted(mapping.items())), tuple(notes))
        g = groups.get(key)
        if g is None:
            groups[key] = OpGuess(fname, [name], [qn], mapping, score, list(notes))
        else:
            g.names.append(name)
            g.qualnames.append(qn)
            g.score = min(g.score, score)
    for g in groups.values():
        pairs = sorted(zip(g.names, g.qualnames), key=lambda nq: _name_order(nq[1]))
        g.names, g.qualnames = [n for n, _ in pairs], [q for _, q in pairs]
    order = {f: i for i, f in enumerate(header.functions)}
    return sorted(groups.values(), key=lambda g: (order[g.fn], _name_order(g.qualnames[0]))), unmatched


def _name_order(qualname: str) -> tuple:
    """add.Tensor, add_.Tensor, add.Scalar, add_.Scalar: functional before
    in-place, tensor overloads first."""
    packet, _, ovl = qualname[6:].partition(".")
    return (packet.strip("_"), ovl not in ("default", "Tensor"), ovl, packet.endswith("_"))


