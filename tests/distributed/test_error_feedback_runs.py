"""Error feedback keeps only what was sent and used, in real EDiT runs (review B1, outer.py's module docstring).

Both runs: 1 shard × 2 replicas, nano, int4 with error feedback, the virtual clock (a few seconds each).

- **inf spike:** replica 0's parameters become inf after its optimizer step 4 (W 2, τ 3: syncs at 5, 8, 11 and the
  closing 14). Its Δ at sync 5 is non-finite: flagged (weight 0), and θ ← a. The residual kept before the fix was
  (Δ + e) − Δ̂ = NaN over every block holding an inf (the block decodes to NaN, 0·inf), so every later Δ̂ of those
  blocks was NaN and the replica was flagged at every sync to the end; now it is admitted from sync 8 on. The
  inner optimizer is SGD (no state): after the spike the replica trains like its peer, so nothing but the residual
  could keep it out. With AdamW (the issue's own reproduction, `test_the_issues_inf_reproduction_...`),
  `forget_inner_state` restarts its moments and its first round's G/k is 1.8× its peer's; since D16 a replica out
  for a non-finite norm is not kept out by that alone (its memory, not yet armed, is no evidence), so it is back
  at the next sync with error feedback as without.
- **×100 spike:** replica 0's parameters are multiplied by 100 after its step 11 (W 2, τ 2, armed detectors): it is
  flagged at sync 12. A checkpoint at every sync shows its residual after sync 12 equal, bit for bit, to the one
  after sync 10; the candidate was kept before the fix (about 12× the next healthy Δ, which kept the replica out
  at 14 and 16). Replica 1, admitted, keeps its candidate at every sync.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from edit_lab import RunConfig, launch
from tests.helpers import small

pytestmark = pytest.mark.slow

FEEDBACK = dict(method="edit", shards=1, replicas=2, clock="virtual", wire_format="int4", error_feedback=True,
                spike_replica=0)


def _replica_records(run, replica: int) -> dict[int, list[dict]]:
    """{sync step: [that replica's penalty record of unit 0, 1, …]}."""
    out: dict[int, list[dict]] = {}
    for p in sorted(run.penalty, key=lambda p: (p["step"], p["unit"])):
        if p["replica"] == replica:
            out.setdefault(p["step"], []).append(p)
    return out


def test_an_inf_spike_is_flagged_once_and_its_replica_comes_back(tmp_path):
    run = launch(small(steps=14, warmup_steps=2, sync_interval=3, spike_step=4, spike_scale=float("inf"),
                       inner_optimizer="sgd", lr=0.1, out=str(tmp_path / "run"), **FEEDBACK))
    mine = _replica_records(run, 0)
    assert sorted(mine) == [5, 8, 11, 14]
    assert all(p["outlier"] and p["weight"] == 0.0 and p["G"] is None for p in mine[5])  # the spike's sync
    for step in (8, 11, 14):
        for p in mine[step]:
            assert p["G"] is not None, f"sync {step}, unit {p['unit']}: replica 0's G is not finite"
            assert not p["outlier"] and p["weight"] > 0.0, f"sync {step}, unit {p['unit']}: replica 0 left out"


def _residuals(ckpt: Path) -> dict[int, list[torch.Tensor]]:
    """{replica: its error-feedback residual of every unit} in one checkpoint (one shard per replica)."""
    out = {}
    for part in sorted(ckpt.glob("rank*.pt")):
        state = torch.load(part, weights_only=False)
        out[state["replica"]] = state["method"]["outer"]["residuals"]
    return out


def test_a_rejected_x100_spike_leaves_the_residual_as_it_was(tmp_path):
    run = launch(small(steps=16, warmup_steps=2, sync_interval=2, spike_step=11, spike_scale=100.0,
                       checkpoint_every=1, out=str(tmp_path / "run"), **FEEDBACK))
    mine = _replica_records(run, 0)
    assert all(p["outlier"] and p["weight"] == 0.0 for p in mine[12])  # the spike's sync: rejected
    ckpts = {torch.load(Path(c) / "rank0.pt", weights_only=False)["step"]: Path(c)
             for c in glob.glob(str(run.path / "checkpoints" / "sync-*"))}
    before, after = _residuals(ckpts[10]), _residuals(ckpts[12])
    for u, (b, a) in enumerate(zip(before[0], after[0])):
        assert torch.equal(a, b), (f"unit {u}: the rejected sync changed replica 0's residual "
                                   f"(norm {float(b.norm()):.3g} -> {float(a.norm()):.3g})")
    for u, (b, a) in enumerate(zip(before[1], after[1])):
        assert not torch.equal(a, b) and bool(torch.isfinite(a).all()), f"unit {u}: replica 1 (used) kept no error"
    assert all(not p["outlier"] and p["weight"] > 0.0 for s in (14, 16) for p in mine[s])  # back at once


def test_the_issues_inf_reproduction_is_back_at_the_next_sync_as_without_error_feedback(tmp_path):
    """Issue 47's command: EDiT 1 × 2 nano, 40 steps (W 10, τ 10: syncs at 20, 30, 40), inf spike on replica 0 at step
    12, int4: with error feedback it was flagged at 20, 30 and 40 (its residual NaN for good); now, with error
    feedback or without, it is out at 20 only, with a finite G and weight > 0 at 30 and 40."""
    for feedback in (True, False):
        run = launch(RunConfig(method="edit", shards=1, replicas=2, model="nano", steps=40, spike_replica=0,
                               spike_step=12, spike_scale=float("inf"), wire_format="int4", error_feedback=feedback,
                               clock="virtual", progress=False, out=str(tmp_path / f"ef{int(feedback)}")))
        recs = _replica_records(run, 0)
        assert sorted(recs) == [20, 30, 40]
        assert all(p["outlier"] and p["weight"] == 0.0 for p in recs[20])
        for step in (30, 40):
            assert all(p["G"] is not None and not p["outlier"] and p["weight"] > 0.0 for p in recs[step]), (feedback,
                                                                                                          step)
