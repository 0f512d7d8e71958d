"""Backup workers (`backup`) at their edges: the grid of R, S and m, random pauses and a reader's rule, time
budgets, validation, clipping, checkpoints and (elastic) resumes, the preview simulator, faults, refusals.

Every run is the nano model for a few steps, mostly on the virtual clock (deterministic); the faults and a few
structural checks also on real gloo processes. What each test holds a run to:

- exactly R - m replicas dropped at every step (train rows `dropped`, 0 tokens), every rank of a replica alike;
- every replica holds the same θ after every step (`checksums`);
- m = R is `sync` to the bit (model and every loss);
- the simulator's collectives and timeline are the virtual clock's (`sim_crosscheck.compare`);
- a fault ends the run within seconds with `WorkerError`, nothing hangs.

The last test is a bug found while probing (time-only mode had no `drop_backward`), fixed since.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest
import torch

from edit_lab import launch
from edit_lab.config import ConfigError, RunConfig
from edit_lab.records.run import Run
from edit_lab.runtime.launch import WorkerError
from tests.distributed.sim_crosscheck import compare
from tests.helpers import small

STEPS = 4
RULE = "def fn(step, replica, compute_s):\n    return 0.05 if (step + replica) % 3 == 0 else 0.0\n"


def _rows(run: Run) -> list[dict]:
    return [m for m in run.metrics if m["kind"] == "train" and not m.get("carried")]


def _dropped(run: Run) -> list[tuple[int, int]]:
    return sorted({(m["step"], m["replica"]) for m in _rows(run) if m.get("dropped")})


def _drops_per_step(run: Run) -> dict[int, int]:
    per = Counter(s for s, _ in _dropped(run))
    return {s: per[s] for s in sorted({m["step"] for m in _rows(run)})}


def _structure(run: Run, m: int) -> None:
    """R - m dropped every step; a dropped row has 0 tokens, a member's not; both ranks of a replica agree; the
    replicas hold the same θ after every step."""
    R, S = run.config.replicas, run.config.shards
    rows = _rows(run)
    assert set(_drops_per_step(run).values()) == {R - m}
    assert all((r["tokens"] == 0) == bool(r.get("dropped")) for r in rows)
    fate = defaultdict(set)
    for r in rows:
        fate[(r["step"], r["replica"])].add(bool(r.get("dropped")))
    assert all(len(v) == 1 for v in fate.values()), "the ranks of a replica parted"
    theta: dict[tuple, set] = defaultdict(set)
    for e in run.events_of("checksum"):
        theta[(e["step"], e["unit"], e["shard"])].add(e["data"]["theta"])
    steps = len({r["step"] for r in rows})
    assert len(theta) == steps * 3 * S and all(len(v) == 1 for v in theta.values())  # nano: 3 units


def _same_numbers(a: Run, b: Run) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert [(m["step"], m["replica"], m["loss"]) for m in a.metrics if m["kind"] == "train"] == \
        [(m["step"], m["replica"], m["loss"]) for m in b.metrics if m["kind"] == "train"]


def _sim_agrees(run: Run) -> None:
    c = compare(run)
    assert c.same_collectives, c.first_difference()
    assert c.timeline_error < 1e-9, c.worst_time()


# ---------------------------------------------------------------------------------------------- the grid
GRID = [(R, S, strag, m) for R, S in ((2, 1), (2, 2), (3, 1), (3, 2), (4, 1), (8, 1))
        for strag in ((), (R - 1,), (0, 1)) if len(strag) < R
        for m in sorted({1, R - 1, R})]


@pytest.mark.parametrize("R,S,strag,m", GRID, ids=[f"R{R}-S{S}-strag{''.join(map(str, s)) or 'none'}-m{m}"
                                                   for R, S, s, m in GRID])
def test_grid_on_the_virtual_clock(tmp_path, R, S, strag, m):
    cfg = small(method="backup", replicas=R, shards=S, backup_m=m, steps=STEPS, clock="virtual", checksums=True,
                straggler_replicas=strag, straggler_factor=5.0 if strag else 1.0, out=str(tmp_path / "b"))
    run = launch(cfg)
    _structure(run, m)
    if m == R:
        assert not _dropped(run)
        _same_numbers(launch(cfg.replace(method="sync", backup_m=0, checksums=False, out=str(tmp_path / "s"))), run)
    elif strag and len(strag) <= R - m:  # on the virtual clock the slow ones are the late ones
        assert {r for _, r in _dropped(run)} >= set(strag)


def test_default_m_is_r_minus_one_and_ties_drop_the_highest_replicas(tmp_path):
    run = launch(small(method="backup", replicas=4, shards=1, steps=STEPS, clock="virtual", checksums=True,
                       out=str(tmp_path / "b")))
    _structure(run, 3)
    assert _dropped(run) == [(s, 3) for s in range(STEPS)]
    _sim_agrees(run)


@pytest.mark.parametrize("overlap", ["0", "1"])
def test_without_the_gradient_overlap_too(tmp_path, monkeypatch, overlap):
    """The late replica's zeros follow the members' unit order with the overlap off (first to last) as on."""
    monkeypatch.setenv("EDIT_LAB_GRAD_ALL_REDUCE_OVERLAP", overlap)
    cfg = small(method="backup", replicas=2, shards=2, backup_m=1, steps=STEPS, clock="virtual", checksums=True,
                straggler_replicas=(1,), straggler_factor=5.0, out=str(tmp_path / "b"))
    run = launch(cfg)
    _structure(run, 1)
    assert _dropped(run) == [(s, 1) for s in range(STEPS)]
    full = launch(cfg.replace(backup_m=2, checksums=False, out=str(tmp_path / "full")))
    _same_numbers(launch(cfg.replace(method="sync", backup_m=0, checksums=False, out=str(tmp_path / "s"))), full)


# ------------------------------------------------------- pauses, rules, budgets, eval, clipping, simulator
CASES = {
    "random": dict(random_pause_prob=0.5, random_pause_ms=50),
    "rule": dict(straggler_rule=RULE),
    "rule+straggler": dict(straggler_rule=RULE, straggler_replicas=(2,), straggler_factor=4.0),
    "grad_clip": dict(grad_clip=0.01, straggler_replicas=(2,), straggler_factor=4.0),
    "eval_every": dict(eval_every=2, straggler_replicas=(2,), straggler_factor=4.0),
    "time_budget": dict(time_budget=0.5, straggler_replicas=(2,), straggler_factor=4.0),
    "link": dict(link_latency_ms=5.0, straggler_replicas=(2,), straggler_factor=4.0),
}


@pytest.mark.parametrize("S", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_pauses_rules_budgets_and_the_simulator(tmp_path, case, S):
    run = launch(small(method="backup", replicas=3, shards=S, steps=6, clock="virtual", checksums=True,
                       out=str(tmp_path / "b"), **CASES[case]))
    _structure(run, 2)
    steps = sorted({m["step"] for m in _rows(run)})
    assert steps == list(range(len(steps))) and len(steps) >= 6
    if case == "eval_every":
        assert {m["step"] for m in run.metrics if m["kind"] == "eval"} == {2, 4, 6}
    _sim_agrees(run)


def test_a_time_budget_with_timed_validation_on_real_processes(tmp_path):
    """Every replica stops at the same step (stop checks), each step drops exactly one."""
    run = launch(small(method="backup", replicas=3, shards=1, steps=1000, time_budget=1.0, eval_every_s=0.5,
                       checksums=True, straggler_replicas=(2,), straggler_factor=3.0, out=str(tmp_path / "b")))
    _structure(run, 2)
    per_replica = Counter(m["replica"] for m in _rows(run))
    assert len(set(per_replica.values())) == 1 and len(per_replica) == 3


def test_real_processes_two_shards_m_one(tmp_path):
    run = launch(small(method="backup", replicas=2, shards=2, backup_m=1, steps=STEPS, checksums=True,
                       straggler_replicas=(1,), straggler_factor=5.0, out=str(tmp_path / "b")))
    _structure(run, 1)


def test_real_processes_three_replicas_m_one(tmp_path):
    run = launch(small(method="backup", replicas=3, shards=1, backup_m=1, steps=STEPS, checksums=True,
                       straggler_replicas=(2,), straggler_factor=5.0, out=str(tmp_path / "b")))
    _structure(run, 1)


# --------------------------------------------------------------------------------- checkpoints, resumes
@pytest.mark.parametrize("clock", ["virtual", "wall"])
@pytest.mark.parametrize("pauses", ["straggler", "random"])
def test_resume_from_a_checkpoint_is_the_uninterrupted_run(tmp_path, clock, pauses):
    kw = dict(straggler_replicas=(2,), straggler_factor=4.0) if pauses == "straggler" else \
        dict(random_pause_prob=0.5, random_pause_ms=30)
    base = small(method="backup", replicas=3, shards=1, steps=8, clock=clock, checkpoint_every=2, **kw)
    full = launch(base.replace(out=str(tmp_path / "full")))
    res = launch(base.replace(resume=str(tmp_path / "full" / "checkpoints" / "sync-000004"),
                              out=str(tmp_path / "res")))
    assert set(_drops_per_step(res).values()) == {1} and sorted(_drops_per_step(res)) == [4, 5, 6, 7]
    if clock == "virtual":  # on real processes a tie (nobody pausing) is a race, and a starved member can be late
        sa, sb = full.state_dict(), res.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
        assert _dropped(res) == [x for x in _dropped(full) if x[0] >= 4]
        lf = sorted((m["step"], m["replica"], m["loss"]) for m in _rows(full) if m["step"] >= 4)
        assert lf == sorted((m["step"], m["replica"], m["loss"]) for m in _rows(res))


@pytest.mark.parametrize("to", [2, 4])
def test_an_elastic_resume_keeps_m_at_r_minus_one(tmp_path, to):
    base = small(method="backup", replicas=3, shards=1, steps=6, clock="virtual", checkpoint_every=2, checksums=True,
                 straggler_replicas=(1,), straggler_factor=3.0)
    launch(base.replace(out=str(tmp_path / "a")))
    res = launch(base.replace(replicas=to, resume=str(tmp_path / "a" / "checkpoints" / "sync-000002"),
                              out=str(tmp_path / "b")))
    assert _drops_per_step(res) == {s: 1 for s in range(2, 6)}
    assert {m["replica"] for m in _rows(res)} == set(range(to))


def test_a_checkpointed_run_on_the_simulator(tmp_path):
    _sim_agrees(launch(small(method="backup", replicas=3, shards=1, steps=6, clock="virtual", checkpoint_every=2,
                             straggler_replicas=(1,), straggler_factor=3.0, out=str(tmp_path / "b"))))


# -------------------------------------------------------------------------------------------------- faults
FAULTS = [("virtual", 1, 2, "raise"), ("virtual", 1, 0, "nan"), ("wall", 1, 2, "raise"), ("wall", 1, 0, "raise"),
          ("wall", 1, 2, "kill"), ("wall", 1, 0, "nan"), ("wall", 1, 2, "hang"),
          ("wall", 2, 3, "kill"), ("wall", 2, 2, "kill"), ("wall", 2, 3, "hang")]


@pytest.mark.parametrize("clock,S,rank,kind", FAULTS, ids=[f"{c}-S{s}-rank{r}-{k}" for c, s, r, k in FAULTS])
def test_a_fault_ends_the_run_within_seconds(tmp_path, clock, S, rank, kind):
    """The straggler is the last replica (its ranks: 2 at S=1, 2 and 3 at S=2): a fault in it and in a member."""
    R = 3 if S == 1 else 2
    cfg = small(method="backup", replicas=R, shards=S, steps=6, clock=clock, timeout_s=5,
                straggler_replicas=(R - 1,), straggler_factor=5.0, fault_rank=rank, fault_step=2, fault_kind=kind,
                out=str(tmp_path / "b"))
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=f"rank {rank}"):
        launch(cfg)
    assert time.monotonic() - t0 < (15 if kind == "hang" else 8)


def test_a_nan_spike_on_the_late_replica_stops_the_run(tmp_path):
    with pytest.raises(WorkerError, match="loss is nan"):
        launch(small(method="backup", replicas=3, shards=1, steps=6, clock="virtual", straggler_replicas=(2,),
                     straggler_factor=5.0, spike_replica=2, spike_step=2, spike_scale=float("nan"),
                     out=str(tmp_path / "b")))


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("kw,field", [
    (dict(method="backup", replicas=1), "replicas=1"),
    (dict(method="backup", replicas=3, backup_m=4), "backup_m=4"),
    (dict(method="backup", replicas=3, backup_m=-1), "backup_m=-1"),
    (dict(method="backup", replicas=3, backup_m=True), "backup_m=True"),
    (dict(method="backup", replicas=3, backup_m=2.0), "backup_m=2.0"),
    (dict(method="backup", replicas=3, backup_m="2"), "backup_m='2'"),
    (dict(method="diloco", replicas=3, backup_m=2), "backup_m=2"),
    (dict(method="sync", replicas=3, backup_m=3), "backup_m=3"),
])
def test_refusals(kw, field):
    with pytest.raises(ConfigError, match=f"^{field.replace('.', '[.]')} is not allowed"):
        RunConfig(**kw).validate()


# --------------------------------------------------------------------------------------------------- a bug, fixed
def test_charged_virtual_compute_with_a_late_replica(tmp_path):
    run = launch(small(method="backup", replicas=3, shards=1, steps=2, clock="virtual", virtual_compute="charged",
                       straggler_replicas=(2,), straggler_factor=4.0, out=str(tmp_path / "b")))
    assert set(_drops_per_step(run).values()) == {1}
