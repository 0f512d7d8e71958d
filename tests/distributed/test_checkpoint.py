"""Checkpoints: resume is bit-for-bit, a cut-short checkpoint is refused, replicas can change."""

from __future__ import annotations

import statistics

import pytest
import torch

from edit_lab import WorkerError, launch
from edit_lab.config import ConfigError
from edit_lab.train.checkpoint import CheckpointError, resolve
from tests.helpers import small


def _same_state(a, b) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["edit", "diloco", "sync"])
def test_killed_run_resumes_bit_for_bit(method, tmp_path):
    steps = 14
    full = launch(small(method=method, steps=steps, eval_every=7, out=str(tmp_path / "full")))
    # the same run, killed (SIGKILL, no clean-up) at the start of step 11, after checkpoints were taken
    with pytest.raises(WorkerError):
        launch(small(method=method, steps=steps, eval_every=7, checkpoint_every=1, fault_rank=1, fault_step=11,
                     fault_kind="kill", out=str(tmp_path / "killed")))
    resumed = launch(small(method=method, steps=steps, eval_every=7, resume=str(tmp_path / "killed"),
                           out=str(tmp_path / "resumed")))
    assert resumed.syncs[0]["kind"] == "resume" and resumed.syncs[0]["step"] <= 11
    assert _same_state(full.state_dict(), resumed.state_dict())
    assert full.train_losses() == resumed.train_losses()  # every step's loss, the carried ones included
    assert full.val_losses() == resumed.val_losses()


def test_aedit_checkpoint_resumes_and_replicas_agree(tmp_path):
    """A-EDiT syncs by wall clock, so a resumed run is not step-for-step the same run; it must still resume
    every replica from its own step and timer and end with all replicas on one model."""
    kw = dict(method="aedit", steps=16, sync_period=0.05, min_sync_steps=1, checksums=True)
    first = launch(small(checkpoint_every=1, out=str(tmp_path / "first"), **kw))
    ckpts = sorted((first.path / "checkpoints").glob("sync-*"))
    assert len(ckpts) >= 2
    import json

    manifest = json.loads((ckpts[0] / "manifest.json").read_text())
    assert len(manifest["steps"]) == 4 and manifest["step"] == max(manifest["steps"]) < 16
    resumed = launch(small(resume=str(ckpts[0]), out=str(tmp_path / "resumed"), **{**kw, "steps": 20}))
    rec = resumed.syncs[0]
    assert rec["kind"] == "resume"
    per_replica = {r: v["steps"] for r, v in resumed.summary["per_replica"].items()}
    assert all(0 < n <= 20 for n in per_replica.values())
    last = {}
    for e in resumed.events:
        if e["kind"] == "checksum":
            last[(e["rank"], e["unit"])] = e["data"]
    for (rank, unit), d in last.items():
        assert d["theta"] == d["anchor"]
        assert d["anchor"] == last[(rank % 2, unit)]["anchor"]  # same shard index in the other replica


def test_cut_short_checkpoint_is_refused_and_the_previous_one_used(tmp_path):
    run = launch(small(method="edit", steps=11, checkpoint_every=1, out=str(tmp_path / "run")))
    ckpts = sorted((run.path / "checkpoints").glob("sync-*"))
    assert [c.name for c in ckpts] == ["sync-000001", "sync-000002", "sync-000003"]  # syncs at steps 5, 8, 11
    newest = ckpts[-1]
    data = (newest / "rank2.pt").read_bytes()
    (newest / "rank2.pt").write_bytes(data[: len(data) // 2])  # a write cut short
    with pytest.raises(CheckpointError, match="rank2.pt.*cut short"):
        resolve(newest)
    warnings: list[str] = []
    assert resolve(run.path, warn=warnings.append) == ckpts[-2]
    assert len(warnings) == 1 and "rank2.pt" in warnings[0]
    # a folder that never got its manifest (the writer died before the rename) is refused too
    (ckpts[-2] / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="no manifest"):
        resolve(ckpts[-2])
    assert resolve(run.path, warn=warnings.append) == ckpts[0]
    resumed = launch(small(method="edit", steps=14, resume=str(run.path), out=str(tmp_path / "resumed")))
    assert resumed.syncs[0]["step"] == 5


def test_resume_refuses_other_shard_count(tmp_path):
    run = launch(small(method="edit", steps=8, checkpoint_every=1, out=str(tmp_path / "run")))
    with pytest.raises(ConfigError, match="shards"):
        launch(small(method="edit", steps=12, shards=1, resume=str(run.path), out=str(tmp_path / "x")))
    with pytest.raises(ConfigError, match="steps"):
        launch(small(method="edit", steps=8, resume=str(run.path), out=str(tmp_path / "y")))


def test_elastic_two_replicas_resume_as_three(tmp_path):
    kw = dict(method="edit", shards=1, warmup_steps=4, sync_interval=4, batch_size=8)
    before = launch(small(replicas=2, steps=24, checkpoint_every=1, out=str(tmp_path / "two"), **kw))
    after = launch(small(replicas=3, steps=40, resume=str(before.path), out=str(tmp_path / "three"), **kw))
    rec = after.syncs[0]
    assert rec["kind"] == "resume" and rec["from_replicas"] == 2 and rec["to_replicas"] == 3
    start = rec["step"]
    losses = dict(after.train_losses())
    assert sorted(r for r in {m["replica"] for m in after.metrics if m["kind"] == "train" and m["step"] >= start}) \
        == [0, 1, 2]
    # the loss continues: the first resumed steps are no further from the last ones before than usual noise
    prev = [losses[s] for s in range(start - 8, start)]
    noise = max(abs(a - b) for a, b in zip(prev, prev[1:]))
    assert abs(losses[start] - prev[-1]) <= 2 * noise + 0.05
    # and it keeps training: the last loss is lower than at the resume
    assert statistics.mean(losses[s] for s in range(36, 40)) < statistics.mean(prev[-4:])
    # the new replica started from the anchor: after the first sync all three agree (same val loss everywhere)
    assert all(m["val_loss_spread"] == 0.0 for m in after.metrics if m["kind"] == "eval")
