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

from edit_lab.core.penalty import Judged, PenaltyConfig, clip_factor, replay, softmax_weights

EVENTS = ("none", "spike", "rise", "rise-both", "fall")
EVENT_LABELS = {"none": "no event", "spike": "spike on replica 1", "rise": "lasting rise on replica 1",
                "rise-both": "lasting rise on both replicas", "fall": "lasting fall on replica 1 (÷ size)"}


@dataclass(frozen=True)
class NormSeries:
    """How the made-up norms are built: a level with relative noise, and one event.

    `event`: 'none'; 'spike' (replica 1's G is `size`× the level at sync `at` only); 'rise' (replica 1's
    level is `size`× from sync `at` on, for good); 'rise-both' (both replicas' levels rise at `at`: a new
    phase of training, the weather: judged against the peers it flags nobody, with the peers off it is the
    case re-admission is for); 'fall' (replica 1's level is divided by `size` from sync `at` on: with two
    replicas its peer's ratio q rises as much as a rise would make it, and only the peer's own memory, D15,
    says that the peer did not move). The noise is seeded: the same settings give the
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
                elif hit and self.event == "fall" and i >= self.at:
                    factor = 1.0 / self.size
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


# ---------------------------------------------------------------- the replay set of D15 (edit-method.md §7)

#: The episode shapes of the replay set. 'episode': the bad replica's norm on one unit ×f for L syncs after the
#: detector is armed, then healthy again; 'ramp': ×1 → ×f over 10 syncs, held, then ×1 (gradual, learnt);
#: 'before': ×f from the first sync (before arming) for 20 syncs; 'falls': ×1/f on every unit for 15 syncs (a
#: bad replica whose norm FALLS); 'shared': every replica ×f for good (the training's weather: flags nobody).
SHAPES = ("episode", "ramp", "before", "falls", "shared")
REPLAY_SEEDS = {"choose": tuple(range(0, 5)), "held_out": tuple(range(5, 10))}


@dataclass(frozen=True)
class ReplayCase:
    """One made-up run of the replay set: R replicas × `units` units × `syncs` syncs of G (τ local steps each,
    5 % noise, a 1 %/sync drift every replica shares, the last sync the closing one), the last replica bad
    from sync `start` to `end` (exclusive) by `factor` in the given `shape`. Seeded: the same case gives the
    same norms."""

    shape: str
    replicas: int
    factor: float
    seed: int
    length: int = 10  # L, the episode's syncs ('episode')
    start: int = 10
    syncs: int = 36
    units: int = 3
    tau: int = 5
    noise: float = 0.05

    @property
    def bad(self) -> int:
        return self.replicas - 1

    @property
    def end(self) -> int:
        """The first sync after the episode (syncs: for good)."""
        return {"episode": self.start + self.length, "ramp": 28, "before": 20, "falls": self.start + 15,
                "shared": self.syncs}[self.shape]

    @property
    def onset(self) -> int:
        return 0 if self.shape == "before" else self.start

    def scale(self, r: int, u: int, i: int) -> float:
        """The episode's factor on replica r's unit u at sync i."""
        f, s = self.factor, self.start
        if self.shape == "shared":
            return f if i >= s else 1.0
        if r != self.bad:
            return 1.0
        unit = self.seed % self.units  # the unit the episode strikes (every unit when the norm falls)
        if self.shape == "episode":
            return f if u == unit and s <= i < self.end else 1.0
        if self.shape == "ramp":
            return (1.0 + (f - 1.0) * min(1.0, (i - s) / 10.0)) if u == unit and s <= i < self.end else 1.0
        if self.shape == "before":
            return f if u == unit and i < self.end else 1.0
        return 1.0 / f if s <= i < self.end else 1.0  # falls

    def norms(self) -> list[list[list[float]]]:
        """G[r][u][i]."""
        rng = random.Random(f"{self.shape}/{self.replicas}/{self.factor}/{self.length}/{self.seed}")
        return [[[(1.0 + 0.01 * i) * max(0.01, 1.0 + rng.gauss(0.0, self.noise)) * self.tau * self.scale(r, u, i)
                  for i in range(self.syncs)] for u in range(self.units)] for r in range(self.replicas)]

    def steps(self) -> list[list[int]]:
        return [[self.tau] * self.syncs for _ in range(self.replicas)]

    def closing(self) -> list[bool]:
        return [False] * (self.syncs - 1) + [True]


def replay_set(seeds: tuple[int, ...], replicas: tuple[int, ...] = (2, 3, 4)) -> list[ReplayCase]:
    """Every case of the replay set for these seeds: at R = 2, 3, 4, abrupt episodes of 1, 3, 5 and 10 syncs
    at ×1.6, ×2 and ×3, ramps, onsets before arming and falling norms at ×2 and ×3, a shared ×2 rise."""
    cases = []
    for seed in seeds:
        for R in replicas:
            for f in (1.6, 2.0, 3.0):
                cases += [ReplayCase("episode", R, f, seed, length=L) for L in (1, 3, 5, 10)]
            for f in (2.0, 3.0):
                cases += [ReplayCase(shape, R, f, seed) for shape in ("ramp", "before", "falls")]
            cases.append(ReplayCase("shared", R, 2.0, seed))
    return cases


@dataclass
class ReplayScore:
    """What a rule decided on a replay set (`score`).

    `locked_out`: cases where a healthy replica is still flagged two syncs or more after the episode ended
    (the closing sync included); `healthy_closing`: cases whose closing sync leaves a healthy replica out of
    the final model; `healthy_flags` / `healthy_judged`: healthy replica-syncs flagged, over all;
    `caught` / `episode_syncs`: the bad replica's syncs flagged during abrupt post-arming episodes of ×2 or
    more; `shared_flags`: replica-syncs flagged under a shared rise."""

    cases: int = 0
    locked_out: int = 0
    healthy_closing: int = 0
    healthy_flags: int = 0
    healthy_judged: int = 0
    caught: int = 0
    episode_syncs: int = 0
    shared_flags: int = 0
    by_shape: dict[str, int] = field(default_factory=dict)  # locked-out cases per shape and R, "episode R=2"

    @property
    def caught_share(self) -> float:
        return self.caught / self.episode_syncs if self.episode_syncs else math.nan


def flagged(config: PenaltyConfig, case: ReplayCase) -> list[list[bool]]:
    """out[r][i]: replica r left out (of some unit) at sync i under `config`, from `penalty.replay_units`."""
    from edit_lab.core.penalty import replay_units

    got = replay_units(config, case.norms(), case.steps(), case.closing())
    return [[any(got[r][u][i].outlier for u in range(case.units)) for i in range(case.syncs)]
            for r in range(case.replicas)]


def score(config: PenaltyConfig, cases: list[ReplayCase]) -> ReplayScore:
    """Replay every case through `config` (the engine's own `judge_replicas`) and count what `ReplayScore` says."""
    s = ReplayScore()
    for case in cases:
        out = flagged(config, case)
        s.cases += 1
        healthy = [r for r in range(case.replicas) if case.shape == "shared" or r != case.bad]
        if case.shape == "shared":
            s.shared_flags += sum(out[r][i] for r in healthy for i in range(case.syncs))
            continue
        late = range(min(case.end + 2, case.syncs - 1), case.syncs)
        locked = any(out[r][i] for r in healthy for i in late)
        s.locked_out += locked
        if locked:
            key = f"{case.shape} R={case.replicas}"
            s.by_shape[key] = s.by_shape.get(key, 0) + 1
        s.healthy_closing += any(out[r][-1] for r in healthy)
        s.healthy_flags += sum(out[r][i] for r in healthy for i in range(case.syncs))
        s.healthy_judged += len(healthy) * case.syncs
        if case.shape == "episode" and case.factor >= 2.0 and case.onset >= config.arming:
            s.caught += sum(out[case.bad][i] for i in range(case.onset, case.end))
            s.episode_syncs += case.end - case.onset
    return s
