"""Every import between the lab's layers points down: the library never imports the course, the core never
imports a clock, a process or a figure.

The layers, lowest first (a module may import its own layer and the ones below it):

| layer | what | folders |
|---|---|---|
| 0 | torch-free facts and the reader's hooks | `edit_lab/*.py` (the list below) |
| 1 | the run records | `edit_lab/records/` |
| 2 | the core: the model, collectives, sharding, the methods, penalty, outer step | `edit_lab/core/` |
| 3 | one rank's training loop | `edit_lab/train/` |
| 4 | time without this machine's clock | `edit_lab/clock/` |
| 5 | processes | `edit_lab/runtime/` |
| 6 | figures of records (L0 and L1 only: a figure draws records, it runs nothing) | `edit_lab/viz/` |
| 7 | widgets | `edit_lab/ui/` |
| 8 | the course | `edit_course/` |

Layer 0 is what `RunConfig.validate` needs without torch: the knobs (`config/`), the methods' names (`registry`), the
model shapes (`sizes`), when the replicas talk (`protocol`), the reader's rules (`hooks/`), the corpus' split
(`corpus`), the penalty's knobs (`config/penalty.py`) and its detector (`detector`, which `PenaltyConfig` builds).

`edit_lab/__main__.py` and `edit_lab/tools/` are entry points: they may import any layer, and no layer imports them.
So are the old names kept for shipped notebooks (`ALIASES`): nothing in the lab may import them.
`edit_lab/__init__.py` is the public API (`RunConfig`, `launch`, `Run`): it counts as layer 5, so the widgets and
the course may import it. The graph is `test_import_cycles`' (every import, lazy ones and `TYPE_CHECKING` too).
There are no exceptions: a check `RunConfig.validate` needs lives in layer 0, and a figure types what it reads with a
`Protocol` of its own rather than importing a clock's class.
"""

from __future__ import annotations

from pathlib import Path

import edit_lab

from .test_import_cycles import import_graph

#: The course is found beside the library, not imported: the library's tests run without edit_course.
LIBRARY = Path(edit_lab.__file__).parent
COURSE = LIBRARY.parent / "edit_course"
ENTRY = "entry"
FOLDERS = {"config": 0, "rules": 0, "records": 1, "core": 2, "train": 3, "clock": 4, "runtime": 5, "viz": 6, "ui": 7}
#: Layer 6 draws records: it may import these layers only.
VIZ_MAY_IMPORT = {0, 1, 6}

#: Old module names kept importable for the shipped notebooks whose nbval references pin them (old → new); each
#: only re-exports the new module and counts as an entry point. Delete one when its notebook's reference is refreshed.
ALIASES = {"edit_lab.model": "edit_lab.core.model"}


def layer(module: str) -> float | str:
    """The layer of a module of edit_lab or edit_course (ENTRY for the entry points)."""
    parts = module.split(".")
    if parts[0] == "edit_course":
        return 8
    if module == "edit_lab":  # the public API (RunConfig, launch, Run): the processes' layer
        return 5
    if module in ALIASES:
        return ENTRY
    if len(parts) == 1 or parts[1] in ("__main__", "tools"):
        return ENTRY
    return FOLDERS.get(parts[1], 0)


def lab_graph() -> dict[str, set[str]]:
    """Module → the modules of edit_lab and edit_course it imports (test_import_cycles' rule, both packages; the
    library alone where the course is not beside it, as in an installed package)."""
    return import_graph(LIBRARY, "edit_lab", *([(COURSE, "edit_course")] if COURSE.is_dir() else []))


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every edge that goes to a higher layer, into an entry point, or (from viz) beyond the records."""
    bad = set()
    for a, deps in graph.items():
        la = layer(a)
        for b in deps:
            lb = layer(b)
            if lb == ENTRY:
                if la != ENTRY:
                    bad.add((a, b))
            elif la == 6 and lb not in VIZ_MAY_IMPORT:
                bad.add((a, b))
            elif la != ENTRY and lb > la:
                bad.add((a, b))
    return bad


def test_every_import_points_down():
    found = upward(lab_graph())
    assert not found, "imports that go up a layer (tests/unit/test_layers.py):\n" + "\n".join(
        f"  {a} (layer {layer(a)}) → {b} (layer {layer(b)})" for a, b in sorted(found))


def test_the_library_never_imports_the_course():
    graph = lab_graph()
    into = [(a, b) for a, deps in graph.items() if a.startswith("edit_lab") for b in deps if b.startswith("edit_course")]
    assert not into, into


def oracle_imports(path: Path) -> list[str]:
    """Every import of edit_oracles in one file, by string too (test_tests_apart's `imports_of`)."""
    from tests.unit.test_tests_apart import imports_of

    return imports_of(path, lambda n: n.split(".")[0] == "edit_oracles")


def test_the_library_never_imports_the_oracles():
    """edit_oracles (torchft's DiLoCo, what the lab is checked against) sits apart: the library that it checks, and
    that runs without torchft, never imports it (any import, anywhere in a file)."""
    into = {str(p.relative_to(LIBRARY.parent)): hits for p in sorted(LIBRARY.rglob("*.py")) if (hits := oracle_imports(p))}
    assert not into, into


def test_the_oracle_check_sees_every_kind_of_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import edit_lab\ndef f():\n    from edit_oracles.torchft_diloco import torchft_diloco\n"
                 "import importlib\nimportlib.import_module('edit_oracles')\nimport edit_oracles.torchft_diloco as t\n")
    assert oracle_imports(f) == ["3: edit_oracles.torchft_diloco", "5: edit_oracles", "6: edit_oracles.torchft_diloco"]


def test_every_module_has_a_layer():
    """A new folder under edit_lab/ gets a layer here before it lands (else it would count as layer 0)."""
    folders = {p.name for p in LIBRARY.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(FOLDERS) | {"tools"}, folders - set(FOLDERS)


def test_an_upward_import_fails_the_rule():
    """The rule itself: a core module importing a figure, or the library importing the course, is caught."""
    graph = lab_graph()
    graph["edit_lab.core.penalty"] = graph["edit_lab.core.penalty"] | {"edit_lab.viz.timeline"}
    graph["edit_lab.records.run"] = graph["edit_lab.records.run"] | {"edit_course.verdict"}
    graph["edit_lab.viz.timeline"] = graph["edit_lab.viz.timeline"] | {"edit_lab.core.comm"}
    found = upward(graph)
    assert found == {("edit_lab.core.penalty", "edit_lab.viz.timeline"), ("edit_lab.records.run", "edit_course.verdict"),
                     ("edit_lab.viz.timeline", "edit_lab.core.comm")}, found


def test_an_upward_import_in_a_file_fails_the_check(tmp_path):
    """The whole check, from source files: a layer-0 module importing the core inside a function, a figure
    importing a clock's class only for a type annotation, and the course's old alias used by the library are
    each an upward edge."""
    files = {
        "__init__.py": "",
        "sizes.py": "def f():\n    from edit_lab.core.mesh import Mesh\n    return Mesh\n",
        "model.py": "from edit_lab.core.mesh import *\n",  # an alias (ALIASES): an entry point
        "core/__init__.py": "",
        "core/mesh.py": "from edit_lab import model\nclass Mesh: ...\n",
        "clock/__init__.py": "",
        "clock/sim.py": "class Prediction: ...\n",
        "viz/__init__.py": "",
        "viz/fig.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from edit_lab.clock.sim import Prediction\n"),
    }
    root = tmp_path / "edit_lab"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = upward(import_graph(root, "edit_lab"))
    assert found == {("edit_lab.sizes", "edit_lab.core"), ("edit_lab.sizes", "edit_lab.core.mesh"),
                     ("edit_lab.core.mesh", "edit_lab.model"),
                     ("edit_lab.viz.fig", "edit_lab.clock"), ("edit_lab.viz.fig", "edit_lab.clock.sim")}, found


def test_the_aliases_only_re_export():
    """An alias is one star import of its new module, so it can never hold code of its own."""
    for old, new in ALIASES.items():
        path = LIBRARY.joinpath(*old.split(".")[1:]).with_suffix(".py")
        code = [line for line in path.read_text().split('"""')[-1].splitlines() if line.strip()]
        assert code == [f"from {new} import *  # noqa: F401,F403"], (path, code)
