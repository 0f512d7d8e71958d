"""`Run`: a run directory loaded back into Python, the input of every table and figure.

The run directory (its layout: rundir.py) is the only thing the parent process reads, so a run started from a notebook,
the CLI, a test or torchrun on two machines looks the same here.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

from edit_lab.config import RunConfig
from edit_lab.records import rundir
from edit_lab.records.events import read_jsonl
from edit_lab.records.overlap import Overlap


class Run:
    """Lazy accessors over one run directory (plain lists of dicts; `analysis` makes tables of them)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not (self.path / rundir.CONFIG).exists():
            raise FileNotFoundError(f"{self.path} is not a run directory (no {rundir.CONFIG})")

    def __repr__(self) -> str:
        s = self.summary if (self.path / rundir.SUMMARY).exists() else {}
        return (f"Run({str(self.path)!r}, method={self.config.method}, {self.config.shards}×{self.config.replicas}, "
                f"val_loss={s.get('final_val_loss')})")

    @cached_property
    def config(self) -> RunConfig:
        return RunConfig.load(self.path / rundir.CONFIG)

    @cached_property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.path / rundir.SUMMARY).read_text())

    @cached_property
    def metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / rundir.METRICS)

    @cached_property
    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for rank in range(self.config.world_size):
            out.extend(read_jsonl(self.path / rundir.events_file(rank)))
        return out

    @cached_property
    def overlap(self) -> Overlap:
        """Hidden / exposed / other of every collective of the run (overlap.py's one definition)."""
        return Overlap(self.events)

    @cached_property
    def penalty(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / rundir.PENALTY)

    @cached_property
    def syncs(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / rundir.SYNCS)

    def train_losses(self, replica: int | None = None) -> list[tuple[int, float]]:
        rows = [m for m in self.metrics if m["kind"] == "train" and (replica is None or m["replica"] == replica)]
        if replica is None:  # mean over replicas per step
            by: dict[int, list[float]] = {}
            for m in rows:
                by.setdefault(m["step"], []).append(m["loss"])
            return [(s, sum(v) / len(v)) for s, v in sorted(by.items())]
        return [(m["step"], m["loss"]) for m in rows]

    def val_losses(self) -> list[tuple[int, float]]:
        return [(m["step"], m["val_loss"]) for m in self.metrics if m["kind"] == "eval"]

    def state_dict(self) -> dict[str, Any]:
        import torch

        return torch.load(self.path / rundir.MODEL, weights_only=True)

    def events_of(self, kind: str, rank: int | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind and (rank is None or e["rank"] == rank)]
