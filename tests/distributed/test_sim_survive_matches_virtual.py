"""The preview simulator against the virtual clock through a replica's death and its replacement (issue 50, item 7).

The issue's episode (nano, one rank per replica, τ 5, 60 steps, replica 1 killed at the start of step 20, a
replacement at the first sync at or after 40) on the virtual clock, which runs the real `Survival` and methods
(`clock/survive_virtual.py`), and in the simulator (`sim/survive.py`, `sim/surviving.py`) on the same costs: per rank
the same collectives (the dead life's are lost on both sides, the retried sync's are in the new view's group with its
ring bytes), every collective's issue and completion, every step's end, the run's end, and the views with the times
they were published, equal to float rounding (`MEASURED_TOL`, as `test_sim_matches_virtual.py`). Also a hang
(detection after `timeout_s`, the launcher's settle), `discard`, a death inside EDiT's layer-wise sync, stragglers
and random pauses, replica 0's death, and a death before the closing sync with no replacement.

The donor's state is the one input the virtual run measures that the costs do not hold (`torch.save` of the state:
its bytes): it is read from the run's `transfer` record and handed to the simulator as `Costs.state_bytes`, exactly as
`calibrate` would from a run that survived a death.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from edit_lab import launch
from edit_lab.clock.sim.predict import simulate
from edit_lab.clock.virtual import costs_for
from edit_lab.config import ConfigError
from edit_lab.records.events import read_jsonl
from tests.distributed.sim_crosscheck import compare, steps_per_replica
from tests.distributed.test_sim_matches_virtual import MEASURED_TOL
from tests.helpers import small

pytestmark = pytest.mark.slow

EPISODE = dict(shards=1, steps=60, warmup_steps=10, sync_interval=5, eval_every=10, survive=True, fault_replica=1,
               fault_replica_step=20, rejoin_step=40, clock="virtual", timeout_s=20)

CASES: dict[str, dict[str, Any]] = {
    **{f"{m}-kill-R{r}": dict(method=m, replicas=r) for m in ("sync", "diloco", "edit") for r in (2, 3)},
    **{f"{m}-hang-R3": dict(method=m, replicas=3, fault_replica_kind="hang", timeout_s=3.0)
       for m in ("sync", "diloco", "edit")},
    **{f"{m}-kill-discard-R3": dict(method=m, replicas=3, survive_on_failure="discard") for m in ("diloco", "edit")},
    "edit-hang-discard-R2-slow-link": dict(method="edit", replicas=2, fault_replica_kind="hang", timeout_s=3.0,
                                           survive_on_failure="discard", link_latency_ms=5.0, link_bandwidth_mb_s=50.0),
    # a death inside EDiT's layer-wise sync (`fault_replica_unit`): unit 1's transfer, prefetched, still lands
    "edit-inside-unit-1": dict(method="edit", replicas=3, fault_replica_unit=1),
    "edit-inside-unit-0-hang": dict(method="edit", replicas=3, fault_replica_unit=0, fault_replica_kind="hang",
                                    timeout_s=3.0),
    "edit-inside-unit-2-discard-R2": dict(method="edit", replicas=2, fault_replica_unit=2,
                                          survive_on_failure="discard"),
    # the StragglerLab's slowness with a death: a consistent straggler (the dead one, or a survivor), random pauses
    "sync-straggler-random-pauses": dict(method="sync", replicas=3, straggler_replicas=(2,), straggler_factor=2.0,
                                         random_pause_prob=0.3, random_pause_ms=20.0),
    "diloco-the-straggler-dies": dict(method="diloco", replicas=3, straggler_replicas=(1,), straggler_factor=2.0),
    "edit-straggler-slow-link": dict(method="edit", replicas=3, straggler_replicas=(2,), straggler_factor=2.0,
                                     link_latency_ms=5.0, link_bandwidth_mb_s=50.0),
    # replica 0 dies (the donor is then replica 1); a death before the closing sync, with no replacement (the dead
    # life's events stay, as its events file does)
    "diloco-replica-0-dies": dict(method="diloco", replicas=3, fault_replica=0),
    "diloco-before-the-closing-sync": dict(method="diloco", replicas=3, steps=58, fault_replica_step=57,
                                           rejoin_step=-1),
}


def _views(summary: dict[str, Any]) -> list[tuple[int, list[int], list[int], list[int], float]]:
    return [(v["view"], v["members"], v["joined"], v["died"], v["t"]) for v in summary["survival"]["views"]]


@pytest.mark.parametrize("case", CASES)
def test_the_simulator_follows_the_virtual_clock_through_a_death_and_a_join(tmp_path, case):
    cfg = small(out=str(tmp_path / "run"), **{**EPISODE, **CASES[case]})
    run = launch(cfg)
    joiner = [r["bytes"] for r in read_jsonl(run.path / "syncs.jsonl") if r["kind"] == "transfer" and r["side"] == "donor"]
    replaced = cfg.runtime.rejoin_step >= 0
    assert len(joiner) == replaced, "a replacement took a donor's state once"
    check = compare(run, dataclasses.replace(costs_for(run.config), state_bytes=joiner[0] if joiner else 0))
    assert check.same_collectives, check.first_difference()
    virt_steps, sim_steps = steps_per_replica(run, check.prediction)
    dead = str(cfg.trouble.fault_replica)  # the dead life's rows are lost, the replacement's kept
    assert virt_steps == sim_steps and virt_steps[dead] == (cfg.steps - 40 if replaced else 0)
    assert check.timeline_error <= MEASURED_TOL, check.worst_time()
    sim, virt = _views(check.prediction.summary), _views(run.summary)
    assert [v[:4] for v in sim] == [v[:4] for v in virt]
    assert all(abs(a[4] - b[4]) <= MEASURED_TOL * check.length_s for a, b in zip(sim, virt))


def test_a_departure_in_the_episode_shows(tmp_path):
    """Not blind: the same run simulated with the donor's state 1 MB heavier moves the replacement's first sync,
    and with it every later step, by 1 MB over the sync group's bandwidth."""
    run = launch(small(out=str(tmp_path / "run"), **{**EPISODE, "method": "diloco", "replicas": 3}))
    joiner = next(r["bytes"] for r in read_jsonl(run.path / "syncs.jsonl") if r["kind"] == "transfer")
    costs = dataclasses.replace(costs_for(run.config), state_bytes=joiner)
    assert compare(run, costs).timeline_error <= MEASURED_TOL
    heavier = compare(run, dataclasses.replace(costs, state_bytes=joiner + 10**6))
    virt, sim = heavier.times["train_end_s"]
    assert sim - virt == pytest.approx(1e6 / costs.sync_Bps, rel=1e-9)


@pytest.mark.parametrize("field, value", [("shards", 2), ("survive_min_replicas", 3)])
def test_what_the_simulator_cannot_model_is_refused_naming_the_field(field, value):
    cfg = small(**{**EPISODE, "clock": "wall", "method": "edit", "replicas": 3, field: value})
    with pytest.raises(ConfigError, match=f"{field}="):
        simulate(cfg, costs_for(small(clock="virtual", shards=cfg.shards, replicas=3)))


@pytest.mark.parametrize("method, more", [("diloco", "2@35"), ("edit", "1@40"), ("sync", "2@35")])
def test_the_simulator_follows_the_virtual_clock_through_two_deaths(tmp_path, method, more):
    """Two deaths in one run (`fault_replica_more`): replica 1 at 15 back at 25, then replica 2 at 35 back at 45, or
    replica 1's replacement dying at 40 (its second life) back at 50: the same views at the same times, the same
    collectives, each replica's steps."""
    cfg = small(out=str(tmp_path / "run"), **{**EPISODE, "method": method, "replicas": 3, "fault_replica_step": 15,
                                             "rejoin_step": 25, "fault_replica_more": more})
    run = launch(cfg)
    donors = [r["bytes"] for r in read_jsonl(run.path / "syncs.jsonl") if r["kind"] == "transfer" and r["side"] == "donor"]
    assert len(donors) == 2  # two replacements (EDiT's state grows with its detectors' history: the simulator charges the first's bytes)
    check = compare(run, dataclasses.replace(costs_for(run.config), state_bytes=donors[0]))
    assert check.same_collectives, check.first_difference()
    virt_steps, sim_steps = steps_per_replica(run, check.prediction)
    assert virt_steps == sim_steps
    # the second donor's state may differ by a few bytes (EDiT's detectors' history): the simulator, charging the
    # first's, is off after it by exactly their transfer time, and by nothing else
    departure = abs(donors[1] - donors[0]) / check.costs.sync_Bps / check.length_s
    assert check.timeline_error <= departure + MEASURED_TOL, check.worst_time()
    sim, virt = _views(check.prediction.summary), _views(run.summary)
    assert [v[:4] for v in sim] == [v[:4] for v in virt] and len(virt) == 5
