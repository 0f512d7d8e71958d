"""One rank of a run that survives deaths (`RunConfig.runtime.survive`): its replica's own world, the views' sync groups.

`worker.run_rank` builds one world of S·R ranks; a death there breaks every group. Here each replica is a world of
its S ranks (its shard group, on the store prefix `replica{r}/life{n}`: a replacement is a new world), and the sync
group is the view's (`core.survival`). Nothing spans every replica: the common start is a count on the store, and
the records go to files the launcher merges (`survive_launch.write_records`), since a gather over every rank
would need every rank alive.
"""

from __future__ import annotations

import datetime
import os
import pickle
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from edit_lab.config import RunConfig
from edit_lab.core import view as views
from edit_lab.core.mesh import Mesh
from edit_lab.core.survival import Survival
from edit_lab.records import rundir
from edit_lab.records.events import Clock, coords
from edit_lab.records.rundir import ProgressFile
from edit_lab.train.trainer import Trainer, configure_cpu

#: The files a surviving rank leaves for the launcher: its record, and the leader's agreed model.
RECORD = "survive-rank{rank}.pkl"
MODEL = "survive-model.pt"


def start_together(store: dist.Store, world: int, timeout_s: float) -> float:
    """Every rank of the run's start reaches this before any goes on; returns the common start (Unix seconds)."""
    store.add(views.STARTED, 1)
    deadline = time.monotonic() + timeout_s
    while store.add(views.STARTED, 0) < world:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every rank started within {timeout_s:g} s")
        time.sleep(0.001)
    now = time.time()
    if not store.check([views.START_UNIX]):
        store.set(views.START_UNIX, f"{now}")  # the first rank out: the others are within a millisecond
    return float(store.get(views.START_UNIX))


def run_surviving_rank(cfg: RunConfig, rank: int, world: int, store: dist.Store, life: int) -> None:
    """Train as rank `rank` (life `life` of its replica) and leave its record for the launcher."""
    configure_cpu(cfg.runtime.threads)
    out = Path(cfg.runtime.out)
    replica, shard = coords(rank, cfg.shards)
    timeout = datetime.timedelta(seconds=cfg.runtime.timeout_s)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"replica{replica}/life{life}", store), rank=shard,
                            world_size=cfg.shards, timeout=timeout)
    trainer: Trainer | None = None
    try:
        mesh = Mesh(rank=rank, world_size=world, shards=cfg.shards, replicas=cfg.replicas,
                    shard_group=dist.group.WORLD, sync_group=None)
        clock = Clock()
        trainer = Trainer(cfg, mesh, torch.device("cpu"), clock)
        survival = Survival(cfg, store, mesh, trainer.log, life)
        trainer.attach(survival, life)
        if life == 0:
            survival.adopt(views.read(store, 0), step=0)
            start_together(store, world, cfg.runtime.timeout_s)
            clock.reset()
        else:  # a replacement: on the run's clock, then the donor's state at the sync that admits it
            clock.origin = time.perf_counter() - (time.time() - float(store.get(views.START_UNIX)))
            view, state = survival.join()
            time.sleep(cfg.trouble.fault_join_delay_s)  # a slow replacement on purpose (0: none)
            trainer.take_state(state)
            survival.adopt(view, state["step"], after="join")
            trainer.log.step = state["step"]
            trainer.method.join_first_sync(state["step"])
        progress = ProgressFile(out / rundir.PROGRESS) if shard == 0 else None
        trainer.run(progress)
        state = trainer.engine.full_state_dict(trainer.method.eval_shards())  # a shard-group collective
        if shard == 0 and trainer.is_leader():
            torch.save(state, out / (MODEL + ".part"))
            os.replace(out / (MODEL + ".part"), out / MODEL)
        path = out / RECORD.format(rank=rank)
        with open(path.with_suffix(".part"), "wb") as f:
            pickle.dump(trainer.rank_record(), f)
        os.replace(path.with_suffix(".part"), path)
    except BaseException:
        (out / rundir.error_file(rank)).write_text(traceback.format_exc())
        if trainer is not None:
            trainer.log.write(out / rundir.events_file(rank))
        raise
    dist.destroy_process_group()
