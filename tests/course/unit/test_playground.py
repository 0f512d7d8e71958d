"""The detector playground drives the library's own penalty: its flags are the detector's, and every
slider changes what is drawn."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from edit_course.panels.playground import DetectorPlayground, NormSeries, decide
from edit_lab.core.penalty import CLIP_EPS, PenaltyConfig

# replica 1: a steady norm, a spike at sync 7, back to normal; replica 0: steady
HEALTHY = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.0]
SPIKED = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 3.0, 1.0, 1.02]


def _by_hand(config: PenaltyConfig, series: list[float]):
    """One AnomalyDetector fed the series the way the engine does without the peers: decide, then learn unless an
    outlier."""
    det = config.new_detector()
    rows = []
    for x in series:
        mean, limit = det.mu(), det.flag_limit()
        outlier, z, thr = det.observe(x)
        rows.append((outlier, z, thr, mean, limit))
    return rows


@pytest.mark.parametrize("config", [PenaltyConfig(readmit_after=0, peers=False),
                                    PenaltyConfig(readmit_after=0, peers=False, bias_correction=False, alpha=0.1,
                                                  arming=3),
                                    PenaltyConfig(readmit_after=0, peers=False, min_rel_std=0.0, threshold=2.0)])
def test_flags_are_the_detectors(config):
    result = decide([HEALTHY, SPIKED], config)
    for r, series in enumerate((HEALTHY, SPIKED)):
        hand = _by_hand(config, series)
        got = result.judged[r]
        assert [j.outlier for j in got] == [h[0] for h in hand]
        for j, (_, z, thr, mean, limit) in zip(got, hand):
            assert (j.z, j.threshold, j.mean, j.limit) == (z, thr, mean, limit)
    assert 7 in result.flagged(1)


def test_defaults_flag_the_spike_alone_and_zero_its_weight():
    result = decide([HEALTHY, SPIKED], PenaltyConfig())
    assert result.flagged(1) == [7] and result.flagged(0) == []
    assert result.weights[7] == [1.0, 0.0]
    # equal norms, nobody flagged: equal weights, the aggregate is their norm
    assert result.weights[0] == [0.5, 0.5] and result.aggregate[0] == pytest.approx(1.0)
    # sync 9: G = [1.0, 1.02], T = 1: softmax of −G
    w0 = math.exp(-1.0) / (math.exp(-1.0) + math.exp(-1.02))
    assert result.weights[9] == pytest.approx([w0, 1 - w0], rel=1e-12)
    assert result.aggregate[9] == pytest.approx(w0 * 1.0 + (1 - w0) * 1.02, rel=1e-12)


def test_clip_factor_is_phi_over_the_aggregate():
    result = decide([HEALTHY, SPIKED], PenaltyConfig(clip_norm=0.5))
    assert result.clip[0] == pytest.approx(0.5 / (1.0 + CLIP_EPS), rel=1e-12)
    assert decide([HEALTHY, SPIKED], PenaltyConfig(clip=False)).clip == [1.0] * len(HEALTHY)


def test_against_the_peers_the_detector_judges_g_over_the_peers_g():
    result = decide([HEALTHY, SPIKED], PenaltyConfig())
    for r, (mine, other) in enumerate(((HEALTHY, SPIKED), (SPIKED, HEALTHY))):
        assert [j.judged for j in result.judged[r]] == pytest.approx([a / b for a, b in zip(mine, other)])


def test_a_rise_shared_by_both_replicas_flags_nobody_against_the_peers_and_is_readmitted_without():
    norms = [[1.0] * 8 + [2.0] * 6, [1.0] * 8 + [2.0] * 6]
    assert decide(norms, PenaltyConfig()).flagged(0) == decide(norms, PenaltyConfig()).flagged(1) == []
    result = decide(norms, PenaltyConfig(readmit_after=3, peers=False))
    for r in (0, 1):
        assert result.flagged(r) == [8, 9] and result.readmitted(r) == [10]
    # a rise on one replica alone stays flagged: its peer's norm is lower
    for config in (PenaltyConfig(), PenaltyConfig(readmit_after=3, peers=False)):
        alone = decide([[1.0] * 14, norms[1]], config)
        assert alone.flagged(1) == list(range(8, 14)) and alone.readmitted(1) == [] and alone.flagged(0) == []


def test_series_events_and_refusals():
    s = NormSeries(noise=0.0, event="spike", at=5, size=4.0, syncs=10)
    n = s.norms()
    assert n[0] == [1.0] * 10 and n[1][5] == 4.0 and n[1][4] == n[1][6] == 1.0
    rise = NormSeries(noise=0.0, event="rise-both", at=5, size=2.0, syncs=10).norms()
    assert rise[0][5:] == rise[1][5:] == [2.0] * 5
    assert NormSeries().norms() == NormSeries().norms()  # seeded: the same series every time
    with pytest.raises(ValueError, match="event="):
        NormSeries(event="flood").norms()
    with pytest.raises(ValueError, match="at="):
        NormSeries(at=40, syncs=30).norms()


def _trace(fig, role, replica=None):
    (t,) = [t for t in fig.data if t.meta and t.meta.get("role") == role
            and (replica is None or t.meta.get("replica") == replica)]
    return t


def test_every_slider_changes_the_figure():
    pg = DetectorPlayground(series=NormSeries(event="rise", at=12, size=1.6))
    assert pg.figure.layout.meta["flagged"] == [pg.result.flagged(0), pg.result.flagged(1)]
    assert pg.result.config == replace(PenaltyConfig(), per_step=True)

    def changes(role, replica, **values):
        before = list(_trace(pg.figure, role, replica).y)
        pg.set(**values)
        after = list(_trace(pg.figure, role, replica).y)
        assert before != after, (role, values)

    changes("mean", 1, alpha=0.1)
    changes("limit", 1, threshold=2.0)
    changes("limit", 0, min_rel_std=0.0)
    changes("mean", 1, bias_correction=False)
    changes("threshold", 1, arming=2)
    changes("weight", 0, temperature=0.05)
    pg.set(clip_norm=10.0)
    changes("clip", None, clip_norm=0.3)
    changes("G", 1, event="spike")
    changes("G", 1, at=5)
    changes("G", 1, size=3.0)
    changes("G", 0, noise=0.2)
    changes("G", 1, peers=False)  # G itself instead of G over its peer's
    pg.set(event="rise-both", size=2.0, noise=0.05, min_rel_std=0.15, threshold=3.0, arming=4, alpha=0.3,
           bias_correction=True)
    before = pg.result.readmitted(1)
    pg.set(readmit_after=0)
    assert before and pg.result.readmitted(1) == []
    # the figure's flags are the decisions of the library's replay, also after the changes
    assert list(_trace(pg.figure, "outlier", 1).x) == pg.result.flagged(1)
    assert "replica 1: flagged at syncs" in pg.summary.value
    with pytest.raises(KeyError, match="controls:"):
        pg.set(gamma=1.0)


def test_with_two_replicas_a_falling_peer_flags_nobody_with_the_memory_and_the_healthy_one_without():
    """D15's case a student should understand: replica 1's norm halves, so replica 0's q doubles; only replica 0's
    own memory says it did not move. δ_m 0 and κ_e 0 (D11 as first chosen) flag the healthy replica to the end."""
    pg = DetectorPlayground(series=NormSeries(event="fall", at=12, size=2.0))
    assert pg.result.flagged(0) == pg.result.flagged(1) == []
    assert [j.judged for j in pg.result.judged[0][12:]] == pytest.approx([2.0] * 18, rel=0.3)
    pg.set(memory_threshold=0.0)
    assert pg.result.flagged(0) == list(range(12, 30)) and pg.result.flagged(1) == []
    assert "δ_m 0" in pg.figure.layout.title.text
    pg.set(memory_threshold=1.0, enter_ratio=0.0)
    assert pg.result.config.enter_ratio == 0.0 and pg.result.flagged(0) == []
    fell = NormSeries(noise=0.0, event="fall", at=5, size=4.0, syncs=10).norms()
    assert fell[1][5:] == [0.25] * 5 and fell[0] == [1.0] * 10
