"""A diagnosis of the capstone's mysteries made only with the lab's public tools (analysis, Run).

The tests use it to show that each mystery can be solved from its files, and to feed notebook 08's
check cells the right answers; the notebook itself never imports it.
"""

from __future__ import annotations

import math
from typing import Any

from edit_course.lessons.capstone import BANDWIDTHS_MB_S, FACTORS, LINK_LATENCY_MS
from edit_lab.records import analysis
from edit_lab.records.run import Run


def straggle_factor(run: Run, replica: int) -> float:
    """1 + (consistent straggle time) / (forward-to-backward time) over the replica's steps, median: the factor
    by which its steps were stretched (stragglers.py stretches each step by (k − 1) × its compute)."""
    spans: dict[int, list[float]] = {}
    for e in run.events:
        if e["replica"] == replica and e["kind"] in ("compute_fwd", "compute_bwd"):
            s = spans.setdefault(e["step"], [math.inf, -math.inf])
            s[0], s[1] = min(s[0], e["t0"]), max(s[1], e["t1"])
    ratios = sorted(1 + (e["t1"] - e["t0"]) / (spans[e["step"]][1] - spans[e["step"]][0]) for e in run.events
                    if e["replica"] == replica and e["kind"] == "straggle" and e["data"]["reason"] == "consistent")
    return ratios[len(ratios) // 2] if ratios else 1.0


def straggle_seconds(run: Run) -> dict[int, float]:
    out = {rep: 0.0 for rep in range(run.config.replicas)}
    for e in run.events:
        if e["kind"] == "straggle" and e["shard"] == 0:
            out[e["replica"]] += e["t1"] - e["t0"]
    return out


def late_losses(run: Run) -> dict[int, float]:
    m = analysis.metrics_table(run)
    late = m[m["step"] >= m["step"].max() - 8]
    return {int(r): float(v) for r, v in late.groupby("replica")["loss"].mean().items()}


def link_bandwidth_mb_s(run: Run) -> float:
    """The link's rate from one rank's sync all-reduces, as a bound that load cannot push up: within a sync the
    link carries the units one at a time, so from the first unit's issue to the last one's completion it spent
    at least n·latency + Σ bytes / bandwidth. Anything else in that span (compute between units, a late peer,
    a rank that noticed a completion late on a busy machine) only lengthens it, so each sync gives a rate at
    most the link's; the largest over the syncs is the closest (one with the link busy throughout)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for e in run.events:
        if e["kind"] == "sync_reduce" and e["rank"] == 0:
            by_step.setdefault(e["step"], []).append(e)
    rates = []
    for evs in by_step.values():
        span = max(e["t1"] for e in evs) - min(e["t0"] for e in evs) - len(evs) * LINK_LATENCY_MS / 1e3
        if span > 0:
            rates.append(sum(e["bytes"] for e in evs) / span / 1e6)
    return max(rates) if rates else math.inf


def nearest(value: float, options: tuple[float, ...]) -> float:
    return min(options, key=lambda o: abs(math.log(value / o)))


def solve(run: Run) -> tuple[str, dict[str, Any]]:
    losses = late_losses(run)
    healthy = sorted(losses.values())[len(losses) // 2]
    worst = max(losses, key=losses.get)
    if losses[worst] > healthy + 0.5:  # random bytes: a loss near ln 256 against a learning model's
        return "bad_data", {"replica": worst}
    straggle = straggle_seconds(run)
    slow = max(straggle, key=straggle.get)
    rest = sorted(v for r, v in straggle.items() if r != slow)
    if straggle[slow] > 3 * rest[len(rest) // 2] + 0.1:  # random pauses hit every replica alike
        return "straggler", {"replica": slow, "factor": nearest(straggle_factor(run, slow), FACTORS)}
    return "slow_link", {"bandwidth_mb_s": nearest(link_bandwidth_mb_s(run), BANDWIDTHS_MB_S)}
