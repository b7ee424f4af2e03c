"""YAML spec files with locations: every mapping and list remembers the file
and line each of its entries came from, through `extends` merging, so a
problem found later is reported as ``file:line: field: message``."""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from ..errors import SpecProblem


class LocDict(dict):
    """A mapping whose keys remember (file, line)."""
    __slots__ = ("file", "line", "key_locs")

    def loc(self, key) -> tuple[str, int]:
        return self.key_locs.get(key, (self.file, self.line))


class LocList(list):
    """A list whose items remember (file, line)."""
    __slots__ = ("file", "line", "item_locs")

    def loc(self, i) -> tuple[str, int]:
        return self.item_locs[i] if 0 <= i < len(self.item_locs) else (self.file, self.line)


MAX_SPEC_BYTES = 4 << 20      # a spec with every aten op listed is a few hundred KiB
MAX_VALUES = 100_000          # mappings, lists and scalars after aliases are expanded
MAX_DEPTH = 64                # a spec nests about six levels


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class _Budget(Exception):
    """Raised inside _convert when the spec is too big or too deep; never
    leaves this module (load_yaml turns it into a SpecProblem)."""

    def __init__(self, line: int, message: str):
        self.line, self.message = line, message


def _convert(node, loader, file: str, problems: list, path: str, budget: list, depth: int = 0):
    line = node.start_mark.line + 1
    budget[0] -= 1
    if budget[0] < 0:
        raise _Budget(line, f"the spec expands to more than {MAX_VALUES} values (YAML aliases that "
                            f"refer to aliases multiply: write the values out, or reuse fewer)")
    if depth > MAX_DEPTH:
        raise _Budget(line, f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        problems.append(SpecProblem(file, line, path or "<top>", f"YAML tag {node.tag!r} is not allowed in a "
                                                                 f"spec: write a plain mapping or list"))
    if isinstance(node, yaml.MappingNode):
        d = LocDict()
        d.file, d.line, d.key_locs = file, line, {}
        for knode, vnode in node.value:
            kline = knode.start_mark.line + 1
            if not isinstance(knode, yaml.ScalarNode):
                problems.append(SpecProblem(file, kline, path or "<top>", "a list or mapping cannot be a key"))
                continue
            if knode.tag == "tag:yaml.org,2002:merge":
                problems.append(SpecProblem(file, kline, path or "<top>", "YAML merge keys (<<) are not "
                                            "supported: write the fields out, or share them with `extends`"))
                continue
            key = _scalar(knode, loader, file, problems, path or "<top>")
            if key is _BAD:
                continue
            if not isinstance(key, str):
                problems.append(SpecProblem(file, kline, path or "<top>", f"key {key!r:.60} is not a string"))
                continue
            if key in d:
                problems.append(SpecProblem(file, kline, _join(path, key),
                                            f"duplicate key (also on line {d.key_locs[key][1]})"))
            d[key] = _convert(vnode, loader, file, problems, _join(path, key), budget, depth + 1)
            d.key_locs[key] = (file, kline)
        return d
    if isinstance(node, yaml.SequenceNode):
        lst = LocList()
        lst.file, lst.line, lst.item_locs = file, line, []
        for i, item in enumerate(node.value):
            lst.append(_convert(item, loader, file, problems, f"{path}[{i}]", budget, depth + 1))
            lst.item_locs.append((file, item.start_mark.line + 1))
        return lst
    v = _scalar(node, loader, file, problems, path or "<top>")
    return None if v is _BAD else v


_BAD = object()   # a scalar that could not be read (the problem is recorded)


def _scalar(node, loader, file: str, problems: list, path: str):
    """A scalar's value; a tag or literal PyYAML cannot construct (a huge
    integer, an unknown tag, a bad timestamp) is a problem at its line."""
    try:
        return loader.construct_object(node, deep=True)
    except Exception as e:  # noqa: BLE001 - any constructor failure is a problem with this value
        why = str(getattr(e, "problem", None) or e)
        if "integer string conversion" in why:
            why = "a number with more digits than Python reads (4300)"
        problems.append(SpecProblem(file, node.start_mark.line + 1, path,
                                    f"cannot read value {node.value[:40]!r}: {why}"))
        return _BAD


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def read_text(path: Path, problems: list, what: str = "spec") -> str | None:
    """The file's text, at most MAX_SPEC_BYTES, decoded as UTF-8; problems
    (unreadable, too big, not UTF-8) name the file and line."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        problems.append(SpecProblem(file, 1, "<file>", f"cannot read: {e.strerror or e}"))
        return None
    if len(raw) > MAX_SPEC_BYTES:
        problems.append(SpecProblem(file, 1, "<file>", f"larger than {MAX_SPEC_BYTES >> 20} MiB: not a {what}"))
        return None
    try:
        return raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        problems.append(SpecProblem(file, line, "<file>",
                                    f"not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} (column {col}); "
                                    f"save the {what} as UTF-8"))
        return None


def load_yaml(path: Path, problems: list) -> LocDict | None:
    """Parses one file; YAML errors become problems with their line.  Work
    and memory are bounded: size, values after alias expansion, nesting."""
    file = str(path)
    text = read_text(path, problems)
    if text is None:
        return None
    loader = None
    try:
        loader = yaml.SafeLoader(text)   # checks every character is allowed in YAML
        node = loader.get_single_node()
        if node is None:
            problems.append(SpecProblem(file, 1, "<file>", "empty spec file"))
            return None
        root = _convert(node, loader, file, problems, "", [MAX_VALUES])
    except _Budget as e:
        problems.append(SpecProblem(file, e.line, "<yaml>", e.message))
        return None
    except RecursionError:
        problems.append(SpecProblem(file, loader.line + 1, "<yaml>", "nested too deeply to read"))
        return None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        ch = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "\0")
        problems.append(SpecProblem(file, line, "<yaml>", f"not valid YAML: character U+{ch:04X} at column "
                                                          f"{e.position - text.rfind(chr(10), 0, e.position)} "
                                                          f"is not allowed ({e.reason})"))
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = mark.line + 1 if mark else 1
        problems.append(SpecProblem(file, line, "<yaml>", f"not valid YAML: {getattr(e, 'problem', None) or e}"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(root, LocDict):
        problems.append(SpecProblem(file, 1, "<top>", "a spec must be a mapping of fields"))
        return None
    return root


_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
MAX_PATH = 4096


def bad_path(value: str) -> str | None:
    """Why a path written in a spec cannot name a file, or None."""
    if "\0" in value:
        return "contains a NUL character"
    if len(value) > MAX_PATH:
        return f"is longer than {MAX_PATH} characters"
    return None


def is_file(p: Path) -> bool:
    """Path.is_file() that says False instead of raising (name too long, a
    loop of links, no permission)."""
    try:
        return p.is_file()
    except (OSError, ValueError):
        return False


def expand_path(value: str, spec_dir: Path, missing: list[str]) -> Path:
    """$VAR / ${VAR} from the environment, then relative to the spec's folder."""
    def sub(m):
        name = m.group(1) or m.group(2)
        if name not in os.environ:
            missing.append(name)
            return m.group(0)
        return os.environ[name]
    p = Path(os.path.expanduser(_VAR.sub(sub, value)))
    return p if p.is_absolute() else (spec_dir / p)


def merge(parent, child):
    """Child overrides parent field by field.  Mappings merge recursively;
    `supported_ops` entries merge by `name`; other lists are replaced."""
    if isinstance(parent, LocDict) and isinstance(child, LocDict):
        out = LocDict(parent)
        out.file, out.line, out.key_locs = child.file, child.line, dict(parent.key_locs)
        for k, v in child.items():
            if k in parent and k == "supported_ops" and isinstance(v, list) and isinstance(parent[k], list):
                out[k] = _merge_ops(parent[k], v)
            elif k in parent:
                out[k] = merge(parent[k], v)
            else:
                out[k] = v
            out.key_locs[k] = child.key_locs[k]
        return out
    return child


def _names(entry) -> list:
    if isinstance(entry, dict):
        n = entry.get("name")
        return list(n) if isinstance(n, list) else [n] if n is not None else []
    return []


def _with_names(entry, names):
    out = LocDict(entry)
    out.file, out.line, out.key_locs = entry.file, entry.line, dict(entry.key_locs)
    out["name"] = names[0] if len(names) == 1 else names
    return out


def _merge_ops(parent: LocList, child: LocList) -> LocList:
    """A child entry overrides, field by field, the parent entries that list
    any of its op names (for those names only); other entries are kept."""
    out = LocList()
    out.file, out.line, out.item_locs = child.file, child.line, []
    entries = [(e, parent.loc(i)) for i, e in enumerate(parent)]
    for ci, ce in enumerate(child):
        cnames = _names(ce)
        nxt, merged_any = [], False
        for pe, loc in entries:
            pnames = _names(pe)
            shared = [n for n in pnames if n in cnames]
            if not shared or not isinstance(pe, LocDict) or not isinstance(ce, LocDict):
                nxt.append((pe, loc))
                continue
            rest = [n for n in pnames if n not in shared]
            if rest:
                nxt.append((_with_names(pe, rest), loc))
            nxt.append((merge(pe, _with_names(ce, shared)), child.loc(ci)))
            merged_any = True
        if not merged_any:
            nxt.append((ce, child.loc(ci)))
        entries = nxt
    for e, loc in entries:
        out.append(e)
        out.item_locs.append(loc)
    return out


def load_with_extends(path: Path, problems: list,
                      _chain: tuple[tuple[Path, int], ...] = ()) -> LocDict | None:
    """Loads a spec and, recursively, what it extends; reports cycles and
    missing parents at the `extends` line.  `_chain` holds (file, line of its
    extends) for the specs that led here."""
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as e:
        problems.append(SpecProblem(str(path), 1, "<file>", f"cannot resolve the path: {e}"))
        return None
    if any(p == path for p, _ in _chain):
        cycle = " -> ".join(p.name for p, _ in _chain) + f" -> {path.name}"
        last, line = _chain[-1]
        problems.append(SpecProblem(str(last), line, "extends", f"extends cycle: {cycle}"))
        return None
    data = load_yaml(path, problems)
    if data is None or "extends" not in data:
        return data
    ext = data["extends"]
    file, line = data.loc("extends")
    if not isinstance(ext, str) or not ext.strip():
        problems.append(SpecProblem(file, line, "extends", "must be a file name (e.g. base.yaml)"))
        return data
    why = bad_path(ext)
    if why:
        problems.append(SpecProblem(file, line, "extends", f"the file name {why}"))
        return data
    missing: list[str] = []
    parent_path = expand_path(ext, path.parent, missing)
    if missing:
        problems.append(SpecProblem(file, line, "extends",
                                    f"environment variable {', '.join('$' + m for m in missing)} is not set"))
        return data
    if not is_file(parent_path):
        problems.append(SpecProblem(file, line, "extends", f"parent spec {parent_path} does not exist"))
        return data
    parent = load_with_extends(parent_path, problems, _chain + ((path, line),))
    if parent is None:
        return data
    child = LocDict({k: v for k, v in data.items() if k != "extends"})
    child.file, child.line = data.file, data.line
    child.key_locs = {k: v for k, v in data.key_locs.items() if k != "extends"}
    merged = merge(parent, child)
    merged.file = data.file
    return merged
