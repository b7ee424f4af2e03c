"""The package's shape: subpackages by role, small modules, imports that run
one way only (docs/architecture.md draws the layers).

Every import counts: absolute (`from flbridge.x import y`), relative
(`from ..x import y`) and those inside functions.  An import of a subpackage
also runs its __init__.py, so that file's own imports count as edges too.
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "flbridge"

# may import the package root: they stand above everything (docs/architecture.md)
ABOVE_THE_ROOT = ("flbridge.cli", "flbridge.tools", "flbridge.demos")
# what a newcomer reads as the package's face must stay small
MAX_TOP_LEVEL_MODULES = 15
MAX_MODULE_LINES = 800
# the public functions of flbridge: a subpackage of one of these names would rebind it on import
PUBLIC_FUNCTIONS = ("init", "chips", "stats", "reset_stats", "torch_device", "device", "wrap", "coverage",
                    "autocompare", "profiler")


def _modules() -> dict:
    """{dotted module name: (path, is_package)} for every module of flbridge."""
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (f, is_pkg)
    return out


def _imports() -> dict:
    """{module: {(imported module, line), ...}}: every import of a flbridge
    module, wherever it stands in the file."""
    mods = _modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "flbridge"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
                elif (node.module or "").split(".")[0] == "flbridge":
                    base = node.module.split(".")
                else:
                    continue
                targets = [".".join(base + [a.name]) if ".".join(base + [a.name]) in mods else ".".join(base)
                           for a in node.names]
            for t in targets:
                while t not in mods:
                    t = t.rsplit(".", 1)[0]
                # importing a.b.c runs a/__init__ and a/b/__init__ first, except the
                # packages this module is inside (their import is already under way)
                parts = t.split(".")
                for i in range(1, len(parts)):
                    step = ".".join(parts[:i])
                    if step in mods and not (name + ".").startswith(step + "."):
                        deps.add((step, node.lineno))
                if t != name:
                    deps.add((t, node.lineno))      # what it names, even a package it is inside
        graph[name] = deps
    return graph


def _cycles(graph) -> list:
    edges = {m: sorted({d for d, _ in deps}) for m, deps in graph.items()}
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_no_import_cycle_counting_every_kind_of_import():
    cycles = _cycles(_imports())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_function_level_and_absolute_imports():
    graph = {"a": {("b", 1)}, "b": {("a", 9)}}           # the shape a function-level import back up makes
    assert _cycles(graph) == [["a", "b"]]
    deps = dict(_imports())
    assert any(d == "flbridge.routing.route" for d, _ in deps["flbridge.routing.special"])


def test_nothing_below_the_cli_tools_and_demos_imports_the_package_root():
    offenders = [f"{m} (line {line})" for m, deps in _imports().items() for d, line in deps
                 if d == "flbridge" and m != "flbridge" and not m.startswith(ABOVE_THE_ROOT)]
    assert not offenders, "import the package root from below: " + ", ".join(sorted(offenders))


def test_subpackages_group_the_modules_and_do_not_shadow_public_functions():
    top = [f for f in PKG.glob("*.py") if f.name != "__init__.py"]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, sorted(f.name for f in top)
    subs = [d.name for d in PKG.iterdir() if (d / "__init__.py").exists()]
    assert len(subs) >= 5, subs
    assert not set(subs) & set(PUBLIC_FUNCTIONS), set(subs) & set(PUBLIC_FUNCTIONS)
    for d in subs:
        face = (PKG / d / "__init__.py").read_text()
        tree = ast.parse(face)
        assert ast.get_docstring(tree), f"flbridge/{d}/__init__.py says what the subpackage holds"
        assert all(isinstance(n, (ast.Expr, ast.ImportFrom)) for n in tree.body), \
            f"flbridge/{d}/__init__.py only hands on names"


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {str(p.relative_to(PKG)): n for p, _ in _modules().values()
            if (n := p.read_text().count("\n")) > MAX_MODULE_LINES}
    assert not long, long


def test_the_op_path_modules_are_small():
    # dispatch -> route -> native (+ prepare, eligibility, adapter) -> launch: each readable without scrolling far
    for mod in ("routing/dispatch", "routing/route", "routing/native", "routing/prepare", "routing/adapter",
                "routing/eligibility", "routing/cpu_fallback", "routing/views", "routing/special", "binding/launch"):
        lines = (PKG / f"{mod}.py").read_text().count("\n")
        assert lines < 600, (mod, lines)


def test_the_dispatch_entry_is_installed_explicitly():
    tensor_src = (PKG / "tensor" / "xpu_tensor.py").read_text()
    assert "routing.install" in tensor_src          # reading the class says where its ops go
    reg = (PKG / "backend" / "registration.py").read_text()
    assert "install_dispatch(XPUTensor)" in reg
    assert "noqa: F401" not in reg                  # no import kept for its side effect
