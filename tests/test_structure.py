"""The package's shape: one op's path reads through small modules that
import each other in one direction only."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "flbridge"


def _imports() -> dict:
    graph = {}
    for f in PKG.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[f.stem] = deps
    return graph


def test_flbridge_modules_import_each_other_without_cycles():
    graph = _imports()
    state, cycles = {}, []

    def visit(mod, path):
        state[mod] = "open"
        for dep in sorted(graph.get(mod, ())):
            if dep not in graph:
                continue
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [mod, dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[mod] = "done"

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_op_path_modules_are_small():
    # dispatch -> route -> native (+ eligibility) -> runtime: each readable without scrolling far
    for mod in ("dispatch", "route", "native", "prepare", "adapter", "eligibility", "cpu_fallback", "metaops",
                "crossings", "launch"):
        lines = (PKG / f"{mod}.py").read_text().count("\n")
        assert lines < 600, (mod, lines)
