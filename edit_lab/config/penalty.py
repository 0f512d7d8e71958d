"""The pseudo-gradient penalty's knobs (`PenaltyConfig`: a `RunConfig`'s `penalty` section), checked torch-free.

Its flags are `--penalty-<name>` (`RunConfig(penalty_alpha=...)` for `cfg.penalty.alpha`). `RunConfig.validate`
refuses a bad one with `PenaltyConfig.validate`, the one definition of the bounds, without importing the core;
the core's penalty (`edit_lab.core.penalty`) takes its decisions with the same class. What each knob does is told in `edit_lab.core.penalty` and edit-method.md §4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from edit_lab.config.knob import knob
from edit_lab.detector import AnomalyDetector, PenaltyValueError, _check_detector_params, _check_positive, _is_number



@dataclass(frozen=True)
class PenaltyConfig:
    """The penalty's knobs; each of the three parts can be switched off on its own (for ablations).

    `arming` is E, counted in syncs (not steps). The detector defaults are the lab's, chosen by measurement
    (edit-method.md D10 and D11, `benchmarks/penalty_defaults.py`, `benchmarks/penalty_rule.py`). `peers`
    (D11) makes the detector judge each replica's norm per step relative to the median of its peers' and
    judges the replica as a whole; `stay_ratio` κ_s keeps a flagged replica out while some unit of it is
    still above κ_s × its peers' (0: back as soon as its detectors no longer flag it); D15's `enter_ratio`
    κ_e and `memory_threshold` δ_m (the replica's own memory, asked with fewer than 3 peers) decide who
    enters, and who stays. The authors' exact
    detector is `peers=False, bias_correction=False, readmit_after=0, per_step=False, min_rel_std=0,
    alpha=0.02` (with their E = 120; `AUTHORS_DETECTOR` holds these values). `temperature` T = inf gives equal
    weights; `clip_norm` φ = inf never clips. A reader's weighting rule is `RunConfig.rules.weighting`.
    """

    TITLE: ClassVar[str] = "pseudo-gradient penalty (edit, aedit)"
    PREFIX: ClassVar[str] = "penalty_"  # the flags: penalty_alpha for alpha

    anomaly: bool = knob(True,
            "anomaly elimination: a flagged replica's pseudo-gradient is left out", checked_by="penalty")
    weighting: bool = knob(True,
            'weighted averaging: softmax weights from the pseudo-gradient norms', checked_by="penalty")
    clip: bool = knob(True,
            'gradient clip of the aggregated pseudo-gradient at phi', checked_by="penalty")
    alpha: float = knob(0.3,
            'alpha: EWMA smoothing of the anomaly detector, in (0, 1)', checked_by="penalty")
    arming: int = knob(4,
            'E: syncs of history before the detector may flag, >= 1', checked_by="penalty")
    threshold: float = knob(3.0,
            'delta: flag a norm this many standard deviations above the mean, finite > 0', checked_by="penalty")
    temperature: float = knob(1.0,
            'T of the softmax weights, > 0 (inf: equal weights)', checked_by="penalty")
    clip_norm: float = knob(10.0,
            'phi: the largest norm of the aggregated pseudo-gradient, > 0 (inf: no clip)', checked_by="penalty")
    bias_correction: bool = knob(True,
            "mean and variance divided by 1-(1-alpha)^n, as Adam's (false: the reference)", checked_by="penalty")
    readmit_after: int = knob(3,
            'K, with penalty_peers off: a replica flagged K syncs in a row is re-admitted if its norm is in line with'
            " its unflagged peers' (or all are flagged); 0: never", checked_by="penalty")
    min_rel_std: float = knob(0.15,
            "epsilon: the detector's sigma is never below epsilon times its mean, a noise floor (0: the reference)",
            checked_by="penalty")
    weight_per_step: bool = knob(True,
            "softmax weights from G times mean k over k: a longer round (A-EDiT's fast replica) is not down-weighted "
            'for its steps', checked_by="penalty")
    per_step: bool = knob(True,
            'the detector judges G/k, k = local steps in the round (false: G, as the reference)',
            checked_by="penalty")
    peers: bool = knob(True,
            "the detector judges G/k over the median of the other replicas' at the same sync, and a replica flagged "
            'on one unit is left out of all (a rise every replica shares flags none; false: each unit alone on G/k, '
            'as the authors)', checked_by="penalty")
    stay_ratio: float = knob(1.3,
            "kappa_s: a flagged replica stays out while a unit of it is above kappa_s times its peers' median (0: no;"
            ' with penalty_peers)', checked_by="penalty")
    enter_ratio: float = knob(1.6,
            "kappa_e: a replica is newly flagged only on a unit above kappa_e times its peers' median, so one in line"
            ' with its peers never is (0: no such test; with penalty_peers)', checked_by="penalty")
    memory_threshold: float = knob(1.5,
            'delta_m: with fewer than 3 peers (no majority) a replica is newly flagged only where its own G/k is '
            "above its own history's mean by delta_m sigma (0: not asked; with penalty_peers)",
            checked_by="penalty")
    majority_ratio: float = knob(1.5,
            'kappa_m: with 3 peers or more (a majority) a replica is flagged on a unit above kappa_m times their '
            'median, its detector armed or not (0: no; with penalty_peers)', checked_by="penalty")

    def validate(self) -> None:
        """Raise PenaltyValueError (a ValueError) naming the first bad field and its allowed values."""
        for name in ("anomaly", "weighting", "clip", "per_step", "weight_per_step", "peers"):
            if not isinstance(getattr(self, name), bool):
                raise PenaltyValueError(name, getattr(self, name), "True or False")
        if not _is_number(self.stay_ratio) or not (self.stay_ratio == 0.0 or 1.0 <= self.stay_ratio < math.inf):
            raise PenaltyValueError("stay_ratio", self.stay_ratio,
                                    "0 or a finite number >= 1 (κ_s: a flagged replica stays out while a unit of it "
                                    "is above κ_s times its peers' median; 0: no)")
        if not _is_number(self.enter_ratio) or not (self.enter_ratio == 0.0 or 1.0 <= self.enter_ratio < math.inf):
            raise PenaltyValueError("enter_ratio", self.enter_ratio,
                                    "0 or a finite number >= 1 (κ_e: a replica is newly flagged only on a unit above "
                                    "κ_e times its peers' median; 0: wherever its detector flags)")
        if not _is_number(self.memory_threshold) or not 0.0 <= self.memory_threshold < math.inf:
            raise PenaltyValueError("memory_threshold", self.memory_threshold,
                                    "a finite number >= 0 (δ_m: with fewer than 3 peers a replica is newly flagged "
                                    "only where its own G/k is more than δ_m σ above its own history's mean; 0: not "
                                    "asked)")
        if not _is_number(self.majority_ratio) or not (self.majority_ratio == 0.0
                                                         or 1.0 < self.majority_ratio < math.inf):
            raise PenaltyValueError("majority_ratio", self.majority_ratio,
                                    "0 or a finite number > 1 (κ_m: with 3 peers or more a replica is flagged on a "
                                    "unit above κ_m times their median, armed or not; 0: no)")
        _check_detector_params(self.alpha, self.arming, self.threshold, self.bias_correction, self.readmit_after,
                               self.min_rel_std)
        _check_positive("temperature", self.temperature, "T of the softmax weights")
        _check_positive("clip_norm", self.clip_norm, "phi, the largest norm of the aggregated pseudo-gradient")

    def new_detector(self) -> AnomalyDetector:
        """A fresh detector with this configuration (one is needed per replica and unit)."""
        return AnomalyDetector(alpha=self.alpha, arming=self.arming, threshold=self.threshold,
                               bias_correction=self.bias_correction, readmit_after=self.readmit_after,
                               min_rel_std=self.min_rel_std)

    def judged_norm(self, g: float, steps: int) -> float | None:
        """The value the detector judges for a unit's norm G after `steps` local steps of the replica.

        per_step: G/k. The norm of a pseudo-gradient grows with the local steps it holds, and an A-EDiT
        round holds as many as the clock allowed (1 in one round, 5 in the next), so the round's G alone
        would make every longer round look anomalous; so would resuming with a larger τ. Per step, rounds
        of any length compare. For EDiT with a fixed τ the decisions are the same either way (z is
        unchanged when every value is scaled by the same k). None when the replica trained no step in the
        round (an A-EDiT replica that finished early): its Δ is 0 by construction, nothing to judge or learn.
        """
        if steps <= 0:
            return None
        return g / steps if self.per_step else g

    @classmethod
    def authors(cls, **changes: Any) -> "PenaltyConfig":
        """The authors' detector (`AUTHORS_DETECTOR`: each unit judged alone on G with α 0.02, E 120, no bias
        correction, noise floor, re-admission or peers), the softmax on raw G; `changes` on top."""
        return cls(**{**AUTHORS_DETECTOR, **changes})


#: The PenaltyConfig fields that give the authors' detector (atorch local_sgd, edit-method.md §4): RunConfig
#: takes them as penalty_<name> (`--no-penalty-peers --no-penalty-bias-correction --no-penalty-per-step
#: --penalty-readmit-after 0 --penalty-min-rel-std 0 --penalty-alpha 0.02 --penalty-arming 120
#: --no-penalty-weight-per-step`).
AUTHORS_DETECTOR: dict[str, Any] = dict(peers=False, bias_correction=False, per_step=False, readmit_after=0,
                                        min_rel_std=0.0, alpha=0.02, arming=120, weight_per_step=False)
