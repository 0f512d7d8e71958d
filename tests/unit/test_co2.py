"""CO2's outer arithmetic (`CO2Outer`) against sequences computed by hand, without processes.

The authors' outer step (edit-method.md §9), per value of the anchor a and the momentum b:

    b ← μ·b + Δ̄/λ            (b starts at 0)
    b ← clamp(b, −c, c)       (only when clipping is on; the clamped b is what carries over)
    a ← a − lr·b;  θ ← a

and CO2 applies round k's mean Δ̄_k at the boundary that closes round k+1 (one round late), with each
round's Δ measured from the anchor that round started at. Two replicas are simulated here the way
`CO2Method.sync_between_steps` orders a boundary: Δ = a − θ first, then the mean that landed, then θ ← a;
the all-reduce is replaced by the mean the test computes, the only thing processes would add.
"""

from __future__ import annotations

import argparse

import pytest
import torch

from edit_lab.config import ConfigError, RunConfig, field_help
from edit_lab.methods.co2 import CO2Outer


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

    round 1 ends at θ0 = [0.5, 2.5 | 0.25], θ1 = [0.7, 1.5 | 0.75]:  Δ̄1 = mean(a0 − θ) = [0.4, 0 | 0]
    boundary 1: Δ̄1 in flight, nothing lands:                          a = a0, θ ← a0
    round 2 ends at θ0 = [0.9, 1.6 | 0],    θ1 = [0.5, 2.0 | 0.5]:   Δ̄2 = [0.3, 0.2 | 0.25] (from a0)
    boundary 2: Δ̄1 lands: b1 = Δ̄1/2 = [0.2, 0 | 0];                 a1 = a0 − b1 = [0.8, 2 | 0.5]
    round 3 ends at θ0 = [0.6, 2.2 | 0.5],  θ1 = [0.8, 1.8 | 0.3]:   Δ̄3 = [0.1, 0 | 0.1] (from a1)
    boundary 3: Δ̄2 lands: b2 = 0.5·b1 + Δ̄2/2 = [0.25, 0.1 | 0.125]; a2 = a1 − b2 = [0.55, 1.9 | 0.375]
    the end:    Δ̄3 lands: b3 = 0.5·b2 + Δ̄3/2 = [0.175, 0.05 | 0.1125]; a3 = [0.375, 1.85 | 0.2625]
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
    assert two.momentum() == pytest.approx([0.25, 0.1, 0.125], abs=1e-7)
    assert two.anchor() == pytest.approx([0.55, 1.9, 0.375], abs=1e-7)

    two.finalize()
    assert two.momentum() == pytest.approx([0.175, 0.05, 0.1125], abs=1e-7)
    assert two.anchor() == pytest.approx([0.375, 1.85, 0.2625], abs=1e-7)


def test_lr_one_no_momentum_no_penalty_is_averaging_one_round_late():
    two = TwoReplicas(lr=1.0, momentum=0.0)
    two.train_to([[[0.5, 2.5], [0.25]], [[0.7, 1.5], [0.75]]])
    two.boundary()
    two.train_to([[[0.9, 1.6], [0.0]], [[0.5, 2.0], [0.5]]])
    two.boundary()
    # round 1's average, [0.6, 2.0 | 0.5]; round 2's (also trained from a0) is still in flight
    assert two.anchor() == pytest.approx([0.6, 2.0, 0.5], abs=1e-7)


def test_momentum_clip_clamps_the_buffer_that_carries_over():
    """lr 1, μ 0.5, λ 1, c 0.25; a0 = [0, 0].
    step 1: Δ̄ = [1, −0.1]:    b = [1, −0.1] → clamp → [0.25, −0.1];                 a = [−0.25, 0.1]
    step 2: Δ̄ = [−0.2, −0.4]: b = 0.5·[0.25, −0.1] + Δ̄ = [−0.075, −0.45] → [−0.075, −0.25]; a = [−0.175, 0.35]
    (had the unclamped buffer carried over, b's first value would be 0.5·1 − 0.2 = 0.3 → 0.25)
    """
    outer = CO2Outer([torch.zeros(2)], lr=1.0, momentum=0.5, clip=0.25)
    outer.step(0, torch.tensor([1.0, -0.1]))
    assert outer.momenta[0].tolist() == pytest.approx([0.25, -0.1], abs=1e-7)
    assert outer.anchors[0].tolist() == pytest.approx([-0.25, 0.1], abs=1e-7)
    outer.step(0, torch.tensor([-0.2, -0.4]))
    assert outer.momenta[0].tolist() == pytest.approx([-0.075, -0.25], abs=1e-7)
    assert outer.anchors[0].tolist() == pytest.approx([-0.175, 0.35], abs=1e-7)


def test_without_clip_it_is_torch_heavy_ball_sgd_on_the_penalised_mean():
    """b ← μ·b + g, a ← a − lr·b with g = Δ̄/λ: torch's SGD(momentum=μ, nesterov=False), bit for bit."""
    torch.manual_seed(0)
    a0 = torch.randn(7)
    outer = CO2Outer([a0], lr=0.7, momentum=0.5, penalty=2.0)
    p = torch.nn.Parameter(a0.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.5, nesterov=False, foreach=False)
    for _ in range(4):
        g = torch.randn(7)
        outer.step(0, g)
        p.grad = g / 2.0
        sgd.step()
        assert torch.equal(outer.anchors[0], p.detach())
        assert torch.equal(outer.momenta[0], sgd.state[p]["momentum_buffer"])


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
    assert (cfg.co2_outer_lr, cfg.co2_outer_momentum, cfg.co2_staleness_penalty, cfg.co2_momentum_clip) == \
        (1.0, 0.5, 1.0, 0.0)
    assert (cfg.outer_lr, cfg.outer_momentum, cfg.outer_nesterov) == (0.7, 0.8, True)  # DiLoCo/EDiT's, untouched


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
    assert (cfg.co2_staleness_penalty, cfg.co2_momentum_clip) == (2.0, 0.1)
