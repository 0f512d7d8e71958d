"""The survival episode on the timeline (viz/episode.py), on a hand-built run: the fake run of viz_fake_run.py
(2 shards × 2 replicas, 4 steps of 1 s) plus the rows a surviving run writes: replica 1 dies in step 2, replica 0's
sync of step 3 fails, rolls back, moves to the new view and is retried, and replica 1's replacement joins at 3.5 s
with replica 0's state."""

from __future__ import annotations

import json

import pytest

from edit_lab.records.run import Run
from edit_lab.viz.episode import PIECES, episode_spans
from edit_lab.viz.timeline import BAR_WIDTH, ESSENTIAL_ROWS, ROWS, timeline_figure

from . import viz_fake_run as F

LAUNCHER = [
    {"kind": "view", "t": 0.0, "view": 0, "members": [0, 1], "joined": [], "died": [], "reason": "start"},
    {"kind": "death", "t": 2.3, "replica": 1, "view": 0, "exits": [[2, -9]], "since_last_step_ms": 200.0,
     "cause": "rank 2: exit -9"},
    {"kind": "fenced", "t": 2.3, "replica": 1},
    {"kind": "view", "t": 2.3, "view": 1, "members": [0], "joined": [], "died": [1], "reason": "exited"},
    {"kind": "replacement_started", "t": 2.3, "replica": 1, "life": 1},
    {"kind": "view", "t": 3.5, "view": 2, "members": [0, 1], "joined": [1], "died": [], "reason": "replacement",
     "asked_at_step": 3},
]
SYNC_ROWS = [
    {"kind": "detection", "step": 3, "view": 0, "error": "RuntimeError: Connection closed by peer", "blocked_ms": 40.0,
     "t": 3.04},
    {"kind": "rollback", "step": 3, "view": 0, "restored": True, "t0": 3.04, "ms": 20.0},
    {"kind": "view", "step": 3, "view": 1, "members": [0], "joined": [], "died": [1], "reason": "exited",
     "after": "failure", "t0": 3.06, "t1": 3.1, "ms": 40.0},
    {"kind": "retry", "step": 3, "view": 1, "mode": "retry", "t0": 3.1, "ms": 50.0},
    {"kind": "transfer", "step": 3, "view": 2, "to": [1], "bytes": 670000, "side": "donor", "t0": 3.5, "ms": 3.0},
]


@pytest.fixture(scope="module")
def episode_run(tmp_path_factory):
    path = F.make_fake_run(tmp_path_factory.mktemp("episode") / "run")
    with open(path / "syncs.jsonl", "a") as f:
        for row in SYNC_ROWS:
            f.write(json.dumps(row) + "\n")
    (path / "survival.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LAUNCHER))
    return Run(path)


def _episode_traces(fig):
    return {t.meta["piece"]: t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("role") == "episode"}


def test_the_episode_is_plain_data(episode_run):
    spans = {s["piece"]: s for s in episode_spans(episode_run)}
    assert set(spans) == set(PIECES)
    assert spans["death"]["replica"] == 1 and spans["death"]["t0"] == pytest.approx(2.1)  # its last step's start
    assert (spans["detection"]["t0"], spans["detection"]["t1"]) == pytest.approx((3.0, 3.04))
    assert (spans["retry"]["t0"], spans["retry"]["t1"]) == pytest.approx((3.1, 3.15))
    assert spans["join"]["replica"] == 1 and spans["join"]["t0"] == 3.5
    assert all(s["replica"] == 0 for k, s in spans.items() if k not in ("death", "join"))  # the survivor's rows


@pytest.mark.parametrize("view, rows", [("essential", ESSENTIAL_ROWS), ("full", ROWS)])
def test_every_piece_is_drawn_above_its_replica_s_bars(episode_run, view, rows):
    fig = timeline_figure(episode_run, view=view)
    traces = _episode_traces(fig)
    assert set(traces) == set(PIECES) and fig.layout.meta["episode"] == len(PIECES)
    lanes = {int(k): v for k, v in fig.layout.meta["lanes"].items()}
    top = min(rows.values()) - BAR_WIDTH / 2  # the top edge of a lane's bars (the y axis is reversed)
    for piece, t in traces.items():
        replica = 1 if piece in ("death", "join") else 0
        y_lane = lanes[replica * F.S]
        assert all(y_lane - 0.8 < y < y_lane + top for y in t.y), (piece, list(t.y), y_lane)  # above, before the gap
        if piece not in ("death", "join"):
            assert all(y + t.width / 2 < y_lane + top for y in t.y)  # the band does not reach the bars
    assert list(traces["view"].base) == [3.06] and list(traces["view"].x) == pytest.approx([0.04])


def test_only_the_pieces_in_the_time_shown(episode_run):
    fig = timeline_figure(episode_run, view="essential", steps=(0, 1))
    assert _episode_traces(fig) == {} and fig.layout.meta["episode"] == 0
    fig = timeline_figure(episode_run, view="essential", steps=(2, 2))
    assert set(_episode_traces(fig)) == {"death"}


def test_a_run_without_deaths_draws_no_episode(tmp_path):
    fig = timeline_figure(Run(F.make_fake_run(tmp_path / "run")))
    assert _episode_traces(fig) == {} and fig.layout.meta["episode"] == 0
