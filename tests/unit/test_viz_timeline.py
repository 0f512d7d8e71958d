"""The timeline figure on a synthetic run: lanes, bars per kind, the exposed overlay, filters, hover."""

from __future__ import annotations

from collections import Counter

import pytest

from edit_lab.records import analysis as A
from edit_lab.records.run import Run
from edit_lab.viz import colors
from edit_lab.viz.timeline import BAR_WIDTH, ROWS, STAGGER, lane_positions, row_of, timeline_figure

from . import viz_fake_run as F


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run"))


def _event_traces(fig):
    return {t.meta["kind"]: t for t in fig.data if t.meta and t.meta.get("role") == "event"}


def _exposed_trace(fig):
    found = [t for t in fig.data if t.meta and t.meta.get("role") == "exposed"]
    return found[0] if found else None


def test_one_trace_per_kind_with_one_bar_per_event(fake):
    fig = timeline_figure(fake, view="full")
    traces = _event_traces(fig)
    expected = Counter(e["kind"] for e in fake.events)
    assert {k: len(t.x) for k, t in traces.items()} == dict(expected)
    assert fig.layout.meta["counts"] == dict(expected)
    for kind, t in traces.items():
        assert t.orientation == "h" and len(t.base) == len(t.x) == len(t.y)
        assert t.name == colors.kind_label(kind)
    # an unknown kind still gets a bar and a stable colour
    assert traces["mystery"].marker.color == colors.kind_color("mystery")
    assert traces["all_gather"].marker.color == colors.KIND_COLORS["all_gather"]
    # bars start and last as the events did
    ag = sorted((e["t0"], e["t1"]) for e in fake.events if e["kind"] == "all_gather")
    drawn = sorted((b, b + x) for b, x in zip(traces["all_gather"].base, traces["all_gather"].x))
    assert [v for pair in drawn for v in pair] == pytest.approx([v for pair in ag for v in pair])


def test_lanes_one_per_rank_grouped_by_replica(fake):
    fig = timeline_figure(fake, view="full")
    lanes = {int(k): v for k, v in fig.layout.meta["lanes"].items()}
    assert sorted(lanes) == [0, 1, 2, 3]
    assert lanes[0] < lanes[1] < lanes[2] < lanes[3]
    assert lanes[2] - lanes[1] > lanes[1] - lanes[0]  # a gap between replicas
    # every bar sits in its own rank's lane, on the row of its kind
    for t in _event_traces(fig).values():
        for y, cd in zip(t.y, t.customdata):
            rank = cd[3]
            assert min(abs(y - (lanes[rank] + off)) for off in ROWS.values()) <= STAGGER + 1e-9
    comp = _event_traces(fig)["compute_fwd"]
    assert {round(y - lanes[cd[3]], 9) for y, cd in zip(comp.y, comp.customdata)} == {ROWS["compute"]}
    # collectives of consecutive units are staggered, so overlapping transfers (prefetch) stay visible
    sr = _event_traces(fig)["sync_reduce"]
    offsets = {(cd[1][0], round(y - lanes[cd[3]], 9)) for y, cd in zip(sr.y, sr.customdata)}
    assert offsets == {("0", round(ROWS["sync"] - STAGGER, 9)), ("1", round(ROWS["sync"] + STAGGER, 9)),
                       ("2", round(ROWS["sync"] - STAGGER, 9))}
    assert set(sr.width) == {BAR_WIDTH / 2}
    ticks = list(fig.layout.yaxis.ticktext)
    assert sum("rank" in t for t in ticks) == 4 and len(ticks) == 4 * len(ROWS)


def test_exposed_overlay_and_hidden_plus_exposed(fake):
    fig = timeline_figure(fake, view="full")
    comm = [e for e in fake.events if A.is_comm(e["kind"], e["group"])]
    ex = _exposed_trace(fig)
    assert len(ex.x) == len(comm) == fig.layout.meta["exposed_bars"]  # every collective here has exposed > 0
    assert sum(ex.x) == pytest.approx(sum(fake.overlap.split(e).exposed for e in comm))
    # the overlay ends where the collective ended (every wait here ends at its collective's end)
    assert sorted(b + x for b, x in zip(ex.base, ex.x)) == pytest.approx(sorted(e["t1"] for e in comm))
    other = [t for t in fig.data if t.meta and t.meta.get("role") == "other"][0]
    assert sum(other.x) == pytest.approx(sum(fake.overlap.split(e).other for e in comm))
    assert "another collective" in other.name
    c = fig.layout.meta["comm"]
    assert c["hidden_s"] + c["exposed_s"] + c["other_s"] == pytest.approx(c["total_s"])
    assert c["total_s"] == pytest.approx(sum(e["t1"] - e["t0"] for e in comm))
    by_kind = fig.layout.meta["comm_by_kind"]
    n_rs = sum(1 for e in comm if e["kind"] == "reduce_scatter")
    assert by_kind["reduce_scatter"]["hidden_s"] == pytest.approx(n_rs * F.BWD)
    assert by_kind["all_gather"]["hidden_s"] == pytest.approx(0.0, abs=1e-12)
    assert sum(k["total_s"] for k in by_kind.values()) == pytest.approx(c["total_s"])
    assert "hidden under compute" in fig.layout.title.text
    assert _exposed_trace(timeline_figure(fake, view="full", show_exposed=False)) is None


def test_step_and_rank_filters(fake):
    fig = timeline_figure(fake, view="full", steps=(3, 3), ranks=[2, 3])
    assert fig.layout.meta["steps"] == [3, 3]
    assert sorted(int(k) for k in fig.layout.meta["lanes"]) == [2, 3]
    traces = _event_traces(fig)
    assert len(traces["sync_reduce"].x) == 2 * F.UNITS
    assert "grad_all_reduce" not in traces  # only step 0 all-reduces gradients
    assert all(cd[2] == 3 and cd[3] in (2, 3) for t in traces.values() for cd in t.customdata)
    one = timeline_figure(fake, view="full", steps=0)
    assert len(_event_traces(one)["grad_all_reduce"].x) == 4 * F.UNITS
    assert "step 3 · sync" in [a.text for a in fig.layout.annotations]
    nothing = timeline_figure(fake, view="full", steps=(50, 60))
    assert len(nothing.data) == 0 and nothing.layout.meta["comm"]["total_s"] == 0


def test_time_alignment_and_time_windows(fake):
    by_step = timeline_figure(fake, view="full", steps=1)
    by_time = timeline_figure(fake, view="full", steps=1, align="time")
    assert by_time.layout.meta["align"] == "time" and by_step.layout.meta["align"] == "step"
    t0, t1 = by_time.layout.meta["time"]
    rank0 = [e for e in fake.events if e["rank"] == 0 and e["step"] == 1 and e["kind"] != "eval"]
    assert (t0, t1) == (min(e["t0"] for e in rank0), max(e["t1"] for e in rank0))
    # lock-step replicas: the same events, except the evaluation that came later in wall-clock time
    step_counts = dict(by_step.layout.meta["counts"])
    assert step_counts.pop("eval") == 4 and by_time.layout.meta["counts"] == step_counts
    assert list(by_time.layout.xaxis.range)[0] < t0 < t1 < list(by_time.layout.xaxis.range)[1]
    window = timeline_figure(fake, view="full", time=(3.0, 3.005))
    overlapping = [e for e in fake.events if e["t1"] >= 3.0 and e["t0"] <= 3.005]
    assert sum(window.layout.meta["counts"].values()) == len(overlapping) > 0
    assert "3.000–3.005 s" in window.layout.title.text
    with pytest.raises(ValueError):
        timeline_figure(fake, view="full", align="sideways")


def test_default_range_is_cut_to_max_events(fake):
    per_step = Counter(e["step"] for e in fake.events)
    fig = timeline_figure(fake, view="full", max_events=per_step[0] + per_step[1])
    assert fig.layout.meta["steps"] == [0, 1]


def test_hover_has_unit_step_bytes_duration(fake):
    fig = timeline_figure(fake, view="full", steps=0, ranks=[0])
    ag = _event_traces(fig)["all_gather"]
    cd = ag.customdata[0]
    assert cd[1] == "0 (root)" and cd[2] == 0 and cd[8] == "2.0 kB" and float(cd[7]) == pytest.approx(10.0)
    assert "exposed 10.00 ms" in cd[9] and "blocking" in cd[9]
    for key in ("unit", "step", "duration", "ms"):
        assert key in ag.hovertemplate
    rs = _event_traces(fig)["reduce_scatter"]
    assert "async" in rs.customdata[0][9] and "hidden 5.00 ms" in rs.customdata[0][9]
    assert "other 10.00 ms" in rs.customdata[0][9]
    fwd = _event_traces(fig)["compute_fwd"]
    assert {c[1] for c in fwd.customdata} == {"0 (root: embed)", "1 (block 0)", "2 (block 1)"}


def test_rows_and_lane_helpers():
    assert row_of({"kind": "wait", "group": "sync"}) == "compute"
    assert row_of({"kind": "all_gather", "group": "shard"}) == "shard"
    assert row_of({"kind": "co2_reduce", "group": "world"}) == "sync"
    lanes = lane_positions([(3, 1, 1), (0, 0, 0), (2, 1, 0), (1, 0, 1)])
    assert sorted(lanes, key=lanes.get) == [0, 1, 2, 3]


def test_colours_are_consistent_and_complete():
    for kind in ("compute_fwd", "compute_bwd", "all_gather", "reduce_scatter", "grad_all_reduce", "grad_norm",
                 "optimizer", "eval", "straggle", "wait", "sync_reduce", "sync_norms", "sync_clip", "outer_step",
                 "param_average", "co2_reduce", "step_count"):
        assert kind in colors.KIND_COLORS and kind in colors.KIND_LABELS
    assert len(set(colors.KIND_COLORS.values())) == len(colors.KIND_COLORS)  # no two kinds look alike
    assert colors.kind_color("something_new") == colors.kind_color("something_new")
    assert colors.rgba("#FF0000", 0.5) == "rgba(255,0,0,0.5)"
    assert colors.run_colors(["edit", "edit", "sync"])[0] == colors.METHOD_COLORS["edit"]
    assert len(set(colors.run_colors(["edit", "edit", "sync"]))) == 3


# ------------------------------------------------------------------------------- the essential view
def _roles(fig, role="event"):
    return {t.meta["kind"]: t for t in fig.data if t.meta and t.meta.get("role") == role}


def test_the_essential_view_is_one_lane_per_replica_and_one_colour_per_meaning(fake):
    fig = timeline_figure(fake)  # the default
    assert fig.layout.meta["view"] == "essential"
    lanes = {int(k) for k in fig.layout.meta["lanes"]}
    assert lanes == {rep * F.S for rep in range(F.R)}  # each replica's shard-0 rank
    traces = _roles(fig)
    assert set(traces) <= {"compute", "eval", "straggle", "waiting", "sync"}
    assert len([t for t in fig.data if t.showlegend is not False]) <= 7
    shown = [e for e in fake.events if e["rank"] in lanes]
    # compute: forward, backward, optimizer and outer step of the shown ranks, one trace, two blues by step
    compute = [e for e in shown if e["kind"] in ("compute_fwd", "compute_bwd", "optimizer", "outer_step")]
    assert len(traces["compute"].x) == len(compute)
    assert set(traces["compute"].marker.color) <= {colors.ROUND_COLORS["step"], colors.ROUND_COLORS["step_alt"]}
    # sync-group traffic: every collective that is not the shard group's, one colour; the shard group's is left out
    sync = [e for e in shown if A.is_comm(e["kind"], e["group"]) and e["group"] != "shard"]
    assert len(traces["sync"].x) == len(sync) and traces["sync"].marker.color == colors.ROUND_COLORS["sync"]
    assert set(traces["sync"].meta["kinds"]) == {e["kind"] for e in sync}
    ticks = list(fig.layout.yaxis.ticktext)
    assert len(ticks) == 2 * len(lanes) and not any("shard-group" in t for t in ticks)


def test_waiting_is_the_union_of_every_collectives_exposed_part(fake):
    """On the compute row, red = the rank stood blocked on a collective of any group: the union of the exposed
    parts overlap.py gives, each instant once (hand-built events of viz_fake_run)."""
    from edit_lab.records.overlap import length, merge

    fig = timeline_figure(fake)
    waiting = _roles(fig)["waiting"]
    assert waiting.marker.color == colors.EXPOSED
    lanes = {int(k) for k in fig.layout.meta["lanes"]}
    for rank in lanes:
        comm = [e for e in fake.events if e["rank"] == rank and A.is_comm(e["kind"], e["group"])]
        want = merge(iv for e in comm for iv in fake.overlap.split(e).exposed_at)
        drawn = sorted((b, b + x) for b, x, cd in zip(waiting.base, waiting.x, waiting.customdata) if cd[3] == rank)
        assert [v for iv in drawn for v in iv] == pytest.approx([v for iv in want for v in iv])
        assert length(drawn) <= sum(fake.overlap.split(e).exposed for e in comm) + 1e-12
    # the subtitle's totals are the sync group's traffic of the shown ranks
    sync = [e for e in fake.events if e["rank"] in lanes and A.is_comm(e["kind"], e["group"]) and e["group"] != "shard"]
    assert fig.layout.meta["comm"]["total_s"] == pytest.approx(fake.overlap.totals(sync)["total_s"])
    assert "sync-group traffic in flight" in fig.layout.title.text


def test_a_view_is_named(fake):
    with pytest.raises(ValueError, match="view='all'"):
        timeline_figure(fake, view="all")
    assert timeline_figure(fake, ranks=[1]).layout.meta["lanes"] == {"1": 0.0}  # chosen ranks are kept
