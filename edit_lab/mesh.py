"""The 2-D process mesh: shard groups (inside a replica) × sync groups (across replicas).

rank = replica · S + shard, shard index fastest, so that under `torchrun --nproc-per-node S` one
machine holds one replica: the shard group stays on the fast local links and only the sync group
crosses the slow network, which is the setting EDiT was designed for.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

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
    device_mesh: object | None = None

    @property
    def replica(self) -> int:
        return self.rank // self.shards

    @property
    def shard(self) -> int:
        return self.rank % self.shards

    def shard_group_ranks(self) -> list[int]:
        return [self.replica * self.shards + s for s in range(self.shards)]

    def sync_group_ranks(self) -> list[int]:
        return [r * self.shards + self.shard for r in range(self.replicas)]

    @classmethod
    def build(cls, shards: int, replicas: int, device_type: str = "cpu", timeout_s: float | None = None) -> "Mesh":
        """Build both groups from an initialised default process group (every rank calls this).

        `timeout_s` must be passed on explicitly: subgroups do not inherit the world's timeout but get
        torch's 30-minute default, so without it a hung rank would block its peers for half an hour.
        """
        from torch.distributed.device_mesh import init_device_mesh

        rank, world = dist.get_rank(), dist.get_world_size()
        if world != shards * replicas:
            raise RuntimeError(f"world size {world} != shards×replicas {shards}×{replicas}")
        node = os.environ.get("GROUP_RANK")
        local_world = os.environ.get("LOCAL_WORLD_SIZE")
        if node is not None and local_world is not None and int(local_world) == shards and int(node) != rank // shards:
            raise RuntimeError(f"torchrun node {node} holds rank {rank}, which belongs to replica {rank // shards}")
        override = None
        if timeout_s is not None:
            override = {name: _group_options(dist.get_backend(), timeout_s) for name in ("replica", "shard")}
        dm = init_device_mesh(device_type, (replicas, shards), mesh_dim_names=("replica", "shard"),
                              backend_override=override)
        return cls(
            rank=rank,
            world_size=world,
            shards=shards,
            replicas=replicas,
            shard_group=dm.get_group("shard"),
            sync_group=dm.get_group("replica"),
            device_mesh=dm,
        )


def _group_options(backend: str, timeout_s: float) -> tuple[str, object]:
    """(backend, options) for init_device_mesh's backend_override, carrying only the collective timeout."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return backend, opts
    from torch._C._distributed_c10d import Backend as C10dBackend  # the type init_device_mesh documents

    return backend, C10dBackend.Options(backend, timeout)
