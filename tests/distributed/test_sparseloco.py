"""SparseLoCo's wire format on real gloo processes and on the virtual clock (issue 48 item 4, edit_lab/core/wire.py).

- The exchange: each rank all-gathers its sparse payload and sums the R decoded payloads in member order; every
  rank holds the same sum, the one `wire.sparse_sum` (the virtual clock's) computes, exactly Σ sparsify(x_r).
- DiLoCo, nano, 1 × 2, sparseloco with its error feedback and outer SGD: a real multi-process run and a virtual one
  train the same model bit for bit, with the same collectives of the same bytes; after every sync both replicas
  hold the same anchor and θ (checksums).
- Bytes by the runs' own events at R = 2, 4, 8: an all-gather, (R − 1)·p per sync, R/256 of float32 up to the
  padding of nano's units to whole 4096-value chunks.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from edit_lab import launch
from edit_lab.clock.time_only import shard_numel
from edit_lab.core import wire
from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS
from tests.helpers import small
from tests.oracles.spawn import free_port

SPARSE = dict(wire_format="sparseloco", error_feedback=True, outer_momentum=0.0, outer_lr=1.0)


def contributions(R: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return [wire.sparsify(torch.randn(n, generator=g) * (1 + r)) for r in range(R)]


def _worker(rank: int, R: int, port: int, n: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=R)
    payload = wire.encode_sparse(contributions(R, n)[rank])
    gathered = torch.empty(R * payload.numel(), dtype=torch.uint8)
    dist.all_gather_into_tensor(gathered, payload)
    torch.save(wire.sparse_sum(gathered.view(R, -1), n), f"{out}/{rank}.pt")
    dist.destroy_process_group()


def test_the_all_gather_of_sparse_payloads_on_gloo(tmp_path):
    R, n = 3, 3 * 4096 + 77
    mp.spawn(_worker, args=(R, free_port(), n, str(tmp_path)), nprocs=R)
    got = [torch.load(tmp_path / f"{r}.pt") for r in range(R)]
    xs = contributions(R, n)
    for g in got[1:]:
        assert torch.equal(g, got[0])
    assert torch.equal(got[0], wire.sparse_sum([wire.encode_sparse(x) for x in xs], n))
    assert torch.equal(got[0], xs[0] + xs[1] + xs[2])  # lossless on what sparsify made: the member-order sum


def _checksums(run) -> dict[tuple[int, int], dict[int, tuple[int, int]]]:
    out: dict[tuple[int, int], dict[int, tuple[int, int]]] = defaultdict(dict)
    for e in run.events_of("checksum"):
        out[(e["step"], e["unit"])][e["replica"]] = (e["data"]["anchor"], e["data"]["theta"])
    return out


def test_real_and_virtual_runs_train_the_same_model_and_replicas_agree(tmp_path):
    kw = dict(method="diloco", shards=1, replicas=2, steps=8, eval_every=4, checksums=True, **SPARSE)
    real = launch(small(out=str(tmp_path / "real"), **kw))
    virt = launch(small(out=str(tmp_path / "virtual"), clock="virtual", **kw))
    sr, sv = real.state_dict(), virt.state_dict()
    assert max(float((sr[k] - sv[k]).abs().max()) for k in sr) == 0.0
    assert [(m["step"], m["replica"], m["loss"]) for m in real.metrics if m["kind"] == "train"] == \
        [(m["step"], m["replica"], m["loss"]) for m in virt.metrics if m["kind"] == "train"]
    kinds = lambda run: sorted((e["rank"], e["step"], e["kind"], e["bytes"])  # noqa: E731
                               for e in run.events if e["group"] == "sync")
    assert kinds(real) == kinds(virt)
    for run in (real, virt):
        sums = _checksums(run)
        assert len(sums) >= 3 * 2  # syncs at 5, 8 (W 2, τ 3), every unit
        for key, by_replica in sums.items():
            assert by_replica[0] == by_replica[1], f"{key}: the replicas differ after a sync"


@pytest.mark.parametrize("R", [2, 4, 8])
def test_bytes_by_events_are_an_all_gather_of_sparse_payloads(tmp_path, R):
    got = {}
    for fmt in ("none", "sparseloco"):
        cfg = small(method="diloco", shards=1, replicas=R, steps=24, warmup_steps=2, sync_interval=4,
                    clock="virtual", out=str(tmp_path / f"R{R}-{fmt}"), **(SPARSE if fmt == "sparseloco" else {}))
        run = launch(cfg)
        events = [e for e in run.events
                  if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] in PSEUDO_GRADIENT_KINDS]
        assert len(events) == 6  # syncs after steps 6, 10, 14, 18, 22 and the closing one
        got[fmt] = sum(int(e["bytes"]) for e in events)
    sizes = shard_numel(cfg)
    p = wire.payload_bytes(sum(wire.padded(n, "sparseloco") for n in sizes), "sparseloco")
    assert got["sparseloco"] == 6 * (R - 1) * p  # (R − 1)·p per sync: the ring rule of an all-gather
    assert got["none"] == 6 * (2 * (R - 1) * 4 * sum(sizes) // R)
    # R·p/(2S): R/256 of float32 for whole chunks; nano's units, padded to whole chunks, weigh 1.28× that
    assert got["sparseloco"] / got["none"] == pytest.approx(R * p / (2 * 4 * sum(sizes)), rel=1e-3)
    assert got["sparseloco"] / got["none"] < 0.013 * R / 2
