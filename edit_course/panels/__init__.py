"""The notebooks' smaller panels (ipywidgets 8), each a few controls over runs the notebook already has.

- `PrefetchExplorer` (notebook 04, "the slow-link slider"): a bandwidth and prefetch on/off pick one of
  the notebook's EDiT runs; shows its timeline around the first sync and what the sync step's
  communication hid and exposed.
- `PenaltySwitchPanel` (notebook 05, "switch the defences yourself"): the three penalty switches and a
  unit pick a spiked EDiT run; a combination not run yet is launched on request.
- `TauExplorer` (notebook 02): a τ slider over the sweep's DiLoCo runs, the loss against `sync`.
- `OuterStateCalculator` (notebook 03): a model and S, the bytes a rank holds (no run: the formulas).
- `ClusterPlanner` (notebook 07): machines, GPUs per machine and a model, the commands of that run.

As in edit_lab/ui/lab.py: every control is a public attribute, `set()` and `click()` drive a panel from code
(a test, a script), the shown figures are plain `go.Figure`s in `.figures` and drawn in `FigurePane`s,
failures go to the status line, not up the widget's callback. A panel does not decide which run a
choice means: the notebook passes its own `run_for` (which launches once, then reuses), so the
panel and the notebook's cells share the same runs.

The pure parts, testable without a widget: `switches`, `switches_name` and `switches_config` (the
RunConfig a penalty combination launches), `sync_step_note` (the numbers under the timeline),
`tau_note`, `outer_state_note` and `cluster_plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from edit_lab.config import RunConfig
from edit_lab.records.analysis import comm_totals, sync_window
from edit_lab.records.run import Run
from edit_lab.ui.lab import FigurePane, failure_html, show_figure
from edit_lab.viz.losses import loss_figure
from edit_lab.viz.penalty import penalty_figure
from edit_lab.viz.timeline import timeline_figure

SWITCHES = ("anomaly", "weighting", "clip")  # the pseudo-gradient penalty's defences, in the method page's order
Switches = tuple[bool, bool, bool]  # (anomaly, weighting, clip): which defences are on


def redrawn_panel(panel: Any, controls: list[W.Widget], *below: W.Widget) -> W.VBox:
    """A row of `controls` (wrapping on a narrow notebook) above `below`; every control change calls
    `panel.draw()`, which runs once now so the panel opens drawn."""
    for w in controls:
        w.observe(lambda _change: panel.draw(), names="value")
    row = W.HBox(controls, layout=W.Layout(flex_flow="row wrap", width="100%", align_items="center"))
    box = W.VBox([row, *below], layout=W.Layout(width="100%"))
    panel.draw()
    return box


# ------------------------------------------------------------------------------ the penalty's switches
def switches(anomaly: bool, weighting: bool, clip: bool) -> dict[str, bool]:
    """The RunConfig fields of the three defences (for `cfg.replace(**switches(...))`)."""
    return dict(penalty_anomaly=bool(anomaly), penalty_weighting=bool(weighting), penalty_clip=bool(clip))


def switches_name(key: Switches) -> str:
    """A combination's name: 'penalty off', 'penalty on (all)' or 'only anomaly + clip'."""
    on = [s for s, v in zip(SWITCHES, key) if v]
    return "penalty off" if not on else "penalty on (all)" if len(on) == len(SWITCHES) else "only " + " + ".join(on)


def switches_config(base: RunConfig, key: Switches, out_root: str | Path, prefix: str = "spike") -> RunConfig:
    """`base` with the defences of `key`, writing to `out_root/<prefix>-<name>` (one directory per
    combination, so that a combination run again replaces its own run and no other)."""
    slug = switches_name(key).replace(" ", "-").replace("+", "").replace("(", "").replace(")", "")
    return base.replace(**switches(*key), out=str(Path(out_root) / f"{prefix}-{slug}"))


class PenaltySwitchPanel:
    """Three checkboxes (the defences), a unit pick (the root unit first: one unit's four rows; "every unit" on
    demand), and the penalty decisions and losses (a log axis) of that combination."""

    def __init__(self, run_for: Callable[[Switches], Run], runs: Mapping[Switches, Run], reference: Run,
                 n_units: int, reference_label: str = "penalty off") -> None:
        """`run_for(key)`: the run of a combination, launched if it is not in `runs` yet (the notebook's
        cache, read to know which combinations exist without launching); `reference`: the run every loss
        is compared with; `n_units`: the model's units (the unit pick's options)."""
        self.run_for, self.runs, self.reference, self.reference_label = run_for, runs, reference, reference_label
        self.boxes = {s: W.Checkbox(value=True, description=f"penalty_{s}") for s in SWITCHES}
        self.unit_pick = W.Dropdown(options=[("every unit", -1)] + [(f"unit {u}", u) for u in range(n_units)],
                                    value=0 if n_units > 0 else -1, description="units")  # one unit: four subplots
        self.button = W.Button(description="Run this combination", button_style="primary", icon="play",
                               layout=W.Layout(width="auto"))  # the whole label on the button
        self.status = W.HTML()
        self.figures: dict[str, go.Figure] = {}
        self.panes = {"penalty": FigurePane(), "loss": FigurePane()}
        self.error: BaseException | None = None
        for w in (*self.boxes.values(), self.unit_pick):
            w.observe(lambda _change: self.draw(), names="value")
        self.button.on_click(lambda _b: self._on_click())
        wrap = W.Layout(flex_flow="row wrap", width="100%", align_items="center")
        self.widget = W.VBox([W.HBox([*self.boxes.values(), self.unit_pick], layout=wrap),
                              W.HBox([self.button, self.status], layout=wrap), *self.panes.values()],
                             layout=W.Layout(width="100%"))
        self.draw()

    def key(self) -> Switches:
        """The combination the checkboxes describe."""
        return tuple(bool(self.boxes[s].value) for s in SWITCHES)  # type: ignore[return-value]

    def set(self, unit: int | None = None, **on: bool) -> "PenaltySwitchPanel":
        """Set controls from code: `panel.set(anomaly=False, unit=2)` (unit -1: every unit)."""
        for s, v in on.items():
            if s not in self.boxes:
                raise KeyError(f"no switch {s!r}; switches: {', '.join(SWITCHES)}")
            self.boxes[s].value = bool(v)
        if unit is not None:
            self.unit_pick.value = int(unit)
        return self

    def draw(self) -> None:
        """Show the chosen combination's decisions and losses, or say that it has not been run yet."""
        key = self.key()
        run = self.runs.get(key)
        self.button.disabled = run is not None
        if run is None:
            self.status.value = f"<b>{switches_name(key)}</b> has not been run yet: press <i>Run this combination</i>."
            return
        units = "all" if self.unit_pick.value < 0 else [self.unit_pick.value]  # -1: every unit
        self._set("penalty", penalty_figure(run, units=units, title=f"Penalty decisions: {switches_name(key)}"))
        loss = loss_figure([run, self.reference], labels=[switches_name(key), self.reference_label])
        loss.update_yaxes(type="log")  # a spike's hundreds of nats and a defended run's 3, both readable
        self._set("loss", loss)
        self.status.value = (f"<b>{switches_name(key)}</b>: final validation loss {run.summary['final_val_loss']:.3f} "
                             f"({self.reference_label}: {self.reference.summary['final_val_loss']:.3f})")

    def click(self) -> None:
        """Press the button (as a user would): errors are shown in the status line, not raised."""
        self.button.click()

    def _on_click(self) -> None:
        self.error = None
        self.status.value = f"running {switches_name(self.key())} …"
        self.button.disabled = True
        try:
            self.run_for(self.key())
        except Exception as e:  # shown in the panel; the kernel goes on
            self.error = e
            self.status.value = failure_html(e)
            self.button.disabled = False
            return
        self.draw()

    def _set(self, name: str, fig: go.Figure) -> None:
        self.figures[name] = fig
        show_figure(self.panes[name], fig)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


# ------------------------------------------------------------------------------ the slow-link slider
def sync_step_note(run: Run, bandwidth_mb_s: float, prefetch: bool, step: int) -> str:
    """The numbers under the slider's timeline (HTML): at the sync step `step`, the communication in
    flight and its hidden / exposed / other parts (rank-seconds, each instant once), and the run's wall time."""
    t = comm_totals(run, steps=step)
    return (f"<b>{bandwidth_mb_s:g} MB/s, prefetch {'on' if prefetch else 'off'}</b>: "
            f"at sync step {step}, communication in flight {t['total_s'] * 1e3:.1f} ms (per rank, each "
            f"instant once, summed over ranks): "
            f"hidden {t['hidden_s'] * 1e3:.1f} ms, exposed {t['exposed_s'] * 1e3:.1f} ms, "
            f"waiting on another collective {t['other_s'] * 1e3:.1f} ms; "
            f"run wall time {run.summary['wall_s']:.2f} s")


class PrefetchExplorer:
    """A bandwidth slider and a prefetch toggle over EDiT runs: the timeline of the first sync, and its numbers."""

    def __init__(self, run_for: Callable[[float, bool], Run], bandwidths: Iterable[float],
                 value: float | None = None) -> None:
        """`run_for(mb_s, prefetch)`: the notebook's run on that link (launched the first time it is asked
        for); `bandwidths`: the slider's stops in MB/s (sorted, duplicates dropped); `value`: where it starts
        (default: the slowest)."""
        self.run_for = run_for
        options = sorted({float(b) for b in bandwidths} | ({float(value)} if value is not None else set()))
        if not options:
            raise ValueError("bandwidths: give at least one link bandwidth (MB/s)")
        self.bandwidth = W.SelectionSlider(options=options, value=float(value) if value is not None else options[0],
                                           description="link MB/s", continuous_update=False)
        self.prefetch = W.ToggleButtons(options=[("prefetch on", True), ("prefetch off", False)], value=True)
        self.pane = FigurePane()  # a figure that follows the notebook's width
        self.numbers = W.HTML()
        self.figure: go.Figure = go.Figure()
        self.run: Run | None = None
        self.widget = redrawn_panel(self, [self.bandwidth, self.prefetch], self.numbers, self.pane)

    def set(self, bandwidth: float | None = None, prefetch: bool | None = None) -> "PrefetchExplorer":
        """Move the slider and/or the toggle from code (the figure redraws)."""
        if bandwidth is not None:
            self.bandwidth.value = float(bandwidth)
        if prefetch is not None:
            self.prefetch.value = bool(prefetch)
        return self

    def draw(self) -> None:
        """Fetch (or launch) the chosen run and redraw its timeline around the first sync, and the numbers."""
        mbps, prefetch = float(self.bandwidth.value), bool(self.prefetch.value)
        self.run = run = self.run_for(mbps, prefetch)
        steps = sync_window(run)
        self.figure = timeline_figure(run, steps=steps, view="full")  # the explorer: every rank and collective
        show_figure(self.pane, self.figure)
        self.numbers.value = sync_step_note(run, mbps, prefetch, steps[1])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


# ------------------------------------------------------------------------------ the τ slider (notebook 02)
def tau_note(row: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """One sweep row (a DiLoCo run) against the synchronous reference row: syncs, bytes per step after
    warm-up, seconds blocked on the link, training time (HTML)."""
    return (f"diloco τ = {row['tau']}: {row['syncs']} syncs, {row['local_bytes_per_step']:,.0f} bytes/step after "
            f"warm-up (sync: {ref['local_bytes_per_step']:,.0f}); blocked on the link {row['blocked_s']:.2f} s "
            f"(sync: {ref['blocked_s']:.2f} s); training took {row['wall_s']:.2f} s (sync: {ref['wall_s']:.2f} s)")


class TauExplorer:
    """A τ slider over the sweep's DiLoCo runs: that run's loss against synchronous training, and its traffic."""

    def __init__(self, by_tau: Mapping[int, Run], sweep: Any, reference: Run, value: int | None = None,
                 reference_label: str = "sync, slow link") -> None:
        """`by_tau`: τ -> the DiLoCo run (all on the same slow link); `sweep`: their table (a DataFrame with
        the columns method, tau, syncs, local_bytes_per_step, blocked_s, wall_s; one 'sync' row, the
        reference); `reference`: the synchronous run itself; `value`: the τ shown first."""
        self.by_tau, self.sweep, self.reference, self.reference_label = dict(by_tau), sweep, reference, reference_label
        self.ref = sweep[sweep["method"] == "sync"].iloc[0]
        taus = list(self.by_tau)
        self.tau = W.SelectionSlider(options=taus, value=value if value in self.by_tau else taus[0], description="τ",
                                     continuous_update=False)
        self.note = W.HTML()
        self.pane = FigurePane()  # as wide as the notebook
        self.figure: go.Figure = go.Figure()
        self.widget = redrawn_panel(self, [self.tau], self.note, self.pane)

    def set(self, tau: int) -> "TauExplorer":
        """Move the slider from code (the figure redraws)."""
        self.tau.value = tau
        return self

    def draw(self) -> None:
        tau = self.tau.value
        row = self.sweep[(self.sweep["method"] == "diloco") & (self.sweep["tau"] == tau)].iloc[0]
        self.note.value = tau_note(row, self.ref)
        self.figure = loss_figure([self.reference, self.by_tau[tau]],
                                  labels=[self.reference_label, f"diloco τ={tau}, slow link"])
        show_figure(self.pane, self.figure)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


# ------------------------------------------------------------------------------ what a rank holds (notebook 03)
def outer_state_note(num_params: int, shards: int) -> str:
    """Anchor + momentum per rank in MiB, sharded over S (EDiT) and not (an unsharded DiLoCo)."""
    return (f"anchor + momentum per rank: EDiT {8 * num_params / shards / 2**20:,.1f} MiB, "
            f"unsharded {8 * num_params / 2**20:,.1f} MiB")


class OuterStateCalculator:
    """A model and S: the bytes one rank holds with EDiT's sharded outer state and with an unsharded one."""

    def __init__(self, model: str = "base100m", shards: int = 8) -> None:
        from edit_lab.core.model import SIZES

        self.model = W.Dropdown(options=list(SIZES), value=model, description="model")
        self.shards = W.IntSlider(value=shards, min=1, max=64, description="S", continuous_update=False)
        self.note = W.HTML()
        self.pane = FigurePane()
        self.figure: go.Figure = go.Figure()
        self.widget = redrawn_panel(self, [self.model, self.shards], self.note, self.pane)

    def set(self, model: str | None = None, shards: int | None = None) -> "OuterStateCalculator":
        """Choose the model and/or S from code (the figure redraws)."""
        if model is not None:
            self.model.value = model
        if shards is not None:
            self.shards.value = int(shards)
        return self

    def draw(self) -> None:
        from edit_course.figures.concepts import rank_bytes_figure
        from edit_lab.core.model import get_size

        p, s = get_size(self.model.value).num_params(), int(self.shards.value)
        self.figure = rank_bytes_figure(self.model.value, p, s)
        show_figure(self.pane, self.figure)
        self.note.value = outer_state_note(p, s)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


# ------------------------------------------------------------------------------ a cluster run's plan (notebook 07)
def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def cluster_plan(machines: int, gpus: int, model: str) -> str:
    """The plan of a cluster run of R = `machines` × S = `gpus` (HTML): sizes per rank (float32, padding
    ignored), the two commands (write the config once, then torchrun on every machine), and which ranks
    run on which machine (one machine = one replica; the sync group of local rank 0 crosses them)."""
    import pandas as pd

    from edit_lab.core.model import get_size

    R, S = machines, gpus
    P = get_size(model).num_params()
    per_rank = P / S * 4
    text = "\n".join([
        f"world size {R}·{S} = {R * S} ranks, model {model}: P = {P:,} parameters",
        f"  parameter shard per rank      {_mib(per_rank)}",
        f"  anchor + outer momentum       {_mib(2 * per_rank)} per rank (unsharded DiLoCo: {_mib(2 * P * 4)})",
        f"  sent into the sync group      {_mib(per_rank)} per rank and sync, one unit at a time",
        "",
        f"$ python -m edit_lab run --method edit --shards {S} --replicas {R} --model {model} … --write-config cfg.json",
        f"$ torchrun --nnodes {R} --nproc-per-node {S} --rdzv-backend c10d --rdzv-endpoint HOST:29400 "
        f"-m edit_lab.runtime.worker --config cfg.json     # on every machine"])
    rows = [{"machine": r, "ranks (= one replica)": f"{r * S}…{r * S + S - 1}",
             "sync group of its local rank 0": str([q * S for q in range(R)][:8])} for r in range(min(R, 6))]
    return f"<pre>{text}</pre>" + pd.DataFrame(rows).set_index("machine").to_html()


class ClusterPlanner:
    """Machines, GPUs per machine and a model: the commands of that cluster run and what each rank keeps."""

    def __init__(self, machines: int = 4, gpus: int = 8, model: str = "base100m") -> None:
        wide = {"description_width": "140px"}  # "GPUs per machine S" whole, the three labels aligned
        self.machines = W.IntSlider(value=machines, min=1, max=16, description="machines R", style=wide)
        self.gpus = W.IntSlider(value=gpus, min=1, max=8, description="GPUs per machine S", style=wide)
        self.model = W.Dropdown(options=["nano", "tiny", "small", "base100m"], value=model, description="model",
                                style=wide)
        self.plan = W.HTML()
        self.widget = redrawn_panel(self, [self.machines, self.gpus, self.model], self.plan)

    def set(self, machines: int | None = None, gpus: int | None = None, model: str | None = None) -> "ClusterPlanner":
        """Choose from code (the plan is rewritten)."""
        for w, v in ((self.machines, machines), (self.gpus, gpus), (self.model, model)):
            if v is not None:
                w.value = v
        return self

    def draw(self) -> None:
        self.plan.value = cluster_plan(int(self.machines.value), int(self.gpus.value), self.model.value)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
