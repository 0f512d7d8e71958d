"""The straggler model: seeded, deterministic, the same on every rank, and pausing for what it says."""

from __future__ import annotations

import pytest

from edit_lab import RunConfig
from edit_lab.records.events import OWN_COMPUTE_KINDS, Clock, EventLog, own_compute_s
from edit_lab.train.stragglers import StragglerModel


def schedule(model: StragglerModel, replica: int, steps: int) -> list[float]:
    return [model.random_pause(step, replica) for step in range(steps)]


def test_from_config_maps_every_field():
    cfg = RunConfig(replicas=3, seed=7, straggler_replicas=(2,), straggler_factor=2.5, random_pause_prob=0.1,
                    random_pause_ms=40.0)
    m = StragglerModel.from_config(cfg)
    assert (m.seed, m.slow_replicas, m.factor, m.pause_prob, m.pause_s) == (7, (2,), 2.5, 0.1, 0.04)


def test_consistent_straggler_stretches_by_k_minus_one_times_compute():
    m = StragglerModel(seed=0, slow_replicas=(1,), factor=2.0)
    assert m.delay(5, 1, 0.030) == (pytest.approx(0.030), "consistent")
    assert m.delay(5, 0, 0.030) == (0.0, None)  # other replicas run at full speed
    m3 = StragglerModel(seed=0, slow_replicas=(0, 2), factor=3.0)
    assert m3.delay(0, 2, 0.010)[0] == pytest.approx(0.020)  # a k× slower step sleeps (k − 1)× its compute
    assert m3.delay(0, 1, 0.010)[0] == 0.0
    assert StragglerModel(slow_replicas=(0,), factor=1.0).delay(0, 0, 0.010) == (0.0, None)


def test_random_pauses_have_the_configured_probability_and_duration():
    m = StragglerModel(seed=3, pause_prob=0.1, pause_s=0.05)
    n = 4000
    pauses = schedule(m, 0, n)
    hits = [p for p in pauses if p > 0]
    assert set(hits) == {0.05}  # every pause is exactly the configured duration
    # binomial(4000, 0.1): mean 400, sd 19; 10 % of the mean is more than 2 sd
    assert abs(len(hits) - 0.1 * n) < 0.1 * 0.1 * n
    assert all(p == 0.0 for p in schedule(StragglerModel(seed=3, pause_prob=0.0, pause_s=0.05), 0, 200))
    assert all(p == 0.05 for p in schedule(StragglerModel(seed=3, pause_prob=1.0, pause_s=0.05), 0, 200))


def test_random_pauses_are_deterministic_per_seed_and_replica():
    a = StragglerModel(seed=11, pause_prob=0.2, pause_s=0.01)
    again = StragglerModel(seed=11, pause_prob=0.2, pause_s=0.01)
    assert schedule(a, 0, 500) == schedule(again, 0, 500)  # a rerun pauses at the same steps
    assert schedule(a, 1, 500) == schedule(again, 1, 500)
    assert schedule(a, 0, 500) != schedule(a, 1, 500)  # replicas draw independently
    other_seed = StragglerModel(seed=12, pause_prob=0.2, pause_s=0.01)
    assert schedule(a, 0, 500) != schedule(other_seed, 0, 500)
    # the draw of one step does not depend on which steps were asked before (stateless, resumable)
    assert [a.random_pause(s, 0) for s in (400, 3, 250)] == [schedule(a, 0, 500)[s] for s in (400, 3, 250)]


def test_both_kinds_add_up():
    m = StragglerModel(seed=5, slow_replicas=(0,), factor=2.0, pause_prob=1.0, pause_s=0.02)
    d, why = m.delay(4, 0, 0.01)
    assert d == pytest.approx(0.03) and why == "consistent+random"
    assert m.delay(4, 1, 0.01) == (pytest.approx(0.02), "random")


def test_pause_sleeps_the_planned_time_and_records_a_straggle_event():
    log = EventLog(rank=0, replica=1, shard=0, clock=Clock())
    m = StragglerModel(seed=0, slow_replicas=(1,), factor=2.0)
    slept = [m.pause(step, 1, 0.030, log) for step in range(5)]
    assert slept == [pytest.approx(0.030)] * 5
    events = [e for e in log.events if e["kind"] == "straggle"]
    assert len(events) == 5
    assert all(e["data"]["reason"] == "consistent" and e["data"]["planned"] == pytest.approx(0.030) for e in events)
    measured = [e["t1"] - e["t0"] for e in events]
    assert min(measured) >= 0.030  # sleep never returns early; how late it ends is this machine's load:
    # benchmarks/stragglers.py reports it (random_pause_overshoot)
    assert m.pause(0, 0, 0.030, log) == 0.0  # a fast replica neither sleeps nor records anything
    assert len([e for e in log.events if e["kind"] == "straggle"]) == 5


def test_own_compute_is_forward_backward_and_optimizer_never_a_collective_or_a_wait():
    """What a consistent straggler stretches, on a hand-built EDiT sync step: 0.5 + 0.5 + 1 + 0.25 s of own
    compute between an all-gather, a wait, a 2 s layer-wise sync, a reduce-scatter and a clip norm."""
    def ev(kind: str, t0: float, t1: float) -> dict:
        return {"kind": kind, "t0": t0, "t1": t1}

    step = [ev("all_gather", 0.0, 1.0), ev("wait", 0.1, 0.9), ev("compute_fwd", 1.0, 1.5), ev("sync_reduce", 1.5, 3.5),
            ev("outer_step", 3.5, 3.6), ev("compute_fwd", 3.6, 4.1), ev("compute_bwd", 4.1, 5.1),
            ev("reduce_scatter", 4.6, 5.6), ev("grad_norm", 5.6, 6.0), ev("optimizer", 6.0, 6.25)]
    assert own_compute_s(step) == pytest.approx(2.25)
    assert own_compute_s([e for e in step if e["kind"] not in OWN_COMPUTE_KINDS]) == 0.0
    m = StragglerModel(slow_replicas=(1,), factor=3.0)
    assert m.stretches(1) and not m.stretches(0) and not StragglerModel(slow_replicas=(1,)).stretches(1)
    assert m.delay(0, 1, own_compute_s(step))[0] == pytest.approx(2 * 2.25)  # the sync's 2 s are not stretched
