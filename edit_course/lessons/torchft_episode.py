"""Notebook 10's episode beside torchft's DiLoCo: the same death, the lab's survival against torchft's.

Why here and not in a test only: issue 50 asks the notebook to show torchft's behaviour on the same episode where
torchft runs. The episode is tests/distributed/test_torchft_survive.py's (3 replicas × 1 shard of nano, DiLoCo,
H = 3, W = 0 as torchft has no warm-up, 12 steps, replica 1 gone at the start of its step 5): the lab on real
processes with `survive=True`, torchft on threads (`edit_oracles.torchft_diloco`, which cannot SIGKILL a thread, so the
leaver leaves by torchft's own calls). What is compared is what needs no tap into the ranks: which rounds each
side commits (torchft's `rounds`, the lab's syncs.jsonl) and the lab's final model against torchft's survivors'
last anchors. The test compares every sync's θ, anchors and momenta through a tap.

`available()` says whether torchft imports here (and why not); `side_by_side(out, mode)` runs both.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edit_lab import RunConfig, launch
from edit_lab.records.events import read_jsonl

#: The dead replica, its step (it dies at the start of it) and the survivors.
DEAD, STEP, SURVIVORS = 1, 5, (0, 2)


def available() -> tuple[bool, str]:
    """(True, version) where torchft imports, else (False, the reason)."""
    try:
        import torchft  # noqa: F401
        from importlib.metadata import version

        return True, f"torchft {version('torchft')}"
    except Exception as e:  # an ImportError, or a native library missing on this platform
        return False, f"torchft does not import here ({type(e).__name__}: {e}); it runs on Linux"


def episode_config(mode: str, out: Path) -> RunConfig:
    """The lab's side of the episode (`mode`: survive_on_failure, "discard" or "retry")."""
    return RunConfig(method="diloco", shards=1, replicas=3, model="nano", steps=12, warmup_steps=0,
                     sync_interval=3, seq_len=32, batch_size=4, eval_every=0, eval_batches=2, progress=False,
                     survive=True, survive_on_failure=mode, fault_replica=DEAD, fault_replica_step=STEP,
                     timeout_s=20, out=str(out))


def side_by_side(out: Path, mode: str = "discard") -> dict[str, Any]:
    """Run the episode on both sides. Returns plain data: per sync step, the lab's record kinds of replica 0 and
    torchft's (committed, participants) of each survivor, and max |Δ| of the lab's final model against each
    survivor's last torchft anchors. With `discard` torchft's leaver joins the failed sync's quorum (its commit
    fails, the round is dropped); with `retry` it leaves in no quorum (the survivors commit as two)."""
    from edit_oracles.torchft_diloco import torchft_diloco

    run = launch(episode_config(mode, Path(out) / f"lab_{mode}"), overwrite=True)
    with _quiet(Path(out) / f"torchft_{mode}.log"):
        ref = torchft_diloco(run.config, 1, leave=(DEAD, STEP), leave_in_quorum=(mode == "discard"))
    lab: dict[int, list[str]] = {}
    for row in read_jsonl(run.path / "syncs.jsonl"):
        if row.get("kind") in ("sync", "discard"):
            lab.setdefault(int(row["step"]), []).append(row["kind"])
    end = run.state_dict()
    theirs = {r: [(x["step"], x["committed"], x["participants"]) for x in ref[r]["rounds"]] for r in SURVIVORS}
    diff = 0.0
    for r in SURVIVORS:
        anchors = ref[r]["rounds"][-1]["anchors"][0]  # one fragment: "i.name" over the units' ModuleList
        names = _lab_names(run.config.data.model)
        diff = max(diff, max(float((end[names[k]] - v).abs().max()) for k, v in anchors.items()))
    return {"mode": mode, "lab": lab, "torchft": theirs, "final_max_diff": diff}


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """torchft's own log (its Rust lighthouse and managers write to fd 2, its Python side logs every failed
    collective with a traceback: hundreds of lines per episode) goes to `log`, not into the notebook; an error
    still raises. Native threads that log after the managers' shutdown get half a second to finish."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "wb") as f:
        os.dup2(f.fileno(), 2)
        logging.disable(logging.ERROR)
        try:
            yield
        finally:
            time.sleep(0.5)
            logging.disable(logging.NOTSET)
            os.dup2(saved, 2)
            os.close(saved)


def _lab_names(model: str) -> dict[str, str]:
    """torchft's fragment names ("i.name", unit i of the ModuleList) → the lab's full parameter names."""
    from edit_lab.core.model import build_model

    units = build_model(model, 0).units()
    prefixes = ["root."] + [f"blocks.{i}." for i in range(len(units) - 1)]
    return {f"{i}.{n}": prefixes[i] + n for i, u in enumerate(units) for n, _ in u.named_parameters()}
