"""Notebook 09's exercise: the fragment schedule, against the library's and against a run's recorded landings."""

from __future__ import annotations

from types import SimpleNamespace

from edit_lab import RunConfig
from edit_lab.exercises.nb09 import check_fragment_schedule
from edit_lab.schedule import fragment_landing

from .exercise_asserts import not_yet


def right(step, warmup, interval, fragments):
    every = interval // fragments
    if step <= warmup or (step - warmup) % every:
        return None
    return ((step - warmup) // every - 1) % fragments


def off_by_one(step, warmup, interval, fragments):  # fragment 1 first
    every = interval // fragments
    return None if step <= warmup or (step - warmup) % every else ((step - warmup) // every) % fragments


def recorded(landings, **cfg):
    """A stand-in for a Run: its config and the syncs records a streaming run writes."""
    config = RunConfig(method="streaming_diloco", model="nano", steps=20, warmup_steps=2, sync_interval=6,
                       fragments=3, fragment_sync_delay=1, **cfg)
    syncs = [{"kind": "anchor", "step": 2}]
    for p, sent, landed in landings:
        syncs += [{"kind": "fragment_sent", "step": sent, "fragment": p, "lands_at": landed},
                  {"kind": "sync", "step": landed, "fragment": p, "sent_at": sent}]
    return SimpleNamespace(config=config, syncs=syncs)


def test_unanswered_wrong_and_right(capsys):
    assert not check_fragment_schedule(None) and "Not answered yet" in capsys.readouterr().out
    assert not check_fragment_schedule(lambda *a: None) and "Not answered yet" in capsys.readouterr().out
    not_yet(capsys, check_fragment_schedule(off_by_one), "fragment 0 first", "H/P")
    not_yet(capsys, check_fragment_schedule(lambda s, w, h, p: 1 / 0), "ZeroDivisionError")
    not_yet(capsys, check_fragment_schedule(lambda s, w, h, p: True if s > w else None), "True")
    assert check_fragment_schedule(right) and "on every setting tried" in capsys.readouterr().out
    assert check_fragment_schedule(fragment_landing)  # the library's own


def test_against_a_runs_records(capsys, tmp_path):
    landings = [(0, 3, 4), (1, 5, 6), (2, 7, 8), (0, 9, 10)]
    assert check_fragment_schedule(right, recorded(landings))
    assert "all 4 landings" in capsys.readouterr().out
    # a run that landed fragment 2 where the schedule lands 1: the reader's function is held to the records
    not_yet(capsys, check_fragment_schedule(right, recorded([(0, 3, 4), (2, 5, 6)])), "landed fragment 2 at step 6")
    # a folder with no run in it: the library alone, said
    assert check_fragment_schedule(right, tmp_path / "nothing") and "no run's records" in capsys.readouterr().out
