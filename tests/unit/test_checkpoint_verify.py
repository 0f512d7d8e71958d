"""Checkpoint verification and selection without processes: hand-built checkpoint folders, whole and broken.

`checkpoint.save` needs a process group (tests/distributed/test_checkpoint.py runs it); what decides
whether a folder on disk may be resumed from (`verify`, `resolve`) and which old file a new rank loads
(`source_rank`, `check_compatible`) only reads files and a dict, and is tested here on every way a
checkpoint can be broken.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
import torch

from edit_lab.config import ConfigError, RunConfig
from edit_lab.train.checkpoint import CheckpointError, check_compatible, checkpoint_dir, resolve, source_rank, verify


def write_checkpoint(run_dir: Path, sync_index: int, world_size: int = 2, step: int = 8) -> Path:
    """A whole checkpoint as `save` leaves it: one state per rank and a manifest with sizes and CRC-32s."""
    folder = checkpoint_dir(run_dir, sync_index)
    folder.mkdir(parents=True)
    files = {}
    for r in range(world_size):
        path = folder / f"rank{r}.pt"
        torch.save({"step": step, "shard": torch.arange(4.0) + r}, path)
        data = path.read_bytes()
        files[path.name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    cfg = RunConfig(shards=1, replicas=world_size)
    manifest = {"config": json.loads(cfg.to_json()), "sync": sync_index, "steps": [step] * world_size,
                "step": step, "world_size": world_size, "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_whole_checkpoint_gives_its_manifest(tmp_path):
    folder = write_checkpoint(tmp_path, 3)
    manifest = verify(folder)
    assert manifest["sync"] == 3 and manifest["step"] == 8 and set(manifest["files"]) == {"rank0.pt", "rank1.pt"}


def _no_manifest(folder: Path) -> None:
    (folder / "manifest.json").unlink()


def _bad_json(folder: Path) -> None:
    (folder / "manifest.json").write_text("{\"files\": ")


def _missing_file(folder: Path) -> None:
    (folder / "rank1.pt").unlink()


def _cut_short(folder: Path) -> None:
    data = (folder / "rank0.pt").read_bytes()
    (folder / "rank0.pt").write_bytes(data[: len(data) // 2])


def _flipped_byte(folder: Path) -> None:
    data = bytearray((folder / "rank1.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the CRC can tell
    (folder / "rank1.pt").write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    (_no_manifest, r"has no manifest\.json: its write was cut short"),
    (_bad_json, r"manifest\.json is not valid JSON"),
    (_missing_file, r"rank1\.pt is missing"),
    (_cut_short, r"rank0\.pt has \d+ bytes, the manifest says \d+: it was cut short"),
    (_flipped_byte, r"rank1\.pt does not match its CRC-32 in the manifest"),
])
def test_a_broken_checkpoint_is_refused_naming_the_file_and_why(tmp_path, damage, message):
    folder = write_checkpoint(tmp_path, 1)
    damage(folder)
    with pytest.raises(CheckpointError, match=message):
        verify(folder)


def test_a_run_directory_resolves_to_its_newest_whole_checkpoint_skipping_broken_ones(tmp_path):
    write_checkpoint(tmp_path, 1)
    whole = write_checkpoint(tmp_path, 2)
    _flipped_byte(write_checkpoint(tmp_path, 3))
    (tmp_path / "checkpoints" / "sync-000004.tmp").mkdir()  # a write that never got its rename
    warned: list[str] = []
    assert resolve(tmp_path, warn=warned.append) == whole
    assert len(warned) == 1 and "sync-000003" in warned[0] and "CRC-32" in warned[0]


def test_a_checkpoint_folder_named_directly_is_verified_not_replaced(tmp_path):
    write_checkpoint(tmp_path, 1)
    broken = write_checkpoint(tmp_path, 2)
    _cut_short(broken)
    with pytest.raises(CheckpointError, match="cut short"):
        resolve(broken)


def test_a_run_directory_without_a_whole_checkpoint_is_refused(tmp_path):
    _no_manifest(write_checkpoint(tmp_path, 1))
    with pytest.raises(CheckpointError, match="no whole checkpoint under"):
        resolve(tmp_path, warn=lambda _: None)


def test_new_replicas_load_the_files_of_old_replica_r_mod_r_old():
    # 2 shards; 2 old replicas (ranks 0..3) resumed as 3 replicas (ranks 0..5): new replica 2 reads old replica 0
    assert [source_rank(r, shards=2, old_replicas=2) for r in range(6)] == [0, 1, 2, 3, 0, 1]
    # shrinking: 4 old replicas resumed as 2, each new replica reads its own
    assert [source_rank(r, shards=1, old_replicas=4) for r in range(2)] == [0, 1]


def test_a_resume_may_change_the_replicas_but_not_the_shards_and_must_add_steps(tmp_path):
    manifest = verify(write_checkpoint(tmp_path, 1, world_size=2, step=8))
    check_compatible(manifest, RunConfig(shards=1, replicas=4, steps=20))
    with pytest.raises(ConfigError, match=r"^shards=2 differs from the checkpoint's 1"):
        check_compatible(manifest, RunConfig(shards=2, replicas=1, steps=20))
    with pytest.raises(ConfigError, match=r"^steps=8 is not allowed: the checkpoint is already at step 8"):
        check_compatible(manifest, RunConfig(shards=1, replicas=2, steps=8))
