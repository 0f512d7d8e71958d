"""CO2's outer arithmetic (`CO2Outer`) against sequences computed by hand, without processes.

The authors' outer step (edit-method.md §9), per value of the anchor a and the momentum b, is
b ← μ·b + (a − x̄)/λ with a the anchor as it is at the step and x̄ the replicas' mean endpoint. CO2
applies round k's mean at the boundary that closes round k+1 (one round late); the mean travels as
Δ̄_k = a_k − x̄_k, measured from the anchor a_k round k started at, and since then the anchor took one
step of lr·b, so a − x̄ = Δ̄ − lr·b:

    g ← Δ̄ − lr·b;  b ← μ·b + g/λ   (b starts at 0)
    b ← clamp(b, −c, c)            (only when clipping is on; the clamped b is what carries over)
    a ← a − lr·b;  θ ← a

Two replicas are simulated here the way `CO2Method.sync_between_steps` orders a boundary: Δ = a − θ
first, then the mean that landed, then θ ← a; the all-reduce is replaced by the mean the test computes,
the only thing processes would add.
"""

from __future__ import annotations

import argparse

import pytest
import torch

from edit_lab.config import ConfigError, RunConfig, field_help
from edit_lab.core.methods.co2 import CO2Outer


def _shards() -> list[torch.Tensor]:
    """One rank's shard of two units: 2 values and 1 value."""
    return [torch.tensor([1.0, 2.0]), torch.tensor([0.5])]


class TwoReplicas:
    """Two replicas of one shard each, with CO2's boundary order and a mean that lands one boundary late."""

    def __init__(self, **settings) -> None:
        self.theta = [_shards(), _shards()]
        self.outer = [CO2Outer(t, **settings) for t in self.theta]
        self.in_flight: torch.Tensor | None = None

    def train_to(self, ends: list[list[list[float]]]) -> None:
        """Local training, abstracted: replica r's round ends at θ = ends[r] (one list per unit)."""
        for theta, end in zip(self.theta, ends):
            for t, v in zip(theta, end):
                t.copy_(torch.tensor(v))

    def boundary(self) -> torch.Tensor | None:
        deltas = [o.pseudo_gradients(t) for o, t in zip(self.outer, self.theta)]  # before the anchor moves
        landed, self.in_flight = self.in_flight, sum(deltas) / len(deltas)  # "issue" this round's mean
        for o, t in zip(self.outer, self.theta):
            if landed is not None:
                o.apply(landed)
            o.restart(t)
        return landed

    def finalize(self) -> None:
        landed, self.in_flight = self.in_flight, None
        for o, t in zip(self.outer, self.theta):
            o.apply(landed)
            o.restart(t)

    def anchor(self) -> list[float]:
        flat = [torch.cat(o.anchors) for o in self.outer]
        assert torch.equal(flat[0], flat[1])  # the anchor is the same on both replicas, bit for bit
        for o, t in zip(self.outer, self.theta):
            assert torch.equal(torch.cat(t), torch.cat(o.anchors))  # and every replica restarted from it
        return flat[0].tolist()

    def momentum(self) -> list[float]:
        return torch.cat(self.outer[0].momenta).tolist()


def test_three_boundaries_by_hand_one_round_late_with_a_staleness_penalty():
    """lr 1, μ 0.5 (the authors' defaults), λ 2; a0 = [1, 2 | 0.5] (two units).

    round 1 ends at θ0 = [0.5, 2.5 | 0.25], θ1 = [0.7, 1.5 | 0.75]:  x̄1 = [0.6, 2 | 0.5], Δ̄1 = a0 − x̄1 = [0.4, 0 | 0]
    boundary 1: Δ̄1 in flight, nothing lands:                          a = a0, θ ← a0
    round 2 ends at θ0 = [0.9, 1.6 | 0],    θ1 = [0.5, 2.0 | 0.5]:   x̄2 = [0.7, 1.8 | 0.25], Δ̄2 = [0.3, 0.2 | 0.25]
    boundary 2: Δ̄1 lands, a = a0 still: g = a0 − x̄1 = [0.4, 0 | 0]; b1 = g/2 = [0.2, 0 | 0]; a1 = [0.8, 2 | 0.5]
    round 3 ends at θ0 = [0.6, 2.2 | 0.5],  θ1 = [0.8, 1.8 | 0.3]:   x̄3 = [0.7, 2 | 0.4], Δ̄3 = [0.1, 0 | 0.1] (from a1)
    boundary 3: Δ̄2 lands: g = a1 − x̄2 = Δ̄2 − b1 = [0.1, 0.2 | 0.25]
                b2 = 0.5·b1 + g/2 = [0.15, 0.1 | 0.125];  a2 = a1 − b2 = [0.65, 1.9 | 0.375]
    the end:    Δ̄3 lands: g = a2 − x̄3 = Δ̄3 − b2 = [−0.05, −0.1 | −0.025]
                b3 = 0.5·b2 + g/2 = [0.05, 0 | 0.05];  a3 = [0.6, 1.9 | 0.325]
    """
    two = TwoReplicas(lr=1.0, momentum=0.5, penalty=2.0)
    two.train_to([[[0.5, 2.5], [0.25]], [[0.7, 1.5], [0.75]]])
    assert two.boundary() is None
    assert two.anchor() == [1.0, 2.0, 0.5] and two.momentum() == [0.0, 0.0, 0.0]

    two.train_to([[[0.9, 1.6], [0.0]], [[0.5, 2.0], [0.5]]])
    assert two.boundary().tolist() == pytest.approx([0.4, 0.0, 0.0], abs=1e-7)  # round 1's mean, one round late
    assert two.momentum() == pytest.approx([0.2, 0.0, 0.0], abs=1e-7)
    assert two.anchor() == pytest.approx([0.8, 2.0, 0.5], abs=1e-7)

    two.train_to([[[0.6, 2.2], [0.5]], [[0.8, 1.8], [0.3]]])
    assert two.boundary().tolist() == pytest.approx([0.3, 0.2, 0.25], abs=1e-7)
    assert two.momentum() == pytest.approx([0.15, 0.1, 0.125], abs=1e-7)
    assert two.anchor() == pytest.approx([0.65, 1.9, 0.375], abs=1e-7)

    two.finalize()
    assert two.momentum() == pytest.approx([0.05, 0.0, 0.05], abs=1e-7)
    assert two.anchor() == pytest.approx([0.6, 1.9, 0.325], abs=1e-7)


def test_lr_one_no_momentum_no_penalty_is_averaging_one_round_late():
    """The anchor becomes the replicas' mean endpoint of the round before, at every boundary: at boundary 3
    round 2's, although round 2 trained from a0 and the anchor has moved since. (Adding round 2's Δ̄ to the
    moved anchor instead, the lab's arithmetic until issue 23, gives a1 − Δ̄2 = [0.3, 1.8 | 0.25].)"""
    two = TwoReplicas(lr=1.0, momentum=0.0)
    two.train_to([[[0.5, 2.5], [0.25]], [[0.7, 1.5], [0.75]]])
    two.boundary()
    two.train_to([[[0.9, 1.6], [0.0]], [[0.5, 2.0], [0.5]]])
    two.boundary()
    # round 1's average, [0.6, 2.0 | 0.5]; round 2's (also trained from a0) is still in flight
    assert two.anchor() == pytest.approx([0.6, 2.0, 0.5], abs=1e-7)
    two.train_to([[[0.6, 2.2], [0.5]], [[0.8, 1.8], [0.3]]])
    two.boundary()
    assert two.anchor() == pytest.approx([0.7, 1.8, 0.25], abs=1e-7)  # round 2's average
    two.finalize()
    assert two.anchor() == pytest.approx([0.7, 2.0, 0.4], abs=1e-7)  # round 3's average


@pytest.mark.parametrize("progress", [1.0, 0.8])
def test_one_round_late_converges_where_a_round_gets_far(progress):
    """A quadratic seen through CO2's boundaries: every round moves each replica `progress` of the way from
    the anchor it started at to the optimum x* (1: a round of τ steps solves that direction). At the
    authors' defaults (lr 1, μ 0.5) the anchor's error shrinks to ≤ 2 % in 12 boundaries. Adding Δ̄ to
    the moved anchor counted each round twice there: the error recurrence has |z|² = μ + lr·progress > 1,
    and the error grew 3.6× (1.0) and 4.3× (0.8) in the same 12 boundaries."""
    optimum = [[0.3, -1.0], [2.0]]
    two = TwoReplicas(lr=1.0, momentum=0.5)
    error0 = max(abs(a - x) for a, x in zip(two.anchor(), [0.3, -1.0, 2.0]))
    for _ in range(12):
        ends = [[[t + progress * (x - t) for t, x in zip(unit.tolist(), best)] for unit, best in zip(theta, optimum)]
                for theta in two.theta]
        two.train_to(ends)
        two.boundary()
    error = max(abs(a - x) for a, x in zip(two.anchor(), [0.3, -1.0, 2.0]))
    assert error < 0.02 * error0


def test_momentum_clip_clamps_the_buffer_that_carries_over():
    """lr 1, μ 0.5, λ 1, c 0.25; a0 = [0, 0].
    step 1: Δ̄ = [1, −0.1]:   g = Δ̄; b = [1, −0.1] → clamp → [0.25, −0.1];               a = [−0.25, 0.1]
    step 2: Δ̄ = [0.3, −0.2]: g = Δ̄ − b = [0.05, −0.1]; b = 0.5·[0.25, −0.1] + g = [0.175, −0.15]; a = [−0.425, 0.25]
    (had the unclamped buffer carried over, b's first value would be 0.5·1 + 0.3 − 1 = −0.2)
    """
    outer = CO2Outer([torch.zeros(2)], lr=1.0, momentum=0.5, clip=0.25)
    outer.step(0, torch.tensor([1.0, -0.1]))
    assert outer.momenta[0].tolist() == pytest.approx([0.25, -0.1], abs=1e-7)
    assert outer.anchors[0].tolist() == pytest.approx([-0.25, 0.1], abs=1e-7)
    outer.step(0, torch.tensor([0.3, -0.2]))
    assert outer.momenta[0].tolist() == pytest.approx([0.175, -0.15], abs=1e-7)
    assert outer.anchors[0].tolist() == pytest.approx([-0.425, 0.25], abs=1e-7)


def test_without_clip_it_is_torch_heavy_ball_sgd_on_the_anchor_minus_the_stale_endpoint():
    """torch's SGD(momentum=μ, nesterov=False) fed (a − x̄)/λ, the authors' step: x̄ = a_then − Δ̄ is the mean
    endpoint of a round that began at a_then, the anchor before the previous step (the one-round delay)."""
    torch.manual_seed(0)
    a0 = torch.randn(7)
    outer = CO2Outer([a0], lr=0.7, momentum=0.5, penalty=2.0)
    p = torch.nn.Parameter(a0.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.5, nesterov=False, foreach=False)
    a_then = a0.clone()  # the anchor the round being landed started at
    for _ in range(5):
        delta_bar = torch.randn(7)
        endpoint = a_then - delta_bar
        a_then = p.detach().clone()  # the next landed round starts at the anchor before this step
        outer.step(0, delta_bar)
        p.grad = (p.detach() - endpoint) / 2.0
        sgd.step()
        torch.testing.assert_close(outer.anchors[0], p.detach(), rtol=0, atol=1e-6)
        torch.testing.assert_close(outer.momenta[0], sgd.state[p]["momentum_buffer"], rtol=0, atol=1e-6)


def test_sharding_does_not_change_the_update():
    """Every operation is element-wise (the clip too), so each rank steps its own shard with no exchange:
    two shards of a unit give exactly the unsharded result."""
    torch.manual_seed(1)
    a0, grads = torch.randn(6), [torch.randn(6) for _ in range(3)]
    settings = dict(lr=0.9, momentum=0.5, penalty=1.5, clip=0.3)
    whole = CO2Outer([a0], **settings)
    halves = [CO2Outer([a0[:4]], **settings), CO2Outer([a0[4:]], **settings)]
    for g in grads:
        whole.step(0, g)
        halves[0].step(0, g[:4])
        halves[1].step(0, g[4:])
    assert torch.equal(whole.anchors[0], torch.cat([h.anchors[0] for h in halves]))


def test_state_round_trips_and_counts_anchor_and_momentum():
    outer = CO2Outer(_shards(), lr=1.0, momentum=0.5)
    outer.step(0, torch.tensor([0.5, -0.5]))
    again = CO2Outer(_shards(), lr=1.0, momentum=0.5)
    again.load_state_dict(outer.state_dict())
    assert [a.tolist() for a in again.anchors] == [a.tolist() for a in outer.anchors]
    assert [b.tolist() for b in again.momenta] == [b.tolist() for b in outer.momenta]
    assert outer.numel() == 2 * 3


def test_outer_refuses_settings_that_cannot_work():
    for bad in (dict(lr=0.0, momentum=0.5), dict(lr=1.0, momentum=1.0), dict(lr=1.0, momentum=0.5, penalty=0.0),
                dict(lr=1.0, momentum=0.5, clip=-1.0)):
        with pytest.raises(ValueError):
            CO2Outer(_shards(), **bad)


# ------------------------------------------------------------ the configuration
def test_config_defaults_are_the_authors():
    cfg = RunConfig(method="co2").validate()
    assert (cfg.outer.co2_lr, cfg.outer.co2_momentum, cfg.outer.co2_staleness_penalty, cfg.outer.co2_momentum_clip) == \
        (1.0, 0.5, 1.0, 0.0)
    assert (cfg.outer.lr, cfg.outer.momentum, cfg.outer.nesterov) == (0.7, 0.8, True)  # DiLoCo/EDiT's, untouched


@pytest.mark.parametrize("name, value", [
    ("co2_outer_lr", 0.0), ("co2_outer_lr", float("inf")), ("co2_outer_lr", True),
    ("co2_outer_momentum", 1.0), ("co2_outer_momentum", -0.1),
    ("co2_staleness_penalty", 0.0), ("co2_staleness_penalty", float("nan")),
    ("co2_momentum_clip", -0.5), ("co2_momentum_clip", float("inf")),
])
def test_config_refuses_bad_co2_settings(name, value):
    with pytest.raises(ConfigError, match=name):
        RunConfig(method="co2", **{name: value}).validate()


def test_the_old_field_is_gone_and_the_new_ones_are_flags():
    with pytest.raises(ConfigError, match="staleness_penalty"):
        RunConfig.from_dict({"staleness_penalty": 0.5})
    helps = field_help()
    assert all(helps.get(n) for n in ("co2_outer_lr", "co2_outer_momentum", "co2_staleness_penalty",
                                      "co2_momentum_clip"))
    from edit_lab.__main__ import _add_config_flags, config_from_args

    ap = argparse.ArgumentParser()
    _add_config_flags(ap)
    args = ap.parse_args(["--co2-staleness-penalty", "2", "--co2-momentum-clip", "0.1"])
    cfg = config_from_args(args)
    assert (cfg.outer.co2_staleness_penalty, cfg.outer.co2_momentum_clip) == (2.0, 0.1)
