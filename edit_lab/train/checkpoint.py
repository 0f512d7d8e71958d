"""Checkpoints (edit-method.md D6): taken right after a sync, written atomically, resumable elastically.

Right after a sync every replica holds θ = a, so a checkpoint needs no per-replica parameters beyond
the anchor: it holds, per rank, the parameter shard (= the anchor shard), the outer optimizer's
momentum, the inner optimizer's state, the anomaly detectors, the step counters, the A-EDiT timer
and the metrics so far. Data positions are the step number: the data streams are stateless.

Layout: `<run>/checkpoints/sync-000004/rank{r}.pt` plus `manifest.json`, numbered by syncs rather
than steps because under A-EDiT the replicas meet at different step counts (each rank's file holds
its own next step; the manifest lists them). Every rank writes into `sync-000004.tmp/`; after a
barrier rank 0 writes the manifest (each file's size and CRC-32) and renames the folder. A folder without a manifest, or whose files do not match it, was cut short and
is refused; resuming from a run directory then falls back to the newest checkpoint that is whole.

Elastic replicas: resuming with a different number of replicas (same shard count) gives new replica
r the files of old replica r mod R_old. Anchor and momentum are the same in every old replica, so
nothing of the agreed model is lost; the data streams re-partition by themselves (they are keyed by
replica index).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edit_lab.config import ConfigError, RunConfig
from edit_lab.core.mesh import Mesh


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message says which file and why."""


def checkpoint_dir(run_dir: Path, sync_index: int) -> Path:
    return run_dir / "checkpoints" / f"sync-{sync_index:06d}"


def _crc_file(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def save(run_dir: Path, sync_index: int, rank: int, world_size: int, state: dict[str, Any],
         meta: dict[str, Any], barrier: Callable[[], None] = dist.barrier) -> Path:
    """Every rank calls this at the same sync; returns the final folder (complete only after rank 0 renames).

    `barrier`: the run's (`Comm.barrier`: torch.distributed's, or the virtual clock's fabric)."""
    final = checkpoint_dir(run_dir, sync_index)
    tmp = final.with_name(final.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    part = tmp / f"rank{rank}.pt.part"
    torch.save(state, part)
    os.replace(part, tmp / f"rank{rank}.pt")
    (tmp / f"rank{rank}.step").write_text(str(state["step"]))
    barrier()
    if rank == 0:
        files = {f"rank{r}.pt": {"bytes": (tmp / f"rank{r}.pt").stat().st_size, "crc32": _crc_file(tmp / f"rank{r}.pt")}
                 for r in range(world_size)}
        steps = [int((tmp / f"rank{r}.step").read_text()) for r in range(world_size)]
        manifest = {**meta, "sync": sync_index, "steps": steps, "step": max(steps), "world_size": world_size,
                    "files": files}
        (tmp / "manifest.json.part").write_text(json.dumps(manifest, indent=2))
        os.replace(tmp / "manifest.json.part", tmp / "manifest.json")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    barrier()
    return final


def verify(ckpt: Path) -> dict[str, Any]:
    """The manifest of a whole checkpoint; CheckpointError naming the problem otherwise."""
    man_path = ckpt / "manifest.json"
    if not man_path.exists():
        raise CheckpointError(f"checkpoint {ckpt} has no manifest.json: its write was cut short")
    try:
        manifest = json.loads(man_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint {ckpt}: manifest.json is not valid JSON ({e})") from None
    for name, info in manifest["files"].items():
        p = ckpt / name
        if not p.exists():
            raise CheckpointError(f"checkpoint {ckpt}: {name} is missing")
        if p.stat().st_size != info["bytes"]:
            raise CheckpointError(f"checkpoint {ckpt}: {name} has {p.stat().st_size} bytes, the manifest says "
                                  f"{info['bytes']}: it was cut short")
        if _crc_file(p) != info["crc32"]:
            raise CheckpointError(f"checkpoint {ckpt}: {name} does not match its CRC-32 in the manifest")
    return manifest


def resolve(path: str | Path, warn=print) -> Path:
    """A checkpoint folder, or the newest whole checkpoint of a run directory (skipping broken ones)."""
    path = Path(path)
    if (path / "manifest.json").exists() or path.name.startswith("sync-"):
        verify(path)
        return path
    root = path / "checkpoints"
    candidates = sorted((p for p in root.glob("sync-*") if p.is_dir() and not p.name.endswith(".tmp")),
                        reverse=True) if root.exists() else []
    for c in candidates:
        try:
            verify(c)
            return c
        except CheckpointError as e:
            warn(f"edit_lab: skipping a broken checkpoint: {e}")
    raise CheckpointError(f"no whole checkpoint under {path} (looked for {root}/sync-*/manifest.json)")


def check_compatible(manifest: dict[str, Any], cfg) -> None:
    """Refuse a resume that cannot work, before any process starts."""
    old = RunConfig.from_dict(manifest["config"])  # in sections, or flat as older checkpoints wrote it
    for name in ("shards", "model", "method", "inner_optimizer"):
        if old.get(name) != cfg.get(name):
            raise ConfigError(f"{name}={cfg.get(name)!r} differs from the checkpoint's {old.get(name)!r}: "
                              f"resuming can change the number of replicas, not {name}")
    if manifest["step"] >= cfg.steps:
        raise ConfigError(f"steps={cfg.steps} is not allowed: the checkpoint is already at step {manifest['step']}; "
                          f"ask for more steps than that")


def source_rank(rank: int, shards: int, old_replicas: int) -> int:
    """The old rank whose file new `rank` loads: same shard, replica r mod R_old."""
    replica, shard = Mesh.coords(rank, shards)
    return (replica % old_replicas) * shards + shard


def load(ckpt: Path, rank: int, shards: int) -> tuple[dict[str, Any], dict[str, Any]]:
    manifest = json.loads((ckpt / "manifest.json").read_text())
    old_replicas = manifest["config"]["replicas"]
    src = source_rank(rank, shards, old_replicas)
    state = torch.load(ckpt / f"rank{src}.pt", weights_only=False)
    return state, manifest


def prepare_resume(cfg, warn=print):
    """Resolve `cfg.runtime.resume` to one whole checkpoint folder and check it fits `cfg` (no-op without resume)."""
    if not cfg.runtime.resume:
        return cfg
    ckpt = resolve(cfg.runtime.resume, warn)
    check_compatible(verify(ckpt), cfg)
    return cfg.replace(resume=str(ckpt))
