"""The round picture (viz/rounds.py): exact blocks on hand-built runs, sanity on a shipped example.

The hand-built runs have 2 shards × 2 replicas; replica 1 is a straggler whose steps take twice as long
(0.1 s of compute, then a 0.1 s pause). Shard 1 of each replica gets the same events 3 ms later plus a
wait of its own, so a number taken from the wrong rank shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edit_lab import RunConfig
from edit_lab.records.overlap import merge
from edit_lab.records.run import Run
from edit_lab.viz import rounds_figure
from edit_lab.viz.layout import SUBTITLE_CHARS, TITLE_CHARS
from edit_lab.viz.rounds import BLOCK_LABELS, default_window, round_blocks, round_marks

S, R, STEPS = 2, 2, 4
EXAMPLES = Path(__file__).resolve().parents[2] / "edit_lab" / "records" / "examples"


def _ev(rank: int, step: int, kind: str, t0: float, t1: float, group: str | None = None, unit: int | None = None,
        **data) -> dict:
    return {"rank": rank, "replica": rank // S, "shard": rank % S, "step": step, "unit": unit, "kind": kind,
            "t0": t0, "t1": t1, "bytes": 0, "group": group, "data": data}


def _compute(rep: int, step: int, t: float, slow: bool) -> list[tuple]:
    """A step of 0.05 s forward + 0.05 s backward, and on the straggler a 0.1 s pause."""
    out = [(step, "compute_fwd", t, t + 0.05), (step, "compute_bwd", t + 0.05, t + 0.10)]
    if slow:
        out.append((step, "straggle", t + 0.10, t + 0.20))
    return out


def _write_run(path: Path, method: str, per_replica: dict[int, list[tuple]], syncs: list[dict]) -> Run:
    """A run directory whose shard-0 ranks have exactly `per_replica`'s events: tuples
    (step, kind, t0, t1) or (step, kind, t0, t1, group, data)."""
    path.mkdir(parents=True)
    cfg = RunConfig(method=method, shards=S, replicas=R, steps=STEPS, model="nano", seq_len=32, batch_size=4,
                    warmup_steps=0, sync_interval=2, sync_period=0.25, straggler_replicas=(1,), straggler_factor=2.0,
                    progress=False, out=str(path))
    (path / "config.json").write_text(cfg.to_json())
    for rep, evs in per_replica.items():
        for shard in range(S):
            rank = rep * S + shard
            lag = 0.003 * shard
            rows = [_ev(rank, e[0], e[1], e[2] + lag, e[3] + lag, *(e[4:5]), **(e[5] if len(e) > 5 else {}))
                    for e in evs]
            if shard:  # a wait only shard 1 has
                rows.append(_ev(rank, 0, "wait", 0.02, 0.03, group="sync", on="nothing"))
            (path / f"events-rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "syncs.jsonl").write_text("".join(json.dumps(s) + "\n" for s in syncs))
    (path / "metrics.jsonl").write_text("")
    (path / "summary.json").write_text(json.dumps({"method": method, "wall_s": 0.82, "method_info": {}}))
    return Run(path)


def _blocking(step: int, t0: float, t1: float, kind: str = "sync_decisions") -> tuple:
    return (step, kind, t0, t1, "sync", {"overlapped": False, "exposed": t1 - t0})


@pytest.fixture(scope="module")
def edit_run(tmp_path_factory) -> Run:
    """EDiT, sync every 2 steps. The fast replica reaches the sync of step 2 at 0.20 s and blocks in the
    decisions exchange until the slow one arrives at 0.40 s (+10 ms of transfer); its async sync_reduce
    (0.41–0.47) runs under its forward and is waited on for 10 ms (0.46–0.47). Final sync at step 4."""
    fast = _compute(0, 0, 0.0, False) + _compute(0, 1, 0.1, False) + [
        _blocking(2, 0.20, 0.41),
        (2, "sync_reduce", 0.41, 0.47, "sync", {"overlapped": True, "exposed": 0.01}),
        (2, "wait", 0.46, 0.47, "sync", {"on": "sync_reduce"}),
        (2, "compute_fwd", 0.41, 0.46), (2, "compute_bwd", 0.47, 0.52),
    ] + _compute(0, 3, 0.52, False) + [_blocking(4, 0.62, 0.82)]
    slow = _compute(1, 0, 0.0, True) + _compute(1, 1, 0.2, True) + [
        _blocking(2, 0.40, 0.41),
        (2, "sync_reduce", 0.41, 0.45, "sync", {"overlapped": True, "exposed": 0.0}),
    ] + _compute(1, 2, 0.41, True) + _compute(1, 3, 0.61, True) + [_blocking(4, 0.81, 0.82)]
    syncs = [{"kind": "anchor", "step": 0}, {"kind": "sync", "step": 2}, {"kind": "sync", "step": 4}]
    return _write_run(tmp_path_factory.mktemp("rounds") / "edit", "edit", {0: fast, 1: slow}, syncs)


@pytest.fixture(scope="module")
def aedit_run(tmp_path_factory) -> Run:
    """A-EDiT: three meetings (step-count all-gathers), the second one without a sync."""
    fast = (_compute(0, 0, 0.0, False) + _compute(0, 1, 0.1, False) + _compute(0, 2, 0.2, False)
            + [_blocking(3, 0.30, 0.40, "step_count")] + _compute(0, 3, 0.40, False)
            + [_blocking(4, 0.50, 0.602, "step_count"), _blocking(4, 0.602, 0.803, "step_count")])
    slow = (_compute(1, 0, 0.0, True) + _compute(1, 1, 0.2, True) + [_blocking(2, 0.40, 0.401, "step_count")]
            + _compute(1, 2, 0.401, True) + [_blocking(3, 0.601, 0.602, "step_count")]
            + _compute(1, 3, 0.602, True) + [_blocking(4, 0.802, 0.803, "step_count")])
    syncs = [{"kind": "anchor", "step": 0},
             {"kind": "round", "step": 3, "synced": True, "t": 0.4}, {"kind": "sync", "step": 3},
             {"kind": "round", "step": 4, "synced": False, "t": 0.6},
             {"kind": "round", "step": 4, "synced": True, "t": 0.8}, {"kind": "sync", "step": 4}]
    return _write_run(tmp_path_factory.mktemp("rounds") / "aedit", "aedit", {0: fast, 1: slow}, syncs)


def _spans(blocks, replica, kind):
    return [(round(b["t0"], 9), round(b["t1"], 9), b["step"]) for b in blocks
            if b["replica"] == replica and b["kind"] == kind]


# ---------------------------------------------------------------- the numbers
def test_blocks_of_a_fast_and_a_slow_replica(edit_run):
    blocks = round_blocks(edit_run)
    assert {b["rank"] for b in blocks if b["replica"] == 0} == {0} and {b["rank"] for b in blocks
                                                                        if b["replica"] == 1} == {2}  # shard 0
    # the fast replica: its steps, and waiting where it stood blocked on the sync group
    assert _spans(blocks, 0, "step") == [(0.0, 0.1, 0), (0.1, 0.2, 1), (0.41, 0.46, 2), (0.47, 0.52, 2),
                                         (0.52, 0.62, 3)]
    assert _spans(blocks, 0, "wait") == [(0.2, 0.41, 2), (0.46, 0.47, 2), (0.62, 0.82, 4)]
    assert _spans(blocks, 0, "straggle") == []
    assert _spans(blocks, 0, "sync") == [(0.2, 0.47, 2), (0.62, 0.82, 4)]  # decisions ∪ sync_reduce, issue→end
    # the slow one: half of every step is the pause, and it hardly waits (the 10 ms transfer)
    assert _spans(blocks, 1, "step") == [(0.0, 0.1, 0), (0.2, 0.3, 1), (0.41, 0.51, 2), (0.61, 0.71, 3)]
    assert _spans(blocks, 1, "straggle") == [(0.1, 0.2, 0), (0.3, 0.4, 1), (0.51, 0.61, 2), (0.71, 0.81, 3)]
    assert _spans(blocks, 1, "wait") == [(0.4, 0.41, 2), (0.81, 0.82, 4)]
    assert _spans(blocks, 1, "sync") == [(0.4, 0.45, 2), (0.81, 0.82, 4)]


def test_waiting_is_the_exposed_part_by_overlap_py(edit_run):
    """The red blocks are overlap.py's exposed intervals: all of a blocking collective, only the `wait` of an
    async one (the whole sync_reduce span 0.41–0.47 would be 60 ms, not 10)."""
    rank0 = [e for e in edit_run.events if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] != "wait"]
    exposed = merge(iv for e in rank0 for iv in edit_run.overlap.split(e).exposed_at)
    waits = [(b["t0"], b["t1"]) for b in round_blocks(edit_run) if b["replica"] == 0 and b["kind"] == "wait"]
    assert [t for iv in waits for t in iv] == pytest.approx([t for iv in exposed for t in iv])


def test_round_boundaries_are_the_last_arrival(edit_run, aedit_run):
    assert [(m["t"], m["step"], m["source"]) for m in round_marks(edit_run)] == \
        [(0.40, 2, "sync"), (0.81, 4, "sync")]
    # A-EDiT: the m-th round record is each rank's m-th meeting; the meeting without a sync draws no line
    assert [(m["t"], m["step"], m["source"]) for m in round_marks(aedit_run)] == \
        [(0.40, 3, "round"), (0.802, 4, "round")]


def test_window_clips_blocks(edit_run):
    blocks = round_blocks(edit_run, (0.15, 0.45))
    assert _spans(blocks, 0, "step") == [(0.15, 0.2, 1), (0.41, 0.45, 2)]
    assert _spans(blocks, 0, "wait") == [(0.2, 0.41, 2)]
    assert _spans(blocks, 1, "straggle") == [(0.15, 0.2, 0), (0.3, 0.4, 1)]
    assert all(0.15 <= b["t0"] < b["t1"] <= 0.45 for b in blocks)


def test_default_window_from_the_anchor_to_the_first_replica_out_of_steps(edit_run, aedit_run):
    # EDiT alone: from its anchor (step 0) to its fast replica's last step (0.62 s); with the A-EDiT run,
    # whose fast replica runs out of steps at 0.50 s, the shared window ends there
    assert default_window(edit_run) == pytest.approx((0.0, 0.62))
    assert default_window([edit_run, aedit_run]) == pytest.approx((0.0, 0.50))


# ---------------------------------------------------------------- the figure
def test_figure_stacks_runs_on_one_time_axis(edit_run, aedit_run):
    window = (0.0, 0.85)
    fig = rounds_figure([edit_run, aedit_run], labels=["edit", "aedit"], window=window)
    meta = fig.layout.meta
    assert meta["runs"] == ["edit", "aedit"] and meta["window"] == list(window)
    # one subplot per run, one row per replica, the same x range everywhere (and zooming together)
    assert fig.layout.xaxis.range == fig.layout.xaxis2.range == window and fig.layout.xaxis.matches == "x2"
    assert "xaxis3" not in fig.layout
    for ax in (fig.layout.yaxis, fig.layout.yaxis2):
        assert list(ax.tickvals) == [0, 1]
        assert ax.ticktext[0] == "replica 0" and ax.ticktext[1].startswith("replica 1") and "slow ×2" in ax.ticktext[1]
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("<b>edit</b>") and titles[1].startswith("<b>aedit</b>")
    assert "replica 0: 4 steps, waited 49%" in titles[0]  # 0.21 + 0.01 + 0.20 s of 0.85 s
    # the legend: each kind named once
    named = [t.name for t in fig.data if t.showlegend]
    assert sorted(named) == sorted(BLOCK_LABELS[k] for k in ("step", "straggle", "wait", "sync", "boundary"))
    # the bars are the blocks: the edit run's (on x/y) add up to the records' seconds, kind by kind
    blocks = round_blocks(edit_run, window)
    for kind in ("step", "straggle", "wait", "sync"):
        drawn = sum(sum(t.x) for t in fig.data if t.meta and t.meta.get("role") == kind and t.meta["run"] == "edit")
        assert drawn == pytest.approx(sum(b["t1"] - b["t0"] for b in blocks if b["kind"] == kind)), kind
    lines = [t for t in fig.data if t.meta and t.meta.get("role") == "boundary"]
    assert [[x for x in t.x if x is not None][::2] for t in lines] == [[0.40, 0.81], [0.40, 0.802]]
    assert meta["marks"] == [[0.40, 0.81], [0.40, 0.802]]
    assert fig.layout.width is None and fig.layout.autosize is True and fig.layout.legend.orientation == "h"
    for line in fig.layout.title.text.split("<br>"):  # wrapped to fit a laptop's notebook
        visible = re.sub(r"<[^>]+>", "", line)
        assert len(visible) <= (SUBTITLE_CHARS if "<sup>" in line else TITLE_CHARS), line


# ---------------------------------------------------------------- a shipped example
@pytest.mark.parametrize("name", ["sync-straggler", "edit-straggler", "aedit-straggler"])
def test_shipped_example_blocks_are_disjoint_and_inside_the_run(name):
    run = Run(EXAMPLES / name)
    blocks = round_blocks(run)
    end = max(e["t1"] for e in run.events)
    wall = run.summary["wall_s"]
    for rep in range(run.config.replicas):
        mine = [b for b in blocks if b["replica"] == rep]
        for lane in (("step", "straggle", "wait", "eval"), ("sync",)):
            ivs = sorted((b["t0"], b["t1"]) for b in mine if b["kind"] in lane)
            assert ivs and all(a < b for a, b in ivs)
            assert all(b0 <= a1 + 1e-12 for (_, b0), (a1, _) in zip(ivs, ivs[1:])), (name, rep, lane)
        assert all(0.0 <= b["t0"] and b["t1"] <= end for b in mine)
        # training ends with the last step (wall_s); only the final sync and evaluation come after it, and
        # with a time budget the clock read and exchange that decided to stop (tagged with the last step, as
        # every step's budget check is with the step before it)
        rank = rep * run.config.shards
        last = max(b["step"] for b in mine if b["kind"] == "step")
        stop = max((e["t1"] for e in run.events if e["rank"] == rank and e["step"] == last
                    and e["kind"] in ("clock", "stop_check")), default=wall)
        assert all(b["t1"] <= max(wall, stop) + 1e-9 for b in mine if b["kind"] in ("step", "straggle"))
        # the red seconds are the rank's exposed sync-group time, each instant once (overlap.py)
        cross = [e for e in run.events if e["rank"] == rank and e.get("group") in ("sync", "world")
                 and e["kind"] != "wait"]
        exposed = run.overlap.rank_totals(cross)[rank]["exposed_s"]
        assert sum(b["t1"] - b["t0"] for b in mine if b["kind"] == "wait") == pytest.approx(exposed)


def test_time_budget_runs_are_drawn_to_the_steps_they_trained():
    """With a time budget `steps` is ignored: the round picture of the shipped EDiT run (cfg.steps = 24, 81
    steps trained) must draw every step, not stop at step 24 (issue 23)."""
    from edit_lab.viz.rounds import step_spans

    run = Run(EXAMPLES / "edit-straggler")
    trained = {int(k): v["steps"] for k, v in run.summary["per_replica"].items()}
    assert run.config.time_budget > 0 and min(trained.values()) > run.config.steps
    blocks = round_blocks(run)
    for rep, n in trained.items():
        assert sorted(step_spans(run, rep)) == list(range(n))
        assert max(b["step"] for b in blocks if b["replica"] == rep and b["kind"] == "step") == n - 1
    # the default window still ends when the first replica ran out of steps, at the latest: now near the budget
    cap = min(max(b for _, b in step_spans(run, rep).values()) for rep in trained)
    assert cap > 0.9 * run.config.time_budget and default_window(run)[1] <= cap
