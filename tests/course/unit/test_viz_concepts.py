"""The figures of the method's arithmetic (edit_course/figures/concepts.py) and of a τ sweep (edit_course/figures/sweeps.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from edit_course.figures.concepts import (
    BLOCKED,
    mesh_figure,
    outer_state_figure,
    rank_bytes,
    rank_bytes_figure,
    shard_layout_figure,
    sync_schedule_figure,
    sync_straggler_figure,
)
from edit_course.figures.sweeps import TAU_PANELS, tau_sweep_figure
from edit_lab.core.mesh import Mesh
from edit_lab.core.methods.local_sgd import in_warmup, is_anchor_step, is_sync_step
from edit_lab.core.sharding import UnitLayout
from edit_lab.core.model import build_model, get_size
from edit_lab.viz.layout import SUBPLOT_TITLE_LIFT_PX, SUBPLOT_TITLE_PX


def test_sync_straggler_figure_blocks_the_healthy_replica():
    fig = sync_straggler_figure(2.5, steps=3)
    compute = [t for t in fig.data if t.name == "compute"]
    blocked = [t for t in fig.data if t.name == "blocked in the all-reduce"]
    assert len(compute) == 6 and len(blocked) == 3  # only the healthy replica waits, once per step
    assert all(t.y == ("replica 0 (healthy)",) and t.x == (1.5,) and t.marker.color == BLOCKED for t in blocked)
    assert [t.base[0] for t in blocked] == [1.0, 3.5, 6.0]  # it waits from the end of its compute to the step's end
    assert [s.x0 for s in fig.layout.shapes] == [2.5, 5.0, 7.5]  # the all-reduce ends each step
    assert sum(t.showlegend for t in fig.data) == 2
    no_wait = sync_straggler_figure(1.0)
    assert {t.name for t in no_wait.data} == {"compute"}  # equal replicas: nobody stands blocked


def _schedule(steps: int, warmup: int, tau: int) -> str:
    return "".join("g" if in_warmup(s, warmup) else "A" if is_anchor_step(s, warmup)
                   else "S" if is_sync_step(s, warmup, tau) else "." for s in range(steps))


def test_sync_schedule_figure_marks_each_step_kind():
    fig = sync_schedule_figure({2: _schedule(12, 4, 2), 4: _schedule(12, 4, 4)}, warmup=4)
    warm, anchors, syncs = fig.data
    assert len(warm.x) == 8 and set(warm.x) == {0, 1, 2, 3}  # 4 warm-up steps on each of the 2 rows
    assert list(anchors.x) == [4, 4] and list(anchors.y) == ["τ = 2", "τ = 4"]
    assert [(x, y) for x, y in zip(syncs.x, syncs.y)] == [(6, "τ = 2"), (8, "τ = 2"), (10, "τ = 2"), (8, "τ = 4")]
    assert fig.layout.xaxis.range == (-1, 12) and fig.layout.height == 200


def test_mesh_figure_groups_as_the_mesh_computes_them():
    meshes = [Mesh(rank=k, world_size=6, shards=3, replicas=2, shard_group=None, sync_group=None) for k in range(6)]
    fig = mesh_figure(meshes)
    (labels,) = fig.data
    assert list(labels.text) == [f"<b>rank {k}</b>" for k in range(6)]
    assert list(labels.x) == [0, 1, 2, 0, 1, 2] and list(labels.y) == [0, 0, 0, 1, 1, 1]
    notes = [a.text for a in fig.layout.annotations]
    assert "replica 1<br>shard group [3, 4, 5]" in notes and "sync group<br>[2, 5]" in notes
    assert len(fig.layout.shapes) == 6 + 3  # a box per rank, a dotted column per sync group
    assert "S = 3 shards × R = 2 replicas" in fig.layout.title.text


def test_shard_layout_figure_cuts_each_unit_into_s_shards():
    units = build_model("nano", 0).units()
    layouts = [UnitLayout.of(u, 3) for u in units]
    names = [f"unit {k}" for k in range(len(units))]
    fig = shard_layout_figure(layouts, names, "nano")
    *shards, padding = fig.data
    assert len(shards) == 3 and padding.name == "padding to a multiple of S"
    for s, t in enumerate(shards):
        assert list(t.base) == [s * lay.shard_size for lay in layouts] and list(t.y) == names
    assert list(padding.x) == [lay.padded - lay.numel for lay in layouts]
    assert list(padding.base) == [lay.numel for lay in layouts]
    # every unit named (plotly hides every other category label when the rows are squeezed): a tick per unit,
    # and room for 45 px a row besides the title, the x axis and the three-row legend
    assert fig.layout.yaxis.dtick == 1 and fig.layout.height >= 250 + 45 * len(units)
    with pytest.raises(ValueError, match="same number of shards"):
        shard_layout_figure([UnitLayout.of(units[0], 2), UnitLayout.of(units[1], 4)], names[:2], "nano")


def test_outer_state_figure_and_rank_bytes():
    p = 1000
    fig = outer_state_figure(p, [1, 2, 4], [8000.0, 4000.0, 2000.0], "x")
    edit, diloco, measured = fig.data
    assert list(edit.x) == list(range(1, 9)) and list(edit.y) == [8 * p / s for s in range(1, 9)]
    assert set(diloco.y) == {8 * p}
    assert list(measured.x) == [1, 2, 4] and list(measured.y) == [8000.0, 4000.0, 2000.0]
    assert list(outer_state_figure(p, [16], [500.0], "x").data[0].x)[-1] == 16  # the axis reaches the largest S run
    held = rank_bytes(p, 4)
    assert held["EDiT (sharded outer state)"] == {"parameter shard": 1000.0, "AdamW state": 2000.0,
                                                  "anchor + momentum": 2000.0}
    assert held["DiLoCo (unsharded outer state)"]["anchor + momentum"] == 8000.0
    n = get_size("nano").num_params()
    bars = rank_bytes_figure("nano", n, 2)
    assert [t.name for t in bars.data] == ["parameter shard", "AdamW state", "anchor + momentum"]
    assert list(bars.data[2].y) == [4 * 2 * n / 2, 4 * 2 * n] and bars.layout.barmode == "stack"


def _tau_sweep() -> pd.DataFrame:
    return pd.DataFrame([
        {"method": "sync", "tau": 1, "local_bytes_per_step": 800.0, "blocked_s": 4.0, "final_val_loss": 3.0},
        *({"method": "diloco", "tau": t, "local_bytes_per_step": 800.0 / t, "blocked_s": 4.0 / t,
           "final_val_loss": 3.0 + t / 100} for t in (2, 10, 20))])


def test_tau_sweep_figure_against_the_sync_reference():
    fig = tau_sweep_figure(_tau_sweep())
    assert len(fig.data) == 3 and all(list(t.x) == [2, 10, 20] for t in fig.data)
    assert list(fig.data[0].y) == [400.0, 80.0, 40.0] and list(fig.data[1].y) == [2.0, 0.4, 0.2]
    assert [s.y0 for s in fig.layout.shapes] == [800.0, 4.0, 3.0]  # the dotted sync lines
    assert [fig.layout[f"xaxis{k}"].type for k in ("", "2", "3")] == ["log"] * 3
    # the three panel titles sit above their panels, clear of a top tick's label (they touched it by 2 px in CI);
    # the dotted line's label "sync" stays where plotly puts it
    titles = {a.text: a for a in fig.layout.annotations}
    assert all(titles[t].yshift == SUBPLOT_TITLE_LIFT_PX and titles[t].font.size == SUBPLOT_TITLE_PX
               for _, t in TAU_PANELS)
    assert titles["sync"].yshift is None
    assert len(fig.layout.annotations) == 4  # no label on the other two dotted lines (plotly 7 wrote "new text")
    with pytest.raises(ValueError, match="no 'sync' row"):
        tau_sweep_figure(_tau_sweep().iloc[1:])


def test_capacity_share_figure_one_panel_per_setting():
    from edit_course.figures.sweeps import capacity_share_figure

    rows = [{"setting": setting, "link GB/s": link, "method": method, "share of capacity": share}
            for setting, scale in (("alike", 1.0), ("one slow node", 0.5))
            for link in (1.0, 5.0, 25.0)
            for method, share in (("sync", 0.2 * link / 25), ("edit", 0.9))]
    fig = capacity_share_figure(pd.DataFrame(rows), ("sync", "edit"), "cluster")
    assert [a.text for a in fig.layout.annotations] == ["alike", "one slow node"]
    assert [(t.name, t.xaxis, t.showlegend) for t in fig.data] == [("sync", "x", True), ("edit", "x", True),
                                                                    ("sync", "x2", False), ("edit", "x2", False)]
    assert list(fig.data[0].x) == [1.0, 5.0, 25.0] and list(fig.data[1].y) == [0.9, 0.9, 0.9]
    assert fig.layout.yaxis.range == (0, 1.05) and fig.layout.title.text == "cluster"
    with pytest.raises(ValueError, match="share of capacity"):
        capacity_share_figure(pd.DataFrame(rows).drop(columns="share of capacity"), ("sync",), "cluster")


@pytest.mark.parametrize("transfer", [0.5, 1.0, 2.0])
def test_the_idealised_layerwise_sync(transfer):
    """Without prefetch every transfer is waited for in full; with it only the first one, then the link or the
    compute, whichever is slower, sets the pace (one transfer at a time)."""
    from edit_course.figures.concepts import layerwise_schedule, layerwise_sync_figure

    units, c = 4, 1.0
    off, on = (layerwise_schedule(units, c, transfer, p) for p in (False, True))
    end = lambda s: max(e for _, _, e in s["compute"])  # noqa: E731
    assert end(off) == pytest.approx(units * (c + transfer))
    assert end(on) == pytest.approx(transfer + c + (units - 1) * max(c, transfer))
    assert sum(b - a for _, a, b in off["blocked"]) == pytest.approx(units * transfer)
    assert on["blocked"][0] == (0, 0.0, transfer)  # unit 0 has nothing to hide behind
    for s in (off, on):  # the link carries one transfer at a time, each before its unit computes
        spans = sorted((a, b) for _, a, b in s["transfer"])
        assert all(b0 <= a1 + 1e-12 for (_, b0), (a1, _) in zip(spans, spans[1:]))
        done = {u: b for u, _, b in s["transfer"]}
        assert all(a >= done[u] - 1e-12 for u, a, _ in s["compute"])
    fig = layerwise_sync_figure(units, c, transfer)
    assert fig.layout.meta["ends"] == {"prefetch off": end(off), "prefetch on": end(on)}


@pytest.mark.parametrize("slow, tau", [(2.0, 4), (3.0, 3), (1.5, 2)])
def test_the_idealised_rounds(slow, tau):
    """In the same seconds: sync's and EDiT's fast replica trains the slow one's steps and stands blocked for
    the difference, A-EDiT's trains its own pace and is never blocked."""
    from edit_course.figures.concepts import rounds_schedule, rounds_schedule_figure

    until = 2 * tau * slow
    count = lambda s, rep: sum(1 for k, _, _ in s[rep] if k == "step")  # noqa: E731
    blocked = lambda s, rep: sum(b - a for k, a, b in s[rep] if k == "blocked")  # noqa: E731
    for method in ("sync", "edit"):
        s = rounds_schedule(method, slow, tau)
        assert count(s, 0) == count(s, 1) == 2 * tau
        assert blocked(s, 0) == pytest.approx(until - 2 * tau) and blocked(s, 1) == 0
    a = rounds_schedule("aedit", slow, tau)
    assert count(a, 0) == int(until) and count(a, 1) == int(until / slow + 1e-9) and blocked(a, 0) == 0
    for s in (rounds_schedule(m, slow, tau) for m in ("sync", "edit", "aedit")):  # no replica overlaps itself
        for rep in (0, 1):
            spans = sorted((x, y) for _, x, y in s[rep])
            assert all(y0 <= x1 + 1e-12 for (_, y0), (x1, _) in zip(spans, spans[1:]))
    fig = rounds_schedule_figure(slow, tau)
    assert fig.layout.meta["steps"]["aedit/0"] == int(until) and fig.layout.meta["steps"]["edit/0"] == 2 * tau
