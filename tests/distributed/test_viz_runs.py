"""Every figure, export and panel built from real small runs (gloo, nano model, ≤ 4 ranks).

Runs are shared per module: a synchronous 2×2 run with a slow replica, random pauses and a slow
sync link; an EDiT 1×2 run with a parameter spike (so the penalty flags an outlier) and prefetch on;
the same without prefetch and spike. The panels launch their own tiny 1×2 runs. (Every process
costs a second or two of imports, so only the run that must be 2×2 is.)
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from edit_lab import launch
from edit_lab.records import analysis as A
from edit_lab.viz import loss_figure, memory_figure, penalty_figure, straggler_figure, timeline_figure, write_trace
from tests.helpers import small


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    return launch(small(method="sync", shards=2, replicas=2, steps=6, straggler_replicas=(1,), straggler_factor=2.0,
                        random_pause_prob=0.5, random_pause_ms=15.0, link_latency_ms=1.0, link_bandwidth_mb_s=50.0,
                        eval_every=3, out=str(tmp_path_factory.mktemp("viz") / "sync")))


@pytest.fixture(scope="module")
def edit_run(tmp_path_factory):
    # steps 10: the spike after step 6 is judged at the sync of step 8 (the closing sync of `finalize`, 10,
    # is not judged)
    return launch(small(method="edit", shards=1, replicas=2, steps=10, warmup_steps=2, sync_interval=2,
                        penalty_arming=2, spike_replica=1, spike_step=6, link_latency_ms=2.0,
                        link_bandwidth_mb_s=20.0, eval_every=4, out=str(tmp_path_factory.mktemp("viz") / "edit")))


@pytest.fixture(scope="module")
def edit_no_prefetch(tmp_path_factory):
    return launch(small(method="edit", shards=1, replicas=2, steps=6, warmup_steps=2, sync_interval=2,
                        prefetch=False, link_latency_ms=2.0, link_bandwidth_mb_s=20.0,
                        out=str(tmp_path_factory.mktemp("viz") / "edit-noprefetch")))


def _event_traces(fig):
    return {t.meta["kind"]: t for t in fig.data if t.meta and t.meta.get("role") == "event"}


# ---------------------------------------------------------------- timeline
def test_timeline_of_a_real_run(sync_run):
    steps = (1, 3)
    fig = timeline_figure(sync_run, steps=steps, view="full")
    evs = [e for e in sync_run.events if steps[0] <= e["step"] <= steps[1]]
    assert sorted(int(k) for k in fig.layout.meta["lanes"]) == list(range(sync_run.config.world_size))
    traces = _event_traces(fig)
    assert {k: len(t.x) for k, t in traces.items()} == dict(Counter(e["kind"] for e in evs))
    for kind in ("compute_fwd", "compute_bwd", "all_gather", "reduce_scatter", "grad_all_reduce", "wait",
                 "straggle", "optimizer"):
        assert kind in traces, kind
    # straggler pauses: every step of the slow replica (ranks 2, 3) has one
    slow = [cd for cd in traces["straggle"].customdata if cd[4] == 1]
    assert len(slow) == 2 * (steps[1] - steps[0] + 1)
    comm = [e for e in evs if A.is_comm(e["kind"], e["group"])]
    c = fig.layout.meta["comm"]
    assert c["total_s"] <= sum(e["t1"] - e["t0"] for e in comm) + 1e-9  # concurrent collectives counted once
    assert c["hidden_s"] + c["exposed_s"] + c["other_s"] == pytest.approx(c["total_s"])
    tot = A.comm_totals(sync_run, steps=steps)
    assert {k: c[k] for k in tot} == pytest.approx(tot)
    assert fig.layout.meta["exposed_bars"] == sum(len(sync_run.overlap.split(e).exposed_at) for e in comm)


def _waits_on(run, kind: str) -> tuple[float, float]:
    """(within, after) for the asynchronous collectives of `kind`: `within` is Σ of the time their rank waited
    on one while it was in flight (each `wait` span on it, same rank, unit and group, cut to its t0..t1);
    `after` is Σ of the waits that began once their collective had completed (the rank came to wait on a
    collective already done: overlap.py then counts the recorded wait, at most the collective's duration)."""
    waits = [w for w in run.events_of("wait") if w["data"].get("on") == kind]
    key = lambda e: (e["rank"], e["unit"], e["group"])  # noqa: E731
    within, used = 0.0, set()
    for c in run.events_of(kind):
        mine = [i for i, w in enumerate(waits) if key(w) == key(c) and w["t0"] < c["t1"] and w["t1"] > c["t0"]]
        within += sum(min(waits[i]["t1"], c["t1"]) - max(waits[i]["t0"], c["t0"]) for i in mine)
        used.update(mine)
    return within, sum(w["t1"] - w["t0"] for i, w in enumerate(waits) if i not in used)


def test_exposed_part_of_async_collectives_is_the_wait(sync_run):
    split = A.comm_split(sync_run, by=("kind",)).set_index("kind")
    df = A.events_table(sync_run)
    waits = df[df["kind"] == "wait"].groupby("on")["duration"].sum()
    for kind in ("reduce_scatter", "grad_all_reduce"):
        overlapped = df[(df["kind"] == kind)]
        assert overlapped["overlapped"].all()
        # exposed time is the wait, clipped to the collective's own span: a rank woken late by a busy OS
        # waited longer than the transfer lasted, and that part of its wait is no collective's exposed time
        assert split.loc[kind, "exposed_s"] <= waits[kind] + 1e-9
        within, after = _waits_on(sync_run, kind)
        assert within - 1e-9 <= split.loc[kind, "exposed_s"] <= within + after + 1e-9
    # the root's all-gather is blocking (nothing computes before it) and exposed end to end; every block's
    # is prefetched (issued before the previous unit computes, as FSDP2 does) and waited for later
    ag = df[df["kind"] == "all_gather"]
    root = ag[ag["unit"] == 0]
    assert (~root["overlapped"]).all() and root["hidden"].sum() == pytest.approx(0.0, abs=1e-9)
    assert root["exposed"].sum() == pytest.approx(root["duration"].sum())
    blocks = ag[(ag["unit"] >= 1) & (ag["step"] < sync_run.config.steps)]  # not the final state-dict gathers
    assert blocks["overlapped"].all() and blocks["hidden"].sum() > 0


def test_timeline_shows_what_prefetch_hides(edit_run, edit_no_prefetch):
    """With prefetch, unit l's sync is issued before unit l−1 computes and mostly hidden; without, it is not."""
    for run, prefetch in ((edit_run, True), (edit_no_prefetch, False)):
        sync_step = A.sync_window(run)[1]
        fig = timeline_figure(run, steps=sync_step, view="full")
        assert "sync_reduce" in _event_traces(fig)
        assert "step %d · sync" % sync_step in [a.text for a in fig.layout.annotations]
        evs = [e for e in run.events if e["step"] == sync_step and e["rank"] == 0]
        issue = {e["unit"]: e["t0"] for e in evs if e["kind"] == "sync_reduce"}
        fwd = {e["unit"]: e for e in evs if e["kind"] == "compute_fwd" and (e["data"].get("part") != "head")}
        for u in range(1, len(issue)):
            if prefetch:
                assert issue[u] < fwd[u - 1]["t0"]  # in flight while the previous unit computes
            else:
                assert issue[u] > fwd[u - 1]["t1"]  # only after it, nothing to hide behind
    hidden = {}
    for name, run in (("on", edit_run), ("off", edit_no_prefetch)):
        s = A.comm_split(run, by=("kind", "unit"))
        s = s[(s["kind"] == "sync_reduce") & (s["unit"] >= 1)]
        hidden[name] = s["hidden_s"].sum() / s["total_s"].sum()
        # the figure reports the same split for what it shows
        fig = timeline_figure(run, view="full")
        k = fig.layout.meta["comm_by_kind"]["sync_reduce"]
        assert k["hidden_s"] + k["exposed_s"] + k["other_s"] == pytest.approx(k["total_s"])
    assert hidden["on"] > hidden["off"]


def _sampled(path, rank: int, dt: float = 2e-5) -> dict[str, float]:
    """Hidden and in-flight seconds of one rank's collectives, from its events file by sampling time
    every `dt` (independent of overlap.py's interval arithmetic): an instant is hidden when a
    collective is in flight and the rank is in a compute span and in no wait or blocking collective."""
    import numpy as np

    evs = [json.loads(line) for line in open(path / f"events-rank{rank}.jsonl")]
    end = max(e["t1"] for e in evs)
    t = np.arange(0.0, end, dt)

    def covered(spans):
        on = np.zeros(len(t), dtype=bool)
        for a, b in spans:
            on[np.searchsorted(t, a):np.searchsorted(t, b)] = True
        return on

    comm = [e for e in evs if e["group"] is not None and e["kind"] != "wait"]
    flight = covered((e["t0"], e["t1"]) for e in comm)
    work = covered((e["t0"], e["t1"]) for e in evs if e["kind"] in
                   ("compute_fwd", "compute_bwd", "optimizer", "outer_step", "eval", "straggle"))
    blocked = covered([(e["t0"], e["t1"]) for e in evs if e["kind"] == "wait"]
                      + [(e["t0"], e["t1"]) for e in comm if not e["data"].get("overlapped")])
    return {"comm_s": flight.sum() * dt, "hidden_s": (flight & work & ~blocked).sum() * dt}


def test_hidden_time_is_the_intersection_of_communication_and_compute(edit_run):
    """On a real EDiT run over a slow link, the hidden time the lab reports is the overlap of each rank's
    collectives with its own compute, as read straight from events-rank*.jsonl."""
    by_rank = A.comm_by_rank(edit_run).set_index("rank")
    for rank in range(edit_run.config.world_size):
        want = _sampled(edit_run.path, rank)
        assert by_rank.loc[rank, "comm_s"] == pytest.approx(want["comm_s"], abs=2e-3)
        assert by_rank.loc[rank, "hidden_s"] == pytest.approx(want["hidden_s"], abs=2e-3)
        assert by_rank.loc[rank, "hidden_s"] <= by_rank.loc[rank, "work_s"]
    sync = A.comm_totals(edit_run, groups=["sync"])
    assert 0 < sync["hidden_s"] < sync["total_s"]


# ---------------------------------------------------------------- penalty, stragglers, losses, memory
def test_penalty_figure_marks_the_recorded_outliers(edit_run):
    fig = penalty_figure(edit_run, units="all")
    records = edit_run.penalty
    assert len(records) == len({p["step"] for p in records}) * (1 + 2) * edit_run.config.replicas
    outliers = sorted((p["step"], p["unit"], p["replica"]) for p in records if p["outlier"])
    assert any(rep == 1 for _, _, rep in outliers)  # the spiked replica was caught
    assert fig.layout.meta["outliers"] == len(outliers)
    drawn = []
    for t in fig.data:
        if t.meta and t.meta.get("role") == "outlier" and t.meta["panel"] == "G":
            unit = fig.layout.meta["units"][0 if t.xaxis == "x" else int(t.xaxis[1:]) - 1]
            drawn += [(int(x), unit) for x in t.x]
    assert sorted(drawn) == sorted((s, u) for s, u, _ in outliers)
    weights = [t for t in fig.data if t.meta and t.meta.get("role") == "weight"]
    assert sum(len(t.y) for t in weights) == len(records)


def test_straggler_figure_against_the_capacity_bound(sync_run, tmp_path):
    fig = straggler_figure(sync_run)
    table = A.replica_table(sync_run)
    bound = A.capacity_bound(sync_run)
    assert fig.layout.meta["capacity_bound"] == pytest.approx([bound])
    assert fig.layout.meta["achieved"][0] <= bound  # nobody beats their own pace
    assert (table["own_tokens_per_s"] >= table["tokens_per_s"]).all()
    assert table.loc[1, "straggle_s"] > 0  # the slow replica was stretched every step
    rounds = A.rounds_table(sync_run)
    assert rounds["local_steps"].tolist() == [1] * (sync_run.config.steps * 2)  # synchronous: every step


def test_losses_memory_and_comparison_of_real_runs(sync_run, edit_run):
    fig = loss_figure([sync_run, edit_run])
    assert fig.layout.meta["runs"] == [A.run_label(sync_run), A.run_label(edit_run)]
    val = [t for t in fig.data if t.meta.get("role") == "val" and t.xaxis == "x2"]
    assert [len(t.x) for t in val] == [2, 3] and all(x == x for t in val for x in t.x)  # eval times known
    mem = memory_figure([sync_run, edit_run])
    parts = {t.meta["role"]: list(t.y) for t in mem.data}
    n_sync = sync_run.config.world_size
    assert len(parts["params"]) == n_sync + edit_run.config.world_size
    for k in range(n_sync):
        assert parts["params"][k] == sync_run.summary["memory"][str(k)]["params"]
        assert parts["method_state"][k] == 0
    for k in range(edit_run.config.world_size):
        e = edit_run.summary["memory"][str(k)]
        assert parts["params"][n_sync + k] == e["params"]
        assert parts["method_state"][n_sync + k] == 2 * e["params"]  # anchor + outer momentum, sharded like θ
    table = A.compare([sync_run, edit_run])
    assert table["syncs"].tolist()[0] == 0 and table["syncs"].tolist()[1] >= 2
    assert (table["hidden_s"] + table["exposed_s"] + table["other_s"]).tolist() == pytest.approx(table["comm_s"].tolist())


# ---------------------------------------------------------------- exports
def test_trace_of_a_2x2_run_parses(sync_run, tmp_path):
    for path in (sync_run.path / "trace.json", write_trace(sync_run, tmp_path / "t.json")):
        trace = json.loads(path.read_text())
        assert isinstance(trace["traceEvents"], list)
        pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
        assert pids == {0, 1, 2, 3}
        procs = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
        assert sorted(e["pid"] for e in procs) == [0, 1, 2, 3]
        assert all(e["dur"] >= 0 and "ts" in e for e in trace["traceEvents"] if e["ph"] == "X")


def test_report_of_a_real_run(sync_run, tmp_path):
    from edit_lab.viz.report import write_report

    path = write_report(sync_run.path, tmp_path / "report.html")
    text = path.read_text()
    assert "Run report: sync 2×2" in text and text.count("Plotly.newPlot") == 4  # no penalty for sync


# ---------------------------------------------------------------- panels
def test_timeline_explorer_filters_and_redraws(sync_run):
    from edit_lab.ui.lab import TimelineExplorer

    ex = TimelineExplorer(sync_run)
    assert ex.figure.layout.meta["steps"] == list(A.sync_window(sync_run))
    before = ex.figure
    ex.set(steps=(0, 0), ranks=[1, 3])
    assert ex.figure is not before
    assert ex.figure.layout.meta["steps"] == [0, 0]
    assert sorted(ex.figure.layout.meta["lanes"]) == ["1", "3"]
    n = sum(1 for e in sync_run.events if e["step"] == 0 and e["rank"] in (1, 3))
    assert sum(ex.figure.layout.meta["counts"].values()) == n
    assert len(ex.fig_widget.data) == len(ex.figure.data)
    assert "all_gather" in ex.table.value
    ex.show_exposed.value = False
    assert ex.figure.layout.meta["exposed_bars"] == 0
    ex.set(align="time", steps=(2, 2))
    meta = ex.figure.layout.meta
    assert meta["align"] == "time" and meta["time"][0] < meta["time"][1]


def test_straggler_lab_launches_and_redraws(tmp_path):
    from edit_lab.ui.lab import StragglerLab

    lab = StragglerLab(base=small(shards=1, replicas=2, steps=3, warmup_steps=1, sync_interval=1), out_dir=tmp_path,
                       initial=[])  # no shipped example runs: the panel starts empty
    assert lab.figures["timeline"].layout.meta["empty"]
    # a bad setting is reported in the panel, before anything starts
    lab.base = lab.base.replace(seq_len=10_000)
    lab.click()
    assert type(lab.error).__name__ == "ConfigError" and "failed" in lab.status.value and lab.last_run is None
    lab.base = lab.base.replace(seq_len=32)

    lab.set(method="sync", slow_factor=2.0, pause_prob=0.0, bandwidth=20.0, latency_ms=1.0)
    lab.click()
    assert lab.error is None, lab.error
    cfg = lab.last_run.config
    assert (cfg.method, cfg.stragglers.replicas, cfg.stragglers.factor) == ("sync", (1,), 2.0)
    assert (cfg.link.bandwidth_mb_s, cfg.link.latency_ms) == (20.0, 1.0)
    assert lab.progress.value == 3 and lab.progress.bar_style == "success"
    tl = lab.figures["timeline"]
    assert sorted(tl.layout.meta["lanes"]) == ["0", "1"]
    lo, hi = tl.layout.meta["steps"]
    straggle = _event_traces(tl)["straggle"]
    assert len(straggle.x) == hi - lo + 1 and {cd[4] for cd in straggle.customdata} == {1}  # the slow replica
    assert len(lab.figure_widgets["timeline"].data) == len(tl.data)
    first_stragglers = lab.figures["stragglers"]

    lab.set(method="edit", slow_factor=1.0)
    lab.click()
    assert lab.error is None, lab.error
    assert lab.last_run.config.method == "edit" and lab.last_run.config.stragglers.replicas == ()
    assert lab.figures["stragglers"] is not first_stragglers
    assert len(lab.figures["stragglers"].layout.meta["runs"]) == 2  # the two presses, compared
    assert len(lab.figures["loss"].layout.meta["runs"]) == 2
    assert lab.figures["penalty"].layout.meta.get("syncs", 0) >= 1
