"""Notebook 10's claims (edit_course/claims/survival.py) and its exercise's judge on hand-built values."""

from __future__ import annotations

from edit_course.claims import survival as sv
from edit_course.exercises import nb10


class WorkerError(Exception):  # the claim reads the type's name, as launch's WorkerError is named
    pass


def test_run_ended_and_restart():
    assert sv.run_ended(WorkerError("rank 1 failed"), 1).ok
    assert not sv.run_ended(None, 1).ok
    lost, v = sv.restart_loses(20, 27, 3)
    assert lost == 21 and v.ok
    lost, v = sv.restart_loses(20, 20, 3)
    assert lost == 0 and not v.ok


def test_views_window_val():
    assert sv.views_go([[0, 1, 2], [0, 2], [0, 1, 2]], [[0, 1, 2], [0, 2], [0, 1, 2]]).ok
    assert not sv.views_go([[0, 1, 2], [0, 2]], [[0, 1, 2], [0, 2], [0, 1, 2]]).ok
    members = {25: [0, 1, 2], 30: [0, 2], 35: [0, 2], 40: [0, 1, 2]}
    assert sv.window_synced_survivors(members, 27, 40, [0, 2]).ok
    assert not sv.window_synced_survivors({**members, 35: [0, 1, 2]}, 27, 40, [0, 2]).ok
    assert not sv.window_synced_survivors(members, 36, 40, [0, 2]).ok  # no sync in the window
    assert sv.val_keeps_falling({20: 3.5, 30: 3.4, 40: 3.3}, 27, 40).ok
    assert not sv.val_keeps_falling({30: 3.4, 40: 3.45}, 27, 40).ok
    assert not sv.val_keeps_falling({40: 3.3}, 27, 40).ok


def test_rejoin_checksums_lost_and_settings():
    curves = {0: [(0, 5.5), (40, 3.1)], 2: [(0, 5.5), (40, 3.2)], 1: [(40, 3.3)]}
    assert sv.rejoins_at_level(curves, 1, [0, 2], 40).ok
    assert not sv.rejoins_at_level({**curves, 1: [(40, 5.4)]}, 1, [0, 2], 40).ok
    assert not sv.rejoins_at_level({0: curves[0]}, 1, [0], 40).ok
    same = {40: {r: {(0, 0, 7, 7)} for r in range(3)}, 45: {r: {(0, 0, 8, 8)} for r in range(3)}}
    assert sv.joiner_agrees(same, 40, 1).ok
    assert not sv.joiner_agrees({**same, 45: {0: {(0, 0, 8, 8)}, 1: {(0, 0, 9, 8)}}}, 40, 1).ok
    assert not sv.joiner_agrees({}, 40, 1).ok
    lost = [{"replica": 1, "replica_steps": 15, "tokens": 1920}]
    assert sv.lost_as_defined(lost, 1, 25, 40, 128).ok
    assert not sv.lost_as_defined(lost, 1, 20, 40, 128).ok
    assert sv.retry_and_discard(["detection", "rollback", "view", "sync", "retry"],
                                ["detection", "rollback", "view", "discard"], 30).ok
    assert not sv.retry_and_discard(["sync"], ["sync"], 30).ok
    assert [k for k, _, _ in sv.costs_table({"rollback_ms": {"n": 2, "mean": 1.0, "max": 1.5}})] == list(sv.PHASES)


def test_donor_exercise_judge_without_a_run():
    def right(members, joined):
        return max(m for m in members if m not in joined)

    def lowest(members, joined):
        return next(m for m in members if m not in joined)

    assert nb10.check_donor(right).passed
    assert not nb10.check_donor(lowest).passed
    assert not nb10.check_donor(lambda m, j: None).passed
    assert nb10.judge_donor_run([2], 2, True).passed
    assert not nb10.judge_donor_run([0], 2, True).passed
    assert not nb10.judge_donor_run([2], 2, False).passed
    assert not nb10.judge_donor_run([], 2, True).passed


def test_the_episode_in_order_and_the_standstill():
    spans = [{"piece": "death", "replica": 1, "t0": 0.25, "t1": 0.25},
             {"piece": "detection", "replica": 0, "t0": 0.267, "t1": 0.275},
             {"piece": "rollback", "replica": 0, "t0": 0.275, "t1": 0.297},
             {"piece": "view", "replica": 0, "t0": 0.297, "t1": 0.311},
             {"piece": "retry", "replica": 0, "t0": 0.311, "t1": 0.316},
             {"piece": "join", "replica": 1, "t0": 0.40, "t1": 0.40},
             {"piece": "view", "replica": 0, "t0": 0.362, "t1": 0.40}]  # the join's view: not the death's
    v = sv.episode_in_order(spans[:-1], dead=1, joiner=1)
    assert v.ok and "detection, rollback, view, retry" in v.numbers
    assert abs(sv.standstill_ms(spans, dead=1) - 49.0) < 1e-9  # 8 + 22 + 14 + 5 ms; the join's view left out
    early = [dict(s, t0=0.24) if s["piece"] == "detection" else s for s in spans[:-1]]  # waiting before the marker
    assert sv.episode_in_order(early, dead=1, joiner=1).ok and abs(sv.standstill_ms(early, dead=1) - 76.0) < 1e-9
    assert not sv.episode_in_order([dict(s, t1=0.245) if s["piece"] == "detection" else s for s in early],
                                   dead=1, joiner=1).ok  # a survivor's piece that ended before the death
    late = [dict(s, t0=0.5) if s["piece"] == "rollback" else s for s in spans[:-1]]  # a piece after the join
    assert not sv.episode_in_order(late, dead=1, joiner=1).ok
    assert not sv.episode_in_order([s for s in spans if s["piece"] != "death"], dead=1, joiner=1).ok
    assert not sv.episode_in_order([s for s in spans if s["piece"] != "join"], dead=1, joiner=1).ok


def test_torchft_agrees_on_hand_built_rounds():
    rows = [(3, True, 3), (6, False, 3), (9, True, 2), (12, True, 2)]
    side = {"mode": "discard", "lab": {3: ["sync"], 6: ["discard"], 9: ["sync"], 12: ["sync"]},
            "torchft": {0: rows, 2: rows}, "final_max_diff": 2.6e-7}
    v = sv.torchft_agrees(side)
    assert v.ok and "6: False" in v.numbers
    assert not sv.torchft_agrees(dict(side, final_max_diff=1e-3)).ok  # the models apart
    assert not sv.torchft_agrees(dict(side, lab={**side["lab"], 6: ["sync"]})).ok  # the lab kept the round
    retry = [(3, True, 3), (6, True, 2), (9, True, 2), (12, True, 2)]
    assert not sv.torchft_agrees(dict(side, torchft={0: retry, 2: retry})).ok  # torchft committed 6, the lab dropped it
    assert not sv.torchft_agrees(dict(side, torchft={})).ok  # nothing to compare
