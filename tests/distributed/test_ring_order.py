"""The virtual clock adds an all-reduce's terms in gloo's order (edit_lab/clock/ring_order.py): checked here against
gloo itself, bit for bit, on 2, 3 and 4 processes and buffers of 1 to 65,537 float32 values, chunk boundaries
included; and rank order, which the fabric used before, shown to differ from gloo from three members on."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from edit_lab.clock.ring_order import chunk_bounds, ring_sum
from tests.oracles.spawn import free_port

SIZES = [1, 2, 3, 5, 6, 7, 9, 13, 100, 1001, 4097, 65537]


def _inputs(n: int, world: int) -> list[torch.Tensor]:
    """Values over seven orders of magnitude and both signs: any other order of addition shows in the bits."""
    g = torch.Generator().manual_seed(n * 10 + world)
    return [torch.randn(n, generator=g) * 10.0 ** torch.randint(-3, 4, (n,), generator=g) for _ in range(world)]


def _rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    got = {}
    for n in SIZES:
        t = _inputs(n, world)[rank].clone()
        dist.all_reduce(t)
        got[n] = t
    if rank == 0:
        torch.save(got, out)
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_fabric_adds_as_gloo_does(tmp_path, world):
    out = str(tmp_path / "gloo.pt")
    mp.spawn(_rank, args=(world, free_port(), out), nprocs=world, join=True)
    gloo = torch.load(out)
    for n in SIZES:
        ins = _inputs(n, world)
        assert torch.equal(ring_sum(ins), gloo[n]), (world, n)
        if world >= 3 and n >= 100:  # the rank order the fabric used before: not gloo's bits
            rank_order = ins[0].clone()
            for x in ins[1:]:
                rank_order += x
            assert not torch.equal(rank_order, gloo[n]), (world, n)


def test_the_chunks_cover_the_buffer_in_even_lengths():
    assert chunk_bounds(7, 3) == [(0, 4), (4, 7), (7, 7)]  # ceil(7/3) = 3, rounded up to 4
    assert chunk_bounds(100, 3) == [(0, 34), (34, 68), (68, 100)]
    assert chunk_bounds(1, 4) == [(0, 1), (1, 1), (1, 1), (1, 1)]
    for n in range(1, 50):
        for r in range(2, 6):
            b = chunk_bounds(n, r)
            assert b[0][0] == 0 and b[-1][1] == n and all(x[1] == y[0] for x, y in zip(b, b[1:]))
