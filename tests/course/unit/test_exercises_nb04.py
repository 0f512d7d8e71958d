"""Notebook 04's check cells: one link transfer, blocked time with prefetch, the schedule of a sync step."""

from __future__ import annotations

import pandas as pd
import pytest

from edit_course.exercises.nb04 import (
    check_exposed_with_prefetch,
    check_prediction_cheaper,
    check_schedule,
    check_transfer_ms,
    exposed_ms,
    no_prefetch_schedule,
    prefetch_schedule,
    recorded_schedule,
    replay_exposed_ms,
    schedule_problems,
    transfer_ms,
)
from edit_lab.core.comm import LinkModel
from tests.course.exercise_asserts import not_yet as _not_yet


def test_transfer_ms_is_the_link_model_of_comm():
    link = LinkModel(latency_s=2e-3, bandwidth_Bps=20e6)
    assert transfer_ms(99_072, 2.0, 20.0) == pytest.approx(link.transfer_time(99_072) * 1e3)
    assert transfer_ms(99_072, 2.0, 20.0) == pytest.approx(6.9536)


def test_exposed_ms_model():
    assert exposed_ms(5, 7.0, 3.0, prefetch=False) == 35.0
    assert exposed_ms(5, 7.0, 3.0, prefetch=True) == 23.0
    assert exposed_ms(5, 2.0, 3.0, prefetch=True) == 2.0  # a fast link: only unit 0 is exposed
    assert exposed_ms(1, 7.0, 3.0, prefetch=True) == 7.0
    assert exposed_ms(0, 7.0, 3.0, prefetch=True) == 0.0


def test_check_transfer_ms(capsys):
    assert not check_transfer_ms(None)
    assert check_transfer_ms(6.9536)
    assert check_transfer_ms(6.95)
    assert check_transfer_ms(1.0 + 1000 / 1e3, nbytes=1000, latency_ms=1.0, bandwidth_mbps=1.0)
    capsys.readouterr()
    out = _not_yet(capsys, check_transfer_ms(4.9536), "too low", "latency")  # forgot the latency
    assert "6.95" not in out  # the right number is not given away
    _not_yet(capsys, check_transfer_ms(2 + 99_072 / (20 * 2**20) * 1e3), "too low", "MB = 10⁶ bytes")  # MiB: 6.72
    _not_yet(capsys, check_transfer_ms(0.0069536), "seconds", "milliseconds")  # the units


def test_check_exposed_with_prefetch(capsys):
    assert not check_exposed_with_prefetch(None)
    assert check_exposed_with_prefetch(23)
    assert check_exposed_with_prefetch(10.0, n_units=3, transfer=4.0, compute=1.0)
    capsys.readouterr()
    _not_yet(capsys, check_exposed_with_prefetch(35), "without prefetch")  # prefetch off
    out = _not_yet(capsys, check_exposed_with_prefetch(7), "too low", "Without prefetch: 35")  # only unit 0
    assert "23" not in out


def test_replay_agrees_with_the_closed_form():
    for n, x, c in ((5, 7.0, 3.0), (5, 2.0, 3.0), (1, 7.0, 3.0), (8, 4.0, 4.0), (3, 10.0, 1.0)):
        assert replay_exposed_ms(prefetch_schedule(n), x, c) == pytest.approx(exposed_ms(n, x, c, prefetch=True))
        assert replay_exposed_ms(no_prefetch_schedule(n), x, c) == pytest.approx(exposed_ms(n, x, c, prefetch=False))


def test_schedule_problems_name_the_broken_rule():
    assert schedule_problems(prefetch_schedule(5), 5) == []
    assert schedule_problems(no_prefetch_schedule(5), 5) == []
    gather_first = [("issue", 0), ("all_gather", 0), ("wait", 0), ("compute", 0)]
    assert any("sync before all-gather" in p for p in schedule_problems(gather_first, 1))
    backwards = [op for u in (1, 0) for op in (("issue", u), ("wait", u), ("all_gather", u), ("compute", u))]
    assert any("computes before unit 0" in p for p in schedule_problems(backwards, 2))
    assert any("has no wait" in p for p in schedule_problems([("issue", 0), ("all_gather", 0), ("compute", 0)], 1))
    assert any("twice" in p for p in schedule_problems(prefetch_schedule(2) + [("issue", 1)], 2))
    assert any("not one of" in p for p in schedule_problems([("send", 0)], 1))
    assert any("is not a pair" in p for p in schedule_problems([("issue",), ["wait", 0, 1], 7], 1))


def test_check_schedule(capsys):
    assert check_schedule(prefetch_schedule)
    assert "23 ms per sync instead of 35 ms" in capsys.readouterr().out
    assert not check_schedule(no_prefetch_schedule)  # keeps the rule, hides nothing
    assert "Not yet" in capsys.readouterr().out
    assert not check_schedule(lambda n: None)
    assert "returns None" in capsys.readouterr().out
    _not_yet(capsys, check_schedule(lambda n: [][n]), "raised IndexError")
    _not_yet(capsys, check_schedule(lambda n: 5), "not a list")
    _not_yet(capsys, check_schedule(lambda n: [("issue", 0), "wait 0"]), "operation 1", "is not a pair")
    _not_yet(capsys, check_schedule(lambda n: [("issue", "0")]), "operation 0", "is not a pair")

    def gather_before_sync(n):  # exercise 3's first change: the all-gather moved above the wait
        ops = [("issue", 0)]
        for u in range(n):
            ops += ([("issue", u + 1)] if u + 1 < n else []) + [("all_gather", u), ("wait", u), ("compute", u)]
        return ops
    _not_yet(capsys, check_schedule(gather_before_sync), "sync before all-gather")


def test_recorded_schedule_reads_events_in_time_order():
    rows = [("sync_reduce", 0, 0.0, 5.0), ("sync_reduce", 1, 0.1, 9.0), ("all_gather", 0, 5.0, 5.5),
            ("compute_fwd", 0, 5.5, 8.0), ("all_gather", 1, 9.0, 9.5), ("compute_fwd", 1, 9.5, 12.0),
            ("all_gather", 1, 20.0, 20.5), ("compute_fwd", 0, 12.0, 13.0)]  # a backward re-gather, the head
    ev = pd.DataFrame([{"kind": k, "unit": u, "t0": a, "t1": b} for k, u, a, b in rows])
    ev.loc[len(ev)] = {"kind": "sync_decisions", "unit": None, "t0": -1.0, "t1": -0.5}  # no unit: ignored
    ops = recorded_schedule(ev)
    assert ops == [("issue", 0), ("issue", 1), ("wait", 0), ("all_gather", 0), ("compute", 0), ("wait", 1),
                   ("all_gather", 1), ("compute", 1)]
    assert schedule_problems(ops, 2) == []


def test_check_prediction_cheaper(capsys):
    assert not check_prediction_cheaper(None, 50.0, 100.0, "here")
    out = capsys.readouterr().out  # locked: what the run measured waits for a prediction
    assert out.startswith("Not answered yet.") and "50.0 ms" not in out
    assert check_prediction_cheaper(True, 50.0, 100.0, "here")
    assert "EDiT exposed 50.0 ms" in capsys.readouterr().out
    assert not check_prediction_cheaper(True, 80.0, 20.0, "there")
    assert "dearer" in capsys.readouterr().out
    assert check_prediction_cheaper(False, 80.0, 20.0, "there")
