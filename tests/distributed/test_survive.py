"""Training through a replica's death (issue 50, edit-method.md §16), on real processes: nano, 60 steps, τ 5.

The episode: replica 1 dies at the start of step 20 (SIGKILL, or a hang bounded by `timeout_s`), the survivors
re-form the sync group as a new view and go on, a replacement joins at the first sync at or after step 40 from a
live peer's state, and the run ends with exit 0 and no process left. Checked from the run directory only: the views
(summary.json), who synced at each sync (syncs.jsonl), the anchors' CRCs after every sync (`checksums`), the
validation loss; for diloco and edit (the issue's pair), and sync. A surviving run without a death trains the bits of
a plain run, and a plain run is not touched by any of it (the other distributed tests).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import psutil
import torch
import pytest

from edit_lab import WorkerError, launch
from edit_lab.records.events import read_jsonl
from tests.helpers import small

pytestmark = pytest.mark.slow


def _workers(out: Path) -> list[psutil.Process]:
    """Live processes writing one of the run's logs (a replacement's is rank{r}.life{n}.log)."""
    found = []
    for p in psutil.process_iter(["status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        try:
            if any(Path(f.path).parent == out and f.path.endswith(".log") for f in p.open_files()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "run"
    yield d
    for p in _workers(d):  # never leave CPU hogs behind, even when failing
        p.kill()


def _run(out: Path, method: str = "diloco", shards: int = 1, replicas: int = 3, **kw):
    cfg = dict(method=method, shards=shards, replicas=replicas, steps=60, warmup_steps=10, sync_interval=5,
               eval_every=10, survive=True, fault_replica=1, fault_replica_step=20, rejoin_step=40, checksums=True,
               out=str(out), timeout_s=20)
    cfg.update(kw)
    run = launch(small(**cfg))
    deadline = time.monotonic() + 5
    while _workers(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers(out), "worker processes left"
    return run


def _syncs(out: Path) -> dict[int, dict]:
    """step -> the `sync` record of the first rank (the last one at a step: a retried sync's)."""
    return {r["step"]: r for r in read_jsonl(out / "syncs.jsonl") if r["kind"] == "sync"}


def _views(run) -> list[list[int]]:
    return [v["members"] for v in run.summary["survival"]["views"]]


def _anchors_agree(out: Path, from_step: int) -> int:
    """Every replica's anchor and θ CRCs are equal per (shard, unit) at each sync from `from_step` on; returns how
    many syncs were compared. A sync's checksums are its last ones on a rank (a retried sync's)."""
    by = defaultdict(dict)  # (step, shard, unit) -> replica -> (theta, anchor)
    for path in out.glob("events-rank*.jsonl"):
        for e in read_jsonl(path):
            if e["kind"] == "checksum" and e["step"] >= from_step:
                by[(e["step"], e["shard"], e["unit"])][e["replica"]] = (e["data"]["theta"], e["data"]["anchor"])
    for key, per in by.items():
        assert len(set(per.values())) == 1, (key, per)
    return len({k[0] for k in by})


def _val(run) -> dict[int, float]:
    return {m["step"]: m["val_loss"] for m in run.metrics if m["kind"] == "eval" and not m.get("final")}


def _episode(out: Path, run, method: str, replicas: int = 3) -> None:
    """What every death-and-rejoin of replica 1 at 20/40 shows."""
    everyone, survivors = list(range(replicas)), [r for r in range(replicas) if r != 1]
    assert _views(run) == [everyone, survivors, everyone]
    syncs = _syncs(out)
    for step in range(25, 40, 5):
        assert syncs[step]["members"] == survivors, syncs[step]  # each sync in the window averages the survivors'
    assert syncs[40]["members"] == everyone and syncs[40]["fresh"] == [1]  # the replacement sends Δ = 0 ...
    if method == "edit":  # ... with weight 0 (k = 0), and the survivors split the weight
        rows = [r for r in read_jsonl(out / "penalty.jsonl") if r["step"] == 40]
        assert {r["weight"] for r in rows if r["replica"] == 1} == {0.0}
        assert all(r["steps"] == 0 for r in rows if r["replica"] == 1)
        assert not any(r["outlier"] for r in read_jsonl(out / "penalty.jsonl"))  # a view change flags nobody
    assert _anchors_agree(out, from_step=40) >= 4  # the replacement holds the agreed model at every sync
    val = _val(run)
    assert val[40] < val[30] < val[20], val  # the survivors keep learning
    lost = run.summary["survival"]["lost"]
    assert [(x["replica"], x["rejoined_at_step"]) for x in lost] == [(1, 40)]


@pytest.mark.parametrize("method", ["diloco", "edit"])
def test_kill_and_rejoin_1x3(out, method):
    run = _run(out, method)
    _episode(out, run, method)
    if method == "edit":  # the kill struck at EDiT's sync step: the survivors' sync failed, rolled back, retried
        kinds = [r["kind"] for r in read_jsonl(out / "syncs.jsonl") if r["step"] == 20]
        # (or, on a loaded machine where the launcher published the new view before they began that sync, they
        # took it at the sync's start and never failed: test_a_death_inside_... makes the failure certain)
        assert kinds in (["detection", "rollback", "view", "sync", "retry"], ["view", "sync"]), kinds
    launcher = [r["kind"] for r in read_jsonl(out / "survival.jsonl")]  # the launcher's side of the episode
    assert launcher == ["view", "death", "fenced", "view", "replacement_started", "view"], launcher
    costs = run.summary["survival"]["costs_ms"]
    assert costs["transfer_joiner_ms"]["n"] == 1 and costs["view_change_join_ms"]["n"] == 3  # 2 survivors + 1


@pytest.mark.parametrize("method", ["diloco", "edit"])
def test_kill_and_rejoin_2x3(out, method):
    run = _run(out, method, shards=2)
    _episode(out, run, method)


@pytest.mark.parametrize("method, shards", [("edit", 1), ("diloco", 2)])
def test_hang_is_bounded_by_timeout(out, method, shards):
    timeout_s = 3.0
    t0 = time.monotonic()
    run = _run(out, method, shards=shards, fault_replica_kind="hang", timeout_s=timeout_s)
    _episode(out, run, method)
    detections = [r for r in read_jsonl(out / "syncs.jsonl") if r["kind"] == "detection"]
    assert detections and all(0.8 * timeout_s * 1e3 < d["blocked_ms"] < 2 * timeout_s * 1e3 for d in detections)
    assert "hung" in run.summary["survival"]["deaths"][0]["cause"]
    assert time.monotonic() - t0 < 6 * timeout_s + 30  # the hang cost one timeout and a settle, not the run


@pytest.mark.parametrize("kind", ["kill", "hang"])
def test_two_replicas_one_survivor_trains_alone(out, kind):
    """R = 2, min 1: the survivor trains alone, a hang too (torchft's quorum, a majority of the heartbeating
    replicas, cannot form there: a hung replica still heartbeats). The launcher fences the silent one."""
    run = _run(out, "diloco", replicas=2, rejoin_step=-1, fault_replica_kind=kind, timeout_s=3.0)
    assert _views(run) == [[0, 1], [0]]
    syncs = _syncs(out)
    assert all(syncs[s]["members"] == [0] for s in range(25, 61, 5))
    assert run.summary["per_replica"]["0"]["steps"] == 60
    val = _val(run)
    assert val[50] < val[20]


def test_death_of_replica_0_moves_its_duties(out):
    run = _run(out, "edit", fault_replica=0)
    assert _views(run) == [[0, 1, 2], [1, 2], [0, 1, 2]]
    syncs = _syncs(out)  # written from replica 1's records: replica 0's replacement saw only the end
    assert syncs[30]["members"] == [1, 2] and syncs[40]["fresh"] == [0]
    assert _anchors_agree(out, from_step=40) >= 4
    assert (out / "model.pt").exists() and run.summary["survival"]["deaths"][0]["replica"] == 0


@pytest.mark.parametrize("method", ["diloco", "edit"])
def test_discard_drops_the_interrupted_round(out, method):
    run = _run(out, method, survive_on_failure="discard")
    at = 20 if method == "edit" else 25  # the first sync after the death: EDiT's is in step 20, DiLoCo's at 25
    kinds = [r["kind"] for r in read_jsonl(out / "syncs.jsonl") if r["step"] == at]
    assert "discard" in kinds and "sync" not in kinds, kinds  # that round was dropped, not retried
    assert _views(run) == [[0, 1, 2], [0, 2], [0, 1, 2]]
    assert _anchors_agree(out, from_step=25) >= 5


def test_below_the_minimum_the_run_ends_with_the_reason(out):
    with pytest.raises(WorkerError) as info:
        _run(out, "diloco", survive_min_replicas=3)
    assert "survive_min_replicas=3" in str(info.value) and "replica 1 died" in str(info.value)
    assert not _workers(out)
    assert json.loads((out / "config.json").read_text())["runtime"]["survive"] is True


def _anchor_crcs(out: Path, replica: int, steps: range) -> dict:
    """(step, shard, unit) -> replica `replica`'s anchor CRC after that step's sync (its last attempt's)."""
    crcs = {}
    for path in out.glob("events-rank*.jsonl"):
        for e in read_jsonl(path):
            if e["kind"] == "checksum" and e["replica"] == replica and e["step"] in steps:
                crcs[(e["step"], e["shard"], e["unit"])] = e["data"]["anchor"]
    return crcs


def test_a_death_inside_edit_s_layerwise_sync_is_rolled_back_exactly(tmp_path):
    """Replica 1 dies right before unit 1 of step 20's sync (nano: units 0, 1, 2), having issued unit 1's transfer
    (prefetch): the survivors have stepped unit 0 with three replicas' Δ (and unit 1 too when its transfer had
    completed) and fail at unit 1 or 2. Rolled back and retried, their anchors are bit for bit those of a run where
    replica 1 died before the sync began (the prefetched transfer drained, anchors, momentum, detectors restored)."""
    inside, before = tmp_path / "inside", tmp_path / "before"
    _run(inside, "edit", fault_replica_unit=1, rejoin_step=-1)
    _run(before, "edit", rejoin_step=-1)
    kinds = [r["kind"] for r in read_jsonl(inside / "syncs.jsonl") if r["step"] == 20]
    assert kinds[:2] == ["detection", "rollback"] and "retry" in kinds, kinds
    window = range(20, 61)
    a, b = _anchor_crcs(inside, 0, window), _anchor_crcs(before, 0, window)
    assert a and a == b
    assert _anchors_agree(inside, from_step=20) >= 8


@pytest.mark.parametrize("method", ["diloco", "edit"])
def test_a_death_before_the_closing_sync(out, method):
    """steps = 58: the run ends with finalize's closing sync at 58 (3 local steps), which the survivors take alone."""
    run = _run(out, method, steps=58, fault_replica_step=57, rejoin_step=-1)
    assert _views(run) == [[0, 1, 2], [0, 2]]
    assert _syncs(out)[58]["members"] == [0, 2]
    assert _anchors_agree(out, from_step=58) == 1


@pytest.mark.parametrize("method", ["sync", "diloco", "edit"])
def test_survival_without_a_death_trains_the_same_bits(tmp_path, method):
    """The views, the per-replica worlds and the snapshots change who talks to whom, not one number: with no
    death a surviving run's losses and final model are a plain run's, bit for bit."""
    runs = [launch(small(method=method, shards=2, replicas=2, steps=24, warmup_steps=4, sync_interval=5,
                         eval_every=8, survive=survive, out=str(tmp_path / f"run{survive}"))) for survive in (False, True)]
    plain, surviving = ([(m["kind"], m["step"], m.get("replica"), m.get("loss", m.get("val_loss"))) for m in r.metrics]
                        for r in runs)
    assert plain == surviving
    a, b = (r.state_dict() for r in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert runs[1].summary["survival"]["views"] == [{"view": 0, "members": [0, 1], "joined": [], "died": [],
                                                     "reason": "start", "t": None}]


@pytest.mark.parametrize("shards", [1, 2])
def test_sync_trains_through_a_death(out, shards):
    """Synchronous training: every step's gradient all-reduce is the sync. The survivors' all-reduce of step 20
    fails, is retried by the two of them (the step again up to its optimizer, θ untouched), and the replacement
    takes a live peer's θ and optimizer state at the first step at or after 40, where it all-reduces with them."""
    run = _run(out, "sync", shards=shards)
    assert _views(run) == [[0, 1, 2], [0, 2], [0, 1, 2]]
    views = {r["view"]: r["step"] for r in read_jsonl(out / "syncs.jsonl") if r["kind"] == "view"}
    assert views[1] == 20 and views[2] == 40
    final = next(m for m in run.metrics if m["kind"] == "eval" and m.get("final"))
    assert final["val_loss_spread"] == 0.0  # every rank of every replica evaluates the same θ, bit for bit
    val = _val(run)
    assert val[40] < val[30] < val[20]
    steps = {r: v["steps"] for r, v in run.summary["per_replica"].items()}
    assert steps == {"0": 60, "1": 20, "2": 60}  # replica 1's first life's rows died with it; its replacement's
    assert run.summary["survival"]["lost"][0]["replica_steps"] == 20


def test_a_slow_replacement_is_waited_for(out):
    """A replacement admitted (its view published) that reaches the view's group 8 s late, with `timeout_s` 3 s:
    the members gather on the store before gloo's rendezvous (`Survival.gather`, bounded by max(3·timeout_s, 60 s)),
    so nobody times out; before, the survivors' group creation failed after `timeout_s` and the run ended."""
    run = _run(out, "diloco", timeout_s=3.0, fault_join_delay_s=8.0)
    _episode(out, run, "diloco")
    joins = [r for r in read_jsonl(out / "syncs.jsonl") if r["kind"] == "view" and r.get("joined")]
    assert len(joins) == 1 and joins[0]["ms"] > 8000 * 0.9  # the survivors waited for it, at the view change
    assert not [r for r in read_jsonl(out / "syncs.jsonl") if r["kind"] == "detection" and r["step"] >= 40]


def test_a_survivor_that_raises_ends_the_run_with_its_traceback(out):
    """An exception is a bug, not a death: the run ends at once with the rank and its traceback, as without
    survival, instead of fencing the replica as dead and training on (or waiting for the stall timeout)."""
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(small(method="diloco", shards=1, replicas=3, steps=60, warmup_steps=10, sync_interval=5, eval_every=0,
                     survive=True, fault_replica=1, fault_replica_step=20, rejoin_step=40, out=str(out), timeout_s=3.0,
                     fault_rank=2, fault_step=30, fault_kind="raise"), stall_timeout_s=600)
    assert info.value.rank == 2 and "InjectedFault" in info.value.traceback and "not a death" in info.value.traceback
    assert time.monotonic() - t0 < 300  # far from the stall timeout (600 s): it ended at the failure
    deadline = time.monotonic() + 5
    while _workers(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers(out), "worker processes left"


@pytest.mark.parametrize("method, more, views, back", [
    ("diloco", "2@35", [[0, 1, 2], [0, 2], [0, 1, 2], [0, 1], [0, 1, 2]], [(1, 25), (2, 45)]),
    ("edit", "1@40", [[0, 1, 2], [0, 2], [0, 1, 2], [0, 2], [0, 1, 2]], [(1, 25), (1, 50)]),  # the replacement dies
])
def test_two_deaths_in_one_run(out, method, more, views, back):
    """`fault_replica_more`: replica 1 dies at 15 (back at the first sync at or after 25), then replica 2 at 35, or
    replica 1's replacement (its second life) at 40, each back `rejoin_step − fault_replica_step` = 10 steps later."""
    run = _run(out, method, fault_replica_step=15, rejoin_step=25, fault_replica_more=more)
    assert _views(run) == views
    assert [(x["replica"], x["rejoined_at_step"]) for x in run.summary["survival"]["lost"]] == back
    launcher = [r["kind"] for r in read_jsonl(out / "survival.jsonl")]
    assert launcher == ["view"] + ["death", "fenced", "view", "replacement_started", "view"] * 2, launcher
    assert _anchors_agree(out, from_step=back[-1][1]) >= 2  # every replica on the agreed model after the last join
    val = _val(run)
    assert val[60 - 10] < val[20], val  # still learning through both
