"""Simulated stragglers in real runs: the configured pauses, at the same steps in every rerun.

Two launches of the same configuration (sync, 2 replicas): replica 1 is a consistent 2× straggler and
every replica pauses 50 ms with probability 0.25 per step.
"""

from __future__ import annotations

import pytest

from edit_lab import launch
from edit_lab.train.stragglers import StragglerModel
from tests.distributed import CLOCK_SKEW_S
from tests.helpers import small

pytestmark = pytest.mark.slow

PAUSE_S, PROB = 0.05, 0.25


@pytest.fixture(scope="module")
def reruns(tmp_path_factory):
    base = tmp_path_factory.mktemp("stragglers")
    cfg = small(method="sync", shards=1, replicas=2, steps=16, seed=3, straggler_replicas=(1,), straggler_factor=2.0,
                random_pause_prob=PROB, random_pause_ms=PAUSE_S * 1e3)
    return cfg, [launch(cfg.replace(out=str(base / f"run{i}"))) for i in range(2)]


def _pattern(run) -> list[tuple[int, int, str]]:
    return sorted((e["replica"], e["step"], e["data"]["reason"]) for e in run.events_of("straggle"))


def test_random_pauses_fall_where_the_seeded_model_says(reruns):
    cfg, (run, _) = reruns
    model = StragglerModel.from_config(cfg)
    for replica in range(cfg.replicas):
        expected = [s for s in range(cfg.steps) if model.random_pause(s, replica) > 0]
        got = [e["step"] for e in run.events_of("straggle")
               if e["replica"] == replica and "random" in e["data"]["reason"]]
        assert got == expected
    assert any("random" in r for _, _, r in _pattern(run))  # the seed does produce pauses in 16 × 2 draws
    # replica 0 is no consistent straggler: it pauses only at its random steps; replica 1 at every step
    assert {s for r, s, _ in _pattern(run) if r == 1} == set(range(cfg.steps))
    assert all(reason == "random" for r, _, reason in _pattern(run) if r == 0)


def test_reruns_with_the_same_seed_pause_at_the_same_steps(reruns):
    cfg, (first, second) = reruns
    assert _pattern(first) == _pattern(second)
    planned = [[(e["replica"], e["step"], e["data"]["planned"]) for e in sorted(run.events_of("straggle"),
               key=lambda e: (e["replica"], e["step"])) if e["replica"] == 0] for run in (first, second)]
    assert planned[0] == planned[1]  # replica 0's pauses are purely random: the same to the bit


def test_pauses_last_what_was_configured(reruns):
    cfg, runs = reruns
    for run in runs:
        events = run.events_of("straggle")
        random_only = [e for e in events if e["data"]["reason"] == "random"]
        assert random_only and all(e["data"]["planned"] == PAUSE_S for e in random_only)
        measured = [e["t1"] - e["t0"] for e in events]
        assert all(m >= e["data"]["planned"] * 0.999 for m, e in zip(measured, events))  # never shorter
        # and never longer than the step it stretched (how close a pause comes to its plan is the
        # machine's scheduling, not the model's: a busy machine takes the core from a spinning straggler)
        steps = {(m["replica"], m["step"]): m for m in run.metrics if m["kind"] == "train"}
        assert all(e["t1"] - e["t0"] <= steps[(e["replica"], e["step"])]["dt"] for e in events)
        # the consistent straggler spins (k − 1) × its own measured compute: at least the compute spans
        # of its step, at most the step itself
        for e in events:
            if e["replica"] != 1:
                continue
            extra = PAUSE_S if "random" in e["data"]["reason"] else 0.0
            compute = sum(c["t1"] - c["t0"] for c in run.events if c["rank"] == e["rank"] and c["step"] == e["step"]
                          and c["kind"] in ("compute_fwd", "compute_bwd"))
            assert compute * 0.99 <= e["data"]["planned"] - extra <= steps[(1, e["step"])]["dt"]


def test_a_synchronous_run_goes_at_the_pace_of_its_slowest_replica(reruns):
    """Who waited for whom, from the recorded events: the gradient all-reduce a replica issued next after a
    pause completed, on the other replica too, only once that pause was over, so each replica's pauses
    show up as the other's waiting, and no step of one replica ends before the other's pause."""
    cfg, (run, _) = reruns
    per = run.summary["per_replica"]
    assert per["0"]["steps"] == per["1"]["steps"] == cfg.steps
    rows = {(m["replica"], m["step"]): m for m in run.metrics if m["kind"] == "train"}
    reduces = run.events_of("grad_all_reduce")
    first_done: dict[tuple[int, int], float] = {}  # (replica, step) -> its first gradient all-reduce to complete
    for e in reduces:
        key = (e["replica"], e["step"])
        first_done[key] = min(first_done.get(key, e["t1"]), e["t1"])
    pauses = run.events_of("straggle")
    assert {p["replica"] for p in pauses if p["data"]["planned"] >= PAUSE_S} == {0, 1}  # the seed: both pause 50 ms
    checked = 0
    for p in pauses:
        after = [e["step"] for e in reduces if e["replica"] == p["replica"] and e["t0"] >= p["t1"]]
        if not after:
            continue  # the run's last pause, with no all-reduce after it
        other = (1 - p["replica"], min(after))
        # (the ranks' clocks start a barrier apart: a few milliseconds, against a 50 ms pause or a step's compute)
        assert first_done[other] >= p["t1"] - CLOCK_SKEW_S, (p, first_done[other])
        assert rows[other]["t"] >= p["t1"] - CLOCK_SKEW_S
        checked += 1
    assert checked >= len(pauses) - cfg.replicas
