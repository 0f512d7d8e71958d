"""The simulator checked against the virtual clock: the same collectives, per rank, and the same timeline.

The simulator (`programs.py`) is a second, time-only copy of every method; the virtual clock
(`virtual.py`) runs the methods' own code on the same `Costs`. Both are deterministic, so for one
configuration and one set of costs they must agree exactly, and any difference is a place where the
time-only copy departs from the methods (issue 24, item 5). `compare(run)` simulates a virtual run's
configuration on the very costs it ran on (`virtual.costs_for`) and returns what differs:

- per rank, the ordered sequence of its cross-replica collectives: (step, kind, group, unit, bytes);
- the timeline: each such collective's issue and completion, each step's end (metrics.jsonl, one row
  per replica: the latest of its ranks) and the run's end (`train_end_s`, `wall_s`), as the largest
  difference relative to the run's length.

Used by `tests/distributed/test_sim_matches_virtual.py`; imports torch only through the virtual run it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import events_all_shards
from edit_lab.clock.sim.predict import Prediction, simulate
from edit_lab.records.events import is_cross_replica, read_jsonl

if TYPE_CHECKING:
    from edit_lab.config import RunConfig
    from edit_lab.records.run import Run

#: What identifies one collective in a rank's sequence (its times are the timeline's business).
Key = tuple[int, str, str, int | None, int]


@dataclass
class Crosscheck:
    """What the simulator and a virtual run of one configuration say, side by side (virtual first)."""

    config: "RunConfig"
    costs: Costs
    prediction: Prediction
    sequences: dict[int, tuple[list[Key], list[Key]]]  # rank: (virtual's, simulator's)
    times: dict[str, tuple[float, float]] = field(default_factory=dict)  # what: (virtual's, simulator's)
    length_s: float = 0.0  # the virtual run's end: what the timeline's error is relative to

    @property
    def same_collectives(self) -> bool:
        return all(v == s for v, s in self.sequences.values())

    def first_difference(self) -> str | None:
        """Where the sequences first part, in words (None: they do not), for an assertion's message."""
        for rank, (v, s) in sorted(self.sequences.items()):
            for i in range(max(len(v), len(s))):
                a, b = (v[i] if i < len(v) else None), (s[i] if i < len(s) else None)
                if a != b:
                    return f"rank {rank}, collective #{i}: virtual {a}, simulator {b} ({len(v)} against {len(s)})"
        return None

    @property
    def timeline_error(self) -> float:
        """The largest |virtual − simulator| over every compared time, relative to the run's length."""
        worst = max((abs(v - s) for v, s in self.times.values()), default=0.0)
        return worst / self.length_s if self.length_s > 0 else worst

    def worst_time(self) -> str:
        """The time that differs most, in words."""
        if not self.times:
            return "no time compared"
        what, (v, s) = max(self.times.items(), key=lambda kv: abs(kv[1][0] - kv[1][1]))
        return f"{what}: virtual {v:.6f} s, simulator {s:.6f} s (run length {self.length_s:.6f} s)"


# ------------------------------------------------------------------------------------ the two sides
def rank_collectives(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One rank's cross-replica collectives in issue order.

    Events are written when a collective completes, not when it is issued, so they are sorted by their
    issue time `t0`; a group serves its collectives one at a time, in issue order, so the completion `t1`
    breaks the ties of collectives issued together (EDiT's prefetch issues two units at one moment)."""
    mine = [e for e in events if is_cross_replica(e)]
    return sorted(mine, key=lambda e: (e["t0"], e["t1"]))


def key(e: dict[str, Any]) -> Key:
    return (int(e["step"]), e["kind"], e["group"], e["unit"], int(e["bytes"] or 0))


def virtual_collectives(run: "Run") -> dict[int, list[dict[str, Any]]]:
    """Per rank, the virtual run's collectives, read from its events-rank{r}.jsonl."""
    from edit_lab.records import rundir

    return {r: rank_collectives(read_jsonl(run.path / rundir.events_file(r))) for r in range(run.config.world_size)}


def simulated_collectives(pred: Prediction) -> dict[int, list[dict[str, Any]]]:
    """Per rank, the simulator's collectives (a replica's ranks are copies of its shard-0 rank there)."""
    cfg = pred.config
    events = events_all_shards(pred.events, cfg.shards)
    return {r: rank_collectives([e for e in events if e["rank"] == r]) for r in range(cfg.world_size)}


def step_ends(rows: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """(replica, step): the end of that step, from metrics rows of kind "train"."""
    return {(int(m["replica"]), int(m["step"])): float(m["t"]) for m in rows if m["kind"] == "train"}


# ------------------------------------------------------------------------------------ the comparison
def compare(run: "Run", costs: Costs | None = None) -> Crosscheck:
    """Simulate the virtual run `run`'s configuration on its costs (default: `virtual.costs_for`) and compare.

    A time present on one side only (a step one side never trained, a collective only one issued) is
    left to the sequences and to the step counts, which the caller asserts first."""
    from edit_lab.clock.virtual import costs_for

    cfg = run.config
    costs = costs_for(cfg) if costs is None else costs
    pred = simulate(cfg, costs)
    virt, sim = virtual_collectives(run), simulated_collectives(pred)
    sequences = {r: ([key(e) for e in virt[r]], [key(e) for e in sim[r]]) for r in range(cfg.world_size)}
    times: dict[str, tuple[float, float]] = {}
    for r in range(cfg.world_size):
        for i, (a, b) in enumerate(zip(virt[r], sim[r])):
            times[f"rank {r} collective #{i} {a['kind']} issued"] = (a["t0"], b["t0"])
            times[f"rank {r} collective #{i} {a['kind']} complete"] = (a["t1"], b["t1"])
    v_ends, s_ends = step_ends(run.metrics), step_ends(pred.metrics)
    for (replica, step) in sorted(v_ends.keys() & s_ends.keys()):
        times[f"replica {replica} step {step} end"] = (v_ends[(replica, step)], s_ends[(replica, step)])
    for name in ("train_end_s", "wall_s"):
        times[name] = (float(run.summary[name]), float(pred.summary[name]))
    return Crosscheck(cfg, costs, pred, sequences, times, length_s=float(run.summary["train_end_s"]))


def steps_per_replica(run: "Run", pred: Prediction) -> tuple[dict[str, int], dict[str, int]]:
    """(virtual's, simulator's) steps trained per replica: with a time budget, what the timeline decided."""
    steps = lambda s: {r: int(v["steps"]) for r, v in s["per_replica"].items()}  # noqa: E731
    return steps(run.summary), steps(pred.summary)
