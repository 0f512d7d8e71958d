"""EDiT, Post Local SGD and DiLoCo on real gloo ranks (edit-method.md §2–5, §8).

Every run is launched once per module and shared: 2 shards × 2 replicas for the Local-SGD
methods, and 1 shard × 3 replicas for Post Local SGD against PyTorch's own `PeriodicModelAverager`.
All runs use W = 3, τ = 2 and 10 steps: the anchor is created at step 3, the syncs are at the
forwards of steps 5, 7, 9, and a final sync at the end (logged with step == steps).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from edit_lab import launch
from edit_lab.core.model import SIZES
from tests.helpers import small
from tests.oracles.averaging import periodic_averaging

pytestmark = pytest.mark.slow

W, TAU, STEPS = 3, 2, 10
SYNC_STEPS = [5, 7, 9]  # forwards that sync: W+τ, W+2τ, … < STEPS
FINAL = STEPS  # finalize's sync (last step 9 synced at its forward, not after it)
COMMON = dict(warmup_steps=W, sync_interval=TAU, steps=STEPS, checksums=True, eval_every=4)
PLAIN_AVERAGE = dict(outer_lr=1.0, outer_momentum=0.0, penalty_anomaly=False, penalty_weighting=False,
                     penalty_clip=False)


def _launch(tmp_path_factory, name: str, **kw):
    cfg = small(**{**COMMON, **kw}, out=str(tmp_path_factory.mktemp(name) / "run"))
    return cfg, launch(cfg)


@pytest.fixture(scope="module")
def edit_on(tmp_path_factory):
    return _launch(tmp_path_factory, "edit_on", method="edit", shards=2, replicas=2, prefetch=True)


@pytest.fixture(scope="module")
def edit_off(tmp_path_factory):
    return _launch(tmp_path_factory, "edit_off", method="edit", shards=2, replicas=2, prefetch=False)


@pytest.fixture(scope="module")
def edit_average(tmp_path_factory):
    return _launch(tmp_path_factory, "edit_avg", method="edit", shards=2, replicas=2, **PLAIN_AVERAGE)


@pytest.fixture(scope="module")
def post_local_sgd(tmp_path_factory):
    return _launch(tmp_path_factory, "pls", method="post_local_sgd", shards=2, replicas=2)


@pytest.fixture(scope="module")
def diloco(tmp_path_factory):
    return _launch(tmp_path_factory, "diloco", method="diloco", shards=2, replicas=2)


@pytest.fixture(scope="module")
def post_local_sgd_1x3(tmp_path_factory):
    return _launch(tmp_path_factory, "pls13", method="post_local_sgd", shards=1, replicas=3)


# ---------------------------------------------------------------- helpers
def _unit_numels(cfg) -> list[int]:
    size = SIZES[cfg.data.model]
    return [size.root_params()] + [size.block_params()] * size.n_layers


def _shard_numel(cfg) -> int:
    """Values of one rank's shards: every unit padded to a multiple of S, then split S ways."""
    return sum(math.ceil(n / cfg.shards) for n in _unit_numels(cfg))


def _n_units(cfg) -> int:
    return len(_unit_numels(cfg))


def _states_equal(a: dict, b: dict) -> bool:
    assert set(a) == set(b)
    return all(torch.equal(a[k], b[k]) for k in a)


def _first(events, **match):
    """The earliest event with these fields (the training forward comes before any eval forward)."""
    hits = [e for e in events if all(e[k] == v for k, v in match.items())]
    assert hits, match
    return min(hits, key=lambda e: e["t0"])


# ---------------------------------------------------------------- prefetch
def test_prefetch_is_bit_for_bit_the_same(edit_on, edit_off):
    (_, on), (_, off) = edit_on, edit_off
    assert _states_equal(on.state_dict(), off.state_dict())
    assert on.penalty == off.penalty  # every G, z, weight and clip factor, per sync, unit and replica
    assert len(on.penalty) == (len(SYNC_STEPS) + 1) * 3 * 2  # syncs × units × replicas
    assert on.syncs == off.syncs
    assert on.train_losses(0) == off.train_losses(0) and on.train_losses(1) == off.train_losses(1)
    assert on.val_losses() == off.val_losses()


def test_prefetch_issues_the_next_units_sync_before_this_unit_computes(edit_on, edit_off):
    for (cfg, run), prefetch in ((edit_on, True), (edit_off, False)):
        for rank in range(cfg.world_size):
            evs = [e for e in run.events if e["rank"] == rank]
            for step in SYNC_STEPS:
                for unit in range(_n_units(cfg) - 1):
                    issued = _first(evs, kind="sync_reduce", step=step, unit=unit + 1)["t0"]
                    compute = _first(evs, kind="compute_fwd", step=step, unit=unit)  # unit 0: the embedding
                    waited = _first(evs, kind="wait", step=step, unit=unit + 1, group="sync")
                    assert waited["data"]["on"] == "sync_reduce"
                    if prefetch:  # in flight during unit l's compute, waited for only afterwards
                        assert issued < compute["t0"] <= compute["t1"] <= waited["t0"], (rank, step, unit)
                    else:  # issued in unit l+1's own pre-forward, after unit l computed
                        assert compute["t1"] <= issued, (rank, step, unit)


def test_edit_sync_reduce_is_asynchronous(edit_on):
    cfg, run = edit_on
    reduces = run.events_of("sync_reduce")
    assert len(reduces) == cfg.world_size * _n_units(cfg) * (len(SYNC_STEPS) + 1)
    assert all(e["data"]["overlapped"] for e in reduces)
    assert all(e["group"] == "sync" for e in reduces)


# ---------------------------------------------------------------- replicas agree after every sync
@pytest.mark.parametrize("name", ["edit_on", "edit_off", "edit_average", "post_local_sgd", "diloco",
                                  "post_local_sgd_1x3"])
def test_after_every_sync_replicas_hold_the_anchor_bit_for_bit(name, request):
    cfg, run = request.getfixturevalue(name)
    by_key: dict[tuple[int, int, int], list[dict]] = defaultdict(list)
    for e in run.events_of("checksum"):
        by_key[(e["step"], e["unit"], e["shard"])].append(e)
    steps = sorted({k[0] for k in by_key})
    assert len(steps) == len([s for s in run.syncs if s["kind"] == "sync"]) == len(SYNC_STEPS) + 1
    assert len(by_key) == len(steps) * _n_units(cfg) * cfg.shards
    for key, evs in by_key.items():
        assert sorted(e["replica"] for e in evs) == list(range(cfg.replicas)), key
        thetas = {e["data"]["theta"] for e in evs}
        anchors = {e["data"]["anchor"] for e in evs}
        assert len(thetas) == 1 and thetas == anchors, key  # θ identical across replicas and equal to a
    # the checksums are not trivially constant: the model moved between syncs
    assert len({by_key[(s, 1, 0)][0]["data"]["theta"] for s in steps}) == len(steps)


@pytest.mark.parametrize("name", ["edit_on", "edit_average", "post_local_sgd", "diloco"])
def test_every_replica_reports_the_same_validation_loss(name, request):
    cfg, run = request.getfixturevalue(name)
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    assert [m["step"] for m in evals] == [4, 8, 10]  # 8 is in the middle of local steps 7..8
    assert all(m["val_loss_spread"] == 0.0 for m in evals)


def test_replicas_drift_apart_between_syncs(edit_on):
    """What the equal validation losses hide: θ_r differ between syncs (different norms of a − θ_r)."""
    _, run = edit_on
    for step in SYNC_STEPS:
        for unit in range(3):
            norms = [p["G"] for p in run.penalty if p["step"] == step and p["unit"] == unit]
            assert len(norms) == 2 and norms[0] > 0 and norms[1] > 0 and norms[0] != norms[1]


# ---------------------------------------------------------------- EDiT vs the baselines
def test_plain_average_edit_reproduces_post_local_sgd(edit_average, post_local_sgd):
    """lr 1, momentum 0, no penalty: a − mean(a − θ_r) vs mean(θ_r): equal up to float rounding."""
    (_, e), (_, p) = edit_average, post_local_sgd
    se, sp = e.state_dict(), p.state_dict()
    assert set(se) == set(sp)
    for k in se:
        torch.testing.assert_close(se[k], sp[k], rtol=0, atol=1e-6, msg=k)
    # Not bitwise equal: the two formulas round differently (largest difference seen: 1.5e-8).
    for r in range(2):
        for (s1, l1), (s2, l2) in zip(e.train_losses(r), p.train_losses(r)):
            assert s1 == s2 and l1 == pytest.approx(l2, abs=1e-5)
    assert e.summary["final_val_loss"] == pytest.approx(p.summary["final_val_loss"], abs=1e-5)
    assert e.syncs == p.syncs  # anchor at 3, syncs at 5, 7, 9, 10


def test_post_local_sgd_matches_pytorch_periodic_model_averager(post_local_sgd_1x3, tmp_path):
    cfg, run = post_local_sgd_1x3
    ref = periodic_averaging(cfg, tmp_path / "averager")
    assert ref["averaging_steps"] == [4, 6, 8]  # + the final average after step 9
    for r in range(1, cfg.replicas):  # the averager really averaged: the replicas end identical
        assert _states_equal(ref["states"][0], ref["states"][r])
    ours = run.state_dict()
    assert set(ours) == set(ref["state"])
    for k, v in ref["state"].items():
        torch.testing.assert_close(ours[k], v, rtol=1e-5, atol=1e-6, msg=k)
    for r in range(cfg.replicas):  # every replica's loss at every step: the averages happened at the same steps
        losses = [loss for _, loss in run.train_losses(r)]
        assert losses == pytest.approx(ref["losses"][r], abs=1e-5)


# ---------------------------------------------------------------- the trigger schedule (§8)
def _steps_of(events, kind: str) -> set[int]:
    return {e["step"] for e in events if e["kind"] == kind}


@pytest.mark.parametrize("name", ["edit_on", "edit_off"])
def test_trigger_schedule_from_events(name, request):
    cfg, run = request.getfixturevalue(name)
    assert run.syncs == [{"kind": "anchor", "step": W}] + [{"kind": "sync", "step": s} for s in SYNC_STEPS + [FINAL]]
    assert sorted({p["step"] for p in run.penalty}) == SYNC_STEPS + [FINAL]
    n_units = _n_units(cfg)
    for rank in range(cfg.world_size):
        evs = [e for e in run.events if e["rank"] == rank]
        assert _steps_of(evs, "sync_reduce") == set(SYNC_STEPS + [FINAL])
        assert _steps_of(evs, "grad_all_reduce") == set(range(W))  # cross-replica gradients: warm-up only
        for step in range(W):
            assert sorted(e["unit"] for e in evs if e["kind"] == "grad_all_reduce" and e["step"] == step) == \
                list(range(n_units))
        for step in SYNC_STEPS + [FINAL]:
            assert sorted(e["unit"] for e in evs if e["kind"] == "sync_reduce" and e["step"] == step) == \
                list(range(n_units))
        # no other cross-replica traffic at all
        assert {e["step"] for e in evs if e["group"] == "sync"} == set(range(W)) | set(SYNC_STEPS + [FINAL])


# ---------------------------------------------------------------- memory
def test_method_state_is_two_shards_per_rank(edit_on):
    """Anchor + outer momentum: 2·P/S values per rank (each unit padded to a multiple of S)."""
    cfg, run = edit_on
    P = SIZES[cfg.data.model].num_params()
    values = 2 * _shard_numel(cfg)
    assert values <= 2 * P / cfg.shards + 2 * _n_units(cfg)  # padding adds < 1 value per unit and shard
    for rank in range(cfg.world_size):
        mem = run.summary["memory"][str(rank)]
        assert mem["method_state"] == 4 * values
        assert mem["method_state"] == 2 * mem["params"]


# ---------------------------------------------------------------- DiLoCo
def test_diloco_syncs_whole_model_blocking(diloco):
    cfg, run = diloco
    assert run.syncs == [{"kind": "anchor", "step": W}] + [{"kind": "sync", "step": s} for s in SYNC_STEPS + [FINAL]]
    assert run.penalty == []  # no penalty
    for rank in range(cfg.world_size):
        reduces = run.events_of("sync_reduce", rank)
        # one collective per sync, after the optimizer step of the step before (logged in that step's time)
        assert sorted(e["step"] for e in reduces) == [s - 1 for s in SYNC_STEPS] + [FINAL]
        for e in reduces:
            assert e["unit"] is None  # the whole model at once
            assert e["bytes"] == 4 * _shard_numel(cfg)  # every unit's shard, float32
            assert e["data"]["overlapped"] is False  # blocking
        assert not [e for e in run.events_of("wait", rank) if e["data"]["on"] == "sync_reduce"]
        # the outer step follows its transfer inside the same step's time, and says which sync it is
        outer = run.events_of("outer_step", rank)
        assert [(e["step"], e["data"]["sync_step"]) for e in sorted(outer, key=lambda e: e["t0"])] == \
            list(zip([s - 1 for s in SYNC_STEPS] + [FINAL], SYNC_STEPS + [FINAL]))
        assert _steps_of(run.events_of("grad_all_reduce", rank), "grad_all_reduce") == set(range(W))
