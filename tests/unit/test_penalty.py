"""The pseudo-gradient penalty's pure parts against edit-method.md §8 and hand-computed cases."""

from __future__ import annotations

import json
import math

import pytest

from edit_lab.penalty import (
    AnomalyDetector,
    PenaltyConfig,
    all_anomalous,
    clip_factor,
    softmax_weights,
)

# ---------------------------------------------------------------- softmax weights


def test_softmax_weights_values_of_section_8():
    w = softmax_weights([1.0, 2.0], 1.0, [False, False])
    assert w == pytest.approx([0.7310586, 0.2689414], abs=1e-7)
    assert softmax_weights([1.0, 2.0], 1.0, [False, True]) == [1.0, 0.0]


def test_softmax_weights_hand_computed():
    # exp(-G/T) = 1, 1/2, 1/4 -> 4/7, 2/7, 1/7
    w = softmax_weights([0.0, math.log(2), math.log(4)], 1.0, [False] * 3)
    assert w == pytest.approx([4 / 7, 2 / 7, 1 / 7], rel=1e-12)
    # T = 2 halves the exponents: exp(-2 ln2 / 2) = 1/2 -> 2/3, 1/3
    assert softmax_weights([0.0, 2 * math.log(2)], 2.0, [False, False]) == pytest.approx([2 / 3, 1 / 3], rel=1e-12)
    # an anomalous replica in the middle is dropped and the others renormalised: 1, 1/4 -> 4/5, 1/5
    w = softmax_weights([0.0, 0.5, math.log(4)], 1.0, [False, True, False])
    assert w == pytest.approx([0.8, 0.0, 0.2], rel=1e-12)
    assert w[1] == 0.0


def test_softmax_weights_sum_to_one():
    for norms in ([3.0], [0.1, 7.0, 2.5, 2.5], [1e-3, 4e2, 5.0]):
        for t in (0.01, 1.0, 30.0):
            assert math.fsum(softmax_weights(norms, t, [False] * len(norms))) == pytest.approx(1.0, abs=1e-12)


def test_softmax_weights_numerically_stable_for_large_norms():
    # naive exp(-1000) underflows to 0 and gives 0/0; the shift by the smallest norm does not
    w = softmax_weights([1000.0, 1000.0 + math.log(2)], 1.0, [False, False])
    assert w == pytest.approx([2 / 3, 1 / 3], rel=1e-12)
    # the shift uses the smallest norm among the NON-anomalous replicas only
    w = softmax_weights([0.0, 1000.0, 1000.0 + math.log(2)], 1.0, [True, False, False])
    assert w == pytest.approx([0.0, 2 / 3, 1 / 3], rel=1e-12)


def test_softmax_weights_huge_temperature_is_plain_mean():
    assert softmax_weights([1.0, 5.0, 100.0], 1e12, [False] * 3) == pytest.approx([1 / 3] * 3, rel=1e-9)
    assert softmax_weights([1.0, 5.0, 100.0], math.inf, [False] * 3) == [1 / 3] * 3


def test_softmax_weights_disabled_is_mean_over_non_anomalous():
    assert softmax_weights([1.0, 2.0, 3.0, 4.0], 1.0, [False] * 4, enabled=False) == [0.25] * 4
    assert softmax_weights([1.0, 9.0, 3.0], 1.0, [False, True, False], enabled=False) == [0.5, 0.0, 0.5]


def test_softmax_weights_all_anomalous_gives_zeros():
    assert softmax_weights([1.0, 2.0], 1.0, [True, True]) == [0.0, 0.0]
    assert softmax_weights([1.0, 2.0], 1.0, [True, True], enabled=False) == [0.0, 0.0]


def test_softmax_weights_non_finite_norm_of_unflagged_replica_gets_zero():
    # only possible with the anomaly filter off; the softmax limit for an infinite norm is weight 0
    assert softmax_weights([1.0, math.inf], 1.0, [False, False]) == [1.0, 0.0]
    assert softmax_weights([math.nan, 2.0], 1.0, [False, False]) == [0.0, 1.0]
    assert softmax_weights([math.nan, math.inf], 1.0, [False, False]) == [0.0, 0.0]


def test_softmax_weights_refuses_bad_arguments():
    with pytest.raises(ValueError, match="one per replica"):
        softmax_weights([1.0, 2.0], 1.0, [False])
    with pytest.raises(ValueError, match="temperature"):
        softmax_weights([1.0], 0.0, [False])
    with pytest.raises(ValueError, match="at least one replica"):
        softmax_weights([], 1.0, [])


# ---------------------------------------------------------------- clip and all_anomalous


def test_clip_factor_values_of_section_8():
    assert clip_factor(20.0, 10.0) == 10.0 / (20.0 + 1e-6)
    assert clip_factor(20.0, 10.0) == pytest.approx(0.5, rel=1e-7)
    assert clip_factor(5.0, 10.0) == 1.0
    assert clip_factor(0.0, 10.0) == 1.0
    assert clip_factor(10.0 - 1e-6, 10.0) == 1.0
    # at n = phi the epsilon leaves the factor one part in 1e7 below 1, as torch's clip_grad_norm_
    assert clip_factor(10.0, 10.0) == pytest.approx(1.0 - 1e-7, abs=1e-12)


def test_clip_factor_edge_cases():
    assert clip_factor(math.inf, 10.0) == 0.0
    assert math.isnan(clip_factor(math.nan, 10.0))
    assert clip_factor(1e30, math.inf) == 1.0
    with pytest.raises(ValueError, match="clip_norm"):
        clip_factor(1.0, 0.0)
    with pytest.raises(ValueError, match="negative"):
        clip_factor(-1.0, 1.0)


def test_all_anomalous():
    assert all_anomalous([True, True, True]) is True
    assert all_anomalous([True, False, True]) is False
    assert all_anomalous([False]) is False
    with pytest.raises(ValueError):
        all_anomalous([])


# ---------------------------------------------------------------- anomaly detector


def _section_8_detector() -> AnomalyDetector:
    d = AnomalyDetector(alpha=0.02, arming=120, threshold=3.0)
    for x in [0.0] + [1.0] * 119:
        d.update(x)
    return d


def test_detector_values_of_section_8():
    d = _section_8_detector()
    assert d.count == 120
    assert d.mean == pytest.approx(0.90966, abs=1e-5)
    assert d.mean == pytest.approx(1 - 0.98**119, rel=1e-12)  # mu_k = 1 - 0.98^k after the leading 0
    assert d.std() == pytest.approx(0.28379, abs=1e-5)
    # the window: 119 zeros (not armed yet) and the z of the 120th value, taken with the updated statistics
    assert len(d.window) == 120
    assert list(d.window)[:119] == [0.0] * 119
    assert d.window[-1] == pytest.approx((1.0 - d.mean) / d.std(), rel=1e-12)
    assert d.factor() == 1.0  # std of the window ~ 0.029 < 1
    assert d.z(2.0) == pytest.approx(3.84203, abs=1e-5)
    assert d.is_outlier(2.0) is True
    assert d.is_outlier(1.0) is False


def test_detector_hand_computed():
    # alpha 0.5, E 3, delta 1, values 2, 4, 2:
    #   x=2: d=2,    mu=1,    M2=0.5*(0     + 0.5*2*1)        = 0.5
    #   x=4: d=3,    mu=2.5,  M2=0.5*(0.5   + 0.5*3*1.5)      = 1.375
    #   x=2: d=-0.5, mu=2.25, M2=0.5*(1.375 + 0.5*-0.5*-0.25) = 0.71875
    d = AnomalyDetector(alpha=0.5, arming=3, threshold=1.0)
    assert d.std() == 0.0
    d.update(2.0)
    assert (d.count, d.mean, d.m2, d.std()) == (1, 1.0, 0.5, 0.0)  # sigma is 0 until count >= 2
    d.update(4.0)
    assert (d.count, d.mean, d.m2) == (2, 2.5, 1.375)
    assert d.std() == pytest.approx(math.sqrt(1.375))
    assert d.z(100.0) == 0.0 and d.factor() == 1.0  # not armed: z is 0
    d.update(2.0)
    assert (d.count, d.mean, d.m2) == (3, 2.25, 0.71875)
    sigma = math.sqrt(0.71875)
    assert list(d.window) == pytest.approx([0.0, 0.0, (2.0 - 2.25) / sigma])
    assert d.factor() == 1.0  # window std ~ 0.17
    assert d.z(3.2) == pytest.approx(0.95 / sigma)  # 1.1206 > 1
    assert d.is_outlier(3.2) is True
    assert d.is_outlier(3.0) is False  # z = 0.8847
    assert d.is_outlier(-50.0) is False  # one-sided: small norms are never outliers


def test_detector_factor_widens_threshold():
    d = AnomalyDetector(alpha=0.5, arming=2, threshold=1.0)
    d.load_state_dict({"count": 2, "mean": 1.0, "m2": 1.0, "window": [-2.0, 2.0]})
    assert d.factor() == pytest.approx(math.sqrt(8.0))  # unbiased std of [-2, 2]
    assert d.current_threshold() == pytest.approx(math.sqrt(8.0))
    assert d.z(3.0) == 2.0
    assert d.is_outlier(3.0) is False  # z 2 > delta 1, but not > delta * factor 2.83
    assert d.is_outlier(4.0) is True  # z 3


def test_detector_nan_and_inf_are_always_outliers():
    fresh = AnomalyDetector(arming=10)
    armed = _section_8_detector()
    for d in (fresh, armed):
        assert d.is_outlier(math.nan) is True
        assert d.is_outlier(math.inf) is True
        assert d.is_outlier(-math.inf) is True
    assert math.isnan(fresh.z(math.nan)) and fresh.z(math.inf) == math.inf
    with pytest.raises(ValueError, match="finite"):
        fresh.update(math.nan)
    assert fresh.count == 0


def test_detector_before_arming_nothing_finite_is_an_outlier():
    d = AnomalyDetector(alpha=0.02, arming=5, threshold=3.0)
    for x in (1.0, 1.0, 1.0, 1.0):
        assert d.observe(x) == (False, 0.0, 3.0)
    assert d.is_outlier(1e12) is False  # count 4 < E 5
    d.observe(1.0)
    assert d.count == 5
    assert d.is_outlier(1e12) is True


def test_observe_never_updates_with_an_outlier():
    d = _section_8_detector()
    before = json.dumps(d.state_dict())
    z_expected = d.z(2.0)
    outlier, z, threshold = d.observe(2.0)
    assert (outlier, threshold) == (True, 3.0)
    assert z == z_expected
    assert json.dumps(d.state_dict()) == before  # D1: state unchanged
    for bad in (math.nan, math.inf, 50.0):
        assert d.observe(bad)[0] is True
    assert json.dumps(d.state_dict()) == before


def test_observe_reports_numbers_before_the_update():
    d = _section_8_detector()
    z_before, mean_before = d.z(1.0), d.mean
    outlier, z, threshold = d.observe(1.0)
    assert outlier is False
    assert z == z_before and threshold == 3.0
    assert d.count == 121 and d.mean == pytest.approx(mean_before + 0.02 * (1.0 - mean_before))
    assert len(d.window) == 120  # keeps the last E z-scores


def test_state_dict_round_trip_gives_identical_decisions():
    d = AnomalyDetector(alpha=0.1, arming=4, threshold=2.0)
    for x in (1.0, 1.2, 0.9, 1.1, 1.05, 0.95):
        d.observe(x)
    state = json.loads(json.dumps(d.state_dict()))  # plain JSON-able values
    e = AnomalyDetector(alpha=0.1, arming=4, threshold=2.0)
    e.load_state_dict(state)
    assert e.state_dict() == d.state_dict()
    for x in (1.0, 1.3, 2.0, 5.0, 0.2, math.nan, 1.15):
        assert e.observe(x) == d.observe(x)
    assert e.state_dict() == d.state_dict()
    with pytest.raises(ValueError, match="window"):
        e.load_state_dict({"count": 1, "mean": 0.0, "m2": 0.0})


# ---------------------------------------------------------------- configuration


def test_config_defaults_validate_and_build_detectors():
    c = PenaltyConfig()
    c.validate()
    assert (c.alpha, c.arming, c.threshold, c.temperature, c.clip_norm) == (0.02, 10, 3.0, 1.0, 10.0)
    d = c.new_detector()
    assert (d.alpha, d.arming, d.threshold) == (0.02, 10, 3.0)
    PenaltyConfig(temperature=math.inf, clip_norm=math.inf, arming=1).validate()


@pytest.mark.parametrize(
    "field, value",
    [
        ("alpha", 0.0),
        ("alpha", 1.0),
        ("alpha", math.nan),
        ("arming", 0),
        ("arming", 2.5),
        ("threshold", 0.0),
        ("threshold", math.inf),
        ("temperature", 0.0),
        ("temperature", -1.0),
        ("temperature", math.nan),
        ("clip_norm", 0.0),
        ("anomaly", 1),
    ],
)
def test_config_validate_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        PenaltyConfig(**{field: value}).validate()


def test_detector_refuses_bad_parameters():
    with pytest.raises(ValueError, match="arming"):
        AnomalyDetector(arming=0)
    with pytest.raises(ValueError, match="alpha"):
        AnomalyDetector(alpha=2.0)
