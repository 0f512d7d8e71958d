"""Interactive panels (ipywidgets 8): a thin layer that launches or re-filters runs and redraws the figures.

- `StragglerLab`: choose a method, the sync interval (A-EDiT: the sync period in seconds), how slow
  the last replica is, random pauses, the link's bandwidth and latency, prefetch and the penalty
  switches (A-EDiT chosen with no time budget gets one: `config.panel_time_budget`), and a replica to kill at a
  step while the run trains, survival carrying on (ui/death.py); the *preview* tab
  redraws a simulated run (edit_lab/clock/sim) on every change, no Run needed;
  **Run** launches a real run (progress bar included), then sets the preview beside its measurement and
  draws its timeline, the straggler and loss figures (against the previous runs, so two presses compare
  two methods) and the penalty decisions. The *clock* switch picks where that run is timed: on this
  machine (one worker process per rank, the default) or on the virtual clock (`clock="virtual"`, every
  rank a thread of this process, time from a cost model: edit_lab/clock/virtual.py), whose runs say "virtual
  clock" and their cost profile in the status line, in their labels and in every figure's title.
- `TimelineExplorer(run)`: the timeline of an existing run with a step range, a rank selection and
  an alignment (own steps, or by time for A-EDiT), plus the hidden/exposed split of those steps.

Every control is a public attribute and both panels have methods (`run()`, `click()`, `set()`),
so a notebook cell, a script or a test can drive them without a browser. Figures are kept as
plain `go.Figure`s in `.figures` (what tests look at) and shown in `FigurePane`s (what the notebook
shows, always at the notebook's width). Displaying a panel is just leaving it as the last
expression of a cell. The controls wrap onto more rows where the notebook is narrow (a laptop with
the file browser open), so every slider's value stays in view.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from edit_lab.clock.virtual import DEFAULT_EXAMPLE as DEFAULT_COSTS
from edit_lab.config import METHODS, RunConfig, default_lab_config, panel_time_budget
from edit_lab.core.mesh import Mesh
from edit_lab.records.analysis import RunLike, as_run, as_runs, comm_split, sync_window
from edit_lab.records.run import Run
from edit_lab.records.rundir import PROGRESS, read_progress
from edit_lab.ui.death import DeathControls, death_window, deaths, survivors_figure
from edit_lab.ui.preview import LabPreview, Shown
from edit_lab.viz.layout import empty_figure, short_run_labels
from edit_lab.viz.losses import loss_figure
from edit_lab.viz.penalty import penalty_figure
from edit_lab.viz.rounds import rounds_figure
from edit_lab.viz.stragglers import straggler_figure
from edit_lab.viz.timeline import default_align, timeline_figure

CLOCKS = (("this machine", "wall"), ("virtual", "virtual"))  # the panel's clock switch: RunConfig.clock.kind
VIRTUAL = "virtual clock"  # what a virtual run's labels and titles say
BANDWIDTHS = (("unlimited", 0.0), ("1000 MB/s", 1000.0), ("100 MB/s", 100.0), ("20 MB/s", 20.0),
              ("5 MB/s", 5.0), ("1 MB/s", 1.0))
FIGURES = ("preview", "timeline", "stragglers", "rounds", "loss", "penalty")  # preview: PreviewTab
ROUNDS_SHOWN = 3  # runs stacked in the rounds tab (each adds a panel of one row per replica)


def available_methods() -> list[str]:
    """The methods that can be launched, in the course's order (config.METHODS)."""
    return list(METHODS)


def set_controls(controls: dict[str, W.Widget], values: dict[str, Any]) -> None:
    """Set a panel's controls by name from code (a test, a script); an unknown name is refused with the
    known ones, so a typo does not pass silently."""
    for k, v in values.items():
        if k not in controls:
            raise KeyError(f"no control {k!r}; controls: {', '.join(controls)}")
        controls[k].value = v


def failure_html(e: BaseException, limit: int = 600) -> str:
    """A failure for the status line: escaped (a traceback holds '<'), and cut to its last lines."""
    text = f"{type(e).__name__}: {e}"
    if len(text) > limit:
        text = "…" + text[-limit:]
    return f"<b>failed</b>: <pre style='white-space: pre-wrap; margin: 0'>{html.escape(text)}</pre>"


def is_virtual(run: RunLike) -> bool:
    """Whether `run` was timed by the virtual clock's cost model rather than by this machine."""
    return as_run(run).config.clock.kind == "virtual"


def cost_profile(source: str | None) -> str:
    """A virtual run's cost source (summary.json's `clock_costs`, `RunConfig.clock.costs`) as a reader wants it:
    a run directory or a costs file named by its last part (a path says where a checkout lies, not which costs:
    'calibrated from run edit-straggler', 'costs file gpu.json'), the rest (what was scaled) kept as written."""
    if not source:
        return f"the default: calibrated from the shipped example run {DEFAULT_COSTS}"
    head, sep, rest = source.partition(" (")
    if "/" not in head and "\\" not in head and not head.endswith(".json"):
        return source  # a sentence (typed-in costs)
    name = head.rstrip("/\\").replace("\\", "/").split("/")[-1]
    examples = "/edit_lab/records/examples/" in head.replace("\\", "/") + "/"
    what = (f"costs file {name}" if name.endswith(".json") else
            f"calibrated from the shipped example run {name}" if examples else f"calibrated from run {name}")
    return f"{what}{sep}{rest}"


def clock_note(run: RunLike) -> str:
    """'virtual clock, costs <profile>' for a virtual run, '' for one timed on this machine: said wherever the
    run's numbers are shown, since a virtual second is the cost model's, not this machine's."""
    r = as_run(run)
    if not is_virtual(r):
        return ""
    return f"{VIRTUAL}, costs {cost_profile(r.summary.get('clock_costs') or r.config.clock.costs)}"


def clock_labels(runs: Sequence[RunLike], labels: Sequence[str]) -> list[str]:
    """`labels` with ', virtual clock' added to each virtual run's, so a comparison of real and virtual runs
    never reads as one clock."""
    return [f"{label}, {VIRTUAL}" if is_virtual(r) else label for r, label in zip(runs, labels)]


def mark_clock(fig: go.Figure, runs: Sequence[RunLike]) -> go.Figure:
    """`fig` (a figure of `runs`) with a subtitle line under its heading naming the virtual clock and the cost
    profile of the virtual runs among `runs` (unchanged when there are none); the top margin grows with it."""
    from edit_lab.viz.layout import SUBTITLE_CHARS, top_margin, wrap

    virtual = [r for r in runs if is_virtual(r)]
    if not virtual:
        return fig
    profiles = "; ".join(dict.fromkeys(clock_note(r).removeprefix(f"{VIRTUAL}, costs ") for r in virtual))
    note = f"{VIRTUAL}: time from a cost model, not this machine (costs {profiles})"
    if len(virtual) < len(runs):
        note = (f"runs marked '{VIRTUAL}' are timed by a cost model, not this machine (costs {profiles}); the others "
                f"by this machine")
    sub = "<sup>" + wrap(note, SUBTITLE_CHARS).replace("<br>", "</sup><br><sup>") + "</sup>"
    title = fig.layout.title.text or ""
    head, sep, rest = title.partition("<br><sup>")  # under the heading, above the figure's own subtitle
    text = f"{head}<br>{sub}" + (f"{sep}{rest}" if sep else "")
    added = sub.count("<sup>")
    t = fig.layout.margin.t
    fig.update_layout(title_text=text, margin_t=(t + 17 * added) if t is not None else top_margin(text))
    return fig


class FigurePane(W.Output):
    """A figure inside a panel that always takes the notebook's width, as a figure in a cell's output does.

    Why not a `go.FigureWidget`: plotly's FigureWidget (an anywidget) is sized once, when it is first
    drawn (700 px wide by default, or the width of a hidden tab: nothing), and never again: opening
    the file browser, resizing the window or switching to its tab leaves it too wide or too narrow.
    A FigurePane shows the figure the way a cell shows one (JupyterLab's plotly renderer), which
    redraws it at its container's width whenever that changes. `.figure` is the figure shown.
    """

    def __init__(self, fig: go.Figure | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("layout", W.Layout(width="100%", min_width="0"))
        super().__init__(**kwargs)
        self.figure: go.Figure = go.Figure()
        if fig is not None:
            self.show(fig)

    @property
    def data(self) -> tuple:
        """The traces shown (as `FigureWidget.data`)."""
        return self.figure.data

    def show(self, fig: go.Figure) -> None:
        """Show `fig` instead of what was shown, in one update (no flicker, also from another thread)."""
        import plotly.io as pio

        self.figure = fig
        bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
        title = fig.layout.title.text or "figure"
        bundle["text/plain"] = f"<plotly figure: {title.split('<br>')[0][:80]}>"
        self.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)


def show_figure(target: FigurePane, fig: go.Figure) -> None:
    """Replace what a FigurePane shows by `fig` in one update (the notebooks' and panels' redraw)."""
    target.show(fig)


class PreviewTab(LabPreview):
    """StragglerLab's preview tab: `LabPreview`'s figure in `pane`, its table below, redrawn on every change
    of `controls`. The panel hands over how a figure is shown (`show`), so the tab reaches into nothing of it."""

    def __init__(self, base: RunConfig, config: Callable[[], RunConfig], runs: list[Run | None],
                 controls: dict[str, W.Widget], pane: FigurePane, show: Callable[[go.Figure], None]) -> None:
        super().__init__(base, config, runs)
        self.show = show
        self.table = W.HTML(layout=W.Layout(width="100%", overflow="auto"))
        self.box = W.VBox([pane, self.table], layout=W.Layout(width="100%"))
        for w in controls.values():
            w.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def redraw(self) -> None:
        """Predict the run the controls describe and show it (called on every control change)."""
        self._show(self.predicted())

    def after_run(self, run: Run) -> None:
        """Show the preview of the run just made beside its measurement, then calibrate from it (a virtual run's
        measurement is the cost model's: the figure says so)."""
        shown = self.measured(run)
        if shown is not None:
            fig, table = shown
            if is_virtual(run):
                fig.update_layout(title_text=(fig.layout.title.text or "").replace("the real run", "the virtual run"))
                fig = mark_clock(fig, [run])
            self._show((fig, table))

    def _show(self, shown: Shown) -> None:
        fig, self.table.value = shown
        self.show(fig)


def run_summary(run: Run) -> str:
    """The status line after a run: throughput, loss and length, and for a virtual run its clock and costs
    (its seconds are the cost model's)."""
    s = run.summary
    note = clock_note(run)
    line = (f"{run.config.method}: {s.get('tokens_per_s', 0):.0f} tokens/s, final train loss "
            f"{s.get('final_train_loss', float('nan')):.3f}, {s.get('wall_s', 0):.1f} {'virtual s' if note else 's'}")
    return f"{line} ({html.escape(note)})" if note else line


class StragglerLab:
    """Launch runs (real, or on the virtual clock) with stragglers and a slow link, and see what each method
    makes of them."""

    def __init__(self, base: RunConfig | None = None, out_dir: str | Path | None = None,
                 initial: RunLike | Sequence[RunLike] | None = None, keep: int = 4,
                 launcher: Callable[[RunConfig], Run] | None = None) -> None:
        """`base` holds every setting the controls do not (model, steps, mesh…); `initial`: runs to show
        before the first launch (default: the example runs shipped in edit_lab/records/examples; `[]` for none);
        `keep`: runs compared in the figures."""
        self.base = base or default_lab_config()
        self.out_dir = Path(out_dir) if out_dir is not None else Path("runs") / "straggler-lab"
        self.keep = keep
        if launcher is None:
            from edit_lab.runtime.launch import launch as launcher
        self.launcher = launcher
        if initial is None:  # the small runs shipped with the package: something to look at before Run
            from edit_lab.records.examples import example_runs

            initial = example_runs()
        self.history: list[Run] = as_runs(initial)[-keep:] if initial else []
        self.last_run: Run | None = self.history[-1] if self.history else None
        self.error: BaseException | None = None
        self._count = 0
        b = self.base
        # each control 390 px: a 150 px description, the slider and its value ("0.316") all in view; two
        # columns fit a laptop's notebook with the file browser open (~850 px), three a wide screen
        style = {"description_width": "150px"}
        layout = W.Layout(width="390px")
        check = dict(indent=False, layout=W.Layout(width="390px"))  # the label right of the box, uncut
        methods = available_methods()
        self.method = W.Dropdown(options=methods, value=b.method if b.method in methods else methods[0],
                                 description="method", style=style, layout=layout)
        self.sync_interval = W.IntSlider(value=b.schedule.sync_interval, min=1, max=max(20, b.schedule.sync_interval),
                                         description="sync interval τ", style=style, layout=layout)
        self.sync_period = W.FloatLogSlider(value=b.aedit.sync_period, base=10, min=-2, max=1, step=0.1,
                                            description="A-EDiT sync period (s)", style=style, layout=layout)
        self.slow_factor = W.FloatSlider(value=b.stragglers.factor, min=1.0, max=4.0, step=0.25,
                                         description="last replica slower ×", style=style, layout=layout)
        self.pause_prob = W.FloatSlider(value=b.stragglers.random_pause_prob, min=0.0, max=0.5, step=0.05,
                                        description="random pause prob.", style=style, layout=layout)
        self.pause_ms = W.FloatSlider(value=b.stragglers.random_pause_ms, min=0.0, max=200.0, step=10.0,
                                      description="pause length (ms)", style=style, layout=layout)
        bw_values = [v for _, v in BANDWIDTHS]
        self.bandwidth = W.Dropdown(options=BANDWIDTHS,
                                    value=b.link.bandwidth_mb_s if b.link.bandwidth_mb_s in bw_values else 0.0,
                                    description="sync link bandwidth", style=style, layout=layout)
        self.latency_ms = W.FloatSlider(value=b.link.latency_ms, min=0.0, max=50.0, step=1.0,
                                        description="sync link latency (ms)", style=style, layout=layout)
        self.prefetch = W.Checkbox(value=b.schedule.prefetch, description="prefetch (overlap sync with compute)", **check)
        self.penalty_anomaly = W.Checkbox(value=b.penalty.anomaly, description="penalty: anomaly filter", **check)
        self.penalty_weighting = W.Checkbox(value=b.penalty.weighting, description="penalty: softmax weights",
                                            **check)
        self.penalty_clip = W.Checkbox(value=b.penalty.clip, description="penalty: clip", **check)
        self.steps = W.IntSlider(value=b.steps, min=2, max=max(200, b.steps), description="steps", style=style,
                                 layout=layout)
        # 0: train `steps` steps; otherwise every replica trains as many steps as fit (edit-method.md §12);
        # A-EDiT starts from a budget (config.panel_time_budget): with a step count its fast replica idles
        budget = panel_time_budget(self.method.value, b.time_budget)
        self.time_budget = W.FloatSlider(value=budget, min=0.0, max=max(60.0, budget), step=1.0,
                                         description="time budget (s)", style=style, layout=layout,
                                         tooltip="0: train `steps` steps; > 0: train for this many seconds")
        # where Run's run is timed: this machine (a process per rank) or the virtual clock (threads, a cost model)
        self.clock = W.ToggleButtons(options=CLOCKS, value=b.clock.kind if b.clock.kind in dict(CLOCKS).values() else "wall",
                                     description="clock", style={"description_width": "40px", "button_width": "118px"},
                                     layout=W.Layout(width="330px", flex="0 0 auto"),  # both labels whole (118 px each)
                                     tooltips=["a real run: one worker process per rank, timed by this machine",
                                               "the same run in this process, every rank a thread, timed by a cost "
                                               "model (the virtual clock): no core contention, the same on any "
                                               "machine"])
        # a replica killed while the run trains, survival carrying on (ui/death.py says why it is scheduled)
        self.death = DeathControls(b, style, layout)
        self.kill_replica, self.kill_step, self.rejoin_step = self.death.widgets
        self.button = W.Button(description="Run", button_style="primary", icon="play",
                               tooltip="launch a run with these settings (on the chosen clock)")
        self.progress = W.IntProgress(value=0, min=0, max=b.steps, description="",
                                      layout=W.Layout(width="200px", min_width="120px"))
        self.status = W.HTML(value="press Run to launch a real run" if not self.history
                             else f"showing {len(self.history)} earlier run(s); press Run to launch a new one",
                             layout=W.Layout(flex="1 1 300px", min_width="0"))
        self.button.on_click(lambda _b: self._on_click())
        self.clock.observe(lambda _change: self._clock_chosen(), names="value")
        self.method.observe(lambda change: self._method_chosen(change["new"]), names="value")
        self.steps.observe(lambda change: self.death.steps_changed(int(change["new"])), names="value")
        self.figures: dict[str, go.Figure] = {}
        self.figure_widgets: dict[str, FigurePane] = {name: FigurePane() for name in FIGURES}
        previewed = {n: w for n, w in self.controls().items() if n != "clock"}  # the preview simulates either clock
        self.preview = PreviewTab(self.base, self.config, [self.last_run, *self.history[::-1]], previewed,
                                  self.figure_widgets["preview"], show=lambda fig: self._set("preview", fig))
        self.tabs = W.Tab(children=[self.preview.box if n == "preview" else self.figure_widgets[n] for n in FIGURES],
                          titles=list(FIGURES),
                          layout=W.Layout(width="100%"))
        column = dict(layout=W.Layout(width="400px", overflow="visible"))
        # the columns wrap onto the next row where the notebook is narrow, instead of leaving the view
        controls = W.HBox([
            W.VBox([self.method, self.steps, self.sync_interval, self.sync_period, self.prefetch], **column),
            W.VBox([self.time_budget, self.slow_factor, self.pause_prob, self.pause_ms, *self.death.widgets],
                   **column),
            W.VBox([self.bandwidth, self.latency_ms, self.penalty_anomaly, self.penalty_weighting,
                    self.penalty_clip], **column),
        ], layout=W.Layout(flex_flow="row wrap", width="100%", overflow="visible"))
        run_row = W.HBox([self.clock, self.button, self.progress, self.status],
                         layout=W.Layout(flex_flow="row wrap", width="100%", align_items="center"))
        self.widget = W.VBox([controls, run_row, self.tabs], layout=W.Layout(width="100%"))
        if self.history:
            self.draw()
        else:
            for n in FIGURES[1:]:
                self._set(n, empty_figure(n, "no run yet: press Run"))

    # ------------------------------------------------------------ configuration
    def controls(self) -> dict[str, W.Widget]:
        """Every control by name (the names `set()` accepts)."""
        names = ("method", "steps", "time_budget", "sync_interval", "sync_period", "prefetch", "slow_factor",
                 "pause_prob", "pause_ms",
                 "bandwidth", "latency_ms", "penalty_anomaly", "penalty_weighting", "penalty_clip", "kill_replica",
                 "kill_step", "rejoin_step", "clock")
        return {n: getattr(self, n) for n in names}

    def set(self, **values: Any) -> "StragglerLab":
        """Set controls from code: `lab.set(method="edit", slow_factor=2.0)`."""
        set_controls(self.controls(), values)
        return self

    def config(self) -> RunConfig:
        """The RunConfig the controls describe (the slow replica is the last one; `clock`: the switch's)."""
        b = self.base
        slow = self.slow_factor.value > 1.0
        return b.replace(
            method=self.method.value, steps=int(self.steps.value), time_budget=float(self.time_budget.value),
            sync_interval=int(self.sync_interval.value),
            sync_period=float(self.sync_period.value), prefetch=bool(self.prefetch.value),
            straggler_replicas=(b.replicas - 1,) if slow else (), straggler_factor=float(self.slow_factor.value),
            random_pause_prob=float(self.pause_prob.value), random_pause_ms=float(self.pause_ms.value),
            link_bandwidth_mb_s=float(self.bandwidth.value), link_latency_ms=float(self.latency_ms.value),
            penalty_anomaly=bool(self.penalty_anomaly.value), penalty_weighting=bool(self.penalty_weighting.value),
            penalty_clip=bool(self.penalty_clip.value), progress=False, clock=str(self.clock.value),
            **self.death.settings(),
        )

    def _clock_chosen(self) -> None:
        """Say on the status line what Run will do now (nothing runs: only a press of Run launches)."""
        if self.button.disabled:
            return
        where = ("on the virtual clock: every rank a thread of this process, time from a cost model"
                 if self.clock.value == "virtual" else "on this machine: one worker process per rank")
        self.status.value = f"press Run to launch a run {where}"

    def _method_chosen(self, method: str) -> None:
        """A-EDiT chosen with no time budget: give it one (the slider moves, so the reader sees it)."""
        self.time_budget.value = panel_time_budget(method, float(self.time_budget.value))
        self.death.allow(method)  # a method that cannot survive a death: the kill control off, and why

    # ------------------------------------------------------------ running
    def run(self) -> Run:
        """Launch a run with the current settings on the chosen clock, following its progress, then redraw.

        Either clock goes through `self.launcher` (`launch`, which runs a virtual config in this process), so an
        injected launcher sees the config with its `clock`. Raises on failure."""
        self._count += 1
        cfg = self.config()
        out = self.out_dir / f"{self._count:02d}-{cfg.method}-{int(time.time() * 1e3) % 10**8}"
        cfg = cfg.replace(out=str(out))
        cfg.validate()
        self.button.disabled = True
        total, _ = cfg.progress_total()
        self.progress.max, self.progress.value, self.progress.bar_style = total, 0, "info"
        unit = "virtual s" if cfg.clock.kind == "virtual" else "s"
        length = f"{cfg.time_budget:g} {unit}" if cfg.time_budget else f"{cfg.steps} steps"
        where = (f" on the {VIRTUAL} (in this process, every rank a thread; costs {cost_profile(cfg.clock.costs)})"
                 if cfg.clock.kind == "virtual" else "")
        self.status.value = f"running {cfg.method} {cfg.shards}×{cfg.replicas} for {length}{where}…"
        # The run itself stays on this thread, so an interrupt (the notebook's stop button) reaches the
        # launcher, which then ends every worker; a helper thread only follows the progress file.
        done = threading.Event()
        follower = threading.Thread(target=self._follow, args=(out / PROGRESS, done), daemon=True)
        follower.start()
        try:
            run = self.launcher(cfg)
        except BaseException as e:
            self.progress.bar_style = "danger"
            self.status.value = failure_html(e)
            raise
        finally:
            done.set()
            follower.join()
            self.button.disabled = False
        self.progress.value, self.progress.bar_style = total, "success"
        self.history = (self.history + [run])[-self.keep:]
        self.last_run = run
        self.draw()
        self.preview.after_run(run)
        self.status.value = run_summary(run)
        return run

    def click(self) -> None:
        """Press the Run button (as a user would): errors are shown in the panel, not raised."""
        self.button.click()

    def _on_click(self) -> None:
        self.error = None
        try:
            self.run()
        except BaseException as e:  # a widget callback must not kill the kernel's event loop
            self.error = e
            self.status.value = failure_html(e)

    def _follow(self, path: Path, done: threading.Event) -> None:
        """Copy the run's progress file (written by rank 0) into the progress bar until `done`."""
        while not done.wait(0.1):
            prog = read_progress(path)
            if prog is not None:
                self.progress.value = min(prog[0], self.progress.max)

    # ------------------------------------------------------------ drawing
    def draw(self) -> None:
        """Redraw every figure from the latest run and the kept history (a virtual run's labels and every title
        over one say so: `clock_labels`, `mark_clock`)."""
        last = self.last_run
        if last is None:
            return
        runs, shown = self.history, self.history[-ROUNDS_SHOWN:]
        # a run with a death: the timeline shows the episode, the loss tab each replica of that run
        self._set("timeline", mark_clock(timeline_figure(last, steps=death_window(last) or sync_window(last)), [last]))
        labels = clock_labels(runs, short_run_labels(runs))  # two presses with the same settings: '#1', '#2'
        self._set("stragglers", mark_clock(straggler_figure(runs, labels=labels), runs))
        self._set("rounds", mark_clock(rounds_figure(shown, labels=labels[-ROUNDS_SHOWN:]), shown))
        loss = survivors_figure(last, labels[-1]) if deaths(last) else loss_figure(runs, labels=labels)
        self._set("loss", mark_clock(loss, [last] if deaths(last) else runs))
        self._set("penalty", mark_clock(penalty_figure(last), [last]))

    def _set(self, name: str, fig: go.Figure) -> None:
        self.figures[name] = fig
        show_figure(self.figure_widgets[name], fig)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


class TimelineExplorer:
    """The timeline of one run with a step range and a rank selection, and what it hides and exposes."""

    def __init__(self, run: RunLike, steps: tuple[int, int] | None = None, ranks: Sequence[int] | None = None) -> None:
        self.run = as_run(run)
        cfg = self.run.config
        lo, hi = steps if steps is not None else sync_window(self.run)
        self.steps = W.IntRangeSlider(value=(lo, hi), min=0, max=cfg.steps, description="steps",
                                      continuous_update=False, layout=W.Layout(width="500px", max_width="100%"))
        options = [("rank {} (replica {}, shard {})".format(k, *Mesh.coords(k, cfg.shards)), k)
                   for k in range(cfg.world_size)]
        self.ranks = W.SelectMultiple(options=options, value=tuple(ranks) if ranks is not None else
                                      tuple(range(cfg.world_size)), description="ranks",
                                      rows=min(cfg.world_size, 8))
        self.show_exposed = W.Checkbox(value=True, description="hatch exposed communication", indent=False,
                                       layout=W.Layout(width="auto", margin="0 0 0 20px"))
        self.align = W.ToggleButtons(options=[("each rank's own steps", "step"),
                                              ("same time as the first rank", "time")],
                                     value=default_align(cfg.method), description="align",
                                     tooltip="A-EDiT's replicas count their steps separately: align by time",
                                     style={"button_width": "210px"})  # the labels fit on their buttons
        self.fig_widget = FigurePane()  # as wide as the notebook, whatever the window does
        self.table = W.HTML()
        self.figure: go.Figure = go.Figure()
        for w in (self.steps, self.ranks, self.show_exposed, self.align):
            w.observe(lambda _change: self.draw(), names="value")
        wrap = W.Layout(flex_flow="row wrap", width="100%", align_items="center", overflow="visible")
        self.widget = W.VBox([W.HBox([self.steps, self.show_exposed], layout=wrap),
                              W.HBox([self.ranks, self.align], layout=wrap), self.fig_widget, self.table],
                             layout=W.Layout(width="100%"))
        self.draw()

    def set(self, steps: tuple[int, int] | None = None, ranks: Sequence[int] | None = None,
            align: str | None = None) -> "TimelineExplorer":
        """Change the shown steps, ranks and/or alignment ('step' or 'time') from code (the figure redraws)."""
        if align is not None:
            self.align.value = align
        if steps is not None:
            self.steps.value = (int(steps[0]), int(steps[1]))
        if ranks is not None:
            self.ranks.value = tuple(int(k) for k in ranks)
        return self

    def draw(self) -> None:
        ranks = list(self.ranks.value)
        self.figure = timeline_figure(self.run, steps=tuple(self.steps.value), ranks=ranks,
                                      show_exposed=bool(self.show_exposed.value), align=self.align.value,
                                      view="full")  # the explorer: every rank and collective
        show_figure(self.fig_widget, self.figure)
        split = comm_split(self.run, by=("kind", "group"), steps=tuple(self.steps.value), ranks=ranks)
        self.table.value = ("<b>communication in the chosen steps</b> (seconds summed over the selected ranks)"
                            + split.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=0))

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
