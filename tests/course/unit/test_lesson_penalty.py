"""Notebook 05's figures and tables (edit_course.lessons.penalty), on hand-built runs: the exact values under each
chart are the numbers it draws, the loss axes are logarithmic, and the paper's detector is AUTHORS_DETECTOR."""

from __future__ import annotations

import json
import math
from pathlib import Path

from edit_course.lessons import penalty as lesson
from edit_lab import RunConfig
from edit_lab.config import AUTHORS_DETECTOR, PenaltyConfig
from edit_lab.records.run import Run


def run_with(path: Path, vals: list[tuple[int, float]], weights: dict[tuple[int, int], float] = {}) -> Run:
    path.mkdir(parents=True)
    (path / "config.json").write_text(RunConfig(method="edit", shards=1, replicas=2, steps=12, model="nano").to_json())
    rows = [{"kind": "penalty", "step": s, "unit": u, "replica": r, "G": 0.5, "z": 0.1, "threshold": 3.0,
             "outlier": False, "readmitted": False, "steps": 2, "weight": weights.get((s, u), 0.5) if r == 1 else 0.5,
             "clip": 1.0, "skipped": False} for s in (6, 8) for u in (0, 1) for r in (0, 1)]
    (path / "penalty.jsonl").write_text("".join(json.dumps(p) + "\n" for p in rows))
    metrics = [{"kind": "train", "step": s, "replica": r, "loss": 3.0, "tokens": 128, "t": 0.1 * s, "dt": 0.1}
               for s in range(12) for r in range(2)]
    metrics += [{"kind": "eval", "step": s, "val_loss": v} for s, v in vals]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "summary.json").write_text(json.dumps({"final_val_loss": vals[-1][1]}))
    return Run(path)


def test_the_papers_detector_is_the_authors_with_a_short_arming():
    flags = lesson.authors_detector(4)
    cfg = RunConfig(**flags).validate()
    assert cfg.penalty == PenaltyConfig.authors(arming=4)
    assert {k: getattr(cfg.penalty, k) for k in AUTHORS_DETECTOR if k != "arming"} == \
        {k: v for k, v in AUTHORS_DETECTOR.items() if k != "arming"}


def test_the_loss_table_is_what_the_log_figure_draws(tmp_path):
    on = run_with(tmp_path / "on", [(4, 4.6), (8, 3.0)])
    off = run_with(tmp_path / "off", [(4, 4.6), (8, 218.0), (12, 171.9)])
    t = lesson.val_losses([on, off], ["on", "off"])
    assert list(t.index) == [4, 8, 12] and t.loc[8, "off"] == 218.0 and math.isnan(t.loc[12, "on"])
    fig = lesson.log_loss_figure([on, off], ["on", "off"])
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    html = lesson.exact_values(t, "Exact values").data
    assert html.startswith("<details><summary>Exact values</summary>") and "218.0" in html and "—" in html
    assert "<details open" not in html  # folded


def test_the_weight_map_holds_one_row_per_sync_and_a_column_per_unit(tmp_path):
    r = run_with(tmp_path / "r", [(8, 3.0)], weights={(8, 1): 0.0})
    t = lesson.weights_by_unit(r, 1)
    assert list(t.index) == [6, 8] and list(t.columns) == ["unit 0", "unit 1"] and t.loc[8, "unit 1"] == 0.0
    assert list(lesson.weights_by_unit(r, 1, after=6).index) == [8]
    fig = lesson.weights_figure([r, r], ["a", "b"], replica=1)
    assert len(fig.data) == 2 and [d.type for d in fig.data] == ["heatmap", "heatmap"]
    assert list(fig.data[0].z[1]) == [0.5, 0.0]  # unit 1's row: step 6, step 8
    both = lesson.weights_values([r, r], ["a", "b"], 1)
    assert both.shape == (2, 4) and both.loc[8, ("b", "unit 1")] == 0.0
