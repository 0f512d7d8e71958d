"""`reshard_after_forward`: blocks freed after their forward and all-gathered again in the backward (FSDP's
default), against keeping them (FSDP's `reshard_after_forward=False`).

- the tiny model (4 blocks) on 1 replica × 2 shards, once each way: the same bits, the backward all-gathers
  (one per block per step, never the root, prefetched one block ahead) and the peak of gathered memory
  (root + 2 blocks instead of root + 4 blocks);
- EDiT's prefetch stays bit-for-bit neutral with the gathered parameters kept too (test_edit.py checks it
  with the default, resharding), and both settings give the same bits.
"""

from __future__ import annotations

import math

import pytest
import torch

from edit_lab import launch
from edit_lab.core.model import SIZES
from tests.helpers import small

pytestmark = pytest.mark.slow


def _states_equal(a: dict, b: dict) -> bool:
    assert set(a) == set(b)
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """{reshard_after_forward: (cfg, run)} for the tiny model, 2 shards × 1 replica, 3 steps."""
    out = {}
    for reshard in (True, False):
        cfg = small(method="sync", model="tiny", shards=2, replicas=1, steps=3, eval_every=0,
                    reshard_after_forward=reshard, out=str(tmp_path_factory.mktemp(f"tiny-{reshard}") / "run"))
        out[reshard] = (cfg, launch(cfg))
    return out


def _padded_bytes(numel: int, shards: int) -> int:
    return math.ceil(numel / shards) * shards * 4


def test_resharding_changes_no_bit(tiny_runs):
    (_, on), (_, off) = tiny_runs[True], tiny_runs[False]
    assert on.train_losses() == off.train_losses()
    assert on.val_losses() == off.val_losses()
    assert _states_equal(on.state_dict(), off.state_dict())


def test_backward_regathers_every_block_with_prefetch(tiny_runs):
    cfg, run = tiny_runs[True]
    n_blocks = SIZES[cfg.data.model].n_layers
    for rank in range(cfg.world_size):
        evs = [e for e in run.events if e["rank"] == rank]
        for step in range(cfg.steps):
            ag = sorted((e for e in evs if e["kind"] == "all_gather_bwd" and e["step"] == step), key=lambda e: e["t0"])
            assert [e["unit"] for e in ag] == list(range(n_blocks, 0, -1))  # the root is never resharded
            assert all(e["group"] == "shard" and e["data"]["overlapped"] for e in ag)  # issued async, waited for
            bwd = {e["unit"]: e for e in evs if e["kind"] == "compute_bwd" and e["step"] == step
                   and e["data"].get("part") is None}
            head = next(e for e in evs if e["kind"] == "compute_bwd" and e["step"] == step
                        and e["data"].get("part") == "head")
            by_unit = {e["unit"]: e for e in ag}
            assert by_unit[n_blocks]["t0"] <= head["t0"]  # the last block's travels during the head's backward
            for unit in range(n_blocks, 0, -1):
                assert by_unit[unit]["t1"] <= bwd[unit]["t0"] + 1e-9  # there before its backward computes
                if unit > 1:  # prefetch: unit-1's is in flight while unit computes
                    assert by_unit[unit - 1]["t0"] <= bwd[unit]["t0"] + 1e-9, (rank, step, unit)
    cfg_off, off = tiny_runs[False]
    assert off.events_of("all_gather_bwd") == []


def test_resharding_lowers_the_gathered_peak(tiny_runs):
    from edit_lab.viz import memory_figure

    size = SIZES["tiny"]
    root, block = _padded_bytes(size.root_params(), 2), _padded_bytes(size.block_params(), 2)
    for reshard, expected in ((True, root + 2 * block), (False, root + size.n_layers * block)):
        cfg, run = tiny_runs[reshard]
        for rank in range(cfg.world_size):
            assert run.summary["memory"][str(rank)]["gathered_peak"] == expected, reshard
    fig = memory_figure([tiny_runs[True][1], tiny_runs[False][1]], labels=["reshard", "keep"])
    parts = {t.meta["role"]: list(t.y) for t in fig.data}
    assert parts["gathered_peak"] == [root + 2 * block] * 2 + [root + 4 * block] * 2


def test_trace_draws_the_backward_all_gathers(tiny_runs):
    import json

    from edit_lab.viz.colors import kind_color, kind_label

    _, run = tiny_runs[True]
    trace = json.loads((run.path / "trace.json").read_text())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    ag = [e for e in trace["traceEvents"] if e.get("cat") == "all_gather_bwd"]
    assert ag and all(threads[(e["pid"], e["tid"])] == "comm: shard group" for e in ag)
    assert kind_color("all_gather_bwd") != kind_color("all_gather") and "backward" in kind_label("all_gather_bwd")


# ---------------------------------------------------------------- EDiT: prefetch and resharding, same bits
W, TAU, STEPS = 3, 2, 10
COMMON = dict(method="edit", shards=2, replicas=2, warmup_steps=W, sync_interval=TAU, steps=STEPS, checksums=True,
              eval_every=4)


@pytest.fixture(scope="module")
def edit_runs(tmp_path_factory):
    """{(reshard_after_forward, prefetch): run}; test_edit.py covers (True, True) against (True, False)."""
    out = {}
    for reshard, prefetch in ((False, True), (False, False), (True, True)):
        cfg = small(**COMMON, reshard_after_forward=reshard, prefetch=prefetch,
                    out=str(tmp_path_factory.mktemp(f"edit-{reshard}-{prefetch}") / "run"))
        out[(reshard, prefetch)] = launch(cfg)
    return out


def test_edit_prefetch_and_resharding_are_bit_for_bit_the_same(edit_runs):
    base = edit_runs[(True, True)]
    for key in ((False, True), (False, False)):
        other = edit_runs[key]
        assert _states_equal(base.state_dict(), other.state_dict()), key
        assert base.penalty == other.penalty and base.syncs == other.syncs, key
        assert base.train_losses(0) == other.train_losses(0) and base.train_losses(1) == other.train_losses(1), key
        assert base.val_losses() == other.val_losses(), key
    assert not edit_runs[(False, True)].events_of("all_gather_bwd")
    assert edit_runs[(True, True)].events_of("all_gather_bwd")
