"""The pseudo-gradient penalty of EDiT (edit-method.md §4, decisions D1, D2, D10, D11, D15, D16), without any
communication.

SYNC(l) penalises a replica's pseudo-gradient Δ_r = a − θ_r of unit l in three independent steps:

1. **anomaly**: a per-replica, per-unit `AnomalyDetector` follows a value over the syncs and flags one that
   is far above its usual level; a flagged replica's Δ_r is set to zero. By default (`peers`, D11, D15, D16)
   the value is the replica's norm per local step G_r/k_r divided by the median of the other replicas' at
   the same sync, q (`peer_ratios`), so a rise every replica shares changes nothing; a replica is newly
   flagged only on a unit where its detector flags q and q > `enter_ratio` κ_e; where fewer than 3 peers are
   judged on the unit at this sync (no majority: R = 2, 3, or a wider run whose A-EDiT replicas trained no
   step or whose norms are not finite; with two replicas q_0 = 1/q_1) also only where its own G/k stands
   `memory_threshold` δ_m σ above its own history (`memory`, a second detector per replica and unit, kept at
   every R, `needs_memory`); with 3 peers or more (a majority, whose median is a healthy replica's) also
   wherever q > `majority_ratio` κ_m, its detector armed or not (D16: an onset before arming is learnt by its
   detector, not by its peers). Flagged on one unit, it is left out of every unit of that sync, and stays out
   while some unit of it is still more than `stay_ratio` κ_s times its peers' (and, with fewer than 3 peers,
   its memory still says it moved). When every replica that trained is flagged, each is left out only of the
   units it stands out on (D16, `_release`): a frozen anchor could otherwise repeat the same verdicts for the
   rest of the run.
   `enter_ratio=0, memory_threshold=0, majority_ratio=0` is D11 as first chosen. With `peers` off each unit is
   judged alone on G_r/k_r (or G_r), as the authors' detector does, with the re-admission of D10
   (`readmitted_replicas`); both remain options. `judge_replicas` takes one sync's decisions for every replica and
   unit, as the engine does; `replay` runs it over recorded norms.
2. **weighting**: `softmax_weights` gives the replicas with smaller norms more weight (softmax of −G/T),
   anomalous replicas none.
3. **clip**: `clip_factor` scales the *aggregated* pseudo-gradient down to a norm of at most φ.

Everything here is plain float64 arithmetic on Python floats, so that every rank, given the same all-gathered
norms, takes bit-for-bit the same decisions, and so that the rules can be tested and shown in a notebook
without processes or tensors. The collectives that produce the norms and apply the weights live in the engine.
The detector (`edit_lab/detector.py`) and the knobs (`PenaltyConfig`, `edit_lab/config/penalty.py`) are torch-free
layer-0 modules, so that `RunConfig.validate` checks the knobs without the core; both are re-exported here.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

# The detector and the knobs are torch-free layer-0 modules (RunConfig.validate checks the knobs without the
# core); they are re-exported here, the penalty's one public face.
from edit_lab.detector import AnomalyDetector, PenaltyValueError, _check_positive
from edit_lab.rules.weighting_rule import _check_replicas, softmax_weights  # the library's weighting: a rule's default
from edit_lab.config.penalty import AUTHORS_DETECTOR, PenaltyConfig

__all__ = ["AUTHORS_DETECTOR", "CLIP_EPS", "MAJORITY", "AnomalyDetector", "Judged", "PenaltyConfig",
           "PenaltyValueError", "clip_factor", "judge_replicas", "excluded_from_weights", "keeps_memory",
           "needs_memory", "outer_step_skipped", "peer_ratios", "readmitted_replicas", "replay", "replay_units",
           "softmax_weights", "step_scaled_norms"]

#: Added to the norm before dividing, as in `torch.nn.utils.clip_grad_norm_` and the reference code.
CLIP_EPS = 1e-6


def excluded_from_weights(anomalous: Sequence[bool], steps: Sequence[int]) -> list[bool]:
    """The replicas the weights leave out of one unit: the anomalous ones and those that trained no step (k = 0).

    Why the second: a replica with k = 0 (A-EDiT's replica that finished early) holds θ = a, so its Δ = 0 and its
    G = 0, and it is never flagged. Kept in the softmax, it is the smallest norm, the one the softmax shifts by:
    a trained replica's G of 800 then gives exp(−800) = 0 (`softmax_weights([0, 800], 1, [F, F])` = [1, 0]), every
    weight of a trained replica is 0, and the outer step runs on Nesterov's momentum alone. Left out, the trained
    replicas share the weights among themselves. With k > 0 everywhere (EDiT) nothing changes.
    """
    _check_replicas(list(steps), anomalous)
    return [bool(a) or int(k) <= 0 for a, k in zip(anomalous, steps)]


def step_scaled_norms(norms: Sequence[float], steps: Sequence[int]) -> list[float]:
    """G_r·k̄/k_r: each replica's norm per local step, rescaled to the sync's mean round (k̄ over the replicas
    that trained), the softmax's input with `weight_per_step`.

    Why: the softmax of −G/T gives the larger norm the smaller weight, and under A-EDiT a fast replica's
    round holds about twice the steps of a slow one's, so its Δ is longer for being fast, not for being
    wrong (benchmarks/aedit_loss.py measured its weight at 0.28 for a 0.66 share of the steps). With equal
    k (EDiT) the norms are unchanged, so EDiT's weights are bit for bit the same. A replica with no step
    (k = 0, Δ = 0) keeps its norm; `aedit.active_weights` gives it 0 anyway.
    """
    active = [k for k in steps if k > 0]
    if not active or all(k == active[0] for k in active):  # equal rounds: exactly the norms (g·k/k may round)
        return [float(g) for g in norms]
    mean_k = sum(active) / len(active)
    return [float(g) * mean_k / k if k > 0 else float(g) for g, k in zip(norms, steps)]


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


def outer_step_skipped(anomalous: Sequence[bool], steps: Sequence[int]) -> bool:
    """True when no replica that trained in the round (k_r > 0) is admitted for this unit: skip the outer step.

    The authors skip when every replica is anomalous: there is nothing to aggregate. A replica with k = 0
    (A-EDiT's replica that finished early and waits in `finalize`, a time-budget run's closing round) holds
    θ = a, so its Δ = 0 carries nothing, and it is never judged, so never flagged. Counted as admitted, it
    would keep the outer step running when every replica that trained is flagged: the weights are all 0,
    Δ̄ = 0, and Nesterov's momentum alone would move the anchor. With k > 0 everywhere (EDiT with a fixed τ)
    this is exactly the authors' rule.
    """
    _check_replicas(None, anomalous)
    if len(steps) != len(anomalous):
        raise ValueError(f"got {len(steps)} step counts for {len(anomalous)} anomaly flags; need one per replica")
    return not any(not bool(a) and int(k) > 0 for a, k in zip(anomalous, steps))


def readmitted_replicas(flagged: Sequence[bool], streaks: Sequence[int], judged: Sequence[float | None],
                        readmit_after: int, tolerance: float = 0.0) -> list[bool]:
    """D10: which flagged replicas of one unit are re-admitted at this sync (from the all-gathered decisions,
    so every rank computes the same answer).

    Replica r is re-admitted when it has been flagged `readmit_after` (K) syncs in a row (`streaks[r]`,
    this one included), its judged norm is finite, and it is no larger than the largest judged norm of
    the replicas not flagged at this sync times 1 + `tolerance` (the engine passes the noise floor ε) —
    or every replica is flagged (then there is no peer to compare with: a rise shared by all). Never with
    K = 0.
    """
    _check_replicas(list(streaks), flagged)
    if not readmit_after:
        return [False] * len(flagged)
    finite = [j is not None and math.isfinite(float(j)) for j in judged]
    peers = [float(j) for j, f, ok in zip(judged, flagged, finite) if not f and ok]
    ceiling = max(peers) * (1.0 + tolerance) if peers else math.inf
    return [bool(f) and n >= readmit_after and ok and float(j) <= ceiling  # type: ignore[arg-type]
            for f, n, ok, j in zip(flagged, streaks, finite, judged)]


class Judged(NamedTuple):
    """One replica's decision on one unit at one sync, as `judge_replicas` takes it (the engine and `replay`)."""

    outlier: bool
    readmitted: bool
    judged: float | None  # the value the detector judged (G/k, or its peer ratio with `peers`), None: not judged
    z: float
    threshold: float
    limit: float  # the smallest judged value the detector would have flagged (inf: none; before deciding)
    mean: float = math.nan  # μ̂, the detector's mean before deciding (nan: not judged)
    std: float = math.nan  # σ, its standard deviation (noise floor included) before deciding (nan: not judged)
    peer: float = math.nan  # G/k over the median of the other replicas' G/k at this sync (nan: no peer)
    streak: int = 0  # the syncs in a row this replica has been flagged on this unit, this one included


def peer_ratios(values: Sequence[float | None]) -> list[float]:
    """q_r = x_r / median of the other replicas' x at the same sync (D11), for one unit.

    `values[r]` is replica r's norm per local step (None: it trained no step in the round). Only finite
    values are peers; q_r is NaN where x_r is None or not finite, or where no other replica has a finite
    value (nothing to compare with), inf where the peers' median is 0 and x_r > 0, and NaN for 0/0 (a unit that
    no replica moved, e.g. a frozen one: nothing stands out, so nothing may be flagged on it). With two replicas the median of
    the others is the other one: q_0 = x_0/x_1 and q_1 = x_1/x_0. A factor every replica's norm shares
    (the training's weather: a new phase, a larger learning rate) cancels out.
    """
    finite = [v is not None and math.isfinite(float(v)) for v in values]
    ordered = sorted(float(v) for v, ok in zip(values, finite) if ok)  # sorted once: R log R, not R² log R
    n = len(ordered) - 1  # the others of a finite replica
    out = []
    for r, v in enumerate(values):
        if not finite[r] or n == 0:
            out.append(math.nan)
            continue
        x = float(v)
        gone = bisect.bisect_left(ordered, x)  # drop one copy of x: the others' i-th is ordered[i or i + 1]
        other = lambda i: ordered[i] if i < gone else ordered[i + 1]  # noqa: E731
        m = other(n // 2) if n % 2 else 0.5 * (other(n // 2 - 1) + other(n // 2))
        # 0/0 (every value 0: a frozen or unused unit) compares nothing: NaN, never inf (which flags)
        out.append(x / m if m > 0.0 else (math.inf if x > 0.0 else math.nan))
    return out


def _unjudged(outlier: bool, streak: int, x: float | None = None, peer: float = math.nan) -> Judged:
    return Judged(outlier, False, x, 0.0, math.inf, math.inf, peer=peer, streak=streak)


def _judged(det: AnomalyDetector, x: float) -> tuple[bool, list[Any]]:
    """The detector's verdict on x and the numbers it was taken on, without learning (z, threshold, limit, μ̂, σ)."""
    limit, mean, std = det.flag_limit(), det.mu(), det.std()
    return det.is_outlier(x), [det.z(x), det.current_threshold(), limit, mean, std]


def judge_replicas(config: PenaltyConfig, detectors: Sequence[Sequence[AnomalyDetector]],
                norms: Sequence[Sequence[float]], steps: Sequence[int], judge: bool = True,
                whole_replica: bool = True, memory: Sequence[Sequence[AnomalyDetector]] | None = None
                ) -> list[list[Judged]]:
    """The anomaly decisions of one sync for every replica and unit, exactly as every rank takes them.

    `detectors[r][u]` is replica r's detector of unit u (every rank holds every replica's, all fed the same
    all-gathered numbers, so they agree bit for bit), `norms[r][u]` replica r's G of unit u (NaN when not
    finite) and `steps[r]` its local steps k in the round. The detectors learn here. `judge=False` is the
    closing sync of `finalize` (its round is whatever was left: the norm per step of a short round is
    larger, so it is not judged): every replica keeps the verdict of its last judged sync (a replica left
    out there stays out), a non-finite norm is excluded, nothing is learnt. A replica with k = 0 (Δ = 0) is
    never judged nor flagged.

    With `config.peers` (D11) the detector of (r, u) judges q = (G/k) / the median of the other replicas'
    G/k (`peer_ratios`): a rise every replica shares leaves q where it was. A replica is flagged when the
    detector of some unit flags its q above κ_e (and, with fewer than 3 peers judged there, its memory says it
    moved: D15), or q > κ_m with a majority of peers (D16), or when it was flagged at its last judged sync and
    some unit's q is still above `stay_ratio` (κ_s); it is then left out of every unit (`whole_replica`; False
    judges each unit alone, for comparisons in the benchmarks), and none of its detectors learns. When every
    replica that trained is flagged, `_release` lets each one with finite norms back into the units it does
    not stand out on itself (`readmitted` True there; D16). A replica with no peer to compare with at
    this sync (every other one trained no step) keeps its last verdict. With one replica in the run there are
    no peers ever: the detector judges G/k itself (the rule below). `memory` (each replica's own history of
    G/k, one detector per replica and unit) is required with `peers` and `memory_threshold` > 0.

    Without `peers` (D10, and the authors' detector): each unit alone, the detector judges G/k (or G,
    `per_step` off), an outlier is never learnt (D1), and `readmitted_replicas` re-admits a replica flagged
    K syncs in a row whose judged norm is in line with its unflagged peers' (or when every replica is flagged).
    """
    R, U = len(norms), len(norms[0]) if norms else 0
    x = [[config.judged_norm(float(norms[r][u]), int(steps[r])) for u in range(U)] for r in range(R)]
    prev = [[detectors[r][u].streak for u in range(U)] for r in range(R)]
    bad = [[x[r][u] is not None and not math.isfinite(x[r][u]) for u in range(U)] for r in range(R)]
    ratios = [peer_ratios([x[r][u] for r in range(R)]) for u in range(U)]  # ratios[u][r]
    if not judge:  # the closing sync: every replica keeps the verdict of its last judged sync
        return [[_unjudged(bad[r][u] or (config.anomaly and prev[r][u] > 0), prev[r][u], x[r][u], ratios[u][r])
                 for u in range(U)] for r in range(R)]
    if not config.anomaly:
        return [[_unjudged(bad[r][u], 0, x[r][u], ratios[u][r]) for u in range(U)] for r in range(R)]
    if config.peers and R > 1:
        return _decide_peers(config, detectors, x, ratios, bad, prev, whole_replica, memory)
    return _decide_units(config, detectors, x, ratios)


#: Fewer peers than this and the median of a replica's peers is no majority: one bad replica moves it (with
#: two replicas q_0 = 1/q_1 exactly; with three the median of two is their mean), so D15 also asks the replica's
#: own memory (`PenaltyConfig.memory_threshold`). Counted per unit at each sync (D16): the replicas judged there,
#: not the run's width, since A-EDiT's finished replicas (k = 0) and non-finite norms are not peers.
MAJORITY = 3


def needs_memory(config: PenaltyConfig, judged: int) -> bool:
    """Does D15 ask each replica's own history of G/k on a unit where `judged` replicas have a finite G/k at this
    sync (peers judged, fewer than MAJORITY peers each)? A run of R replicas judges R where every one trained
    and every norm is finite, fewer at A-EDiT's closing meetings or beside a non-finite norm."""
    return config.anomaly and config.peers and config.memory_threshold > 0.0 and 1 < judged <= MAJORITY


def keeps_memory(config: PenaltyConfig) -> bool:
    """Is each replica's own history of G/k kept (at every width: a sync of a wide run may judge only two)?"""
    return config.anomaly and config.peers and config.memory_threshold > 0.0


class _Unit(NamedTuple):
    """One replica's tests on one unit at one sync, before the verdicts (`_decide_peers`)."""

    enters: bool  # a new flag: non-finite, or its detector flags q > κ_e (and its memory says it moved), or the
    #               majority's κ_m
    stays: bool  # q > κ_s (and its memory says it moved): out again if it was out at its last judged sync
    numbers: list[Any]  # z, threshold, limit, μ̂, σ of its detector


def _unit_tests(config: PenaltyConfig, det: AnomalyDetector, own: AnomalyDetector | None, x: float | None, q: float,
                bad: bool, comparable: bool, majority: bool, ask_memory: bool, broke: bool = False) -> _Unit:
    """D15's and D16's tests of one replica on one unit (the numbers the decision is taken on, nothing learnt)."""
    if bad:  # a non-finite norm: an outlier, its z the value itself (as `AnomalyDetector.z`)
        return _Unit(True, False, _judged(det, math.nan)[1])
    if not comparable:  # no comparable peer on this unit (none finite, or 0/0)
        return _Unit(False, False, [0.0, math.inf, math.inf, math.nan, math.nan])
    hit, numbers = _judged(det, q)
    if q == math.inf:  # its peers' median is 0: it alone moved the unit; its detector flags that once armed
        hit = det.armed
    # D15: a new flag only where the replica stands above its peers (q > κ_e): one in line with them is never
    # newly flagged, whatever its detector learnt while a peer was bad
    enters = hit and (config.enter_ratio == 0.0 or q > config.enter_ratio)
    stays = config.stay_ratio > 0 and q > config.stay_ratio
    if ask_memory and (enters or stays):
        # no majority: q is high because this replica rose or because its peer fell; only the replica whose own
        # G/k stands above its own history is the one that moved, to enter and to stay. A memory not yet armed
        # cannot say it moved (no entry), nor that it did not: a replica out since before its memory armed (e.g.
        # by a majority at a wider sync) stays out while q > κ_s; unless it was out for a non-finite norm
        # (`broke`): θ ← a and a fresh inner optimizer made it healthy by construction, and a fresh optimizer's
        # larger first steps are no evidence against it
        armed = own is not None and own.armed
        moved = armed and own.z(float(x)) > config.memory_threshold  # type: ignore[union-attr, arg-type]
        enters, stays = enters and moved, stays and (moved or (not armed and not broke))
    # D16: with a majority of peers their median is a healthy replica's, so a q far above 1 is wrong whatever the
    # replica's own history (an onset before arming is learnt by its detector); inf is not (see above)
    if majority and config.majority_ratio > 0 and math.isfinite(q) and q > config.majority_ratio:
        enters = True
    return _Unit(enters, stays, numbers)


def _release(x: list[list[float | None]], bad: list[list[bool]], tests: list[list[_Unit]], prev: list[list[int]],
             verdicts: list[list[bool]], whole_replica: bool, kept: list[bool]) -> list[list[bool]]:
    """D16: every replica that trained is flagged. Left so, no unit's anchor moves, no detector learns, and a
    frozen anchor can repeat the same verdicts at every later sync. So each replica whose norms are all finite
    is then left out only of the units it is flagged on itself (it enters there, or stays). Returns which
    verdicts this released. Never released: a replica with a non-finite norm on any unit (its training broke,
    whichever unit showed it), and one that kept its last verdict because every other replica trained no step
    (`kept`: A-EDiT's closing meeting).

    Why that is enough: with ratios above 1 (κ_e, κ_s, κ_m) the replica with the smallest G/k on a unit has
    q ≤ 1 there and never stands out on it, so every unit two released replicas share a finite norm on is
    unfrozen. A unit can stay frozen for a sync where at most one finite replica is left on it (its peers broke
    or trained no step: they are back at the next sync, from the anchor), or with a test that has no ratio
    (`enter_ratio=0`, D11 as first chosen). Admitting the smallest norm there instead would let a replica that
    stands out ×10 into the anchor because its only peer broke."""
    R, U = len(x), len(x[0])
    trained = [r for r in range(R) if any(v is not None for v in x[r])]
    freed = [[False] * U for _ in range(R)]
    if not trained or not all(any(verdicts[r]) for r in trained):
        return freed
    for r in trained:
        if kept[r] or any(bad[r]):
            continue
        was = any(prev[r]) if whole_replica else False
        for u in range(U):
            own = tests[r][u].enters or ((was or prev[r][u] > 0) and tests[r][u].stays)
            freed[r][u] = verdicts[r][u] and not own
    return freed


def _decide_peers(config: PenaltyConfig, detectors: Sequence[Sequence[AnomalyDetector]], x: list[list[float | None]],
                  ratios: list[list[float]], bad: list[list[bool]], prev: list[list[int]], whole_replica: bool,
                  memory: Sequence[Sequence[AnomalyDetector]] | None) -> list[list[Judged]]:
    R, U = len(x), len(x[0])
    judged = [sum(1 for r in range(R) if x[r][u] is not None and math.isfinite(x[r][u])) for u in range(U)]
    ask = [needs_memory(config, n) for n in judged]
    majority = [n - 1 >= MAJORITY for n in judged]
    if keeps_memory(config) and memory is None:
        raise ValueError("D15 asks each replica's own history of G/k wherever fewer than 3 peers are judged: pass "
                         "`memory`, one detector per replica and unit (PenaltyConfig.new_detector)")
    tests: list[list[_Unit]] = []
    verdicts: list[list[bool]] = []
    kept = [False] * R  # every other replica trained no step: its last verdict kept, nothing counted or learnt
    others = [sum(1 for s in range(R) if s != r and any(v is not None for v in x[s])) for r in range(R)]
    stale = [False] * R  # its last verdict kept (no finite peer): nothing learnt from this sync
    for r in range(R):
        q = [ratios[u][r] for u in range(U)]
        comparable = [math.isfinite(v) or v == math.inf for v in q]
        if all(v is None for v in x[r]):  # trained no step: Δ = 0, nothing to judge
            tests.append([_Unit(False, False, [0.0, math.inf, math.inf, math.nan, math.nan])] * U)
            verdicts.append([False] * U)
            continue
        if not any(comparable) and not any(bad[r]):  # no finite peer: keep the last verdict
            tests.append([_Unit(False, False, [0.0, math.inf, math.inf, math.nan, math.nan])] * U)
            verdicts.append([any(prev[r]) if whole_replica else prev[r][u] > 0 for u in range(U)])
            kept[r] = others[r] == 0  # peers that trained but broke (non-finite): its verdict may be released
            stale[r] = True
            continue
        own = memory[r] if memory is not None else [None] * U
        broke = any(d.broke for d in detectors[r])
        row = [_unit_tests(config, detectors[r][u], own[u], x[r][u], q[u], bad[r][u], comparable[u], majority[u],
                           ask[u], broke) for u in range(U)]
        tests.append(row)
        if whole_replica:
            was = any(prev[r])
            verdicts.append([any(t.enters for t in row) or (was and any(t.stays for t in row))] * U)
        else:
            verdicts.append([t.enters or (prev[r][u] > 0 and t.stays) for u, t in enumerate(row)])
    freed = _release(x, bad, tests, prev, verdicts, whole_replica, kept)
    out: list[list[Judged]] = []
    for r in range(R):
        if all(v is None for v in x[r]):
            out.append([_unjudged(False, prev[r][u]) for u in range(U)])
            continue
        if kept[r]:
            out.append([_unjudged(verdicts[r][u], prev[r][u], x[r][u]) for u in range(U)])
            continue
        mine = []
        for u in range(U):
            q = ratios[u][r]
            comparable = math.isfinite(q) or q == math.inf
            out_now = verdicts[r][u] and not freed[r][u]
            # learnt from: never a flagged value, nor one released only (D1), nor one with no finite peer
            admitted = not verdicts[r][u] and not stale[r]
            if admitted and comparable and math.isfinite(q):
                detectors[r][u].update(q)
            if (admitted and memory is not None and keeps_memory(config) and x[r][u] is not None
                    and math.isfinite(x[r][u])):  # type: ignore[arg-type]
                memory[r][u].update(float(x[r][u]))  # type: ignore[arg-type]
            streak = detectors[r][u].count_flag(out_now)
            detectors[r][u].broke = bad[r][u]
            z, thr, limit, mean, std = tests[r][u].numbers
            mine.append(Judged(out_now, freed[r][u], q if comparable else x[r][u], z, thr, limit, mean, std,
                               peer=q, streak=streak))
        out.append(mine)
    return out


def _decide_units(config: PenaltyConfig, detectors: Sequence[Sequence[AnomalyDetector]], x: list[list[float | None]],
                  ratios: list[list[float]]) -> list[list[Judged]]:
    R, U = len(x), len(x[0])
    cells: list[list[Judged]] = [[] for _ in range(R)]
    for u in range(U):
        row = []
        for r in range(R):
            det, v = detectors[r][u], x[r][u]
            if v is None:
                row.append([False, False, None, 0.0, math.inf, math.inf, math.nan, math.nan, ratios[u][r], det.streak])
                continue
            limit, mean, std = det.flag_limit(), det.mu(), det.std()
            outlier, z, threshold = det.observe(v)
            row.append([outlier, False, v, z, threshold, limit, mean, std, ratios[u][r], det.count_flag(outlier)])
        flagged = [bool(c[0]) for c in row]
        streaks = [c[9] if c[2] is not None else 0 for c in row]
        for r, due in enumerate(readmitted_replicas(flagged, streaks, [c[2] for c in row], config.readmit_after,
                                                    config.min_rel_std)):
            if due:
                detectors[r][u].restart(row[r][2])
                row[r][0], row[r][1], row[r][9] = False, True, 0
        for r in range(R):
            cells[r].append(Judged(*row[r]))
    return cells


def replay_units(config: PenaltyConfig, norms: Sequence[Sequence[Sequence[float]]], steps: Sequence[Sequence[int]],
                 closing: Sequence[bool] | None = None, whole_replica: bool = True) -> list[list[list[Judged]]]:
    """The anomaly decisions of a whole run, every replica and unit, exactly as the engine takes them.

    `norms[r][u][i]` is replica r's G of unit u at sync i (NaN for a non-finite one), `steps[r][i]` its local
    steps in that round, `closing[i]` True for the closing sync of `finalize` (not judged: it keeps the last
    verdict). Fresh detectors, one per replica and unit, then `judge_replicas` sync by sync, as
    `EDiTMethod.start_sync` does. Returns `[r][u][i]`. For measuring settings offline
    (`benchmarks/penalty_defaults.py`, `benchmarks/penalty_rule.py`) and testing them on recorded series.
    """
    R = len(norms)
    U = len(norms[0]) if R else 0
    n = len(norms[0][0]) if U else 0
    dets = [[config.new_detector() for _ in range(U)] for _ in range(R)]
    memory = [[config.new_detector() for _ in range(U)] for _ in range(R)]  # D15's own history of G/k
    out: list[list[list[Judged]]] = [[[] for _ in range(U)] for _ in range(R)]
    for i in range(n):
        sync = judge_replicas(config, dets, [[float(norms[r][u][i]) for u in range(U)] for r in range(R)],
                           [int(steps[r][i]) for r in range(R)], judge=not (closing and closing[i]),
                           whole_replica=whole_replica, memory=memory)
        for r in range(R):
            for u in range(U):
                out[r][u].append(sync[r][u])
    return out


def replay(config: PenaltyConfig, norms: Sequence[Sequence[float]], steps: Sequence[Sequence[int]],
           closing: Sequence[bool] | None = None) -> list[list[Judged]]:
    """`replay_units` for a model of one unit: `norms[r][i]`, returns `[r][i]` (the playground, the tests)."""
    return [per_unit[0] for per_unit in replay_units(config, [[row] for row in norms], steps, closing)]
