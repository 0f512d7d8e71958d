"""D15: the penalty judges replicas at every R >= 2 (edit-method.md §7), on the replay set it was chosen on.

A healthy replica is never locked out after a bad episode ends, whatever the episode's shape (abrupt, a ramp, an
onset before arming, a norm that falls), and the bad one is caught while an abrupt post-arming episode lasts.
Every series is replayed with `penalty.replay_units`, the engine's own `judge_replicas`.
"""

from __future__ import annotations

import math

import pytest

from edit_course.panels.detector_series import ReplayCase, flagged, replay_set, score
from edit_lab.core.penalty import (
    AnomalyDetector,
    PenaltyConfig,
    judge_replicas,
    excluded_from_weights,
    needs_memory,
    outer_step_skipped,
    peer_ratios,
    replay_units,
    softmax_weights,
)

D11_AS_FIRST_CHOSEN = PenaltyConfig(enter_ratio=0.0, memory_threshold=0.0)


def verdicts(config: PenaltyConfig, case: ReplayCase) -> str:
    """One letter per sync: B the bad replica out, H a healthy one out, 2 both, . nobody."""
    out, b = flagged(config, case), case.bad
    healthy = lambda i: any(out[r][i] for r in range(case.replicas) if r != b)  # noqa: E731
    return "".join("2" if out[b][i] and healthy(i) else "B" if out[b][i] else "H" if healthy(i) else "."
                   for i in range(case.syncs))


@pytest.mark.parametrize("R", [2, 3, 4, 8])
@pytest.mark.parametrize("shape,factor", [("episode", 2.0), ("episode", 3.0), ("ramp", 2.0), ("before", 2.0),
                                          ("falls", 2.0), ("falls", 3.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_healthy_replica_is_flagged_two_syncs_after_an_episode_ends(R, shape, factor, seed):
    case = ReplayCase(shape, R, factor, seed)
    out = flagged(PenaltyConfig(), case)
    late = range(case.end + 2, case.syncs)
    assert not any(out[r][i] for r in range(R) if r != case.bad for i in late), verdicts(PenaltyConfig(), case)
    assert not any(out[r][-1] for r in range(R) if r != case.bad)  # the final model holds every healthy replica
    if shape == "episode":  # abrupt, after arming: caught in most of its syncs (here: every one)
        assert sum(out[case.bad][i] for i in range(case.onset, case.end)) == case.end - case.onset


@pytest.mark.parametrize("R", [2, 3, 4, 8])
def test_the_review_cases_read_as_the_replay_predicts(R):
    """The cases of review-fidelity §2.3, seed 0: the bad replica out exactly while its episode lasts, nobody else;
    a falling norm flags nobody. Below a majority (R = 2, 3) a ramp and an onset before arming flag nobody either
    (learnt by the detector: D15 does not see them); with one (R >= 4) the peers' median says q > κ_m 1.5 (D16):
    the ramp is out from where it passes ×1.5 to its end, the onset from its first sync to its last."""
    d16 = PenaltyConfig()
    assert verdicts(d16, ReplayCase("episode", R, 2.0, 0)) == "." * 10 + "B" * 10 + "." * 16
    majority = R >= 4
    assert verdicts(d16, ReplayCase("ramp", R, 2.0, 0)) == ("." * 15 + "B" * 13 + "." * 8 if majority else "." * 36)
    assert verdicts(d16, ReplayCase("before", R, 2.0, 0)) == ("B" * 20 + "." * 16 if majority else "." * 36)
    assert verdicts(d16, ReplayCase("falls", R, 2.0, 0)) == "." * 36
    assert verdicts(d16, ReplayCase("shared", R, 2.0, 0)) == "." * 36


def test_d11_as_first_chosen_locks_the_healthy_replica_out_at_r2_and_the_authors_detector_does_not():
    """Why D15: D11 as first chosen (no entry test, no memory) blames the healthy replica for the rest of the run
    once an episode ends at R = 2, and when the bad norm falls; the authors' detector stays available and never
    does."""
    assert verdicts(D11_AS_FIRST_CHOSEN, ReplayCase("episode", 2, 2.0, 0)) == "." * 10 + "B" * 10 + "H" * 16
    assert verdicts(D11_AS_FIRST_CHOSEN, ReplayCase("falls", 2, 2.0, 0)).startswith("." * 10 + "H" * 15)
    assert verdicts(D11_AS_FIRST_CHOSEN, ReplayCase("episode", 4, 2.0, 0)) == "." * 10 + "B" * 10 + "." * 16
    authors = PenaltyConfig.authors(arming=4)
    for shape in ("episode", "before", "falls"):
        assert "H" not in verdicts(authors, ReplayCase(shape, 2, 3.0, 0))
    assert verdicts(PenaltyConfig.authors(), ReplayCase("episode", 2, 3.0, 0)) == "." * 36  # E 120: never armed


def test_the_held_out_replay_set_matches_the_method_page():
    """The held-out part of the made-up replay set (seeds 5–9): D15's row of §7's D15 table (R = 2, 3, 4), and the
    defaults since D16 (κ_e 1.6, δ_m 1.5, κ_m 1.5: no healthy flag left)."""
    d15 = PenaltyConfig(enter_ratio=1.3, memory_threshold=1.0, majority_ratio=0.0)
    s = score(d15, replay_set((5, 6, 7, 8, 9)))
    assert (s.cases, s.locked_out, s.healthy_closing, s.shared_flags) == (285, 0, 0, 0)
    assert (s.healthy_flags, s.healthy_judged) == (5, 19440)
    assert (s.caught, s.episode_syncs) == (s.episode_syncs, 570)
    s = score(PenaltyConfig(), replay_set((5, 6, 7, 8, 9), (2, 3, 4, 8)))
    assert (s.cases, s.locked_out, s.healthy_closing, s.shared_flags, s.healthy_flags) == (380, 0, 0, 0, 0)
    assert (s.caught, s.episode_syncs) == (760, 760)
    old = score(D11_AS_FIRST_CHOSEN, replay_set((5, 6, 7, 8, 9)))
    assert old.locked_out == 60 and set(old.by_shape) == {f"{s} R={R}" for s in ("episode", "ramp", "before")
                                                         for R in (2, 3)}


def test_the_memory_is_asked_only_without_a_majority_of_peers():
    d15 = PenaltyConfig()
    assert [needs_memory(d15, judged) for judged in (1, 2, 3, 4, 64)] == [False, True, True, False, False]
    assert not needs_memory(PenaltyConfig(peers=False), 2) and not needs_memory(PenaltyConfig(memory_threshold=0), 2)
    dets = [[d15.new_detector()] for _ in range(2)]
    with pytest.raises(ValueError, match="pass `memory`"):
        judge_replicas(d15, dets, [[1.0], [2.0]], [1, 1])


def test_a_zero_over_zero_peer_ratio_is_not_comparable_and_flags_nobody():
    assert all(math.isnan(q) for q in peer_ratios([0.0, 0.0]))
    assert all(math.isnan(q) for q in peer_ratios([0.0, 0.0, 0.0, 0.0]))
    assert peer_ratios([1.0, 0.0, 0.0]) == [math.inf, 0.0, 0.0]  # a replica that moved where no peer did
    # a frozen unit (G = 0 on every replica) beside two that train: nobody is ever flagged, unarmed or armed
    n = 12
    norms = [[[0.0] * n, [1.0 + 0.01 * i for i in range(n)], [2.0] * n] for _ in range(2)]
    got = replay_units(PenaltyConfig(), norms, [[5] * n] * 2)
    assert not any(j.outlier for per in got for unit in per for j in unit)
    assert math.isnan(got[0][0][0].peer)


def test_a_replica_that_trained_no_step_stays_out_of_the_softmax():
    """k = 0 (A-EDiT's finished replica): G = 0 beside G = 800 took every weight ([0, 800] → [1, 0]: exp(−800)
    underflows) and left the outer step to momentum alone. Left out, the trained replica weighs 1."""
    assert softmax_weights([0.0, 800.0], 1.0, [False, False]) == [1.0, 0.0]  # the underflow itself
    excluded = excluded_from_weights([False, False], [0, 5])
    assert excluded == [True, False]
    assert softmax_weights([0.0, 800.0], 1.0, excluded) == [0.0, 1.0]
    assert not outer_step_skipped([False, False], [0, 5])
    assert excluded_from_weights([False, True, False], [3, 3, 3]) == [False, True, False]  # EDiT: unchanged


@pytest.mark.parametrize("field,value", [("enter_ratio", 0.5), ("enter_ratio", math.inf), ("memory_threshold", -1.0),
                                         ("memory_threshold", math.nan), ("enter_ratio", True)])
def test_d15_settings_that_cannot_work_are_refused_naming_the_field(field, value):
    from edit_lab.config import ConfigError, RunConfig
    from edit_lab.core.penalty import PenaltyValueError

    with pytest.raises(PenaltyValueError, match=f"^{field}="):
        PenaltyConfig(**{field: value}).validate()
    with pytest.raises(ConfigError, match=f"^penalty_{field}="):
        RunConfig(**{f"penalty_{field}": value}).validate()


def test_the_memory_of_every_replica_is_an_ordinary_detector_of_g_per_step():
    """What the memory follows at R = 2: each replica's own G/k, learnt while it is admitted; a flagged replica's
    memory learns nothing (as its peer detectors, D1)."""
    d15 = PenaltyConfig()
    dets = [[d15.new_detector()] for _ in range(2)]
    memory = [[d15.new_detector()] for _ in range(2)]
    for _ in range(6):
        judge_replicas(d15, dets, [[10.0], [10.0]], [5, 5], memory=memory)
    assert memory[0][0].count == 6 and memory[0][0].mu() == pytest.approx(2.0)
    out = judge_replicas(d15, dets, [[10.0], [30.0]], [5, 5], memory=memory)
    assert [out[r][0].outlier for r in range(2)] == [False, True]
    assert memory[1][0].count == 6 and memory[0][0].count == 7
    assert isinstance(memory[0][0], AnomalyDetector)
