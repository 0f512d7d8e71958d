"""The StragglerLab's clock switch (issue 24): Run on this machine (a process per rank) or on the virtual clock
(every rank a thread of this process, time from a cost model), and a virtual run's status line, labels and figure
titles say "virtual clock" and its cost profile, so its seconds are never read as this machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from edit_lab.config import RunConfig
from edit_lab.records.run import Run
from edit_lab.ui.lab import (
    FIGURES,
    VIRTUAL,
    StragglerLab,
    clock_labels,
    clock_note,
    cost_profile,
    mark_clock,
    run_summary,
)
from edit_lab.viz.layout import empty_figure

EXAMPLES = Path(__file__).resolve().parents[2] / "edit_lab" / "records" / "examples"


def tiny(**kw) -> RunConfig:
    """A panel base whose run takes a second or two on the virtual clock: nano, 1 × 2, three steps."""
    return RunConfig(method="sync", shards=1, replicas=2, steps=3, warmup_steps=1, sync_interval=1, model="nano",
                     seq_len=32, batch_size=4, eval_every=0, eval_batches=1, progress=False).replace(**kw)


def test_the_switch_sets_the_clock_of_the_launched_config():
    launched: list[RunConfig] = []

    def launcher(cfg: RunConfig) -> Run:
        launched.append(cfg)
        return Run(EXAMPLES / "edit-straggler")

    lab = StragglerLab(base=tiny(), initial=[], launcher=launcher)
    assert lab.clock.value == "wall" and lab.config().clock.kind == "wall"  # the default stays this machine's clock
    assert "clock" in lab.controls() and int(lab.clock.layout.width.rstrip("px")) <= 400
    lab.set(clock="virtual")
    assert lab.config().clock.kind == "virtual" and "virtual clock" in lab.status.value
    lab.set(method="edit")
    lab.run()
    assert launched[-1].clock.kind == "virtual" and launched[-1].method == "edit"
    lab.set(clock="wall")
    lab.run()
    assert launched[-1].clock.kind == "wall"
    # a base on the virtual clock opens the switch there
    assert StragglerLab(base=tiny(clock="virtual"), initial=[], launcher=launcher).clock.value == "virtual"
    with pytest.raises(Exception):
        lab.set(clock="gpu")  # not an option of the switch


def test_the_switch_does_not_redraw_the_preview():
    lab = StragglerLab(base=tiny(), initial=[], launcher=lambda cfg: None)
    n = lab.preview.redraws
    lab.set(clock="virtual")
    assert lab.preview.redraws == n  # the preview simulates the controls' run, whichever clock times it


def test_a_virtual_run_from_the_panel(tmp_path):
    """The real launcher: the run is made in this process (no worker process, so no rank log), and everything
    the panel shows of it says virtual clock and the costs."""
    # 2 × 2 as the shipped runs: the preview has their costs, so it too shows this run beside its prediction
    lab = StragglerLab(base=tiny(shards=2), out_dir=tmp_path, initial=[Run(EXAMPLES / "edit-straggler")])
    lab.set(clock="virtual", method="edit", slow_factor=2.0, time_budget=0.0)
    lab.click()
    assert lab.error is None, lab.error
    run = lab.last_run
    assert run.config.clock.kind == "virtual" and run.summary["clock"] == "virtual"
    assert run.config.stragglers.replicas == (1,) and run.summary["steps"] == 3
    assert not list(run.path.glob("rank*.log"))  # no worker processes: their logs are the launcher's
    assert lab.progress.bar_style == "success"
    status = lab.status.value
    assert "tokens/s" in status and VIRTUAL in status and "virtual s" in status
    assert "calibrated from the shipped example run edit-straggler" in status, status
    assert "/" not in status.split("costs", 1)[1].split("(")[0]  # no machine path in the profile
    for name in FIGURES:
        title = lab.figures[name].layout.title.text
        assert VIRTUAL in title and "edit-straggler" in title, (name, title)
    assert "the virtual run" in lab.figures["preview"].layout.title.text
    names = lab.figures["stragglers"].layout.meta["runs"]
    assert names[-1].endswith(f", {VIRTUAL}") and not names[0].endswith(VIRTUAL)  # the shipped run is real
    assert "the others by this machine" in lab.figures["loss"].layout.title.text  # a real and a virtual run


def test_labels_notes_and_titles_name_the_clock_and_the_costs():
    real = Run(EXAMPLES / "edit-straggler")
    assert clock_note(real) == "" and clock_labels([real], ["edit"]) == ["edit"]
    assert VIRTUAL not in run_summary(real)
    fig = empty_figure("loss", "nothing")
    before = fig.layout.title.text
    assert mark_clock(fig, [real]).layout.title.text == before  # a real run's figure is left alone

    assert cost_profile(None).endswith("shipped example run edit-straggler")
    assert cost_profile("/x/y/edit_lab/records/examples/edit-straggler (measured on model nano; compute scaled)") == \
        "calibrated from the shipped example run edit-straggler (measured on model nano; compute scaled)"
    assert cost_profile("/home/me/runs/edit/") == "calibrated from run edit"
    assert cost_profile("/home/me/gpu.json") == "costs file gpu.json"
    assert cost_profile("typed in") == "typed in"


def test_mark_clock_adds_a_subtitle_under_the_heading(tmp_path):
    import json
    import shutil

    virtual = tmp_path / "v"
    shutil.copytree(EXAMPLES / "edit-straggler", virtual)
    cfg = json.loads((virtual / "config.json").read_text())
    cfg["clock"] = "virtual"
    (virtual / "config.json").write_text(json.dumps(cfg))
    summary = json.loads((virtual / "summary.json").read_text())
    summary.update(clock="virtual", clock_costs="/somewhere/runs/calib (measured on model nano)")
    (virtual / "summary.json").write_text(json.dumps(summary))
    run = Run(virtual)
    assert clock_note(run) == f"{VIRTUAL}, costs calibrated from run calib (measured on model nano)"
    assert clock_labels([run], ["edit"]) == [f"edit, {VIRTUAL}"]
    fig = empty_figure("loss", "nothing")
    fig.update_layout(title_text="Head<br><sup>its own subtitle</sup>", margin_t=80)
    text = mark_clock(fig, [run]).layout.title.text
    assert text.startswith(f"Head<br><sup>{VIRTUAL}: time from a cost model")
    assert text.endswith("its own subtitle</sup>")
    assert "somewhere" not in text and fig.layout.margin.t == 97  # one subtitle line more
