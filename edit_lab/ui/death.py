"""The StragglerLab's death controls: kill a replica of the next run at a step, and watch the survivors go on.

A death in the panel is *scheduled*, not a button pressed mid-run, and the reason is the kernel: the panel's Run
keeps the launcher on the kernel's own thread (so that the notebook's stop button reaches it and ends every
worker), and while a cell's callback runs the kernel reads no widget message, so a "kill now" press would only be
seen after the run. The chosen replica is therefore killed by the run itself while it trains: every rank of it
SIGKILLs itself at the start of the chosen step (`fault_replica`, `fault_replica_step`, the trouble section), with
`survive=True` (edit-method.md §16), so the launcher and the survivors see a real death, re-form the sync group as
a new view and go on, and a replacement joins at the first sync at or after `rejoin_step` when one is asked for.
A method that cannot survive (`Capabilities.survivable`) gets the control disabled, with the reason on it.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from edit_lab.config import RunConfig
from edit_lab.registry import capabilities
from edit_lab.viz.losses import loss_figure

NOBODY = -1  # the kill control's "no death"


class DeathControls:
    """Which replica dies, at which step, and whether a replacement joins (the panel's `kill_*` controls)."""

    def __init__(self, base: RunConfig, style: dict[str, str], layout: W.Layout) -> None:
        t = base.trouble
        steps = max(2, base.steps)
        self.kill_replica = W.Dropdown(options=self.options(base.replicas),
                                       value=t.fault_replica if base.runtime.survive else NOBODY,
                                       description="kill replica", style=style, layout=layout)
        # from step 0: sync survives a death at its first step (a local-SGD method's warm-up is refused by the config)
        chosen = base.runtime.survive and t.fault_replica >= 0  # a base's death at step 0 is kept, not moved
        self.kill_step = W.IntSlider(value=t.fault_replica_step if chosen else steps // 2, min=0, max=steps - 1,
                                     description="… at step", style=style, layout=layout)
        self.rejoin_step = W.IntSlider(value=base.runtime.rejoin_step, min=-1, max=steps - 1,
                                       description="replacement at step", style=style, layout=layout,
                                       tooltip="-1: no replacement; s: one joins at the first sync at or after s")
        self.widgets = (self.kill_replica, self.kill_step, self.rejoin_step)
        self.kill_replica.observe(lambda _c: self._shown(), names="value")
        self.allow(base.method)

    @staticmethod
    def options(replicas: int) -> list[tuple[str, int]]:
        return [("nobody", NOBODY)] + [(f"replica {r}", r) for r in range(replicas)]

    def allow(self, method: str) -> None:
        """Enable the control for a method that survives a death; otherwise disable it and say why."""
        ok = capabilities(method).survivable
        if not ok:
            self.kill_replica.value = NOBODY
        self.kill_replica.disabled = not ok
        self.kill_replica.tooltip = ("kill every rank of this replica (SIGKILL) at the step below, while the run "
                                     "trains; survival carries on (edit-method.md §16)" if ok else
                                     f"{method} cannot survive a death (its sync is not rolled back and retried "
                                     "by fewer replicas): choose sync, diloco or edit")
        self._shown()

    def steps_changed(self, steps: int) -> None:
        """The step sliders follow the run's length: its last step is steps − 1."""
        for s in (self.kill_step, self.rejoin_step):
            s.max = max(1, steps - 1)

    def _shown(self) -> None:
        killing = self.kill_replica.value != NOBODY
        self.kill_step.disabled = self.rejoin_step.disabled = not killing

    def settings(self) -> dict[str, Any]:
        """The flat flags of the death chosen (none: nothing, the base's own)."""
        if self.kill_replica.value == NOBODY:
            return {}
        return {"survive": True, "fault_replica": int(self.kill_replica.value),
                "fault_replica_step": int(self.kill_step.value), "rejoin_step": int(self.rejoin_step.value)}


def deaths(run: Any) -> list[dict[str, Any]]:
    """The deaths a run's summary records (`survival.deaths`; [] for a run without one)."""
    try:
        return list((run.summary.get("survival") or {}).get("deaths") or [])
    except (OSError, ValueError):
        return []


def death_window(run: Any) -> tuple[int, int] | None:
    """The steps from the one before the scheduled death (the dead replica's last step start, where the death is
    drawn) to the first sync after it: the episode the timeline shows, if the run had a death."""
    if not deaths(run):
        return None
    cfg = run.config
    start = cfg.trouble.fault_replica_step
    later = sorted(int(r["step"]) for r in run.syncs if r.get("kind") == "sync" and int(r.get("step", -1)) > start)
    return max(0, start - 1), (later[0] if later else min(cfg.steps - 1, start + cfg.schedule.sync_interval))


def survivors_figure(run: Any, label: str) -> go.Figure:
    """Each replica's training loss of a run with a death: the survivors' curves go on; the dead life's rows are lost
    with it (edit-method.md §16, *Records*), so the dead replica has a curve only from its replacement's join.
    The title says what the records show (the last step each replica trained), not what should happen: a survivor
    is one that trained the death's step or later (a death at the last step leaves the survivors only that step)."""
    fig = loss_figure([run], labels=[label], per_replica=True)
    last: dict[int, int] = {}
    for m in run.metrics:
        if m.get("kind") == "train":
            last[int(m["replica"])] = max(last.get(int(m["replica"]), -1), int(m["step"]))
    dead = sorted({int(d["replica"]) for d in deaths(run)})
    step = run.config.trouble.fault_replica_step
    went_on = [r for r in sorted(last) if r not in dead and last[r] >= step]
    fig.update_layout(title=f"{label}: replica {', '.join(map(str, dead))} killed at step {step}; "
                            f"survivors {went_on} trained on to step {max((last[r] for r in went_on), default=step)}")
    return fig
