"""Notebook 09's readings and figures (edit_course/claims/streaming.py, edit_course/figures/streaming.py) on a hand-built
run whose every byte and second is known (tests/unit/viz_fake_run.py): the sync at step 3 sends 3 × 1,000 bytes
on rank 0 during training, the closing sync at step 4 another 3,000 after it; validations end at 1.7 s and at
4.227 s (after the closing sync)."""

from __future__ import annotations

import pytest

from edit_course.claims import streaming as race
from edit_course.figures.streaming import loss_time_bytes_figure, step_bytes_figure
from edit_lab.records.run import Run

from tests.unit import viz_fake_run as F


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run", penalty=False))


def test_bytes_per_step_leave_the_closing_sync_out_of_the_peak(fake):
    assert race.step_bytes(fake) == {3: 3000}
    m = race.measure(fake)
    assert m["peak_step_bytes"] == 3000 and m["collectives"] == 6 and m["collective_bytes"] == [1000]
    assert m["mean_step_bytes"] == pytest.approx(6000 / F.STEPS) and m["val_loss"] == 3.9


def test_the_mean_per_step_divides_by_the_steps_trained_not_the_configured_ones(fake, tmp_path):
    """A time-budget run ignores `steps`: 60 configured, 5 trained, and the mean is over the 5 (review 09 · 7)."""
    import shutil

    from edit_lab.config import RunConfig

    budget = tmp_path / "budget"
    shutil.copytree(fake.path, budget)
    cfg = RunConfig.load(budget / "config.json").replace(steps=60, time_budget=5.0)
    (budget / "config.json").write_text(cfg.to_json())
    assert race.trained_steps(fake) == F.STEPS < 60
    assert race.measure(Run(budget))["mean_step_bytes"] == pytest.approx(6000 / F.STEPS)


def test_the_exposed_cost_model_charges_the_warm_up_and_what_each_landing_leaves_uncovered(fake, tmp_path):
    """On a 1 MB/s link: the warm-up's three 1,000-byte gradient all-reduces cost 3 ms, the landing at step 3
    three 1,000-byte collectives, 3 ms, uncovered with τ = 0 (the closing sync left out): 6 ms predicted."""
    import shutil

    from edit_lab.config import RunConfig

    slow = tmp_path / "slow"
    shutil.copytree(fake.path, slow)
    cfg = RunConfig.load(slow / "config.json").replace(link_bandwidth_mb_s=1.0, fragment_sync_delay=0)
    (slow / "config.json").write_text(cfg.to_json())
    m = race.exposed_model(Run(slow))
    assert m["warmup_s"] == pytest.approx(0.003) and m["landings_s"] == pytest.approx(0.003)
    assert m["predicted_s"] == pytest.approx(0.006) and m["transfer_s"] == pytest.approx(0.003)
    assert m["measured_s"] == pytest.approx(race.exposed_s(fake)) and m["cover_s"] == 0.0
    # the same run with τ = 1: a landing travels under one own step, which covers up to 3 ms of it
    (slow / "config.json").write_text(cfg.replace(fragment_sync_delay=1).to_json())
    m1 = race.exposed_model(Run(slow))
    assert m1["cover_s"] == pytest.approx(m1["own_step_s"]) and m1["landings_s"] == pytest.approx(
        max(0.0, 0.003 - m1["own_step_s"]))


def test_loss_against_bytes_reads_what_was_sent_by_each_validation(fake):
    p = race.loss_points(fake)
    assert list(p["val_loss"]) == [4.2, 3.9]
    assert list(p["mb"]) == pytest.approx([0.0, 0.006])
    assert race.loss_at_mb(fake, 0.003) == pytest.approx((4.2 + 3.9) / 2)  # halfway along the line
    assert race.loss_at_mb(fake, 0.006) == pytest.approx(3.9)
    assert race.loss_at_mb(fake, 0.01) != race.loss_at_mb(fake, 0.01)  # NaN past the last validation


def test_exposed_is_the_training_steps_sync_group_wait_per_rank(fake):
    # step 0: three gradient all-reduces waited 12 ms each; step 3: the decisions (4 ms, blocking) and three
    # pseudo-gradient collectives waited 8 ms each; the closing sync of step 4 is left out
    assert race.trained_steps(fake) == F.STEPS
    want = 3 * F.GAR_EXP + F.DEC + 3 * F.SR_EXP
    assert race.exposed_s(fake) == pytest.approx(want, abs=1e-6)
    assert race.exposed_ms_per_step(fake) == pytest.approx(1e3 * want / F.STEPS, abs=1e-3)


def test_claims_and_the_winner_line_are_computed(fake, capsys):
    v = race.exposes_less([fake], [fake], "A", "B")
    assert not v.ok and v.line().startswith("✗")  # not less than itself
    same = race.same_bytes(fake, fake)
    assert same.ok and "6,000" not in same.numbers and "3,000 bytes in 1 steps" in same.numbers
    table = race.race_table({"edit": [fake], "diloco": [fake]})
    assert list(table.index) == ["EDiT", "DiLoCo"] and table.loc["EDiT", "peak MB per step"] == pytest.approx(0.003)
    line = race.winner_line({"edit": [fake], "streaming_diloco": [fake]}, "time")
    assert "EDiT reaches the lowest" in line and "Streaming DiLoCo does not win here" in line
    assert not line.startswith(("✓", "✗"))  # a ranking is said, never a verdict


def test_step_bytes_figure_draws_every_step_and_the_peak(fake):
    fig = step_bytes_figure([fake], labels=["a"])
    (trace,) = [t for t in fig.data if t.meta["role"] == "bytes"]
    assert list(trace.x) == list(range(F.STEPS)) and list(trace.y) == pytest.approx([0, 0, 0, 0.003])
    assert fig.layout.shapes[0].y0 == pytest.approx(0.003)  # the dotted peak line
    assert fig.layout.legend.orientation == "h" and fig.layout.autosize


def test_loss_figure_against_time_and_against_bytes(fake):
    fig = loss_time_bytes_figure([fake, fake], labels=["a", "b"])
    val = [t for t in fig.data if t.meta["role"] == "val"]
    assert len(val) == 4 and {t.meta["x"] for t in val} == {"s", "MB"}
    by_mb = next(t for t in val if t.meta["run"] == "a" and t.meta["x"] == "MB")
    assert list(by_mb.x) == pytest.approx([0.0, 0.006]) and list(by_mb.y) == [4.2, 3.9]
    by_s = next(t for t in val if t.meta["run"] == "a" and t.meta["x"] == "s")
    assert by_s.x[0] == pytest.approx(1.7) and by_s.xaxis == "x" and by_mb.xaxis == "x2"
    assert sum(t.showlegend for t in val) == 2  # one legend entry per run
