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


# ---------------------------------------------------------------- error feedback in two phases (review B1)
def _feedback(n: int = 600, seed: int = 0) -> tuple[OuterState, torch.Tensor, torch.Generator]:
    """One unit of `n` values (int4: 3 blocks of 256, the last one padded), with error feedback."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(n, generator=g)
    outer = OuterState([theta.clone()], lr=1.0, momentum=0.0, nesterov=False)
    outer.set_wire("int4", error_feedback=True)
    return outer, theta, g


def _moved(theta: torch.Tensor, g: torch.Generator, scale: float = 0.01) -> torch.Tensor:
    return theta + scale * torch.randn(theta.shape, generator=g)


def test_a_used_sync_keeps_the_residual_as_before():
    """Used: e ← (Δ + e) − Δ̂, bit for bit what a single-phase error feedback keeps."""
    from edit_lab.core.wire import roundtrip

    outer, theta, g = _feedback()
    e = torch.zeros_like(theta)
    for _ in range(3):
        moved = _moved(theta, g)
        x = (outer.anchors[0].detach() - moved) + e
        sent = outer.pseudo_gradient(0, moved)
        assert torch.equal(sent, roundtrip(x, "int4"))
        assert outer.keep_residual(0, used=True)
        e = x - sent
        assert torch.equal(outer.residuals[0], e) and float(e.abs().max()) > 0
    assert outer.owed == {} and outer.keep_residual(0, used=False)  # nothing undecided: nothing happens
    assert torch.equal(outer.residuals[0], e)


def test_a_dropped_sync_restores_the_residual_from_before_it():
    """A replica flagged (weight 0) or a skipped step: its Δ never reached the anchor, so neither does its error;
    the error of the syncs before is still owed. A rejected ×100 spike leaves e as it was (the single-phase rule
    kept about 100 × the healthy one's error)."""
    outer, theta, g = _feedback()
    outer.pseudo_gradient(0, _moved(theta, g))
    outer.keep_residual(0, used=True)
    before = outer.residuals[0].clone()
    spiked = 100.0 * _moved(theta, g)
    sent = outer.pseudo_gradient(0, spiked)
    assert float(outer.residuals[0].norm()) > 10 * float(before.norm())  # the candidate: the spike's error
    assert not outer.keep_residual(0, used=False)
    assert torch.equal(outer.residuals[0], before) and outer.owed == {}
    assert float(sent.norm()) > 100  # what the method was handed is unchanged: Δ̂ of the spike
    # the next, healthy sync starts from the error that was owed before the spike
    healthy = _moved(theta, g)
    x = (outer.anchors[0].detach() - healthy) + before
    assert torch.equal(outer.pseudo_gradient(0, healthy) + outer.residuals[0], x)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_candidate_is_never_kept(bad):
    """An inf in Δ decodes to NaN over its 256-value block (0·inf), so the candidate residual is NaN there: kept, it
    would make every later Δ̂ of that block NaN. Not kept, used or not, nor by a later `pseudo_gradient` that finds it
    undecided."""
    outer, theta, g = _feedback()
    outer.pseudo_gradient(0, _moved(theta, g))
    outer.keep_residual(0, used=True)
    before = outer.residuals[0].clone()
    broken = _moved(theta, g)
    broken[3] = bad
    outer.pseudo_gradient(0, broken)
    assert not bool(torch.isfinite(outer.residuals[0]).all())
    assert not outer.keep_residual(0, used=True)
    assert torch.equal(outer.residuals[0], before)
    # undecided when the next sync measures: that sync first drops it, then measures from `before`
    outer.pseudo_gradient(0, broken)
    healthy = _moved(theta, g)
    x = (outer.anchors[0].detach() - healthy) + before
    sent = outer.pseudo_gradient(0, healthy)
    assert bool(torch.isfinite(sent).all()) and torch.equal(sent + outer.residuals[0], x)


def test_a_checkpoint_refuses_an_undecided_residual():
    outer, theta, g = _feedback()
    outer.pseudo_gradient(0, _moved(theta, g))
    with pytest.raises(AssertionError, match="undecided"):
        outer.state_dict()
    outer.keep_residual(0, used=False)
    assert torch.equal(outer.state_dict()["residuals"][0], torch.zeros_like(theta))
