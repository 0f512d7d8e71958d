"""The simulated sync-group link: latency + bytes/bandwidth per transfer, one transfer at a time.

What `comm.LinkModel` guarantees, and what is asserted here from the events of a real 2×2 `sync`
run (each step all-reduces every unit's gradient shard over the sync group, all issued at once):

- a transfer starts on the link when its real collective has completed and the link is free, and
  ends (event `t1`) exactly latency + bytes/bandwidth later, so measured from its start on the link,
  i.e. max(its issue time, the end of the previous transfer), it lasts *at least* that long;
- it is never charged twice: a transfer queued behind another (every one but the first of a step) lasts
  exactly the model's time, so the median transfer does; the first of a step adds its real collective,
  which includes waiting for the other replica to arrive and whatever the OS scheduling of a loaded machine
  adds, so it is only bounded by a second transfer time (what charging it twice would add), on the member of
  the sync group that arrived last (the smaller duration: both share the same deadline). A tighter bound, the
  run's slowest real shard-group collective plus 3 ms, failed once in a fresh clone's `make test` (5 ms over):
  it measured the machine, not the model;
- transfers queue: within a step the deadlines follow each other by exactly one transfer time;
- `wait()` really blocks until the deadline (the optimizer step starts after the last one), so each
  step lasts at least the sum of its transfer times;
- the shard group is not delayed at all: a delayed collective could never complete in less than the
  latency, and every shard-group kind has collectives that did (by far: on an idle machine they take
  a millisecond or two).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

pytestmark = pytest.mark.slow

LATENCY_S = 0.080
BANDWIDTH_BPS = 1.0e6  # 1 MB/s: ~25 ms for a 25 KB gradient shard of the nano model, so link time dominates


def _transfer_s(nbytes: int) -> float:
    return LATENCY_S + nbytes / BANDWIDTH_BPS


@pytest.fixture(scope="module")
def link_run(tmp_path_factory):
    from edit_lab import launch
    from tests.helpers import small

    cfg = small(method="sync", steps=4, link_latency_ms=LATENCY_S * 1e3, link_bandwidth_mb_s=BANDWIDTH_BPS / 1e6,
                out=str(tmp_path_factory.mktemp("link") / "run"))
    return launch(cfg)


def _sync_transfers(run) -> dict[int, list[dict]]:
    """Per rank, its sync-group all-reduces in issue order, each with `link_s`: t1 − its start on the link."""
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for e in run.events_of("grad_all_reduce"):
        by_rank[e["rank"]].append(e)
    for evs in by_rank.values():
        evs.sort(key=lambda e: (e["t0"], e["step"], e["unit"]))
        free_at = float("-inf")
        for e in evs:
            e["link_s"] = e["t1"] - max(e["t0"], free_at)
            free_at = e["t1"]
    return by_rank


def test_every_transfer_lasts_at_least_latency_plus_bytes_over_bandwidth(link_run):
    cfg = link_run.config
    by_rank = _sync_transfers(link_run)
    n_units = len({e["unit"] for evs in by_rank.values() for e in evs})
    assert sorted(by_rank) == list(range(cfg.world_size))
    for rank, evs in by_rank.items():
        assert len(evs) == cfg.steps * n_units
        for e in evs:
            assert e["group"] == "sync" and e["bytes"] > 20_000
            assert e["link_s"] >= _transfer_s(e["bytes"]) - 1e-6, e


def _shard_group_collectives(run) -> list[dict]:
    return run.events_of("all_gather") + run.events_of("reduce_scatter")


def test_transfers_are_never_charged_twice(link_run):
    by_key: dict[tuple[int, int, int], list[float]] = defaultdict(list)  # (shard, step, unit) = one sync group's transfer
    for evs in _sync_transfers(link_run).values():
        for e in evs:
            by_key[(e["shard"], e["step"], e["unit"])].append((e["link_s"], e["bytes"]))
    excess = []  # link time beyond the model, relative to it
    for key, members in by_key.items():
        assert len(members) == link_run.config.replicas
        link_s, nbytes = min(members)  # the member that arrived last did not wait for its peer
        excess.append(link_s / _transfer_s(nbytes) - 1.0)
        assert link_s < 2 * _transfer_s(nbytes), (key, members)
    excess.sort()
    # the queued transfers (two of every step's three) add nothing to the model
    assert excess[len(excess) // 2] == pytest.approx(0.0, abs=1e-6), excess


def test_transfers_queue_one_at_a_time(link_run):
    for evs in _sync_transfers(link_run).values():
        steps: dict[int, list[dict]] = defaultdict(list)
        for e in evs:
            steps[e["step"]].append(e)
        for step_evs in steps.values():
            for prev, e in zip(step_evs, step_evs[1:]):
                assert e["t0"] < prev["t1"]  # issued while the previous one was still on the link...
                assert e["t1"] - prev["t1"] == pytest.approx(_transfer_s(e["bytes"]), abs=1e-4)  # ...so it queued


def test_wait_really_blocks_until_the_deadline(link_run):
    cfg = link_run.config
    by_rank = _sync_transfers(link_run)
    dt = {(m["replica"], m["step"]): m["dt"] for m in link_run.metrics if m["kind"] == "train"}
    for rank, evs in by_rank.items():
        for step in range(cfg.steps):
            step_evs = [e for e in evs if e["step"] == step]
            opt = [e for e in link_run.events_of("optimizer", rank) if e["step"] == step]
            assert len(opt) == 1
            assert opt[0]["t0"] >= max(e["t1"] for e in step_evs) - 1e-6
            replica = step_evs[0]["replica"]  # every rank of a replica moves the same bytes (equal shards)
            assert dt[(replica, step)] >= sum(_transfer_s(e["bytes"]) for e in step_evs) - 1e-6


def test_shard_group_is_not_delayed(link_run):
    shard_evs = _shard_group_collectives(link_run)
    assert shard_evs and all(e["group"] == "shard" for e in shard_evs)
    smallest_sync = min(e["t1"] - e["t0"] for e in link_run.events_of("grad_all_reduce"))
    assert smallest_sync >= LATENCY_S  # every sync-group collective waited for the link ...
    for kind in ("all_gather", "reduce_scatter"):  # ... and no shard-group one did: each kind has some
        fastest = min(e["t1"] - e["t0"] for e in shard_evs if e["kind"] == kind)  # that took less than a
        assert fastest < LATENCY_S / 4, (kind, fastest)  # quarter of the latency (a millisecond or less, idle)
