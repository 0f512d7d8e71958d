"""OuterState (anchor shards + SGD Nesterov outer optimizer) against steps computed by hand."""

from __future__ import annotations

import io

import pytest
import torch

from edit_lab.core.outer import OuterState


def _shards() -> list[torch.Tensor]:
    """Two 'units' of one rank: 2 values and 1 value."""
    return [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]


def test_anchor_starts_as_a_copy_of_theta():
    shards = _shards()
    outer = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True)
    assert [a.tolist() for a in outer.anchors] == [[1.0, 2.0], [3.0]]
    shards[0].add_(1.0)  # training θ must not move the anchor
    assert outer.anchors[0].tolist() == [1.0, 2.0]
    assert outer.pseudo_gradient(0, shards[0]).tolist() == [-1.0, -1.0]  # Δ = a − θ


def test_two_nesterov_steps_by_hand():
    """lr 0.7, momentum 0.8, Nesterov, dampening 0 (torch.optim.SGD):
    b1 = g1;           a1 = a0 − lr·(g1 + μ·b1)  = a0 − 1.26·g1
    b2 = μ·b1 + g2;    a2 = a1 − lr·(g2 + μ·b2)
    """
    outer = OuterState(_shards(), lr=0.7, momentum=0.8, nesterov=True)
    g1 = torch.tensor([0.5, -1.0])
    outer.step(0, g1)
    a1 = [1.0 - 1.26 * 0.5, 2.0 + 1.26 * 1.0]  # [0.37, 3.26]
    assert outer.anchors[0].tolist() == pytest.approx(a1, abs=1e-6)
    assert outer.anchors[1].tolist() == [3.0]  # only the stepped unit moves
    g2 = torch.tensor([0.25, 0.5])
    outer.step(0, g2)
    b2 = [0.8 * 0.5 + 0.25, 0.8 * -1.0 + 0.5]  # [0.65, -0.3]
    a2 = [a1[i] - 0.7 * (g2[i].item() + 0.8 * b2[i]) for i in range(2)]  # [-0.169, 3.078]
    assert a2 == pytest.approx([-0.169, 3.078], abs=1e-9)
    assert outer.anchors[0].tolist() == pytest.approx(a2, abs=1e-6)
    assert outer.anchors[0].grad is None  # the pseudo-gradient is not left behind
    state = outer.optimizer.state[outer.anchors[0]]
    assert state["momentum_buffer"].tolist() == pytest.approx(b2, abs=1e-6)
    assert outer.anchors[1] not in outer.optimizer.state  # unit 1 was never stepped: no momentum


def test_lr1_momentum0_gives_the_plain_average():
    """a − mean(a − θ_r) = mean(θ_r): EDiT's outer step is then periodic model averaging."""
    a = torch.tensor([1.0, -2.0, 0.5])
    thetas = [torch.tensor([1.5, -1.0, 0.0]), torch.tensor([0.5, -4.0, 2.0])]
    outer = OuterState([a], lr=1.0, momentum=0.0, nesterov=True)
    delta_bar = sum(outer.pseudo_gradient(0, t) for t in thetas) / len(thetas)
    outer.step(0, delta_bar)
    assert outer.anchors[0].tolist() == pytest.approx([1.0, -2.5, 1.0], abs=1e-7)
    assert outer.numel() == 3  # momentum 0 keeps no buffer


def test_identical_replicas_leave_the_anchor_unchanged():
    outer = OuterState(_shards(), lr=0.7, momentum=0.8, nesterov=True)
    theta = torch.tensor([1.0, 2.0])
    outer.step(0, outer.pseudo_gradient(0, theta))  # Δ = 0
    assert outer.anchors[0].tolist() == [1.0, 2.0]


def test_reset_restarts_theta_from_the_anchor():
    shards = _shards()
    outer = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True)
    shards[1].mul_(5.0)
    outer.step(1, torch.tensor([1.0]))
    outer.reset(1, shards[1])
    assert shards[1].tolist() == pytest.approx([3.0 - 1.26], abs=1e-6)
    assert torch.equal(shards[1], outer.anchors[1].detach())
    assert shards[0].tolist() == [1.0, 2.0]  # other units untouched


def test_numel_counts_anchors_then_momentum():
    outer = OuterState(_shards(), lr=0.7, momentum=0.8, nesterov=True)
    assert outer.numel() == 3  # anchors only, before any outer step
    outer.step(0, torch.tensor([0.1, 0.1]))
    assert outer.numel() == 3 + 2
    outer.step(1, torch.tensor([0.1]))
    assert outer.numel() == 2 * 3  # anchor + momentum: 2 values per shard value


def test_state_dict_round_trip_continues_identically():
    """Through torch.save / torch.load, as a checkpoint does."""
    a, b = OuterState(_shards(), 0.7, 0.8, True), OuterState(_shards(), 0.7, 0.8, True)
    a.step(0, torch.tensor([0.5, -1.0]))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    for o in (a, b):
        o.step(0, torch.tensor([0.25, 0.5]))
    assert torch.equal(a.anchors[0], b.anchors[0])
