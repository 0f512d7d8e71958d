"""The detector playground: EDiT's penalty on a made-up norm series, redrawn at once as you move a slider.

No process, no tensor: two replicas' pseudo-gradient norms G over a few dozen syncs (a steady noisy level,
and on demand a one-sync **spike** or a **lasting rise**, on replica 1 or on both), judged by the library's
real penalty: `penalty.replay` (one `AnomalyDetector` per replica, the re-admission of D10, exactly as
`EDiTMethod.start_sync` decides), `penalty.softmax_weights` and `penalty.clip_factor`. Every slider is a
field of `PenaltyConfig`, so what you see is what a run with those settings would decide on these norms.

    pg = DetectorPlayground()          # leave as a cell's last expression to show it
    pg.set(alpha=0.1, event="rise")    # or move the sliders; pg.figure / pg.result are what is drawn

One simplification, said where it is drawn: the clip needs the norm of the *aggregated* Δ̄ = Σ w_r Δ_r,
which depends on the directions of the Δ_r, not only on their norms. The playground takes the replicas'
Δ as pointing the same way, so ‖Δ̄‖ = Σ w_r G_r (the largest it can be: the clip is never understated).
Each replica trains one local step per round here, so the judged value G/k is G itself.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from .penalty import Judged, PenaltyConfig, clip_factor, replay, softmax_weights

EVENTS = ("none", "spike", "rise", "rise-both")
EVENT_LABELS = {"none": "no event", "spike": "spike on replica 1", "rise": "lasting rise on replica 1",
                "rise-both": "lasting rise on both replicas"}


@dataclass(frozen=True)
class NormSeries:
    """How the made-up norms are built: a level with relative noise, and one event.

    `event`: 'none'; 'spike' (replica 1's G is `size`× the level at sync `at` only); 'rise' (replica 1's
    level is `size`× from sync `at` on, for good); 'rise-both' (both replicas' levels rise at `at`: a new
    phase of training, the case re-admission is for). The noise is seeded: the same settings give the
    same series, so moving a detector slider changes the decisions, never the data.
    """

    syncs: int = 30
    level: float = 1.0
    noise: float = 0.05  # relative standard deviation of G around its level
    event: str = "rise"
    at: int = 12  # the first sync of the event (0-based)
    size: float = 1.6  # the event's factor on the level
    replicas: int = 2
    seed: int = 0

    def validate(self) -> None:
        if self.event not in EVENTS:
            raise ValueError(f"event={self.event!r} is not allowed: one of {', '.join(EVENTS)}")
        if not (isinstance(self.syncs, int) and self.syncs >= 2):
            raise ValueError(f"syncs={self.syncs!r} is not allowed: an integer >= 2")
        if not (isinstance(self.replicas, int) and self.replicas >= 2):
            raise ValueError(f"replicas={self.replicas!r} is not allowed: an integer >= 2 (replica 1 has the event)")
        if not 0 <= self.at < self.syncs:
            raise ValueError(f"at={self.at!r} is not allowed: a sync index 0 <= at < syncs={self.syncs}")
        if not (self.level > 0 and self.size > 0 and 0 <= self.noise < 1):
            raise ValueError(f"level={self.level}, size={self.size} must be > 0 and 0 <= noise={self.noise} < 1")

    def norms(self) -> list[list[float]]:
        """norms[r][i]: replica r's G at sync i."""
        self.validate()
        rng = random.Random(self.seed)
        out = []
        for r in range(self.replicas):
            row = []
            for i in range(self.syncs):
                factor = 1.0
                hit = r == 1 or self.event == "rise-both"
                if hit and self.event == "spike" and i == self.at:
                    factor = self.size
                elif hit and self.event in ("rise", "rise-both") and i >= self.at:
                    factor = self.size
                row.append(self.level * factor * max(0.01, 1.0 + self.noise * rng.gauss(0.0, 1.0)))
            out.append(row)
        return out


@dataclass
class PlaygroundResult:
    """What the penalty decided on a series: `judged[r][i]` from `penalty.replay`, and per sync the softmax
    weights of every replica and the clip factor of the aggregate."""

    norms: list[list[float]]
    judged: list[list[Judged]]
    weights: list[list[float]]  # weights[i][r]
    aggregate: list[float]  # Σ_r w_r·G_r, ‖Δ̄‖ with the replicas' Δ pointing the same way
    clip: list[float]  # clip_factor(aggregate, φ); 1 with the clip off
    config: PenaltyConfig = field(default_factory=PenaltyConfig)

    def flagged(self, replica: int) -> list[int]:
        """The syncs at which `replica` was an outlier (its Δ set to zero)."""
        return [i for i, j in enumerate(self.judged[replica]) if j.outlier]

    def readmitted(self, replica: int) -> list[int]:
        """The syncs at which `replica` was re-admitted after K flags in a row (its detector re-armed)."""
        return [i for i, j in enumerate(self.judged[replica]) if j.readmitted]


def decide(norms: list[list[float]], config: PenaltyConfig) -> PlaygroundResult:
    """The penalty's decisions on `norms` (one local step per round), with the library's own functions."""
    config.validate()
    steps = [[1] * len(row) for row in norms]
    judged = replay(config, norms, steps)
    weights, aggregate, clip = [], [], []
    for i in range(len(norms[0])):
        g = [row[i] for row in norms]
        w = softmax_weights(g, config.temperature, [judged[r][i].outlier for r in range(len(norms))],
                            enabled=config.weighting)
        agg = math.fsum(wr * gr for wr, gr in zip(w, g))
        weights.append(w)
        aggregate.append(agg)
        clip.append(clip_factor(agg, config.clip_norm) if config.clip else 1.0)
    return PlaygroundResult(norms, judged, weights, aggregate, clip, config)


#: The rules the figure draws, as the detector computes them (penalty.py, regions detector-test and
#: detector-update); MathJax in the notebook.
UPDATE_RULE = r"""
<b>What the detector does at each sync</b>, for one replica and one unit, with x = its norm G (per local step):
$$z = \frac{x - \hat\mu}{\sigma},\qquad \text{outlier} \iff \text{count} \ge E \ \text{and}\ z > \delta\cdot f,
\qquad f = \max\bigl(1,\ \operatorname{std}(\text{last } E \text{ z-scores})\bigr)$$
then, only when x is <i>not</i> an outlier (an outlier is never learnt), the update with smoothing α:
$$d = x - \hat\mu,\quad \mu \leftarrow \mu + \alpha\,(x-\mu),\quad
M_2 \leftarrow (1-\alpha)\bigl(M_2 + \alpha\, d\,(x - \hat\mu_{\text{new}})\bigr)$$
$$c = 1-(1-\alpha)^{\text{count}}\ \text{(bias correction; 1 when off)},\quad \hat\mu = \mu/c,\quad
\sigma = \max\bigl(\sqrt{M_2/c},\ \varepsilon\,\hat\mu\bigr)$$
Re-admission: a replica flagged K syncs in a row whose G is no larger than its unflagged peers' largest
(×(1+ε)), or whose peers are all flagged too, is let back in and its detector restarts from G.
Weights and clip: $w_r = e^{-G_r/T} / \sum_{s\ \text{not flagged}} e^{-G_s/T}$ (0 when flagged),
$\bar\Delta = \sum_r w_r \Delta_r$ is scaled by $\min\bigl(1, \varphi/(\lVert\bar\Delta\rVert + 10^{-6})\bigr)$.
"""

TERMS = """<b>In the figure</b>: <b>G</b> a replica's pseudo-gradient norm at the sync (solid);
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

        from .widgets import FigurePane

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
        self.base = c
        self.syncs, self.seed = s.syncs, s.seed
        self.pane = FigurePane()
        self.summary = W.HTML()
        self.rule = W.HTMLMath(value=UPDATE_RULE + "<p>" + TERMS + "</p>", layout=W.Layout(width="100%"))
        column = dict(layout=W.Layout(width="400px", overflow="visible"))
        controls = W.HBox([
            W.VBox([self.event, self.at, self.size, self.noise], **column),
            W.VBox([self.alpha, self.arming, self.threshold, self.min_rel_std], **column),
            W.VBox([self.readmit_after, self.temperature, self.clip_norm, self.bias_correction, self.anomaly],
                   **column),
        ], layout=W.Layout(flex_flow="row wrap", width="100%", overflow="visible"))
        self.widget = W.VBox([controls, self.summary, self.pane, self.rule], layout=W.Layout(width="100%"))
        self.figure = None
        self.result: PlaygroundResult | None = None
        for w in self.controls().values():
            w.observe(lambda _change: self.draw(), names="value")
        self.draw()

    def controls(self) -> dict[str, Any]:
        names = ("event", "at", "size", "noise", "alpha", "arming", "threshold", "min_rel_std", "readmit_after",
                 "temperature", "clip_norm", "bias_correction", "anomaly")
        return {n: getattr(self, n) for n in names}

    def set(self, **values: Any) -> "DetectorPlayground":
        """Set controls from code: `pg.set(alpha=0.1, event="rise-both")` (the figure redraws)."""
        from .widgets import set_controls

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
                       anomaly=bool(self.anomaly.value), per_step=True)

    def draw(self) -> None:
        from .viz.detector_playground import detector_figure

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
