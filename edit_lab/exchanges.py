"""The layouts of the small float64 tensors the methods gather, in one place each.

EDiT's per-unit penalty decisions (one all-gather per sync, kind 'sync_decisions') and A-EDiT's
step-count meeting (kind 'step_count'). Torch-free, so that the preview simulator (`sim/programs.py`)
sizes the same exchanges from the same definition as the methods pack and read them.
"""

from __future__ import annotations

from typing import NamedTuple


class Decision(NamedTuple):
    """What each replica shares per unit at the start of a sync (one all-gather, kind 'sync_decisions').

    One row of the gathered float64 tensor `decisions[replica, unit, column]`: packed from a `Decision`,
    read back by name through `COLUMN`, so the packing and every reader share this one layout. A replica
    sends its G and k (and, in the outlier column, `exclude_trouble`'s answer); every rank then fills in
    the rest for every replica from every replica's detectors (`penalty.decide_sync`, D11).
    """

    G: float  # the replica's pseudo-gradient norm of the unit
    z: float  # the detector's z-score of what it judges (filled in after the gather)
    threshold: float  # the detector's threshold δ·f (after the gather; inf: not judged)
    outlier: float  # 1.0: flagged (its Δ counts as 0), after the gather
    readmitted: float  # 1.0: re-admitted after K flags in a row (the per-unit rule of D10), after the gather
    steps: float  # k, its local steps in the round (G/k is what the detector judges, `PenaltyConfig.judged_norm`)
    flagged_in_a_row: float  # the syncs in a row it has been flagged (`AnomalyDetector.count_flag`), after it


DECISION_FIELDS = Decision._fields
#: Each field's column in the gathered tensor: `decisions[:, unit, COLUMN.outlier]`.
COLUMN = Decision(*range(len(DECISION_FIELDS)))


#: Values per replica in A-EDiT's step-count exchange, in this order (`methods/aedit.Meeting`).
MEETING_FIELDS = ("since_sync", "since_meeting", "clock", "done", "step")
