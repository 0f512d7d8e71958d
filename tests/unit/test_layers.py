"""Every import between the lab's layers points down: the library never imports the course, the core never
imports a clock, a process or a figure.

The layers, lowest first (a module may import its own layer and the ones below it):

| layer | what | folders |
|---|---|---|
| 0 | torch-free facts (the knobs, the methods' names, the model shapes, when the replicas talk) and the reader's hooks | `edit_lab/{config,registry,sizes,protocol,hooks}.py` |
| 1 | the run records | `edit_lab/records/` |
| 1.5 | the model being trained: a small Llama, cut into sync units | `edit_lab/model.py` |
| 2 | the core: model, collectives, sharding, the methods, penalty, outer step | `edit_lab/core/` |
| 3 | one rank's training loop | `edit_lab/train/` |
| 4 | time without this machine's clock | `edit_lab/clock/` |
| 5 | processes | `edit_lab/runtime/` |
| 6 | figures of records (L0 and L1 only: a figure draws records, it runs nothing) | `edit_lab/viz/` |
| 7 | widgets | `edit_lab/ui/` |
| 8 | the course | `edit_course/` |

`edit_lab/__main__.py` and `edit_lab/tools/` are entry points: they may import any layer, and no layer imports them.
`edit_lab/__init__.py` is the public API (`RunConfig`, `launch`, `Run`): it counts as layer 5, so the widgets and
the course may import it. The graph is `test_import_cycles`' (every import, lazy ones and `TYPE_CHECKING` too).
`ALLOWED` lists the exceptions, each with its reason; it may only shrink (`test_the_exceptions_are_still_needed`).
"""

from __future__ import annotations

from pathlib import Path

import edit_course
import edit_lab

from .test_import_cycles import import_graph

LIBRARY, COURSE = Path(edit_lab.__file__).parent, Path(edit_course.__file__).parent
ENTRY = "entry"
FOLDERS = {"records": 1, "core": 2, "train": 3, "clock": 4, "runtime": 5, "viz": 6, "ui": 7}
#: Layer 6 draws records: it may import these layers only.
VIZ_MAY_IMPORT = {0, 1, 6}

#: (importer, imported): the upward edges that stay, with why. This list may only shrink.
ALLOWED: dict[tuple[str, str], str] = {
    # RunConfig.validate refuses a configuration before any process starts, with the check of the layer that
    # owns the rule, imported inside the method (torch stays out of `import edit_lab.config`):
    ("edit_lab.config", "edit_lab.core"): "the package of the one below",
    ("edit_lab.config", "edit_lab.core.penalty"): "PenaltyConfig checks the penalty's fields",
    ("edit_lab.config", "edit_lab.train"): "the package of the one below",
    ("edit_lab.config", "edit_lab.train.data"): "check_corpus_file checks a corpus file before launch",
    ("edit_lab.viz.preview", "edit_lab.clock"): "the package of the two below",
    ("edit_lab.viz.preview", "edit_lab.clock.sim"): "the package of the one below",
    ("edit_lab.viz.preview", "edit_lab.clock.sim.predict"): "the preview figure draws the simulator's Prediction, "
    "the record of a run that did not run",
}


def layer(module: str) -> float | str:
    """The layer of a module of edit_lab or edit_course (ENTRY for the entry points)."""
    parts = module.split(".")
    if parts[0] == "edit_course":
        return 8
    if module == "edit_lab":  # the public API (RunConfig, launch, Run): the processes' layer
        return 5
    if module == "edit_lab.model":
        return 1.5
    if len(parts) == 1 or parts[1] in ("__main__", "tools"):
        return ENTRY
    return FOLDERS.get(parts[1], 0)


def lab_graph() -> dict[str, set[str]]:
    """Module → the modules of edit_lab and edit_course it imports (test_import_cycles' rule, both packages)."""
    return import_graph(LIBRARY, "edit_lab", (COURSE, "edit_course"))


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
    found = upward(lab_graph()) - set(ALLOWED)
    assert not found, "imports that go up a layer (tests/unit/test_layers.py):\n" + "\n".join(
        f"  {a} (layer {layer(a)}) → {b} (layer {layer(b)})" for a, b in sorted(found))


def test_the_exceptions_are_still_needed():
    """An exception whose import is gone is taken off the list, so the list only shrinks."""
    stale = set(ALLOWED) - upward(lab_graph())
    assert not stale, f"no longer needed, remove from ALLOWED: {sorted(stale)}"


def test_the_library_never_imports_the_course():
    graph = lab_graph()
    into = [(a, b) for a, deps in graph.items() if a.startswith("edit_lab") for b in deps if b.startswith("edit_course")]
    assert not into, into


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
    found = upward(graph) - set(ALLOWED)
    assert found == {("edit_lab.core.penalty", "edit_lab.viz.timeline"), ("edit_lab.records.run", "edit_course.verdict"),
                     ("edit_lab.viz.timeline", "edit_lab.core.comm")}, found
