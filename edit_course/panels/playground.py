"""The detector playground: EDiT's penalty on a made-up norm series, redrawn at once as you move a slider.

No process, no tensor: two replicas' pseudo-gradient norms G over a few dozen syncs (a steady noisy level,
and on demand a one-sync **spike**, a **lasting rise** on replica 1 or on both, or a **lasting fall** on
replica 1), judged by the library's real penalty: `penalty.replay`, exactly as `EDiTMethod.start_sync`
decides. By default (D15) each replica's detector judges q = its G over its peer's (with two replicas the
median of the peers is the other replica, so q₀ = 1/q₁); a new flag also needs q > κ_e, and, since two
replicas have no majority, the replica's own G above its own memory by δ_m σ, to enter and to stay out.
`penalty_enter_ratio=0, penalty_memory_threshold=0` is D11 as first chosen, `peers` off the per-unit rule
of D10 with its re-admission (both stay available). Then `penalty.softmax_weights` and `penalty.clip_factor`. Every control is a field of `PenaltyConfig`,
so what you see is what a run with those settings would decide on these norms.

    pg = DetectorPlayground()          # leave as a cell's last expression to show it
    pg.set(alpha=0.1, event="rise")    # or move the sliders; pg.figure / pg.result are what is drawn

One simplification, said where it is drawn: the clip needs the norm of the *aggregated* Δ̄ = Σ w_r Δ_r,
which depends on the directions of the Δ_r, not only on their norms. The playground takes the replicas'
Δ as pointing the same way, so ‖Δ̄‖ = Σ w_r G_r (the largest it can be: the clip is never understated).
Each replica trains one local step per round here, so the judged value G/k is G itself.

This module is the panel; the series and the decisions are `detector_series.py`'s and the figure is
`viz/detector_playground.py`'s, both without widgets, so the imports go one way: panel → figure → data.
"""

from __future__ import annotations

from typing import Any

from edit_course.figures.detector_playground import detector_figure
from edit_course.panels.detector_series import EVENT_LABELS, EVENTS, NormSeries, PlaygroundResult, decide
from edit_lab.core.penalty import PenaltyConfig

__all__ = ["DetectorPlayground", "NormSeries", "PlaygroundResult", "decide"]

#: The rules the figure draws, as the detector computes them (edit_lab/detector.py, regions detector-test and
#: detector-update); MathJax in the notebook.
UPDATE_RULE = r"""
<b>What the detector does at each sync</b>, for one replica and one unit, with x = q = its norm G (per local step)
divided by the median of the other replicas' G at the same sync ("judge against the peers"; with two replicas
that median is the other replica, so q₀ = 1/q₁; with the peers switched off, x = G itself, as the authors'
detector):
$$z = \frac{x - \hat\mu}{\sigma},\qquad \text{outlier} \iff \text{count} \ge E \ \text{and}\ z > \delta\cdot f,
\qquad f = \max\bigl(1,\ \operatorname{std}(\text{last } E \text{ z-scores})\bigr)$$
then, only when x is <i>not</i> an outlier (an outlier is never learnt), the update with smoothing α:
$$d = x - \hat\mu,\quad \mu \leftarrow \mu + \alpha\,(x-\mu),\quad
M_2 \leftarrow (1-\alpha)\bigl(M_2 + \alpha\, d\,(x - \hat\mu_{\text{new}})\bigr)$$
$$c = 1-(1-\alpha)^{\text{count}}\ \text{(bias correction; 1 when off)},\quad \hat\mu = \mu/c,\quad
\sigma = \max\bigl(\sqrt{M_2/c},\ \varepsilon\,\hat\mu\bigr)$$
Against the peers (D15, the default) an outlier is flagged only where q &gt; κ_e as well, and a flagged replica
stays out while its q is above κ_s; a rise both replicas share leaves q at 1: nobody is flagged. Two replicas
have no majority (q₀ = 1/q₁: the ratios cannot say which one moved), so both tests also ask the replica's
<i>memory</i>, a second detector following its own G: its G must stand δ_m σ above it (δ_m = 0: not asked, the
rule D11 as first chosen). A memory learns only while its replica is admitted. With the peers off (D10), a replica flagged K
syncs in a row whose G is no larger than its unflagged peers' largest (×(1+ε)), or whose peers are all flagged
too, is let back in and its detector restarts from G.
Weights and clip: $w_r = e^{-G_r/T} / \sum_{s\ \text{not flagged}} e^{-G_s/T}$ (0 when flagged),
$\bar\Delta = \sum_r w_r \Delta_r$ is scaled by $\min\bigl(1, \varphi/(\lVert\bar\Delta\rVert + 10^{-6})\bigr)$.
"""

TERMS = """<b>In the figure</b>: <b>G / peer</b> (against the peers) or <b>G</b> a replica's pseudo-gradient
norm at the sync, over its peer's (solid);
<b>μ̂</b> the detector's EWMA mean before it (dashed); <b>flag limit μ̂ + δ·f·σ</b> (dotted): a G above
it is an outlier (red ✕) once the detector is armed (E syncs learnt); <b>z</b> how many σ G lies above μ̂,
drawn against its threshold <b>δ·f</b> (f = max(1, std of the detector's last E z-scores): it widens the
threshold for a replica whose recent z-scores were spread out); ◆ a re-admission (K flags in a row);
<b>weight</b> the softmax weight of each replica's Δ (no bar: every replica was flagged and the outer step
is skipped); <b>clip factor</b> the scale of the aggregate
Δ̄ (1 = not clipped), with ‖Δ̄‖ taken as Σ w·G (the replicas' Δ pointing the same way)."""


class DetectorPlayground:
    """Sliders for the series and every detector setting; the figure redraws on each change.

    `figure` (a plain go.Figure) and `result` (the decisions) are what is shown; `set(**values)` moves
    controls from code, `controls()` names them.
    """

    def __init__(self, config: PenaltyConfig | None = None, series: NormSeries | None = None) -> None:
        import ipywidgets as W

        from edit_lab.ui.lab import FigurePane

        c = config or PenaltyConfig()
        s = series or NormSeries()
        style = {"description_width": "150px"}
        lay = W.Layout(width="390px")
        opts = dict(style=style, layout=lay, continuous_update=False)
        check = dict(indent=False, layout=W.Layout(width="390px"))
        self.event = W.Dropdown(options=[(EVENT_LABELS[e], e) for e in EVENTS], value=s.event,
                                description="event", style=style, layout=lay)
        self.at = W.IntSlider(value=s.at, min=0, max=s.syncs - 1, description="event at sync", **opts)
        self.size = W.FloatSlider(value=s.size, min=1.0, max=5.0, step=0.05, description="event size ×", **opts)
        self.noise = W.FloatSlider(value=s.noise, min=0.0, max=0.3, step=0.01, description="noise (relative)",
                                   **opts)
        self.alpha = W.FloatSlider(value=c.alpha, min=0.01, max=0.9, step=0.01, description="α (EWMA smoothing)",
                                   **opts)
        self.arming = W.IntSlider(value=c.arming, min=1, max=20, description="E (arming, syncs)", **opts)
        self.threshold = W.FloatSlider(value=c.threshold, min=0.5, max=8.0, step=0.1, description="δ (threshold)",
                                       **opts)
        self.min_rel_std = W.FloatSlider(value=c.min_rel_std, min=0.0, max=0.5, step=0.01,
                                         description="ε (noise floor)", **opts)
        self.readmit_after = W.IntSlider(value=c.readmit_after, min=0, max=10, description="K (re-admit; 0 never)",
                                         **opts)
        self.temperature = W.FloatLogSlider(value=c.temperature, base=10, min=-2, max=2, step=0.1,
                                            description="T (softmax temp.)", **opts)
        self.clip_norm = W.FloatLogSlider(value=c.clip_norm, base=10, min=-1, max=2, step=0.1,
                                          description="φ (clip norm)", **opts)
        self.bias_correction = W.Checkbox(value=c.bias_correction, description="bias correction (c)", **check)
        self.anomaly = W.Checkbox(value=c.anomaly, description="anomaly filter on", **check)
        self.peers = W.Checkbox(value=c.peers, description="judge against the peers", **check)
        self.stay_ratio = W.FloatSlider(value=c.stay_ratio, min=0.0, max=3.0, step=0.05,
                                        description="κ_s (stay out above)", **opts)
        self.enter_ratio = W.FloatSlider(value=c.enter_ratio, min=0.0, max=3.0, step=0.05,
                                         description="κ_e (enter above)", **opts)
        self.memory_threshold = W.FloatSlider(value=c.memory_threshold, min=0.0, max=5.0, step=0.1,
                                              description="δ_m (memory; 0 none)", **opts)
        self.base = c
        self.syncs, self.seed = s.syncs, s.seed
        self.pane = FigurePane()
        self.summary = W.HTML()
        self.rule = W.HTMLMath(value=UPDATE_RULE + "<p>" + TERMS + "</p>", layout=W.Layout(width="100%"))
        column = dict(layout=W.Layout(width="400px", overflow="visible"))
        controls = W.HBox([
            W.VBox([self.event, self.at, self.size, self.noise, self.enter_ratio, self.memory_threshold], **column),
            W.VBox([self.alpha, self.arming, self.threshold, self.min_rel_std, self.stay_ratio], **column),
            W.VBox([self.readmit_after, self.temperature, self.clip_norm, self.bias_correction, self.anomaly,
                    self.peers], **column),
        ], layout=W.Layout(flex_flow="row wrap", width="100%", overflow="visible"))
        self.widget = W.VBox([controls, self.summary, self.pane, self.rule], layout=W.Layout(width="100%"))
        self.figure = None
        self.result: PlaygroundResult | None = None
        for w in self.controls().values():
            w.observe(lambda _change: self.draw(), names="value")
        self.draw()

    def controls(self) -> dict[str, Any]:
        names = ("event", "at", "size", "noise", "alpha", "arming", "threshold", "min_rel_std", "readmit_after",
                 "temperature", "clip_norm", "bias_correction", "anomaly", "peers", "stay_ratio", "enter_ratio",
                 "memory_threshold")
        return {n: getattr(self, n) for n in names}

    def set(self, **values: Any) -> "DetectorPlayground":
        """Set controls from code: `pg.set(alpha=0.1, event="rise-both")` (the figure redraws)."""
        from edit_lab.ui.lab import set_controls

        set_controls(self.controls(), values)
        return self

    def series(self) -> NormSeries:
        return NormSeries(syncs=self.syncs, noise=float(self.noise.value), event=self.event.value,
                          at=int(self.at.value), size=float(self.size.value), seed=self.seed)

    def config(self) -> PenaltyConfig:
        """The PenaltyConfig the sliders describe (the other fields from the one given at construction)."""
        from dataclasses import replace

        return replace(self.base, alpha=float(self.alpha.value), arming=int(self.arming.value),
                       threshold=float(self.threshold.value), min_rel_std=float(self.min_rel_std.value),
                       readmit_after=int(self.readmit_after.value), temperature=float(self.temperature.value),
                       clip_norm=float(self.clip_norm.value), bias_correction=bool(self.bias_correction.value),
                       anomaly=bool(self.anomaly.value), peers=bool(self.peers.value),
                       stay_ratio=_stay(float(self.stay_ratio.value)),
                       enter_ratio=_stay(float(self.enter_ratio.value)),
                       memory_threshold=float(self.memory_threshold.value), per_step=True)

    def draw(self) -> None:
        series = self.series()
        self.result = decide(series.norms(), self.config())
        self.figure = detector_figure(self.result, title=f"The detector on a made-up series: "
                                                         f"{EVENT_LABELS[series.event]}")
        self.pane.show(self.figure)
        r = self.result
        parts = []
        for rep in range(len(r.norms)):
            f, a = r.flagged(rep), r.readmitted(rep)
            parts.append(f"replica {rep}: flagged at syncs {_ranges(f) or 'none'}"
                         + (f", re-admitted at {_ranges(a)}" if a else ""))
        self.summary.value = "; ".join(parts)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def _stay(v: float) -> float:
    """The κ_s and κ_e sliders: below 1 means no test (0), as `PenaltyConfig` allows only 0 or a ratio >= 1."""
    return v if v >= 1.0 else 0.0


def _ranges(xs: list[int]) -> str:
    """[3, 4, 5, 9] → '3–5, 9'."""
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}–{xs[j]}")
        i = j + 1
    return ", ".join(out)
