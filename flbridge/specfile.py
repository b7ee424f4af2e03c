"""YAML spec files with locations: every mapping and list remembers the file
and line each of its entries came from, through `extends` merging, so a
problem found later is reported as ``file:line: field: message``."""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from .errors import SpecProblem


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


def _convert(node, loader, file: str, problems: list, path: str):
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        d = LocDict()
        d.file, d.line, d.key_locs = file, line, {}
        for knode, vnode in node.value:
            key = loader.construct_object(knode, deep=True)
            kline = knode.start_mark.line + 1
            if not isinstance(key, str):
                problems.append(SpecProblem(file, kline, path or "<top>", f"key {key!r} is not a string"))
                continue
            if key in d:
                problems.append(SpecProblem(file, kline, _join(path, key),
                                            f"duplicate key (also on line {d.key_locs[key][1]})"))
            d[key] = _convert(vnode, loader, file, problems, _join(path, key))
            d.key_locs[key] = (file, kline)
        return d
    if isinstance(node, yaml.SequenceNode):
        lst = LocList()
        lst.file, lst.line, lst.item_locs = file, line, []
        for i, item in enumerate(node.value):
            lst.append(_convert(item, loader, file, problems, f"{path}[{i}]"))
            lst.item_locs.append((file, item.start_mark.line + 1))
        return lst
    return loader.construct_object(node, deep=True)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def load_yaml(path: Path, problems: list) -> LocDict | None:
    """Parses one file; YAML errors become problems with their line."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        problems.append(SpecProblem(file, 0, "<file>", f"cannot read: {e.strerror or e}"))
        return None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                problems.append(SpecProblem(file, 1, "<file>", "empty spec file"))
                return None
            root = _convert(node, loader, file, problems, "")
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        problems.append(SpecProblem(file, line, "<yaml>", f"not valid YAML: {getattr(e, 'problem', e)}"))
        return None
    if not isinstance(root, LocDict):
        problems.append(SpecProblem(file, 1, "<top>", "a spec must be a mapping of fields"))
        return None
    return root


_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


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
    path = path.resolve()
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
    missing: list[str] = []
    parent_path = expand_path(ext, path.parent, missing)
    if missing:
        problems.append(SpecProblem(file, line, "extends",
                                    f"environment variable {', '.join('$' + m for m in missing)} is not set"))
        return data
    if not parent_path.is_file():
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
