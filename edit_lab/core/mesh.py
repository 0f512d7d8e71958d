"""The 2-D process mesh: shard groups (inside a replica) × sync groups (across replicas).

rank = replica · S + shard, shard index fastest, so that under `torchrun --nproc-per-node S` one
machine holds one replica: the shard group stays on the fast local links and only the sync group
crosses the slow network, which is the setting EDiT was designed for.

A run may build other sync groups (`RunConfig.rules.sync_group`, notebook 03's exercise: a reader's
`fn(rank, shards, replicas)`, checked by `rules.sync_groups` before launch): `Mesh.build` then creates
those groups, and `sync_members` holds this rank's. The shard groups never change.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edit_lab.records.events import coords

if TYPE_CHECKING:  # the arithmetic (`coords`) is imported by tables and figures that never start a process
    import torch.distributed as dist


@dataclass
class Mesh:
    """Where this rank sits, and the two groups it talks to."""

    rank: int
    world_size: int
    shards: int  # S
    replicas: int  # R
    shard_group: dist.ProcessGroup | None
    sync_group: dist.ProcessGroup | None
    sync_members: list[int] | None = None  # this rank's sync group when a sync_group_rule built them (sorted)
    view: Any = None  # with survival (core/survival.py): the `core.view.View` whose sync group this is; None: all R

    @property
    def sync_size(self) -> int:
        """Replicas in this rank's sync group now: R, or the live members of the view (survival)."""
        return self.replicas if self.view is None else len(self.view.members)

    @property
    def sync_index(self) -> int:
        """This replica's place in its sync group: its id, or its index among the view's members (survival)."""
        return self.replica if self.view is None else self.view.index(self.replica)

    @property
    def sync_replicas(self) -> list[int]:
        """The replica ids of the sync group, in group order."""
        return list(range(self.replicas)) if self.view is None else list(self.view.members)

    @staticmethod
    def coords(rank: int, shards: int) -> tuple[int, int]:
        """(replica, shard) of `rank` in a mesh of `shards` ranks per replica: rank = replica · S + shard."""
        return coords(rank, shards)

    @property
    def replica(self) -> int:
        return self.coords(self.rank, self.shards)[0]

    @property
    def shard(self) -> int:
        return self.coords(self.rank, self.shards)[1]

    def shard_group_ranks(self) -> list[int]:
        return [self.replica * self.shards + s for s in range(self.shards)]

    def sync_group_ranks(self) -> list[int]:
        if self.sync_members is not None:
            return list(self.sync_members)
        return [r * self.shards + self.shard for r in range(self.replicas)]

    @classmethod
    def build(cls, shards: int, replicas: int, timeout_s: float | None = None,
              sync_groups: list[list[int]] | None = None) -> "Mesh":
        """Build both groups from an initialised default process group (every rank calls this).

        Every rank creates every shard group and every sync group, in the same order (torch requires it),
        and keeps the two it belongs to. `timeout_s` must be passed on explicitly: subgroups do not
        inherit the world's timeout but get torch's default (10 to 30 minutes), so without it a hung
        rank would block its peers for that long. `sync_groups`: every sync group (a partition of the ranks,
        each sorted, in one order on every rank: `rules.sync_groups`) instead of the mesh's own.
        """
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        if world != shards * replicas:
            raise RuntimeError(f"world size {world} != shards×replicas {shards}×{replicas}")
        node = os.environ.get("GROUP_RANK")
        local_world = os.environ.get("LOCAL_WORLD_SIZE")
        if node is not None and local_world is not None and int(local_world) == shards and int(node) != rank // shards:
            raise RuntimeError(f"torchrun node {node} holds rank {rank}, which belongs to replica {rank // shards}")
        timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
        every_shard_group = [[r * shards + s for s in range(shards)] for r in range(replicas)]  # one per replica
        every_sync_group = [[r * shards + s for r in range(replicas)] for s in range(shards)]  # one per shard index
        if sync_groups is not None:  # a sync_group_rule's (validated before launch), created in its given order
            every_sync_group = [sorted(int(m) for m in g) for g in sync_groups]
        shard_group, _ = dist.new_subgroups_by_enumeration(every_shard_group, timeout=timeout)  # this rank's own
        sync_group, _ = dist.new_subgroups_by_enumeration(every_sync_group, timeout=timeout)
        mine = None if sync_groups is None else next(g for g in every_sync_group if rank in g)
        return cls(rank=rank, world_size=world, shards=shards, replicas=replicas, shard_group=shard_group,
                   sync_group=sync_group, sync_members=mine)


def configured_sync_groups(cfg: Any) -> list[list[int]] | None:
    """Every sync group of `cfg`'s mesh from its `Rules.sync_groups`, or None for the library's (marked builtin):
    the mesh's own columns, which `Mesh.build` makes itself."""
    from edit_lab.rules import Rules, is_builtin

    groups = Rules.from_config(cfg).sync_groups
    return None if is_builtin(groups) else groups(cfg.shards, cfg.replicas)


def members_of(rank: int, groups: list[list[int]] | None) -> list[int] | None:
    """The group of `groups` holding `rank` (None when `groups` is None)."""
    return None if groups is None else next(sorted(g) for g in groups if rank in g)
