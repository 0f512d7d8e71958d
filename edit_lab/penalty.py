"""The pseudo-gradient penalty of EDiT (edit-method.md §4, decisions D1–D2), without any communication.

SYNC(l) penalises a replica's pseudo-gradient Δ_r = a − θ_r of unit l in three independent steps:

1. **anomaly**: a per-replica, per-unit `AnomalyDetector` follows the norm G_r of Δ_r over the syncs and
   flags a norm that is far above its usual value; a flagged replica's Δ_r is set to zero.
2. **weighting**: `softmax_weights` gives the replicas with smaller norms more weight (softmax of −G/T),
   anomalous replicas none.
3. **clip**: `clip_factor` scales the *aggregated* pseudo-gradient down to a norm of at most φ.

Everything here is plain float64 arithmetic on Python floats, so that every rank, given the same all-gathered
norms, takes bit-for-bit the same decisions, and so that the rules can be tested and shown in a notebook
without processes or tensors. The collectives that produce the norms and apply the weights live in the engine.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Added to the norm before dividing, as in `torch.nn.utils.clip_grad_norm_` and the reference code.
CLIP_EPS = 1e-6


def _check_detector_params(alpha: Any, arming: Any, threshold: Any) -> None:
    """Refuse detector settings that cannot work, naming the field (shared by the config and the detector)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha (EWMA smoothing) must be a number with 0 < alpha < 1, got {alpha!r}")
    if isinstance(arming, bool) or not isinstance(arming, int) or arming < 1:
        raise ValueError(f"arming (E, syncs before the detector may flag) must be an integer >= 1, got {arming!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold < math.inf:
        raise ValueError(f"threshold (delta, in standard deviations) must be a finite number > 0, got {threshold!r}")


def _check_positive(name: str, value: Any, what: str) -> None:
    """A number > 0 where +inf is allowed and means 'no effect' (T = inf: plain mean; phi = inf: no clip)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0.0:
        raise ValueError(f"{name} ({what}) must be a number > 0 (inf allowed), got {value!r}")


@dataclass
class PenaltyConfig:
    """The penalty's knobs; each of the three parts can be switched off on its own (for ablations).

    `arming` is E, counted in syncs (not steps). The reference default of 120 syncs is far longer than the
    runs of this lab, hence 10 here. `temperature` T = inf gives equal weights; `clip_norm` φ = inf never clips.
    """

    anomaly: bool = True
    weighting: bool = True
    clip: bool = True
    alpha: float = 0.02
    arming: int = 10  # E
    threshold: float = 3.0  # delta
    temperature: float = 1.0  # T
    clip_norm: float = 10.0  # phi

    def validate(self) -> None:
        """Raise ValueError naming the first bad field and its allowed range."""
        for name in ("anomaly", "weighting", "clip"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        _check_detector_params(self.alpha, self.arming, self.threshold)
        _check_positive("temperature", self.temperature, "T of the softmax weights")
        _check_positive("clip_norm", self.clip_norm, "phi, the largest norm of the aggregated pseudo-gradient")

    def new_detector(self) -> AnomalyDetector:
        """A fresh detector with this configuration (one is needed per replica and unit)."""
        return AnomalyDetector(alpha=self.alpha, arming=self.arming, threshold=self.threshold)


class AnomalyDetector:
    """EWMA mean/variance of a unit's pseudo-gradient norm for one replica (one instance per replica and unit).

    The rules are those of edit-method.md §4, kept to the letter because the numbers of §8 depend on them:

        update(x): count += 1; d = x − μ; μ += α·d; M2 = (1−α)·(M2 + α·d·(x − μ)); window.append(z(x))
        σ = sqrt(M2) when count ≥ 2, else 0
        z(x) = (x − μ)/σ when count ≥ E and σ > 0, else 0
        factor = max(1, unbiased std of the last E z-scores) when count ≥ E, else 1
        is_outlier(x) = count ≥ E and z(x) > δ·factor

    Semantics where the text is silent, chosen here:

    - μ and M2 start at 0, so μ is biased towards 0 for the first ~1/α updates; the arming period E exists
      so that no decision is taken on that young estimate.
    - The window holds the z-score of each accepted value computed *at update time*, i.e. with the
      statistics (and count) that already include that value. It therefore holds zeros until count
      reaches E. It keeps the last E entries.
    - The unbiased std of a window with fewer than two entries is taken as 0 (factor 1), where the reference
      would produce NaN and so never flag anything; this only matters for E = 1.
    - A NaN or ±inf value is always an outlier, even before arming: nothing can be learnt from it and it
      must never enter the statistics. `z` of such a value is the value itself (NaN, ±inf), so that it
      shows as such in the event records. `update` refuses it with ValueError.
    - Only large norms are outliers (one-sided): a replica that barely moved is harmless.
    - `update` does not test for outliers itself; callers must not feed it one (decision D1: the reference
      FSDP path feeds the detector G + 1e6, which blinds it for about a thousand syncs). `observe` does the
      test-then-update in the right order and is what the engine calls.
    """

    def __init__(self, alpha: float = 0.02, arming: int = 10, threshold: float = 3.0) -> None:
        _check_detector_params(alpha, arming, threshold)
        self.alpha = float(alpha)
        self.arming = int(arming)  # E
        self.threshold = float(threshold)  # delta
        self.count: int = 0
        self.mean: float = 0.0
        self.m2: float = 0.0
        self.window: collections.deque[float] = collections.deque(maxlen=self.arming)

    @property
    def armed(self) -> bool:
        """True once E values have been accepted: only then are z-scores and outliers computed."""
        return self.count >= self.arming

    def std(self) -> float:
        """σ = sqrt(M2) once two values have been seen, else 0."""
        if self.count < 2:
            return 0.0
        return math.sqrt(max(self.m2, 0.0))

    def z(self, x: float) -> float:
        """How many σ the norm x lies above the running mean; 0 before arming or with σ = 0."""
        x = float(x)
        if not math.isfinite(x):
            return x
        sigma = self.std()
        if not self.armed or sigma == 0.0:
            return 0.0
        return (x - self.mean) / sigma

    def factor(self) -> float:
        """max(1, unbiased std of the window's z-scores) once armed, else 1.

        Widens the threshold when recent z-scores themselves have been spread out, so that a noisy but
        healthy replica is not flagged over and over.
        """
        if not self.armed or len(self.window) < 2:
            return 1.0
        n = len(self.window)
        mean = math.fsum(self.window) / n
        var = math.fsum((v - mean) ** 2 for v in self.window) / (n - 1)
        return max(1.0, math.sqrt(var))

    def current_threshold(self) -> float:
        """δ·factor: the z-score above which a norm is an outlier now."""
        return self.threshold * self.factor()

    def is_outlier(self, x: float) -> bool:
        """True for NaN/±inf always; otherwise only once armed and when z(x) > δ·factor (one-sided)."""
        x = float(x)
        if not math.isfinite(x):
            return True
        if not self.armed:
            return False
        return self.z(x) > self.current_threshold()

    def update(self, x: float) -> None:
        """Fold an accepted (non-outlier) norm into the statistics; refuses NaN/inf (see the class docstring)."""
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"AnomalyDetector.update needs a finite value, got {x!r}; it is an outlier (D1)")
        self.count += 1
        d = x - self.mean
        self.mean += self.alpha * d
        self.m2 = (1.0 - self.alpha) * (self.m2 + self.alpha * d * (x - self.mean))
        self.window.append(self.z(x))

    def observe(self, x: float) -> tuple[bool, float, float]:
        """Decide on x, then learn from it unless it is an outlier (D1).

        Returns (outlier, z, threshold) where z = z(x) and threshold = δ·factor, both computed BEFORE the
        update, i.e. exactly the numbers the decision was taken on (what the event records should show).
        """
        outlier = self.is_outlier(x)
        z = self.z(x)
        threshold = self.current_threshold()
        if not outlier:
            self.update(x)
        return outlier, z, threshold

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (ints, floats, a list), for checkpoints (D6).

        alpha, arming and threshold are included to make a checkpoint self-describing; `load_state_dict`
        does not take them over (see there).
        """
        return {
            "alpha": self.alpha,
            "arming": self.arming,
            "threshold": self.threshold,
            "count": self.count,
            "mean": self.mean,
            "m2": self.m2,
            "window": list(self.window),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore the running statistics (count, mean, m2, window).

        The instance keeps its own alpha, arming and threshold: the resumed run's configuration is what
        the user asked for. With a smaller arming only the last E z-scores are kept.
        """
        missing = [k for k in ("count", "mean", "m2", "window") if k not in d]
        if missing:
            raise ValueError(f"detector state lacks {', '.join(missing)}")
        self.count = int(d["count"])
        self.mean = float(d["mean"])
        self.m2 = float(d["m2"])
        self.window = collections.deque((float(v) for v in d["window"]), maxlen=self.arming)


def _check_replicas(norms: Sequence[float] | None, anomalous: Sequence[bool]) -> None:
    if len(anomalous) == 0:
        raise ValueError("need at least one replica")
    if norms is not None and len(norms) != len(anomalous):
        raise ValueError(f"got {len(norms)} norms for {len(anomalous)} anomaly flags; need one per replica")


def softmax_weights(
    norms: Sequence[float],
    temperature: float,
    anomalous: Sequence[bool],
    enabled: bool = True,
) -> list[float]:
    """Aggregation weights of the replicas' pseudo-gradients for one unit (decision D2: used whenever enabled).

    enabled:  w_r = exp(−G_r/T) / Σ_{non-anomalous} exp(−G_s/T) for non-anomalous r, 0 for anomalous r.
              Computed as exp(−(G_r − G_min)/T) with G_min the smallest norm among the non-anomalous
              replicas, so the largest term is exactly 1 and nothing overflows or underflows to 0/0.
    disabled: plain mean over the non-anomalous replicas (1/k each, k of them); the norms are not looked at.
    all anomalous: all zeros (the caller then skips the outer step, see `all_anomalous`).

    Anomalous replicas are excluded in both modes, so switching weighting off keeps the anomaly filter
    (with no anomalies, disabled gives the paper's plain 1/R). With weighting on, a non-anomalous replica
    whose norm is +inf or NaN (possible when the anomaly filter is off) gets weight 0, the limit of the
    softmax for an infinitely large norm; if no finite norm is left the weights are all zero. T = inf
    gives equal weights. Weights sum to 1 up to rounding whenever one is non-zero.
    """
    _check_replicas(norms, anomalous)
    _check_positive("temperature", temperature, "T of the softmax weights")
    keep = [not bool(a) for a in anomalous]
    if not enabled:
        k = sum(keep)
        return [1.0 / k if kept else 0.0 for kept in keep] if k else [0.0] * len(keep)
    usable = [kept and math.isfinite(float(g)) for kept, g in zip(keep, norms)]
    if not any(usable):
        return [0.0] * len(keep)
    g_min = min(float(g) for g, ok in zip(norms, usable) if ok)
    t = float(temperature)
    e = [math.exp(-(float(g) - g_min) / t) if ok else 0.0 for g, ok in zip(norms, usable)]
    total = math.fsum(e)
    return [v / total for v in e]


def clip_factor(norm: float, clip_norm: float) -> float:
    """min(1, φ/(n + 1e-6)): the scale that brings the aggregated pseudo-gradient's norm n to at most φ.

    As in `torch.nn.utils.clip_grad_norm_`, the 1e-6 makes the factor φ/(φ + 1e-6) ≈ 1 − 1e-7 (not 1)
    exactly at n = φ; it is exactly 1 for n ≤ φ − 1e-6. n = inf gives 0; a NaN norm gives NaN (the
    aggregate is already NaN; the factor does not pretend otherwise). φ = inf never clips.
    """
    n = float(norm)
    _check_positive("clip_norm", clip_norm, "phi, the largest norm of the aggregated pseudo-gradient")
    if math.isnan(n):
        return math.nan
    if n < 0.0:
        raise ValueError(f"a norm cannot be negative, got {n!r}")
    return min(1.0, float(clip_norm) / (n + CLIP_EPS))


def all_anomalous(anomalous: Sequence[bool]) -> bool:
    """True when every replica was flagged for this unit: there is nothing to aggregate, skip the outer step."""
    _check_replicas(None, anomalous)
    return all(bool(a) for a in anomalous)
