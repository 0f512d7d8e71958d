"""Deaths and joins on the virtual clock (issue 50 item 7, clock/survive_virtual.py) against real processes.

The episode of test_survive.py (nano, τ 5, replica 1 killed at the start of step 20, a replacement at the first
sync at or after 40) on the wall clock and on the virtual clock: the same views, the same episode rows of the
launcher, the survivors' per-step losses and the final model, bit for bit: the fabric adds an all-reduce's terms in
gloo's ring order (clock/ring_order.py, checked against gloo in test_ring_order.py), so the three-term sums of R = 3
have gloo's bits too (before, with rank order, they agreed to 1e-4 only).
"""

from __future__ import annotations

import pytest
import torch

from edit_lab import launch
from edit_lab.records.events import read_jsonl
from tests.helpers import small

pytestmark = pytest.mark.slow


def _run(out, clock: str, method: str = "diloco", replicas: int = 3, **kw):
    cfg = dict(method=method, shards=1, replicas=replicas, steps=60, warmup_steps=10, sync_interval=5,
               eval_every=10, survive=True, fault_replica=1, fault_replica_step=20, rejoin_step=40, checksums=True,
               out=str(out), timeout_s=20, clock=clock)
    cfg.update(kw)
    return launch(small(**cfg))


def _survivors_losses(run) -> list[tuple[int, int, float]]:
    return [(m["step"], m["replica"], m["loss"]) for m in run.metrics if m["kind"] == "train" and m["replica"] != 1]


def _views(run) -> list[list[int]]:
    return [v["members"] for v in run.summary["survival"]["views"]]


def _compare(real, virtual, exact: bool) -> None:
    assert _views(real) == _views(virtual)
    assert [r["kind"] for r in read_jsonl(real.path / "survival.jsonl")] == \
        [r["kind"] for r in read_jsonl(virtual.path / "survival.jsonl")]
    syncs = lambda run: [(r["step"], r["members"], r["fresh"]) for r in read_jsonl(run.path / "syncs.jsonl")  # noqa: E731
                         if r["kind"] == "sync"]
    assert syncs(real) == syncs(virtual)  # who synced at each sync, the replacement's Δ = 0 at its first
    a, b = _survivors_losses(real), _survivors_losses(virtual)
    assert [x[:2] for x in a] == [x[:2] for x in b]
    sa, sb = real.state_dict(), virtual.state_dict()
    assert sa.keys() == sb.keys()
    if exact:
        assert a == b
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    else:
        assert all(abs(x[2] - y[2]) < 1e-4 for x, y in zip(a, b))
        assert all(torch.allclose(sa[k], sb[k], rtol=0, atol=1e-4) for k in sa)


@pytest.mark.parametrize("method", ["sync", "diloco", "edit"])
def test_virtual_equals_real_bit_for_bit_on_a_kill_with_two_replicas(tmp_path, method):
    """R = 2, the survivor trains alone from 20 to 40, the replacement joins from its state at 40."""
    real = _run(tmp_path / "real", "wall", method, 2)
    virtual = _run(tmp_path / "virtual", "virtual", method, 2)
    assert _views(virtual) == [[0, 1], [0], [0, 1]]
    _compare(real, virtual, exact=True)


@pytest.mark.parametrize("method", ["diloco", "edit"])
def test_virtual_equals_real_bit_for_bit_on_the_issue_s_kill_1x3(tmp_path, method):
    real = _run(tmp_path / "real", "wall", method, 3)
    virtual = _run(tmp_path / "virtual", "virtual", method, 3)
    assert _views(virtual) == [[0, 1, 2], [0, 2], [0, 1, 2]]
    _compare(real, virtual, exact=True)
    if method == "edit":  # the kill strikes at EDiT's sync step: the survivors' sync fails, is rolled back, retried
        kinds = [r["kind"] for r in read_jsonl(virtual.path / "syncs.jsonl") if r["step"] == 20]
        assert kinds == ["detection", "rollback", "view", "sync", "retry"], kinds


@pytest.mark.parametrize("method, more", [("diloco", "2@35"), ("edit", "1@40")])
def test_virtual_equals_real_bit_for_bit_through_two_deaths(tmp_path, method, more):
    """Two deaths (`fault_replica_more`): replica 1 at 15 and replica 2 at 35, or replica 1 again at 40 (its
    replacement), each back 10 steps later."""
    kw = dict(fault_replica_step=15, rejoin_step=25, fault_replica_more=more)
    real = _run(tmp_path / "real", "wall", method, 3, **kw)
    virtual = _run(tmp_path / "virtual", "virtual", method, 3, **kw)
    assert len(_views(virtual)) == 5
    _compare(real, virtual, exact=True)


@pytest.mark.parametrize("kind", ["kill", "hang"])
def test_the_virtual_episode_is_charged_and_deterministic(tmp_path, kind):
    """Detection (a kill: DETECT_KILL_S after the death; a hang: timeout_s), the view change, the transfer on the
    link; the same run twice, at one lane and at three, writes the same events."""
    from edit_lab.clock import survive_virtual as sv

    runs = [_run(tmp_path / f"v{lanes}", "virtual", "edit", 3, fault_replica_kind=kind, timeout_s=3.0,
                 virtual_lanes=lanes, link_latency_ms=5.0, link_bandwidth_mb_s=50.0) for lanes in (1, 3)]
    events = [(p.read_text() for p in sorted(r.path.glob("events-rank*.jsonl"))) for r in runs]
    assert list(events[0]) == list(events[1])
    costs = runs[0].summary["survival"]["costs_ms"]
    blocked = 1e3 * (sv.DETECT_KILL_S if kind == "kill" else 3.0)
    assert costs["survivor_blocked_in_failed_sync_ms"]["max"] == pytest.approx(blocked)
    assert costs["view_change_join_ms"]["mean"] == pytest.approx(1e3 * sv.VIEW_CHANGE_S)
    joiner = costs["transfer_joiner_ms"]["mean"] / 1e3
    assert joiner > 5e-3  # at least the link's latency: the state's bytes crossed the link
    assert ("hung" in runs[0].summary["survival"]["deaths"][0]["cause"]) == (kind == "hang")


def test_a_death_inside_edit_s_layerwise_sync_on_the_virtual_clock(tmp_path):
    """Replica 1 dies right before unit 1 of step 20's sync, its unit-1 transfer issued (prefetch): the survivors'
    sync fails in that unit, is rolled back and retried; their anchors from then on are those of a death before the
    sync began (test_survive.py's check on real processes, here on the virtual clock)."""
    inside = _run(tmp_path / "inside", "virtual", "edit", 3, fault_replica_unit=1, rejoin_step=-1)
    before = _run(tmp_path / "before", "virtual", "edit", 3, rejoin_step=-1)
    kinds = [r["kind"] for r in read_jsonl(inside.path / "syncs.jsonl") if r["step"] == 20]
    assert kinds == ["detection", "rollback", "view", "sync", "retry"], kinds
    crcs = lambda run: {(e["step"], e["unit"]): e["data"]["anchor"] for p in run.path.glob("events-rank0.jsonl")  # noqa: E731
                        for e in read_jsonl(p) if e["kind"] == "checksum" and e["step"] >= 20}
    assert crcs(inside) and crcs(inside) == crcs(before)


def test_below_the_minimum_the_virtual_run_ends_with_the_reason(tmp_path):
    from edit_lab import WorkerError

    with pytest.raises(WorkerError) as info:
        _run(tmp_path / "run", "virtual", "diloco", 3, survive_min_replicas=3)
    assert "survive_min_replicas=3" in str(info.value) and "replica 1 died" in str(info.value)


@pytest.mark.parametrize("changes, views, episode", [
    (dict(method="edit", survive_on_failure="discard"), [[0, 1, 2], [0, 2], [0, 1, 2]],
     [("detection", 20), ("view", 20), ("discard", 20), ("retry", 20), ("view", 40)]),
    (dict(method="diloco", survive_on_failure="discard"), [[0, 1, 2], [0, 2], [0, 1, 2]],
     [("view", 25), ("discard", 25), ("view", 40)]),  # the survivors meet the new view at 25's start
    (dict(method="edit", fault_replica=0), [[0, 1, 2], [1, 2], [0, 1, 2]],
     [("detection", 20), ("view", 20), ("retry", 20), ("view", 40)]),
    (dict(method="diloco", steps=58, fault_replica_step=57, rejoin_step=-1), [[0, 1, 2], [0, 2]],
     [("detection", 58), ("view", 58), ("retry", 58)]),  # a death before the closing sync
    (dict(method="sync"), [[0, 1, 2], [0, 2], [0, 1, 2]],
     [("detection", 20), ("view", 20), ("retry", 20), ("view", 40)]),
])
def test_the_other_episodes_on_the_virtual_clock(tmp_path, changes, views, episode):
    """test_survive.py's other scenarios on the virtual clock: discard, replica 0's death (its duties and the
    model move to replica 1), a death before the closing sync, synchronous training."""
    run = _run(tmp_path / "run", "virtual", **{"replicas": 3, **changes})
    assert _views(run) == views
    rows = [(r["kind"], r["step"]) for r in read_jsonl(run.path / "syncs.jsonl")
            if r["kind"] in ("detection", "discard", "retry", "view") and r["step"] > 0]
    assert rows == episode
    assert (run.path / "model.pt").exists()
