"""Edges of deaths on the virtual clock and in the simulator (clock/survive_virtual.py, clock/sim/survive.py; issue
50's edge review): R = 4…8, the last replica, a death at step 0 (sync: no warm-up) and at the last step, EDiT with
τ = 1, a death at the first step after the warm-up (one in it is refused), a replacement asked for at the last step.
On each, the virtual run (the real `Survival`) and the simulator agree: the same collectives, the same times to
float rounding, the same views and steps per replica, whose values are asserted too. nano, 20 steps: seconds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from edit_lab import ConfigError, launch
from edit_lab.clock.virtual import costs_for
from edit_lab.records.events import read_jsonl
from tests.distributed.sim_crosscheck import compare, steps_per_replica
from tests.distributed.test_sim_matches_virtual import MEASURED_TOL
from tests.helpers import small

EDGE = dict(shards=1, steps=20, warmup_steps=4, sync_interval=4, eval_every=0, survive=True, fault_replica=1,
            fault_replica_step=9, rejoin_step=14, clock="virtual", timeout_s=20)

ALL = lambda r: list(range(r))  # noqa: E731
CASES: dict[str, tuple[dict[str, Any], list[list[int]], dict[str, int]]] = {
    # case: (changes, the views' members, steps each replica's surviving rows hold)
    "edit-R5": (dict(method="edit", replicas=5), [ALL(5), [0, 2, 3, 4], ALL(5)],
                {"0": 20, "1": 4, "2": 20, "3": 20, "4": 20}),
    "edit-R8-last-replica": (dict(method="edit", replicas=8, fault_replica=7), [ALL(8), ALL(7), ALL(8)],
                             {**{str(r): 20 for r in range(7)}, "7": 4}),
    "sync-R4-step-0": (dict(method="sync", replicas=4, fault_replica_step=0, rejoin_step=3),
                       [ALL(4), [0, 2, 3], ALL(4)], {"0": 20, "1": 17, "2": 20, "3": 20}),
    "sync-R2-step-0-alone": (dict(method="sync", replicas=2, fault_replica_step=0, rejoin_step=-1), [[0, 1], [0]],
                             {"0": 20, "1": 0}),
    "edit-last-step": (dict(method="edit", replicas=3, fault_replica_step=19, rejoin_step=-1), [ALL(3), [0, 2]],
                       {"0": 20, "1": 0, "2": 20}),
    "diloco-last-step-replaced-at-the-closing-sync": (dict(method="diloco", replicas=3, fault_replica_step=19,
                                                           rejoin_step=19), [ALL(3), [0, 2], ALL(3)],
                                                      {"0": 20, "1": 0, "2": 20}),
    "edit-tau-1": (dict(method="edit", replicas=3, sync_interval=1), [ALL(3), [0, 2], ALL(3)],
                   {"0": 20, "1": 6, "2": 20}),
    "edit-tau-1-first-step-after-warm-up": (dict(method="edit", replicas=3, sync_interval=1, fault_replica_step=5,
                                                 rejoin_step=5), [ALL(3), [0, 2], ALL(3)], {"0": 20, "1": 15, "2": 20}),
}


@pytest.mark.parametrize("case", CASES)
def test_the_virtual_clock_and_the_simulator_agree_at_the_edges(tmp_path, case):
    changes, views, steps = CASES[case]
    run = launch(small(out=str(tmp_path / "run"), **{**EDGE, **changes}))
    donor = [r["bytes"] for r in read_jsonl(run.path / "syncs.jsonl") if r["kind"] == "transfer" and r["side"] == "donor"]
    assert [v["members"] for v in run.summary["survival"]["views"]] == views
    check = compare(run, dataclasses.replace(costs_for(run.config), state_bytes=donor[0] if donor else 0))
    assert check.same_collectives, check.first_difference()
    virt_steps, sim_steps = steps_per_replica(run, check.prediction)
    assert virt_steps == sim_steps == steps
    assert check.timeline_error <= MEASURED_TOL, check.worst_time()
    assert [v["members"] for v in check.prediction.summary["survival"]["views"]] == views


def test_a_death_in_the_warm_up_is_refused_before_launch(tmp_path):
    with pytest.raises(ConfigError, match=r"^fault_replica_step=4 is not allowed: a step after warmup_steps=4"):
        launch(small(out=str(tmp_path / "run"), **{**EDGE, "method": "edit", "replicas": 3, "fault_replica_step": 4}))
    assert not (tmp_path / "run").exists()


def test_below_the_minimum_the_virtual_run_ends_naming_the_replica_and_the_minimum(tmp_path):
    from edit_lab import WorkerError

    with pytest.raises(WorkerError) as info:
        launch(small(out=str(tmp_path / "run"), **{**EDGE, "method": "diloco", "replicas": 3,
                                                   "survive_min_replicas": 3}))
    assert ("replica 1 died (exited): 2 live replica(s) left, fewer than survive_min_replicas=3; the run ends"
            in str(info.value)), str(info.value)
