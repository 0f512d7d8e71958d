"""StragglerLab's preview, without widgets: what to draw for the run the controls describe, and beside a real one.

`LabPreview` holds the costs and turns a configuration into a figure and a predicted-vs-measured table;
the panel's preview tab (`widgets.PreviewTab`) only shows them and asks again on every control change,
so this module knows nothing of ipywidgets or of the panel. Costs come from the latest real run of the
panel when it matches the panel's model and mesh, else from a shipped example run (`edit_lab/records/examples`),
else there is no preview (said in the figure). Simulating one of the panel's runs takes milliseconds,
so the preview is computed in the control's own callback: it is on the screen before the slider is
released.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edit_lab.clock.calibrate import calibrate
from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.predict import Prediction, costs_fit, simulate
from edit_lab.config import ConfigError, RunConfig
from edit_lab.viz.preview import comparison_html, preview_figure

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from edit_lab.records.run import Run

PREFERRED_EXAMPLE = "edit-straggler"  # the shipped run whose costs the first previews use
#: What computes a preview: the simulator (sim/programs.py, a time-only copy of every method) or the virtual
#: clock's time-only mode (edit_lab/clock/time_only.py: the methods' own code on a stand-in model)
PREVIEW_PATHS = ("simulator", "time_only")

Shown = tuple["go.Figure", str]  # what the preview tab shows: the figure and the table's HTML


class LabPreview:
    """The costs of a panel's previews, and what its preview tab shows for a configuration.

    `base`: the panel's settings that no control changes (model, mesh, sequence length: what a calibration
    run must match); `config`: the configuration the controls describe now; `runs`: the panel's own runs,
    newest first, tried for costs before the shipped examples.
    """

    def __init__(self, base: RunConfig, config: Callable[[], RunConfig], runs: list["Run | None"]) -> None:
        self.base, self.config = base, config
        self.costs: Costs | None = None
        self.prediction: Prediction | None = None
        self.compared: tuple[Prediction, dict[str, Any]] | None = None  # (preview before a run, its summary)
        self.redraws = 0
        self.refused = ""  # why the simulator would not predict the last configuration (a ConfigError's words)
        self.path = "simulator"  # one of PREVIEW_PATHS (benchmarks/preview_latency.py times both)
        self.calibrate_from(*runs)
        if self.costs is None:
            self.calibrate_from(*self._examples())

    # ------------------------------------------------------------------ costs
    @staticmethod
    def _examples() -> list["Run"]:
        from edit_lab.records.examples import example_runs

        runs = example_runs()
        return sorted(runs, key=lambda r: r.path.name != PREFERRED_EXAMPLE)

    def calibrate_from(self, *runs: "Run | None") -> bool:
        """Take the costs of the first of `runs` that matches the panel's model, mesh and sequence length."""
        base = self.base
        for run in runs:
            if run is None:
                continue
            c = run.config
            if (c.data.model, c.shards, c.data.seq_len) != (base.data.model, base.shards, base.data.seq_len):
                continue
            try:
                self.costs = calibrate(run)
            except (ValueError, OSError):
                continue
            return True
        return False

    # ------------------------------------------------------------------ what to show
    def predict(self) -> Prediction | None:
        self.refused = ""
        if self.costs is None:
            return None
        cfg = self.config()
        try:
            cfg.validate()
            costs_fit(cfg, self.costs)
        except ConfigError:
            return None
        if self.path == "time_only":
            from edit_lab.clock.virtual import predict_time_only as predict

            try:
                return predict(cfg, self.costs)
            except ConfigError:
                return None
        try:  # a death and a replacement (survive=True) are simulated too; what they leave out is refused
            return simulate(cfg, self.costs)
        except ConfigError as e:
            self.refused = str(e)
            return None

    def _source(self) -> str:
        return self.costs.source.rstrip("/").split("/")[-1] if self.costs else ""

    def predicted(self) -> Shown:
        """Predict the run the controls describe: its figure and table (asked on every control change)."""
        t0 = time.perf_counter()
        pred = self.predict()
        self.prediction = pred
        self.redraws += 1
        if pred is None:
            from edit_lab.viz.layout import empty_figure

            why = self.refused or "no calibration run matches these settings"
            return empty_figure("preview", f"no preview: {why}"), ""
        note = (f"simulated in {1e3 * (time.perf_counter() - t0):.0f} ms from the costs of run {self._source()}; "
                "press Run to measure")
        return preview_figure(pred, note=note), comparison_html(pred)

    def measured(self, run: "Run") -> Shown | None:
        """The preview of the run just made beside its measurement (None: no preview); then calibrate from it."""
        pred = self.prediction if self.prediction is not None and self.prediction.config.replace(out=None) \
            == run.config.replace(out=None) else self.predict()
        shown = None
        if pred is not None:
            self.compared = (pred, run.summary)
            fig = preview_figure(pred, run.summary, note=f"preview from the costs of run {self._source()}, beside "
                                 "the real run; the next previews use this run's costs")
            shown = fig, comparison_html(pred, run.summary)
        self.calibrate_from(run)
        return shown
