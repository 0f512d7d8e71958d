"""The pseudo-gradient penalty's anomaly detector: one replica's, one unit's EWMA of the norm it judges
(edit-method.md §4, decisions D1, D10), and the checks of the penalty's values (`PenaltyValueError`).

Torch-free and plain float64 arithmetic, like the rest of the penalty (`edit_lab.core.penalty`, which takes one
sync's decisions with these detectors). It sits in layer 0 beside `edit_lab.config.penalty`, whose
`PenaltyConfig.new_detector` builds one, so that `RunConfig.validate` checks the penalty's settings without
importing the core (`tests/unit/test_layers.py`).
"""

from __future__ import annotations

import collections
import math
from typing import Any


class PenaltyValueError(ValueError):
    """A penalty setting that cannot work. `field` is its name in `PenaltyConfig` (`penalty_<field>` in
    `RunConfig`, whose validate turns this into a ConfigError naming that field) and `allowed` what would."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")



def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float))


def _check_detector_params(alpha: Any, arming: Any, threshold: Any, bias_correction: Any = False,
                           readmit_after: Any = 0, min_rel_std: Any = 0.0) -> None:
    """Refuse detector settings that cannot work, naming the field.

    The one check of these values: `AnomalyDetector`, `PenaltyConfig.validate` and (through the latter)
    `RunConfig.validate` all call it, so a value the detector would refuse can never pass the config.
    """
    if not _is_number(alpha) or not 0.0 < alpha < 1.0:
        # α = 1 would make μ the last value and M2 always 0: the detector could never flag anything
        raise PenaltyValueError("alpha", alpha, "a number with 0 < alpha < 1 (the EWMA smoothing)")
    if isinstance(arming, bool) or not isinstance(arming, int) or arming < 1:
        raise PenaltyValueError("arming", arming, "an integer >= 1 (E: syncs of history before the detector may flag)")
    if not _is_number(threshold) or not 0.0 < threshold < math.inf:
        raise PenaltyValueError("threshold", threshold, "a finite number > 0 (delta, in standard deviations)")
    if not isinstance(bias_correction, bool):
        raise PenaltyValueError("bias_correction", bias_correction, "True or False")
    if isinstance(readmit_after, bool) or not isinstance(readmit_after, int) or readmit_after < 0:
        raise PenaltyValueError("readmit_after", readmit_after,
                                "an integer >= 0 (K: a replica flagged K syncs in a row is re-admitted when its "
                                "norm is no larger than its unflagged peers' largest times 1 + min_rel_std, or "
                                "every replica is flagged; 0: never)")
    if not _is_number(min_rel_std) or not 0.0 <= min_rel_std < math.inf:
        raise PenaltyValueError("min_rel_std", min_rel_std,
                                "a finite number >= 0 (the smallest σ as a fraction of the mean; 0: none)")



def _check_positive(name: str, value: Any, what: str) -> None:
    """A number > 0 where +inf is allowed and means 'no effect' (T = inf: plain mean; phi = inf: no clip)."""
    if not _is_number(value) or not value > 0.0:
        raise PenaltyValueError(name, value, f"a number > 0, inf allowed ({what})")


class AnomalyDetector:
    """EWMA mean/variance of a unit's pseudo-gradient norm for one replica (one instance per replica and unit).

    **Exact mode** (`bias_correction=False`, `readmit_after=0`, the constructor's defaults): the reference's
    rules of edit-method.md §4, kept to the letter because the numbers of §8 depend on them:

        update(x): count += 1; d = x − μ; μ += α·d; M2 = (1−α)·(M2 + α·d·(x − μ)); window.append(z(x))
        σ = sqrt(M2) when count ≥ 2, else 0
        z(x) = (x − μ)/σ when count ≥ E and σ > 0, else 0
        factor = max(1, unbiased std of the last E z-scores) when count ≥ E, else 1
        is_outlier(x) = count ≥ E and z(x) > δ·factor

    **Bias correction** (`bias_correction=True`, decision D10). μ and M2 start at 0, so for the first
    ~1/α updates μ is pulled towards 0 and a steady healthy norm looks high (with α = 0.02 and E = 3 a
    constant norm has z ≈ 4). As Adam does for its moments, the detector then judges with

        c = 1 − (1−α)^count;   μ̂ = μ / c;   σ̂ = sqrt(M2 / c)

    and measures the deviations of the M2 update from the corrected mean:
    d = x − μ̂_before, M2 = (1−α)·(M2 + α·d·(x − μ̂_after)) (d = 0 for the first value). Dividing the
    reference's M2 alone would not do: its deviations from the biased μ are the start-up transient
    itself (a constant norm c gives M2 ≈ count·α·c², so M2/c would make σ̂ ≈ c and hide a doubled norm).
    With the corrected deviations, μ̂ and σ̂²/(1−α) are exactly the mean and the variance of the values
    seen, weighted (1−α)^age: the first value gives μ̂ = x, σ̂ = 0. As count grows, c → 1 and the rules
    become the exact ones again. μ (`mean`) and M2 (`m2`) are stored uncorrected in both modes.

    **Re-admission** (`readmit_after=K > 0`, D10). A flagged value is never learnt (D1), so a norm that
    rises for good on every replica (a larger lr after a resume, a new phase of training) would be flagged
    at every later sync, and a unit whose replicas are all flagged is not updated: it would stay frozen
    for the rest of the run; and a replica whose detector flagged a rise that its peers' detectors had
    already learnt (they judged a slightly lower value first) stays flagged alone. So every detector counts
    its replica's flags in a row (`count_flag`, shared in the all-gathered decisions), and
    `readmitted_replicas` re-admits a replica flagged K syncs in a row when its judged norm is no larger
    than the largest judged norm of the replicas not flagged now, or when every replica is flagged (a rise
    shared by all, nobody to compare with). Its detector then re-arms from that value (`restart`): it
    forgets everything and starts again with the value as its first, so it learns the new level and may
    flag again E − 1 syncs later. A replica fed bad data has a larger norm than its healthy peers and
    stays flagged; a non-finite norm is never re-admitted.

    Where this departs from the reference (ATorch's `OnlineDynamicEWMA`, whose update, σ, z, window factor and
    `is_outlier` exact mode equals), or where it is silent, chosen here:

    - Arithmetic in float64 on Python floats (ATorch's statistics are float32 tensors): every rank, given the
      same gathered norms, takes bit-for-bit the same decisions. The two agree to float32 rounding.

    - The window holds the z-score of each accepted value computed *at update time*, i.e. with the
      statistics (and count) that already include that value. It therefore holds zeros until count
      reaches E. It keeps the last E entries.
    - The unbiased std of a window with fewer than two entries is taken as 0 (factor 1), where the reference
      would produce NaN and so never flag anything; this only matters for E = 1.
    - A NaN or ±inf value is always an outlier, even before arming: nothing can be learnt from it and it
      must never enter the statistics. `z` of such a value is the value itself (NaN, ±inf), so that it
      shows as such in the event records. `update` refuses it with ValueError. The reference is not silent
      here, it differs: its `z > threshold` is False for NaN, so a NaN norm passes and is learnt (its mean and
      variance turn NaN for good), and before arming it flags nothing, so an infinite norm is learnt too.
      (Peer ratios, `edit_lab.core.penalty._decide_peers`: q = inf from a peers' median of 0 is not a
      non-finite norm; only an armed detector flags it.)
    - Only large norms are outliers (one-sided): a replica that barely moved is harmless.
    - With σ = 0 (e.g. bias-corrected, after identical values) z is 0 and nothing finite is flagged.
    - `update` does not test for outliers itself; callers must not feed it one (decision D1: the reference
      FSDP path feeds the detector G + 1e6, which blinds it for about a thousand syncs). `observe` does the
      test-then-update in the right order and is what the engine calls.
    """

    def __init__(self, alpha: float = 0.02, arming: int = 10, threshold: float = 3.0,
                 bias_correction: bool = False, readmit_after: int = 0, min_rel_std: float = 0.0) -> None:
        _check_detector_params(alpha, arming, threshold, bias_correction, readmit_after, min_rel_std)
        self.alpha = float(alpha)
        self.arming = int(arming)  # E
        self.threshold = float(threshold)  # delta
        self.bias_correction = bias_correction
        self.readmit_after = int(readmit_after)  # K
        self.min_rel_std = float(min_rel_std)  # ε
        self.count: int = 0
        self.mean: float = 0.0  # μ, uncorrected
        self.m2: float = 0.0  # M2, uncorrected
        self.window: collections.deque[float] = collections.deque(maxlen=self.arming)
        self.streak: int = 0  # consecutive syncs at which this replica was flagged on this unit
        self.broke: bool = False  # its last judged value was not finite (D16: θ ← a made the replica healthy again)

    @property
    def armed(self) -> bool:
        """True once E values have been accepted: only then are z-scores and outliers computed."""
        return self.count >= self.arming

    def correction(self) -> float:
        """c = 1 − (1−α)^count with bias correction (1 before any value), else 1."""
        if not self.bias_correction or self.count == 0:
            return 1.0
        return -math.expm1(self.count * math.log1p(-self.alpha))

    def mu(self) -> float:
        """The mean the detector judges with: μ̂ = μ/c with bias correction, else μ."""
        return self.mean / self.correction()

    def std(self) -> float:
        """σ = max(sqrt(M2/c), ε·|μ̂|) (c = 1 in exact mode, ε = 0 in the reference) once two values have
        been seen, else 0. The floor ε·|μ̂| (`min_rel_std`): a series that barely moves has a tiny σ, and its
        z-score then calls a 10 % drift of a healthy norm (a longer round, a later phase of training) an
        anomaly; with the floor a value must exceed μ̂ by at least δ·ε·μ̂ (45 % with δ = 3, ε = 0.15)."""
        if self.count < 2:
            return 0.0
        return max(math.sqrt(max(self.m2, 0.0) / self.correction()), self.min_rel_std * abs(self.mu()))

    # region detector-test
    def z(self, x: float) -> float:
        """How many σ the norm x lies above the running mean; 0 before arming or with σ = 0."""
        x = float(x)
        if not math.isfinite(x):
            return x
        sigma = self.std()
        if not self.armed or sigma == 0.0:
            return 0.0
        return (x - self.mu()) / sigma

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

    def flag_limit(self) -> float:
        """The norm above which a finite value is an outlier now: μ + δ·factor·σ (inf if none can be)."""
        sigma = self.std()
        if not self.armed or sigma == 0.0:
            return math.inf
        return self.mu() + self.current_threshold() * sigma

    def is_outlier(self, x: float) -> bool:
        """True for NaN/±inf always; otherwise only once armed and when z(x) > δ·factor (one-sided)."""
        x = float(x)
        if not math.isfinite(x):
            return True
        if not self.armed:
            return False
        return self.z(x) > self.current_threshold()
    # endregion detector-test

    # region detector-update
    def update(self, x: float) -> None:
        """Fold an accepted (non-outlier) norm into the statistics; refuses NaN/inf (see the class docstring)."""
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"AnomalyDetector.update needs a finite value, got {x!r}; it is an outlier (D1)")
        if self.bias_correction:
            before = self.mu() if self.count else x  # μ̂ is undefined before the first value: no deviation
        else:
            before = self.mean  # the reference: μ, which starts at 0
        self.count += 1
        self.mean += self.alpha * (x - self.mean)
        self.m2 = (1.0 - self.alpha) * (self.m2 + self.alpha * (x - before) * (x - self.mu()))
        self.window.append(self.z(x))
    # endregion detector-update

    def restart(self, x: float) -> None:
        """Re-arm: forget every statistic, the window and the run of flags, and start again from x alone."""
        self.count, self.mean, self.m2, self.streak = 0, 0.0, 0.0, 0
        self.window.clear()
        self.update(x)

    # region detector-observe
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
    # endregion detector-observe

    def count_flag(self, outlier: bool) -> int:
        """Count this sync's decision; returns the syncs in a row this replica has been flagged, this one
        included (0 when it was not). What `readmitted_replicas` compares with K."""
        self.streak = self.streak + 1 if outlier else 0
        return self.streak

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (ints, floats, bools, a list), for checkpoints (D6).

        The settings (alpha … readmit_after) are included to make a checkpoint self-describing;
        `load_state_dict` does not take them over (see there).
        """
        return {
            "alpha": self.alpha,
            "arming": self.arming,
            "threshold": self.threshold,
            "bias_correction": self.bias_correction,
            "readmit_after": self.readmit_after,
            "min_rel_std": self.min_rel_std,
            "count": self.count,
            "mean": self.mean,
            "m2": self.m2,
            "window": list(self.window),
            "streak": self.streak,
            "broke": self.broke,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore the running statistics (count, mean, m2, window) and the run of flags (streak).

        The instance keeps its own settings: the resumed run's configuration is what the user asked for.
        With a smaller arming only the last E z-scores are kept. A checkpoint made before re-admission
        existed has no streak: 0.
        """
        missing = [k for k in ("count", "mean", "m2", "window") if k not in d]
        if missing:
            raise ValueError(f"detector state lacks {', '.join(missing)}")
        self.count = int(d["count"])
        self.mean = float(d["mean"])
        self.m2 = float(d["m2"])
        self.window = collections.deque((float(v) for v in d["window"]), maxlen=self.arming)
        self.streak = int(d.get("streak", 0))
        self.broke = bool(d.get("broke", False))
