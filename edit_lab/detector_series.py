"""The detector playground's data: a made-up norm series and what EDiT's penalty decides on it, no widget.

The playground panel (`playground.DetectorPlayground`) builds a `NormSeries` from its sliders and draws
`decide`'s `PlaygroundResult` with `viz.detector_playground.detector_figure`; both read the result from
here, so the panel depends on its figure and never the other way round. `decide` calls the library's
real penalty (`penalty.replay`, `penalty.softmax_weights`, `penalty.clip_factor`), so what is drawn is
what a run with those settings would decide on these norms.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .penalty import Judged, PenaltyConfig, clip_factor, replay, softmax_weights

EVENTS = ("none", "spike", "rise", "rise-both")
EVENT_LABELS = {"none": "no event", "spike": "spike on replica 1", "rise": "lasting rise on replica 1",
                "rise-both": "lasting rise on both replicas"}


@dataclass(frozen=True)
class NormSeries:
    """How the made-up norms are built: a level with relative noise, and one event.

    `event`: 'none'; 'spike' (replica 1's G is `size`× the level at sync `at` only); 'rise' (replica 1's
    level is `size`× from sync `at` on, for good); 'rise-both' (both replicas' levels rise at `at`: a new
    phase of training, the weather: judged against the peers it flags nobody, with the peers off it is the
    case re-admission is for). The noise is seeded: the same settings give the
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
