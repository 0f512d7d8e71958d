"""int8 / int4 pseudo-gradients as a quantised reduce-scatter then all-gather (issue 48 item 2), on real gloo
processes: every rank ends with the same decoded sum, the sum `wire.quantised_sum` (the virtual clock's) computes,
within the two roundings' bound of the float32 sum, and the event records the ring rule's bytes."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from edit_lab.core import wire
from tests.oracles.spawn import free_port


def tensors(R: int, n: int) -> list[torch.Tensor]:
    """Hand-built contributions: mixed magnitudes per block, an all-zero stretch, a lone spike, odd length."""
    g = torch.Generator().manual_seed(7)
    out = []
    for r in range(R):
        x = torch.randn(n, generator=g) * (1 + r)
        x[100:400] = 0.0
        x[600] = 50.0 * (r + 1)
        x[700:760] *= 1e-3
        out.append(x)
    return out


def _worker(rank: int, R: int, port: int, n: int, fmt: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=R)
    from edit_lab.core.comm import _QuantisedReduce

    x = tensors(R, n)[rank]
    payload = wire.encode_chunks(x, fmt, R)
    work = _QuantisedReduce(dist, payload, fmt, None)
    work.wait()
    torch.save(wire.decode_chunks(work.reduced, n, fmt), f"{out}/{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("R,fmt", [(2, "int8"), (3, "int4"), (4, "int8"), (4, "int4")])
def test_quantised_sum_on_gloo(tmp_path, R, fmt):
    n = 1000 * R + 37  # no multiple of a block or of R: padding to R whole-block chunks
    mp.spawn(_worker, args=(R, free_port(), n, fmt, str(tmp_path)), nprocs=R)
    got = [torch.load(tmp_path / f"{r}.pt") for r in range(R)]
    xs = tensors(R, n)
    for g in got[1:]:
        assert torch.equal(g, got[0])  # every rank holds the same sum
    assert torch.equal(got[0], wire.quantised_sum([wire.encode_chunks(x, fmt, R) for x in xs], n, fmt))
    ref = torch.stack(xs).sum(0)
    levels = {"int8": 127, "int4": 7}[fmt]
    pad = -(-n // wire.BLOCK) * wire.BLOCK

    def half_scale(v: torch.Tensor) -> torch.Tensor:  # per value: half its block's scale
        vp = torch.zeros(pad)
        vp[:n] = v
        s = vp.view(-1, wire.BLOCK).abs().amax(1) / levels / 2
        return s.repeat_interleave(wire.BLOCK)[:n]

    first = sum(half_scale(x) for x in xs)  # each contribution's rounding
    second = half_scale(ref.abs() + first)  # the owner re-encodes the float32 sum of the decoded chunks
    err = (got[0] - ref).abs()
    assert bool((err <= first + second + 1e-5).all()), float((err - first - second).max())
    assert float(err.max()) > 0  # it is compressed
    assert bool((got[0][100:400] == 0).all())  # all-zero blocks stay 0 (the ranks' zeros share a block)


def test_ring_rule():
    assert wire.ring_bytes("all_reduce", 1000, 2) == 1000
    assert wire.ring_bytes("all_reduce", 1000, 4) == 1500
    assert wire.ring_bytes("all_gather", 4 * 250, 4) == 3 * 250  # (R - 1)·p
    assert wire.ring_bytes("reduce_scatter", 1000, 8) == 875
    assert wire.ring_bytes("all_reduce", 1000, 1) == 0
    n = 1 << 20
    for R in (2, 4, 8, 64):
        assert wire.compression_ratio("bf16", R, n) == pytest.approx(0.5)
        assert wire.compression_ratio("int8", R, n) == pytest.approx((1 + 4 / 256) / 4)
        assert wire.compression_ratio("int4", R, n) == pytest.approx((0.5 + 4 / 256) / 4)
