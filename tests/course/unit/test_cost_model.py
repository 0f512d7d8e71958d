"""cost_model.py (the course's cost model, notebooks 01 and 04) on hand-built numbers, and its readers on the
synthetic run of test_sync_timing.py (viz_fake_run.py with a 7 ms late rank and a 2 ms + 1 MB/s link)."""

from __future__ import annotations

import pytest

from edit_course.exercises.nb04 import exposed_ms as exercise_exposed_ms
from edit_course.exercises.nb04 import prefetch_schedule, replay_exposed_ms
from edit_course.lessons import cost_model as M
from edit_course.lessons import sync_timing as T

from tests.course.unit.test_sync_timing import SYNC, fake, variant  # noqa: F401 (fixtures)

ms = pytest.approx


def test_link_ms_is_latency_plus_bytes_over_bandwidth():
    assert M.link_ms(99_072, 2.0, 20.0) == ms(2.0 + 99_072 / 20e6 * 1e3)
    assert M.link_ms(0, 1.0, 5.0) == ms(1.0)


def test_the_closed_form_is_t0_plus_what_each_transfer_outlasts_of_the_work_before_it():
    t, f = [10.0, 8.0, 8.0, 8.0], [1.0, 5.0, 9.0, 99.0]  # the last unit's work hides nothing
    assert M.unit_exposed_ms(t, f) == ms([10.0, 7.0, 3.0, 0.0])
    assert M.unit_exposed_ms(t, f, prefetch=False) == ms(t)
    assert M.sync_exposed_ms(t, f, decisions_ms=4.0) == ms(24.0)
    assert M.sync_exposed_ms(t, f, decisions_ms=4.0, prefetch=False) == ms(38.0)
    with pytest.raises(ValueError, match="a forward for each unit"):
        M.unit_exposed_ms([1.0, 2.0, 3.0], [1.0])


def test_the_model_agrees_with_notebook_04s_exercise_and_its_replay():
    for n, x, c in ((5, 7.0, 3.0), (4, 2.0, 5.0), (1, 3.0, 1.0)):
        want = exercise_exposed_ms(n, x, c, prefetch=True)
        assert M.sync_exposed_ms([x] * n, [c] * n) == ms(want)
        assert M.sync_exposed_ms([x] * n, [c] * n, collective_ms=[0.0] * n) == ms(want)  # the replay, c = 0
        assert replay_exposed_ms(prefetch_schedule(n), x, c) == ms(want)
        assert M.sync_exposed_ms([x] * n, [c] * n, prefetch=False, collective_ms=[0.0] * n) == ms(n * x)


def test_the_replay_hides_a_collectives_own_cost_behind_a_busy_link_and_adds_it_where_the_link_idles():
    # the virtual clock's sync of notebook 04 (tiny, 5 MB/s + 1 ms), rank 0: its t, f and c; exposed as it measured
    t = [14.13, 20.81, 20.81, 20.81, 20.81]
    f = [2.77, 22.77, 21.51, 18.44]
    c = [3.51, 3.66, 3.66, 3.66, 3.66]
    got = M.unit_exposed_ms(t, f, collective_ms=c)
    assert got == ms([17.64, 18.04, 0.0, 2.96, 3.07], abs=0.02)  # the virtual run: 17.97, 18.04, 0, 3.47, 3.06
    # without prefetch every transfer starts on an idle link: c + t each
    assert M.unit_exposed_ms(t, f, prefetch=False, collective_ms=c) == ms([a + b for a, b in zip(t, c)])


def test_exposure_curve_rows_and_the_link_time():
    curve = M.exposure_curve([1000, 2000], [5.0], latency_ms=1.0, bandwidths_mb_s=[1.0, 10.0], decisions_bytes=0)
    assert list(curve.columns) == ["MB/s", "prefetch", "expected exposed ms", "link ms"]
    assert len(curve) == 4
    slow_off = curve[(curve["MB/s"] == 1.0) & ~curve["prefetch"]].iloc[0]
    assert slow_off["link ms"] == ms(1.0 + 2.0 + 3.0)  # decisions (1 ms) + units (2 ms, 3 ms)
    assert slow_off["expected exposed ms"] == ms(6.0)
    slow_on = curve[(curve["MB/s"] == 1.0) & curve["prefetch"]].iloc[0]
    assert slow_on["expected exposed ms"] == ms(1.0 + 2.0 + 0.0)  # unit 1's 3 ms hide under 5 ms of work
    with_c = M.exposure_curve([1000, 2000], [5.0], 1.0, [1.0], collective_ms=[1.0, 1.0])
    assert with_c[with_c["prefetch"]]["expected exposed ms"].iloc[0] == ms(3.0)  # c₀ on the idle link, t₀ 2 ms
    assert with_c["link ms"].tolist() == ms([5.0, 5.0])  # c is not the link's


def test_compared_and_the_reasons_follow_the_direction():
    assert M.compared(10.0, 12.0, 0.2) and not M.compared(10.0, 13.0, 0.2)
    assert M.compared(3.0, 0.0, 0.3, abs_tol=5.0) and not M.compared(6.0, 0.0, 0.3, abs_tol=5.0)
    above = M.sync_gap_reason(30.0, 20.0, peer_later_ms=4.0, timing="T")
    assert above.startswith("10.0 ms more than the model") and "peer issued later by 4.0 ms" in above
    below = M.sync_gap_reason(10.0, 20.0, peer_later_ms=0.0, timing="T")
    assert below.startswith("10.0 ms less than the model") and "peer" not in below  # a late peer cannot shorten a wait


def test_straggler_fraction_and_its_reasons():
    assert M.straggler_fraction(59.0, 24.7) == ms(59.0 / 83.7)  # the review's numbers: about 0.70
    assert M.straggler_fraction(50.0, 50.0) == ms(0.5)  # compute all of a step, k = 2: 1/k
    above = M.straggler_gap_reason(0.79, 0.70, wait_ms=15.0, pause_ms=24.7)
    assert "waited 15.0 ms per step, less than the 24.7 ms pause" in above
    below = M.straggler_gap_reason(0.60, 0.70, wait_ms=30.0, pause_ms=24.7)
    assert below.startswith("the steps grew by more than the 24.7 ms pause")
    n = {"measured": 1.22, "expected": 0.6, "step ms": 123.0, "straggler step ms": 100.0, "wait ms": 29.0,
         "pause ms": 38.0}
    assert "slowed the baseline (a baseline step took 123.0 ms, a straggler run's step 100.0 ms)" in M.straggler_reason(n)
    # the fast replica's own pace, untouched by the straggler, 1.35× the baseline's: load, whatever the direction
    busy = {**n, "measured": 0.99, "expected": 0.72, "own pace ratio": 1.35}
    assert M.straggler_reason(busy).startswith("the fast replica's own pace, which the straggler does not touch, was 1.35×")
    calm = {**busy, "own pace ratio": 1.05}
    assert M.straggler_reason(calm).startswith("the fast replica waited 29.0 ms per step, less than the 38.0 ms pause")


def test_check_many_names_the_runs_off_the_model(capsys):
    v = M.check_many("sweep", {"5 MB/s on": (30.0, 33.0), "50 MB/s off": (25.7, 14.2)}, "T")
    assert not v.ok
    out = capsys.readouterr().out
    assert "50 MB/s off above the model by 11.5 ms" in out and "5 MB/s on above" not in out
    assert "a late peer" in out and "overstating" not in out  # only a cause that can move a run above the model
    assert M.check_many("sweep", {"a": (1.0, 2.0)}, "T").ok


def test_unit_table_reads_t_f_and_exposed_from_the_run(variant):  # noqa: F811
    t = M.unit_table(variant, SYNC, rank=0)
    assert list(t.index) == [0, 1, 2]
    assert t["t (ms)"].tolist() == ms([3.0] * 3)  # 2 ms + 1000 B at 1 MB/s
    assert t["exposed ms"].tolist() == ms([8.0] * 3)
    # rank 0 waits 8 ms at the end of each 40 ms transfer, the next unit's starts 1 ms later: 33 ms between waits
    assert t["f before (ms)"].iloc[1:].tolist() == ms([33.0, 33.0])
    assert t["expected ms"].tolist() == ms(M.unit_exposed_ms(list(t["t (ms)"]), [33.0, 33.0], True, list(t["c (ms)"])))
    assert M.own_work_ms(variant, [SYNC]) == ms([33.0, 33.0])


def test_median_sync_parts_add_up_to_its_exposed_time(fake, variant):  # noqa: F811
    p = T.median_sync_parts(variant)  # 4 ranks, all 24 ms: the lower middle one is rank 1, with its late peer
    assert (p["step"], p["rank"]) == (SYNC, 1)
    assert p["link ms"] + p["peer later ms"] + p["rest ms"] == ms(p["exposed ms"])
    assert (p["exposed ms"], p["link ms"], p["peer later ms"], p["rest ms"]) == ms((24.0, 3.0, 21.0, 0.0), abs=1e-9)
    q = T.median_sync_parts(fake)
    assert q["exposed ms"] == ms(24.0) and q["rest ms"] == ms(24.0)


def test_the_verdicts_on_a_run_print_the_model_beside_the_measurement(variant, capsys):  # noqa: F811
    late = M.check_units(variant, SYNC, "fake", "T", rank=1, first=1)  # rank 1 waits 7 ms a unit for rank 3
    model = M.unit_table(variant, SYNC, 1)["expected ms"].iloc[1:]
    explained = sum(max(m, 7.0) for m in model)
    assert f"exposed 16.0 ms over 2 units; the cost model {model.sum():.1f} ms, the peer's late issue 14.0 ms, " \
           f"the larger of the two per unit {explained:.1f} ms" in capsys.readouterr().out
    assert late.ok == M.compared(16.0, explained, 0.0, 10.0)
    v = M.check_units(variant, SYNC, "fake", "T", rank=0, first=1)
    out = capsys.readouterr().out
    assert "units 1… expose what the cost model or the peer's late issue explains" in out
    assert "the peer's late issue 0.0 ms" in out  # rank 0's peer is on time: the model alone
    assert v.ok == M.compared(16.0, float(M.unit_table(variant, SYNC)["expected ms"].iloc[1:].sum()), 0.0, 10.0)
    measured, expected = M.check_sync(variant, "fake", "T")
    assert measured == ms(T.per_sync_ms(variant)["exposed"]) and expected == ms(M.sync_expected_ms(variant))
    assert "median over ranks and syncs" in capsys.readouterr().out


def test_the_figures_draw_the_model_and_name_their_definition():
    from edit_course.figures.prefetch import cost_model_figure, prefetch_sweep_figure, sync_split_figure

    curve = M.exposure_curve([1000, 2000], [5.0], 1.0, [1.0, 10.0])
    fig = cost_model_figure(curve, {True: (5.0, 3.0), False: (5.0, 6.0)}, latency_ms=1.0)
    names = [t.name for t in fig.data]
    assert names[:2] == ["cost model, prefetch on", "cost model, prefetch off"] and "this run, prefetch on (median)" in names
    sweep = curve.rename(columns={"expected exposed ms": "exposed ms per sync", "link ms": "link ms per sync"})
    assert "cost model, prefetch off" in [t.name for t in prefetch_sweep_figure(sweep, 1.0, model=curve).data]
    bars = {"a": {"hidden": 1.0, "exposed": 2.0, "other": 0.0}}
    assert "the rank that arrived last" in sync_split_figure(bars, 5.0, 1.0, what="the rank that arrived last").layout.title.text
