"""CO2 on real processes (2 shards × 2 replicas): it learns, the anchors agree, the all-reduce hides.

One launch. The sync link is slowed to 30 ms a transfer so that "overlapped" is visible in the timings:
a round of τ = 4 local steps is longer than a transfer, so the transfer travels while the replica trains,
whereas each of the warm-up's gradient all-reduces still takes the full latency on the link (most of it after its
unit's backward, which is short).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from edit_lab import launch
from tests.helpers import small

pytestmark = pytest.mark.slow

W, TAU, STEPS, LATENCY_S = 2, 4, 18, 0.03
BOUNDARIES = list(range(W + TAU, STEPS + 1, TAU))  # 6, 10, 14, 18


@pytest.fixture(scope="module")
def co2(tmp_path_factory):
    cfg = small(method="co2", shards=2, replicas=2, steps=STEPS, warmup_steps=W, sync_interval=TAU, checksums=True,
                link_latency_ms=LATENCY_S * 1e3, eval_every=6,
                # the authors' lr 1.0 and μ 0.5; λ and c off their defaults, all four distinct, to see them arrive
                co2_staleness_penalty=2.0, co2_momentum_clip=0.25,
                out=str(tmp_path_factory.mktemp("co2") / "run"))
    return cfg, launch(cfg)


def _checksums(run):
    """(log step, unit, shard) -> {replica: (anchor crc, theta crc)}, and the order the steps came in."""
    out: dict[tuple[int, int, int], dict[int, tuple[int, int]]] = defaultdict(dict)
    for e in run.events_of("checksum"):
        out[(e["step"], e["unit"], e["shard"])][e["replica"]] = (e["data"]["anchor"], e["data"]["theta"])
    return out


def test_co2_learns(co2):
    cfg, run = co2
    losses = [loss for _, loss in run.train_losses()]
    assert len(losses) == STEPS
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.3
    vals = [v for _, v in run.val_losses()]
    assert len(vals) == 3 and vals[-1] < vals[0]  # evaluated on the anchor, which improves too
    assert run.summary["method_info"]["applied_rounds"] == BOUNDARIES  # each round's mean, applied once
    # one record per sync: the run ends on a boundary (18), so the end only lands round 18's mean, and that
    # landing is recorded as such, not as a fifth sync (notebook 02 counted 5 for 4)
    assert [r["step"] for r in run.syncs if r["kind"] == "sync"] == BOUNDARIES
    assert run.summary["method_info"]["syncs"] == len(BOUNDARIES)
    assert [r for r in run.syncs if r["kind"] == "co2_landing"] == [
        {"kind": "co2_landing", "step": STEPS, "final": True, "applied_round": STEPS}]
    # the anchor was stepped by CO2's own heavy-ball outer optimizer, with the co2_* settings
    assert run.summary["method_info"]["outer"] == {"lr": cfg.outer.co2_lr, "momentum": cfg.outer.co2_momentum,
                                                   "staleness_penalty": cfg.outer.co2_staleness_penalty,
                                                   "momentum_clip": cfg.outer.co2_momentum_clip}


def test_replicas_agree_on_the_anchor_and_the_anchor_moves_one_round_late(co2):
    cfg, run = co2
    ck = _checksums(run)
    steps = sorted({s for s, _, _ in ck})
    # anchors at step W, then at every boundary (logged in the optimizer hook of the step before), then the end
    assert steps == [W] + [b - 1 for b in BOUNDARIES] + [STEPS]
    for key, per_replica in ck.items():
        assert set(per_replica) == {0, 1}
        assert per_replica[0][0] == per_replica[1][0], key  # the anchor: the same in every replica
    units = sorted({u for _, u, _ in ck})
    shards = (0, 1)
    anchor = {s: [ck[(s, u, sh)][0][0] for u in units for sh in shards] for s in steps}
    theta = {s: [[ck[(s, u, sh)][r][1] for u in units for sh in shards] for r in (0, 1)] for s in steps}
    # round 1's mean is still in flight at the first boundary: the anchor has not moved yet …
    assert anchor[BOUNDARIES[0] - 1] == anchor[W]
    # … and moves at every later boundary, with the mean of the round before
    for a, b in zip(BOUNDARIES, BOUNDARIES[1:]):
        assert anchor[b - 1] != anchor[a - 1]
    # every replica restarts from the updated anchor at every boundary, and at the end (the last round landed)
    for s in steps:
        assert theta[s][0] == theta[s][1] == anchor[s], s


def test_the_outer_all_reduce_overlaps_the_next_round(co2):
    cfg, run = co2
    for rank in range(cfg.world_size):
        reduces = run.events_of("co2_reduce", rank)
        assert [e["step"] for e in reduces] == [b - 1 for b in BOUNDARIES]  # issued at every boundary …
        assert all(e["data"]["overlapped"] for e in reduces)
        waits = [e for e in run.events_of("wait", rank) if e["data"].get("on") == "co2_reduce"]
        assert [e["step"] for e in waits] == [b - 1 for b in BOUNDARIES[1:]] + [STEPS]  # … waited one boundary later
        # (the last one is waited for by `finalize` right away: there is no next round to hide it behind)
        for red, wait in zip(reduces[:-1], waits[:-1]):
            # t0: issued; t1: the simulated transfer ended (≥ t0 + 30 ms); wait["t0"]: the rank came to need it.
            # Everything of the transfer before wait["t0"] travelled while this rank trained its next round.
            assert red["t1"] - red["t0"] >= LATENCY_S * 0.99
            assert min(red["t1"], wait["t0"]) - red["t0"] >= 0.9 * LATENCY_S, (red, wait)
        # whereas each of the warm-up's gradient all-reduces takes the latency in full (started when its unit's
        # backward ends, it has only the short backward of the units before it to hide under)
        grads = run.events_of("grad_all_reduce", rank)
        assert grads and max(e["t1"] - e["t0"] for e in grads) >= LATENCY_S * 0.9
    assert run.events_of("sync_reduce") == []


def test_co2_memory_holds_anchor_momentum_and_the_buffer_in_flight(co2):
    cfg, run = co2
    for rank in range(cfg.world_size):
        mem = run.summary["memory"][str(rank)]
        assert mem["method_state"] == 3 * mem["params"]  # a, outer momentum b, and the Δ buffer in flight
