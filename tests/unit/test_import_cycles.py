"""No import cycles inside `edit_lab/`: each module's dependencies point one way.

A cycle makes the order of imports matter (whichever module is imported first sees the other half-
initialised), hides which layer owns what, and is how torch or ipywidgets leak into modules that
should stay light. The graph is read from the source with `ast`, not from `sys.modules`, so an import
that only runs inside a function, or only under `TYPE_CHECKING`, counts as much as one at the top.

The rule, one edge per dependency Python really has:

- every `Import`/`ImportFrom` node anywhere in a module counts; relative imports are resolved against
  the module's package, and only modules of `edit_lab` are nodes;
- `import a.b.c` is an edge to `a.b.c`; `from P import x` is an edge to the submodule `P.x` when there is
  one, else to `P` itself (its `__init__`, which must have run for `x` to exist);
- importing `a.b.c` also runs the `__init__` of `a` and `a.b` first, so those packages are edges too,
  except the packages that contain the importer: Python imports a module's own packages before the
  module, so they are not a dependency the module adds. This is why a package `__init__` that
  re-exports its submodules makes no cycle with them; it does when one of them, or anything it
  imports, depends back on a module that imports the package from outside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import edit_lab

PACKAGE = "edit_lab"
ROOT = Path(edit_lab.__file__).parent

Graph = dict[str, set[str]]


def module_names(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name → its file, for every `.py` under `root` (a package's name for its `__init__`)."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _ancestors(name: str) -> list[str]:
    """`a.b.c` → [`a`, `a.b`]: the packages whose `__init__` runs before `a.b.c`'s."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules of `known` that this one import statement names explicitly."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if node.level:  # relative: resolved against the importer's package
        base = module.split(".")
        base = base if is_package else base[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known]
    if len(out) < len(node.names) and source in known:  # some names are attributes of the package itself
        out.append(source)
    return out


def import_graph(root: Path = ROOT, package: str = PACKAGE, *more: tuple[Path, str]) -> Graph:
    """Module → the modules of the package it depends on, by the rule in this file's docstring (and of the
    packages `more`, as (root, name) pairs: one graph over them all)."""
    files = module_names(root, package)
    for r, p in more:
        files.update(module_names(r, p))
    known = set(files)
    graph: Graph = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        own = set(_ancestors(name)) | ({name} if is_package else set())  # already imported when `name` runs
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, name, is_package, known):
                    deps.add(target)
                    deps.update(p for p in _ancestors(target) if p not in own and p in known)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_one_cycle(graph, c) for c in components]


def _one_cycle(graph: Graph, component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a chain `a, b, …, a`."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [start, *reversed(chain[:-1]), start] if v != start else [start, start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in the component {sorted(component)}")


def test_edit_lab_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in edit_lab/:\n" + "\n".join(" → ".join(c) for c in found)


def test_the_simulator_imports_no_widgets():
    """`edit_lab/clock/sim/` is the pure simulator: the preview tab's widget glue is `edit_lab.ui.preview`, so no module
    of sim/ imports ipywidgets or a module of the widget layer, not even inside a function."""
    widget_layer = {m for m in module_names(ROOT) if m.startswith(f"{PACKAGE}.ui")}
    graph = import_graph()
    for name, path in module_names(ROOT).items():
        if not name.startswith(f"{PACKAGE}.clock.sim"):
            continue
        assert not graph[name] & widget_layer, (name, graph[name] & widget_layer)
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
        assert not {m for m in imported if m.split(".")[0] == "ipywidgets"}, name


def test_the_graph_sees_cycles_through_functions_type_checking_and_packages(tmp_path):
    """The rule itself, on a made-up package: each kind of edge closes a cycle it should, and only those."""
    files = {
        "__init__.py": "from .api import run\n",
        "api.py": "def run():\n    from .lazy import x\n",  # inside a function
        "lazy.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .api import run\nx = 1\n",
        "sub/__init__.py": "from .leaf import y\n",  # re-exports its submodule: no cycle with it
        "sub/leaf.py": "from .. import plain\ny = 1\n",
        "plain.py": "z = 1\n",
        "outside.py": "from .sub import y\n",  # y is no submodule: sub's __init__ alone
        "back.py": "import pkg.sub.leaf\n",  # runs sub/__init__ first
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.outside"] == {"pkg.sub"}
    assert graph["pkg.sub.leaf"] == {"pkg.plain"}  # `from .. import plain`: the submodule, not pkg's __init__
    assert graph["pkg.back"] == {"pkg.sub", "pkg.sub.leaf"}  # not pkg: it contains back.py, already imported
    assert cycles(graph) == [["pkg.api", "pkg.lazy", "pkg.api"]]
    (tmp_path / "plain.py").write_text("import pkg.outside\n")  # sub's __init__ → leaf → plain → outside → sub
    found = cycles(import_graph(tmp_path, "pkg"))
    assert ["pkg.outside", "pkg.sub", "pkg.sub.leaf", "pkg.plain", "pkg.outside"] in found, found
