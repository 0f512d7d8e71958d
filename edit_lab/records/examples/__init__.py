"""Small example runs shipped with the package, so a panel can draw before its first launch.

Made by `python -m edit_lab.tools.make_examples` with the lab's default configuration (2 shards ×
2 replicas, nano model, replica 1 twice as slow): the run directories without `model.pt` and
`trace.json`, their event files gzipped. They are real runs, recorded on an idle 2-core machine.
The capstone's three mystery runs (notebook 08) are the course's: edit_course/mysteries.
"""

from __future__ import annotations

from pathlib import Path

from edit_lab.records.run import Run

HERE = Path(__file__).resolve().parent
NAMES = ("sync-straggler", "edit-straggler", "aedit-straggler")


def example_runs(names: tuple[str, ...] = NAMES) -> list[Run]:
    """The shipped runs that exist, in order (an empty list in a checkout where they were never made)."""
    return [Run(HERE / n) for n in names if (HERE / n / "config.json").exists()]
