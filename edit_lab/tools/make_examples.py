"""Record the small example runs shipped in edit_lab/records/examples (see that package's docstring).

    python -m edit_lab.tools.make_examples
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from edit_lab.config import RunConfig, default_lab_config
from edit_lab.records import rundir
from edit_lab.records.examples import HERE
from edit_lab.runtime.launch import launch


def example_config(method: str) -> RunConfig:
    """The lab's default configuration with replica 1 twice as slow, trained for the same 4 s of wall clock
    by every method (edit-method.md §12): what every example run is made with."""
    return default_lab_config().replace(method=method, straggler_replicas=(1,), straggler_factor=2.0,
                                        time_budget=4.0, eval_every_s=1.0, sync_period=0.15)


def make(name: str, method: str) -> Path:
    cfg = example_config(method)
    dest = HERE / name
    with tempfile.TemporaryDirectory() as tmp:
        run = launch(cfg.replace(out=str(Path(tmp) / name)))
        rundir.ship(run.path, dest)
    conf = json.loads((dest / rundir.CONFIG).read_text())
    conf["out"] = f"edit_lab/records/examples/{name}"  # not the temporary folder it was recorded in
    (dest / rundir.CONFIG).write_text(json.dumps(conf, indent=2, sort_keys=True))
    return dest


def main() -> None:
    for name in ("sync-straggler", "edit-straggler", "aedit-straggler"):
        print(make(name, name.split("-")[0]))


if __name__ == "__main__":
    main()
