"""D16 in real runs (virtual clock: every rank in one process, real numerics, seconds): the StragglerLab panel's own
configuration flags no healthy replica and still catches a spike, and a 1 × 4 replica fed random bytes before the
detectors arm is left out by its peers' majority.

Both reproduce what review-fidelity found on main before D16: with seed 1 the panel's EDiT run flagged replica 0 at
step 40, with seed 2 replica 1 at step 28 (nothing injected); the 1 × 4 bad replica kept a mean weight of 0.232 of a
fair 0.25 to the end.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from edit_lab import launch
from edit_lab.config import default_lab_config


def _flags(run) -> list[tuple[int, int]]:
    return sorted({(p["step"], p["replica"]) for p in run.penalty if p["outlier"]})


@pytest.mark.parametrize("seed", [1, 2])
def test_the_panels_healthy_edit_runs_flag_nobody(tmp_path, seed):
    cfg = default_lab_config().replace(method="edit", steps=48, seed=seed, clock="virtual", out=str(tmp_path / "r"))
    run = launch(cfg)
    assert len({p["step"] for p in run.penalty}) >= 10  # the detectors armed and judged (W 4, τ 4, E 4)
    assert _flags(run) == []


def test_a_spike_at_the_panels_configuration_is_caught_at_the_next_sync_and_nobody_else(tmp_path):
    """×10 on replica 0 at step 29 (its detectors armed from the sync of step 24): out at 32, back at 36."""
    cfg = default_lab_config().replace(method="edit", steps=48, seed=1, clock="virtual", spike_replica=0,
                                       spike_step=29, spike_scale=10.0, out=str(tmp_path / "r"))
    assert _flags(launch(cfg)) == [(32, 0)]


def test_random_bytes_before_arming_at_1x4_are_left_out_by_the_majority(tmp_path):
    """Random bytes on replica 2 from step 12 of a 56-step nano run (W 10, τ 4: syncs at 14, 18, …, 54 and the
    closing 56; the detectors arm at the sync of step 30): from the second sync after the onset (18) its mean
    weight is at most 1/16, and no healthy replica is ever flagged."""
    cfg = default_lab_config().replace(method="edit", shards=1, replicas=4, steps=56, sync_interval=4,
                                       warmup_steps=10, corrupt_replica=2, corrupt_from_step=12, clock="virtual",
                                       out=str(tmp_path / "r"))
    run = launch(cfg)
    weight = defaultdict(list)
    for p in run.penalty:
        weight[(p["step"], p["replica"])].append(p["weight"])
    steps = sorted({s for s, _ in weight})
    assert steps[0] == 14 and steps[-1] == 56
    late = [sum(weight[(s, 2)]) / len(weight[(s, 2)]) for s in steps if s >= 18]
    assert sum(late) / len(late) <= 1 / 16
    assert all(r == 2 for _, r in _flags(run))
