"""StragglerLab's preview: redraw a simulated run on every control change, then set it beside the real one.

The panel (widgets.py) only hands its controls and its preview tab to `LabPreview`; everything else is
here. Costs come from the latest real run of the panel when it matches the panel's model and mesh, else
from a shipped example run (`edit_lab/examples`), else there is no preview (said in the figure).
Simulating one of the panel's runs takes milliseconds, so the preview is computed in the control's own
callback: it is on the screen before the slider is released.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from ..config import ConfigError
from .calibrate import calibrate
from .costs import Costs
from .figure import comparison_html, preview_figure
from .predict import Prediction, check_compatible, simulate

if TYPE_CHECKING:
    from ..run import Run
    from ..widgets import StragglerLab

PREFERRED_EXAMPLE = "edit-straggler"  # the shipped run whose costs the first previews use


class LabPreview:
    """The preview tab of a StragglerLab: a figure and a predicted-vs-measured table."""

    def __init__(self, lab: "StragglerLab", pane: Any) -> None:
        self.lab, self.pane = lab, pane
        self.table = W.HTML(layout=W.Layout(width="100%", overflow="auto"))
        self.box = W.VBox([pane, self.table], layout=W.Layout(width="100%"))
        self.costs: Costs | None = None
        self.prediction: Prediction | None = None
        self.compared: tuple[Prediction, dict[str, Any]] | None = None  # (preview before a run, its summary)
        self.redraws = 0
        self.calibrate_from(lab.last_run, *lab.history[::-1])
        if self.costs is None:
            self.calibrate_from(*self._examples())
        for w in lab.controls().values():
            w.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    # ------------------------------------------------------------------ costs
    @staticmethod
    def _examples() -> list["Run"]:
        from ..examples import example_runs

        runs = example_runs()
        return sorted(runs, key=lambda r: r.path.name != PREFERRED_EXAMPLE)

    def calibrate_from(self, *runs: "Run | None") -> bool:
        """Take the costs of the first of `runs` that matches the panel's model, mesh and sequence length."""
        base = self.lab.base
        for run in runs:
            if run is None:
                continue
            c = run.config
            if (c.model, c.shards, c.seq_len) != (base.model, base.shards, base.seq_len):
                continue
            try:
                self.costs = calibrate(run)
            except (ValueError, OSError):
                continue
            return True
        return False

    # ------------------------------------------------------------------ drawing
    def predict(self) -> Prediction | None:
        if self.costs is None:
            return None
        cfg = self.lab.config()
        try:
            cfg.validate()
            check_compatible(cfg, self.costs)
        except ConfigError:
            return None
        return simulate(cfg, self.costs)

    def redraw(self) -> None:
        """Predict the run the controls describe and show it (called on every control change)."""
        t0 = time.perf_counter()
        pred = self.predict()
        self.prediction = pred
        self.redraws += 1
        if pred is None:
            from ..viz.layout import empty_figure

            self.lab._set("preview", empty_figure("preview", "no preview: no calibration run matches these settings"))
            self.table.value = ""
            return
        source = self.costs.source.rstrip("/").split("/")[-1] if self.costs else ""
        note = (f"simulated in {1e3 * (time.perf_counter() - t0):.0f} ms from the costs of run {source}; "
                "press Run to measure")
        self.lab._set("preview", preview_figure(pred, note=note))
        self.table.value = comparison_html(pred)

    def after_run(self, run: "Run") -> None:
        """Show the preview of the run just made beside its measurement, then calibrate from it."""
        pred = self.prediction if self.prediction is not None and self.prediction.config.replace(out=None) \
            == run.config.replace(out=None) else self.predict()
        if pred is not None:
            self.compared = (pred, run.summary)
            source = self.costs.source.rstrip("/").split("/")[-1] if self.costs else ""
            self.lab._set("preview", preview_figure(pred, run.summary, note=f"preview from the costs of run {source}, "
                                                    "beside the real run; the next previews use this run's costs"))
            self.table.value = comparison_html(pred, run.summary)
        self.calibrate_from(run)
