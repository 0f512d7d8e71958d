"""D16: the penalty at its edges (edit-method.md §7), each case one that D15 as first shipped got wrong.

- every replica flagged at once: nothing froze the anchor (review-fidelity B2);
- the memory asked by the width judged at this sync, not the run's (B3);
- a majority of peers catches an onset before arming (U6), and a unit only one replica moved (its peers' median 0,
  q = inf) flags nobody before arming (U7).

Every series is replayed with `penalty.replay_units`, the engine's own `judge_replicas`.
"""

from __future__ import annotations

import math
import random

import pytest

from edit_course.panels.detector_series import ReplayCase, flagged
from edit_lab.core.penalty import PenaltyConfig, judge_replicas, needs_memory, outer_step_skipped, replay_units


def _noisy(seed: str, n: int, level: float = 5.0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1.0 + 0.05 * rng.gauss(0.0, 1.0)) for _ in range(n)]


def _every_replica_out_of_its_own_unit(R: int, U: int, n: int = 20, start: int = 8) -> list[list[list[float]]]:
    """Replica r's unit r mod U ×2 from sync `start` for good (review-fidelity B2's replays)."""
    return [[[g * (2.0 if u == r % U and i >= start else 1.0) for i, g in enumerate(_noisy(f"{R}/{r}/{u}", n))]
             for u in range(U)] for r in range(R)]


@pytest.mark.parametrize("R,U", [(2, 2), (3, 3), (4, 4), (8, 3)])
def test_every_replica_flagged_leaves_each_out_of_its_own_unit_and_no_anchor_freezes(R, U):
    """B2: on main before D16 every replica was out of every unit from sync 8 to the end, and every unit's outer step
    was skipped (the anchor frozen). Now each replica is out of the unit it stands out on, admitted on the others
    (`readmitted`: released because every replica was flagged), and every unit's anchor moves."""
    n = 20
    got = replay_units(PenaltyConfig(), _every_replica_out_of_its_own_unit(R, U, n), [[5] * n for _ in range(R)])
    for i in range(n):
        for u in range(U):
            assert not outer_step_skipped([got[r][u][i].outlier for r in range(R)], [5] * R), (i, u)
    for r in range(R):
        for u in range(U):
            out = [got[r][u][i].outlier for i in range(n)]
            if u == r % U and sum(1 for s in range(R) if s % U == u) < R:  # out of its own unit for good
                assert out == [False] * 8 + [True] * 12, (r, u)
            elif u == r % U:  # every replica stands out on this unit: the least is admitted
                assert not all(out[8:])
            else:
                assert out == [False] * n, (r, u)
                assert all(got[r][u][i].readmitted for i in range(8, n))


def test_a_rise_both_replicas_share_on_one_unit_flags_nobody_and_a_nan_on_both_waits_one_sync():
    """R = 2, one unit, both ×2 (and ×2.2) from sync 8: q stays near 1, the unit is never frozen; a NaN on every
    replica is never admitted (that sync's outer step is skipped)."""
    n = 14
    norms = [[_noisy("a", n)], [_noisy("b", n)]]
    for i in range(8, n):
        norms[0][0][i] *= 2.0
        norms[1][0][i] *= 2.2
    got = replay_units(PenaltyConfig(), norms, [[5] * n, [5] * n])
    for i in range(n):
        assert not outer_step_skipped([got[r][0][i].outlier for r in range(2)], [5, 5])
    nan_case = [[[5.0] * 6 + [math.nan]], [[5.0] * 6 + [math.nan]]]
    got = replay_units(PenaltyConfig(), nan_case, [[5] * 7, [5] * 7])
    assert [got[r][0][6].outlier for r in range(2)] == [True, True]  # nothing finite to admit: skipped


def _width_case(R: int) -> tuple[list[list[list[float]]], list[list[int]]]:
    """B3's reproduction: 12 syncs of steady norms; at sync 11 every replica beyond the first two trained no step
    (k = 0, A-EDiT's finished ones) and replica 1's G/k halves. Replica 0 did not change."""
    n = 12
    norms = [[[5.0 * (1.0 + 0.01 * ((i * (r + 3)) % 5)) for i in range(n)]] for r in range(R)]
    steps = [[5] * n for _ in range(R)]
    norms[1][0][11] /= 2.0
    for r in range(2, R):
        norms[r][0][11], steps[r][11] = 0.0, 0
    return norms, steps


@pytest.mark.parametrize("R", [2, 3, 4, 8])
def test_the_memory_is_asked_by_the_replicas_judged_at_this_sync_not_by_the_runs_width(R):
    """B3: at R = 4 with two replicas finished, replica 0 (unchanged) was flagged (q = 2) while the same numbers at
    R = 2 flagged nobody: the memory, kept at every R, now says replica 0 did not move."""
    norms, steps = _width_case(R)
    got = replay_units(PenaltyConfig(), norms, steps)
    assert [got[r][0][11].outlier for r in range(R)] == [False] * R
    assert got[0][0][11].peer == pytest.approx(2.0, rel=0.05)  # it does stand out from the one peer judged


def test_needs_memory_counts_the_replicas_judged():
    d = PenaltyConfig()
    assert [needs_memory(d, n) for n in (1, 2, 3, 4, 64)] == [False, True, True, False, False]
    dets = [[d.new_detector()] for _ in range(4)]
    with pytest.raises(ValueError, match="pass `memory`"):  # kept at every width: needed at 4 too
        judge_replicas(d, dets, [[1.0], [2.0], [1.0], [1.0]], [1, 1, 1, 1])


@pytest.mark.parametrize("R", [4, 8])
@pytest.mark.parametrize("factor", [2.0, 3.0])
@pytest.mark.parametrize("seed", [0, 1, 2, 5, 9])
def test_a_majority_catches_an_onset_before_arming_and_flags_no_healthy_replica(R, factor, seed):
    """U6: a replica ×2 or ×3 from sync 0 was learnt by its detector and never flagged at any R. With 3 peers or more
    their median is a healthy replica's: q > κ_m flags it from the first sync, armed or not, while it lasts."""
    case = ReplayCase("before", R, factor, seed)
    out = flagged(PenaltyConfig(), case)
    assert out[case.bad][:case.end] == [True] * case.end
    assert not any(out[case.bad][case.end + 1:])  # back once its episode is over
    assert not any(out[r][i] for r in range(R) if r != case.bad for i in range(case.syncs))


@pytest.mark.parametrize("R", [4, 8])
def test_a_unit_only_one_replica_moved_flags_nobody_before_arming(R):
    """U7: its peers' median is 0, q = inf; before its detector is armed it is not an outlier (it was flagged at
    syncs 0 and 1 at R >= 4), and a detector that never saw a finite q never arms. One armed on a unit every replica
    moved flags the first sync where only its replica still moves it: that q is above any limit."""
    n = 8
    norms = [[_noisy(f"{r}", n), [1e-9 if r == 0 else 0.0] * n] for r in range(R)]
    got = replay_units(PenaltyConfig(), norms, [[5] * n for _ in range(R)])
    assert got[0][1][0].peer == math.inf
    assert not any(got[r][u][i].outlier for r in range(R) for u in range(2) for i in range(n))
    later = [[_noisy(f"{r}", n), [g if r == 0 or i < 6 else 0.0 for i, g in enumerate(_noisy(f"u{r}", n))]]
             for r in range(R)]
    got = replay_units(PenaltyConfig(), later, [[5] * n for _ in range(R)])
    assert [got[0][1][i].outlier for i in range(n)] == [False] * 6 + [True] * 2
    assert not any(got[r][u][i].outlier for r in range(1, R) for u in range(2) for i in range(n))


def test_the_majority_ratio_is_refused_outside_its_range_naming_the_field():
    from edit_lab.config import ConfigError, RunConfig
    from edit_lab.core.penalty import PenaltyValueError

    for bad in (1.0, 0.5, math.inf, math.nan, -1.0, True):
        with pytest.raises(PenaltyValueError, match="^majority_ratio="):
            PenaltyConfig(majority_ratio=bad).validate()
        with pytest.raises(ConfigError, match="^penalty_majority_ratio="):
            RunConfig(penalty_majority_ratio=bad).validate()
    PenaltyConfig(majority_ratio=0.0).validate()


def test_the_launcher_says_when_the_penalty_released_replicas_because_every_one_was_flagged():
    from edit_lab.runtime.launch import readmission_note

    summary = {"method_info": {"penalty_readmissions": [{"step": 40, "unit": 1, "replica": 0}]}}
    note = readmission_note(summary, "runs/x", 3, released=True)
    assert note.startswith("every replica that trained was flagged at once") and "D16" in note
    assert "step 40 unit 1 replica 0" in note and "penalty.jsonl" in note
    assert "penalty_readmit_after=3" in readmission_note(summary, "runs/x", 3)  # D10's re-admission, peers off
    assert readmission_note({"method_info": {}}, "runs/x", 3, released=True) is None


def test_a_replica_out_for_a_non_finite_norm_comes_back_before_its_memory_arms():
    """R = 2, early in a run (the memory not yet armed): replica 0's norm is NaN at sync 1 (out), then 1.8× its peer's
    at sync 2 (a fresh inner optimizer's larger first steps): it is back, since θ ← a made it healthy and an unarmed
    memory is no evidence. A replica out for a finite reason keeps the unarmed memory's benefit of the doubt the
    other way: it stays out while q > κ_s (the review's F2, tests/unit/test_penalty_d16_review.py)."""
    d = PenaltyConfig()
    dets = [[d.new_detector()] for _ in range(2)]
    memory = [[d.new_detector()] for _ in range(2)]
    judge_replicas(d, dets, [[5.0], [5.0]], [5, 5], memory=memory)
    out = judge_replicas(d, dets, [[math.nan], [5.0]], [5, 5], memory=memory)
    assert [out[r][0].outlier for r in range(2)] == [True, False] and dets[0][0].broke
    out = judge_replicas(d, dets, [[9.0], [5.0]], [5, 5], memory=memory)
    assert [out[r][0].outlier for r in range(2)] == [False, False] and not dets[0][0].broke
    assert dets[0][0].state_dict()["broke"] is False
