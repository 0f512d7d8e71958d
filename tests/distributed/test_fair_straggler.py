"""A straggler is k× slower compute for every method alike (stragglers.py): its pause never stretches a collective.

A real 2×2 EDiT run with replica 1 twice as slow and a slow sync link: EDiT's layer-wise sync runs
inside the forward of a sync step, so a pause measured over the step's span would be longer on sync
steps (it was: 37.5 ms against 16.4 ms on the shipped `edit-straggler` run). Each pause must be
(k − 1) × the own compute its rank recorded for that step, and so the same on sync steps as on others.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from edit_lab.records.events import own_compute_s

pytestmark = pytest.mark.slow

K = 2.0


def test_the_pause_of_a_sync_step_is_that_of_any_step(run_small):
    run = run_small(method="edit", shards=2, replicas=2, steps=24, warmup_steps=2, sync_interval=3,
                    straggler_replicas=(1,), straggler_factor=K, link_latency_ms=15.0, link_bandwidth_mb_s=2.0)
    by_step: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in run.events:
        by_step[(e["rank"], e["step"])].append(e)
    pauses = [e for e in run.events if e["kind"] == "straggle"]
    assert pauses and {e["replica"] for e in pauses} == {1}  # only the slow replica pauses, at every step
    assert len(pauses) == 2 * 24
    for p in pauses:  # exactly (k − 1) × the step's forward, backward and optimizer spans
        assert p["data"]["planned"] == pytest.approx((K - 1) * own_compute_s(by_step[(p["rank"], p["step"])]),
                                                     rel=1e-9)
    syncing = {(e["rank"], e["step"]) for e in run.events if e["kind"] == "sync_reduce"}

    def stretch(on_sync: bool) -> float:
        """Σ pause / Σ own compute over the slow replica's sync steps (or its other steps)."""
        mine = [p for p in pauses if ((p["rank"], p["step"]) in syncing) == on_sync]
        assert len(mine) >= 8
        return (sum(p["data"]["planned"] for p in mine)
                / sum(own_compute_s(by_step[(p["rank"], p["step"])]) for p in mine))

    # the added pause on sync steps is that on other steps: the same k − 1 of the same own compute
    # (the compute itself varies from step to step with the machine's load; the stretch does not)
    assert stretch(True) == pytest.approx(K - 1, rel=1e-9)
    assert stretch(False) == pytest.approx(K - 1, rel=1e-9)
    sync_span = [e["t1"] - e["t0"] for e in run.events if e["kind"] == "sync_reduce" and e["replica"] == 1]
    assert sum(sync_span) > 0.05  # the slow link made the in-forward sync long enough to matter
