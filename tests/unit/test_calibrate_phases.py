"""The calibration's phases of one rank's step (edit_lab/clock/calibrate.py `_phases`), on hand-built events."""

from __future__ import annotations

from edit_lab.clock.calibrate import _phases


def _ev(kind: str, t0: float, t1: float, unit: int | None = 0, group: str | None = None) -> dict:
    return {"kind": kind, "t0": t0, "t1": t1, "unit": unit, "group": group, "data": None, "rank": 0, "step": 3}


def test_a_plain_step_gives_its_forward_and_backward_walls() -> None:
    evs = [_ev("all_gather", 0.0, 0.1, group="shard"), _ev("compute_fwd", 0.1, 0.4), _ev("compute_fwd", 0.4, 0.6, 1),
           _ev("compute_bwd", 0.6, 1.0, 1), _ev("reduce_scatter", 1.0, 1.2, group="shard")]
    fwd, bwd = _phases(evs)
    assert abs(fwd - 0.6) < 1e-12 and abs(bwd - 0.6) < 1e-12


def test_a_step_whose_backward_ends_before_its_last_forward_is_not_measured() -> None:
    """Kept, its negative backward wall turned every unit's backward time negative and the costs were refused."""
    evs = [_ev("compute_fwd", 0.0, 0.3), _ev("compute_bwd", 0.3, 0.5), _ev("compute_fwd", 0.5, 0.9, 1)]
    assert _phases(evs) is None


def test_a_forward_with_edits_sync_inside_is_not_a_plain_forward() -> None:
    evs = [_ev("compute_fwd", 0.0, 0.3), _ev("sync_reduce", 0.1, 0.2, group="sync"), _ev("compute_bwd", 0.3, 0.5)]
    assert _phases(evs) is None
