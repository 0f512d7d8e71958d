"""Streaming DiLoCo on the engine (issue 38, item 1) and compressed pseudo-gradients in real runs (item 2).

- One fragment, no overlap, α = 0 is DiLoCo: the same losses and validation losses, bit for bit.
- On real processes (1 × 2, the wall clock), P = 3 fragments with τ = 1 step of overlap in int4: every
  fragment's all-reduce leaves τ steps before its outer step, in turn, and weighs what `wire` says; the
  replicas end on the same model.
- Checkpoints at landings resume to the same run (virtual clock, so the comparison is exact).
- The bytes a run records are the wire format's, and the link charges them: a slow link's transfer takes
  bytes / bandwidth + latency of the compressed size.
- A fragment that leaves at the last step lands in `finalize` and gets that one outer step only (review B4: the
  closing sync stepped it again, and at α = 0 momentum alone moved its anchor); the simulator agrees.
"""

from __future__ import annotations

import pytest

from edit_lab import launch
from edit_lab.core import wire
from edit_lab.protocol import fragment_units
from tests.helpers import small

VIRTUAL = dict(clock="virtual", shards=1, replicas=2)


def unit_numels(run) -> list[int]:
    from edit_lab.core.sharding import UnitLayout
    from edit_lab.core.model import build_model

    return [UnitLayout.of(u, run.config.shards).shard_size for u in build_model(run.config.data.model, 0).units()]


def test_one_fragment_without_overlap_is_diloco(tmp_path):
    kw = dict(steps=14, sync_interval=3, eval_every=7, **VIRTUAL)
    d = launch(small(method="diloco", out=str(tmp_path / "d"), **kw))
    s = launch(small(method="streaming_diloco", fragments=1, fragment_sync_delay=0, fragment_update_alpha=0.0,
                     out=str(tmp_path / "s"), **kw))
    assert s.train_losses(0) == d.train_losses(0) and s.train_losses(1) == d.train_losses(1)
    assert s.val_losses() == d.val_losses()
    assert [x["step"] for x in s.syncs if x["kind"] == "sync"] == [x["step"] for x in d.syncs if x["kind"] == "sync"]


def test_real_processes_fragments_overlap_in_int4(tmp_path):
    run = launch(small(method="streaming_diloco", shards=1, replicas=2, steps=14, warmup_steps=2, sync_interval=6,
                       fragments=3, fragment_sync_delay=1, wire_format="int4", error_feedback=True, checksums=True,
                       out=str(tmp_path / "run")))
    sent = [x for x in run.syncs if x["kind"] == "fragment_sent"]
    landed = [x for x in run.syncs if x["kind"] == "sync" and not x.get("final")]
    # W = 2, H/P = 2: fragment 0 lands at 4, 1 at 6, 2 at 8, 0 at 10, …; each left one step before
    assert [(x["step"], x["fragment"]) for x in sent] == [(3, 0), (5, 1), (7, 2), (9, 0), (11, 1), (13, 2)]
    assert [(x["step"], x["fragment"], x["sent_at"]) for x in landed] == [(4, 0, 3), (6, 1, 5), (8, 2, 7),
                                                                          (10, 0, 9), (12, 1, 11), (14, 2, 13)]
    final = [x for x in run.syncs if x.get("final")]
    # the closing sync: the fragments that trained since their landing (2 has just landed)
    assert [(x["step"], x["fragments"]) for x in final] == [(14, [0, 1])]
    sizes = unit_numels(run)
    frags = fragment_units(len(sizes), 3)
    expect = [wire.collective_bytes(sum(wire.padded(sizes[u], "int4") for u in frags[f]), "int4", 2)
              for f, _ in [(x["fragment"], 0) for x in sent]]
    got = [e["bytes"] for e in run.events_of("sync_reduce", rank=0)]
    assert got[:len(expect)] == expect
    closing = [u for f in (0, 1) for u in frags[f]]
    assert got[-1] == wire.collective_bytes(sum(wire.padded(sizes[u], "int4") for u in closing), "int4", 2)
    last = {}
    for e in run.events_of("checksum"):
        last[(e["rank"], e["unit"])] = e["data"]
    for u in range(len(sizes)):  # both replicas end on the anchors, the same ones
        assert last[(0, u)]["theta"] == last[(0, u)]["anchor"] == last[(1, u)]["anchor"] == last[(1, u)]["theta"]


def test_a_checkpoint_at_a_landing_resumes_the_same_run(tmp_path):
    kw = dict(method="streaming_diloco", steps=16, warmup_steps=2, sync_interval=4, fragments=2,
              fragment_sync_delay=1, fragment_update_alpha=0.5, wire_format="int8", error_feedback=True, **VIRTUAL)
    whole = launch(small(checkpoint_every=1, out=str(tmp_path / "whole"), **kw))
    ckpts = sorted((whole.path / "checkpoints").glob("sync-*"))
    resumed = launch(small(resume=str(ckpts[2]), out=str(tmp_path / "resumed"), **kw))
    start = resumed.syncs[0]["step"]
    assert start == 8  # landings at 4, 6, 8: the third checkpoint
    for r in range(2):
        ours = [x for x in resumed.train_losses(r) if x[0] >= start]  # the checkpoint's carried rows aside
        assert ours == [x for x in whole.train_losses(r) if x[0] >= start]
    assert resumed.val_losses()[-1] == whole.val_losses()[-1]


@pytest.mark.parametrize("fmt", wire.WIRE_FORMATS)
def test_the_link_charges_the_compressed_size(tmp_path, fmt):
    own = dict(error_feedback=True, outer_momentum=0.0) if fmt == "sparseloco" else {}  # its own outer step
    run = launch(small(method="diloco", steps=5, warmup_steps=1, sync_interval=4, link_latency_ms=2.0,
                       link_bandwidth_mb_s=1.0, wire_format=fmt, out=str(tmp_path / fmt), **own, **VIRTUAL))
    (sync,) = [e for e in run.events_of("sync_reduce", rank=0)]
    sizes = unit_numels(run)
    assert sync["bytes"] == wire.collective_bytes(sum(wire.padded(n, fmt) for n in sizes), fmt, 2)
    # a lone transfer on an idle link: latency + bytes / bandwidth, plus the collective's own cost
    assert sync["t1"] - sync["t0"] >= 2e-3 + sync["bytes"] / 1e6
    assert sync["t1"] - sync["t0"] < 2e-3 + sync["bytes"] / 1e6 + 0.01


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_a_fragment_landing_at_the_end_gets_one_outer_step(tmp_path, alpha):
    """W 0, H 6, P 3, τ 1, 11 steps: fragments land at 2, 4, …, 10; fragment 2 leaves at step 11 (the end) and
    lands in `finalize`. That landing is its outer step: the closing sync takes fragments 0 and 1 only, every
    unit gets one outer step at step 11, and the anchor fragment 2 ends on is the one its landing made (at
    α = 0 a second step of Δ' = 0 would still move it by momentum). Both replicas end on the same anchors, also
    at α > 0, where the landing's mix leaves each replica's θ of fragment 2 different. The time-only twin
    (`StreamingDiLoCoProgram`) issues the same collectives at the same times."""
    from tests.distributed.sim_crosscheck import compare

    run = launch(small(method="streaming_diloco", steps=11, warmup_steps=0, sync_interval=6, fragments=3,
                       fragment_sync_delay=1, fragment_update_alpha=alpha, checksums=True,
                       out=str(tmp_path / "run"), **VIRTUAL))
    frags = fragment_units(len(unit_numels(run)), 3)
    syncs = [x for x in run.syncs if x["kind"] == "sync"]
    assert [(x["step"], x.get("fragment")) for x in syncs if not x.get("final")] == \
        [(2, 0), (4, 1), (6, 2), (8, 0), (10, 1), (11, 2)]
    at_end = [x for x in syncs if x["step"] == 11]
    per_fragment = [sum(x.get("fragment") == f or f in x.get("fragments", ()) for x in at_end) for f in range(3)]
    assert per_fragment == [1, 1, 1], "one outer step per fragment at the end"
    assert [x["fragments"] for x in at_end if x.get("final")] == [[0, 1]]
    for rank in range(2):
        stepped = [e["unit"] for e in run.events_of("outer_step", rank=rank) if e["step"] == 11]
        assert sorted(stepped) == sorted(u for f in frags for u in f), "each unit stepped once at the end"
    # the anchor of fragment 2 right after its landing (checksums logged in `land`) is the one the run ends on
    checks = [e for e in run.events_of("checksum") if e["step"] == 11]
    for u in frags[2]:
        landed = [e["data"]["anchor"] for e in checks if e["unit"] == u]
        assert len(set(landed)) == 1, f"unit {u}: its anchor moved after the landing"
    last = {}
    for e in run.events_of("checksum"):
        last[(e["rank"], e["unit"])] = e["data"]
    for u in range(len(unit_numels(run))):  # both replicas end on the anchors, the same ones
        assert last[(0, u)]["theta"] == last[(0, u)]["anchor"] == last[(1, u)]["anchor"] == last[(1, u)]["theta"]
    check = compare(run)
    assert check.same_collectives, check.first_difference()
    assert check.timeline_error <= 1e-9, check.worst_time()
