"""overlap.py on hand-built events: the one definition of hidden, exposed and other.

Times are in milliseconds divided by 1000, chosen so every expected value can be checked by hand.
"""

from __future__ import annotations

import random

import pytest

from edit_lab.records.overlap import Overlap, intersect, length, merge, subtract

MS = 1e-3


def ev(kind, t0, t1, rank=0, unit=None, group=None, **data):
    return {"rank": rank, "replica": 0, "shard": rank, "step": 0, "unit": unit, "kind": kind,
            "t0": t0 * MS, "t1": t1 * MS, "bytes": 0, "group": group, "data": data}


def flat(intervals):
    return [x for iv in intervals for x in iv]


def test_interval_helpers():
    assert merge([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert subtract([(0, 2), (4, 6)], [(1, 5)]) == [(0, 1), (5, 6)]
    assert intersect([(0, 2), (4, 6)], [(1, 5)]) == [(1, 2), (4, 5)]
    assert length([(0, 2), (4, 6)]) == 4


def test_two_async_collectives_waited_in_order_without_compute_hide_nothing():
    # A and B issued at 0 and 1; the rank computes nothing, waits on A (2..10), then on B (10..12)
    a = ev("sync_reduce", 0, 10, unit=1, group="sync", overlapped=True, exposed=8 * MS)
    b = ev("sync_reduce", 1, 12, unit=2, group="sync", overlapped=True, exposed=2 * MS)
    waits = [ev("wait", 2, 10, unit=1, group="sync", on="sync_reduce"),
             ev("wait", 10, 12, unit=2, group="sync", on="sync_reduce")]
    ov = Overlap([a, b, *waits])
    sa, sb = ov.split(a), ov.split(b)
    assert sa.hidden == 0 and sb.hidden == 0
    assert sa.exposed == pytest.approx(8 * MS) and sa.other == pytest.approx(2 * MS)  # 0..2: bookkeeping
    # B was in flight 1..10 while the rank waited on A (or did nothing): other, never hidden
    assert sb.exposed == pytest.approx(2 * MS) and sb.other == pytest.approx(9 * MS)
    assert flat(sb.other_at) == pytest.approx([1 * MS, 10 * MS])
    tot = ov.rank_totals([a, b])[0]
    assert tot["comm_s"] == pytest.approx(12 * MS) and tot["hidden_s"] == 0
    assert tot["exposed_s"] == pytest.approx(10 * MS) and tot["other_s"] == pytest.approx(2 * MS)


def test_a_prefetched_transfer_is_hidden_exactly_by_its_overlap_with_the_forward():
    # unit 2's sync issued at 0 (prefetch), unit 1's forward computes 1..6, the rank waits on it 6..9
    sync = ev("sync_reduce", 0, 9, unit=2, group="sync", overlapped=True, exposed=3 * MS)
    fwd = ev("compute_fwd", 1, 6, unit=1)
    wait = ev("wait", 6, 9.5, unit=2, group="sync", on="sync_reduce")  # woke 0.5 ms after completion
    s = Overlap([sync, fwd, wait]).split(sync)
    assert s.hidden == pytest.approx(5 * MS)
    assert s.exposed == pytest.approx(3 * MS)  # the wake-up lag after completion is not the collective's
    assert s.other == pytest.approx(1 * MS)  # 0..1 before the forward began
    assert flat(s.exposed_at) == pytest.approx([6 * MS, 9 * MS])


def test_a_collective_done_before_its_wait_exposes_nothing():
    # unit 1's sync issued at 0 completes at 4 while the forward computes 0..5; the rank waits on the
    # (finished) handle at 5..7.5 because it was descheduled: that wait is its own, not the collective's
    sync = ev("sync_reduce", 0, 4, unit=1, group="sync", overlapped=True, exposed=2.5 * MS)
    fwd = ev("compute_fwd", 0, 5, unit=0)
    wait = ev("wait", 5, 7.5, unit=1, group="sync", on="sync_reduce")
    s = Overlap([sync, fwd, wait]).split(sync)
    assert (s.hidden, s.exposed, s.other) == pytest.approx((4 * MS, 0, 0))
    assert s.exposed_at == ()


def test_a_blocking_collective_is_exposed_end_to_end_and_hides_nothing_else():
    ag = ev("all_gather", 2, 5, unit=1, group="shard", overlapped=False, exposed=3.1 * MS)
    rs = ev("reduce_scatter", 0, 6, unit=2, group="shard", overlapped=True, exposed=1 * MS)
    bwd = ev("compute_bwd", 0, 2, unit=2)
    wait = ev("wait", 5, 6, unit=2, group="shard", on="reduce_scatter")
    ov = Overlap([ag, rs, bwd, wait])
    s_ag, s_rs = ov.split(ag), ov.split(rs)
    assert (s_ag.hidden, s_ag.exposed, s_ag.other) == pytest.approx((0, 3 * MS, 0))
    assert (s_rs.hidden, s_rs.exposed, s_rs.other) == pytest.approx((2 * MS, 1 * MS, 3 * MS))


def test_a_collective_recorded_without_waits_falls_back_on_its_exposed_number():
    legacy = ev("all_reduce", 0, 3, group="shard")  # no data: blocking, as older runs meant
    old_async = ev("reduce_scatter", 10, 20, unit=1, group="shard", overlapped=True, exposed=4 * MS)
    work = ev("compute_bwd", 10, 14, unit=1)
    ov = Overlap([legacy, old_async, work])
    assert ov.split(legacy).exposed == pytest.approx(3 * MS)
    s = ov.split(old_async)
    assert flat(s.exposed_at) == pytest.approx([16 * MS, 20 * MS])
    assert (s.hidden, s.exposed, s.other) == pytest.approx((4 * MS, 4 * MS, 2 * MS))


def test_compute_during_a_wait_is_not_work():
    # an outer step span that contains a blocking clip all-reduce: that moment hides nothing
    outer = ev("outer_step", 0, 10, unit=1)
    clip = ev("sync_clip", 4, 6, unit=1, group="shard", overlapped=False, exposed=2 * MS)
    other = ev("sync_reduce", 0, 10, unit=2, group="sync", overlapped=True, exposed=0.0)
    ov = Overlap([outer, clip, other])
    assert ov.split(other).hidden == pytest.approx(8 * MS)
    assert ov.work_s(0) == pytest.approx(8 * MS)


def test_the_ranks_are_kept_apart():
    comm = ev("sync_reduce", 0, 4, rank=0, unit=1, group="sync", overlapped=True, exposed=0.0)
    theirs = ev("compute_fwd", 0, 4, rank=1, unit=1)
    assert Overlap([comm, theirs]).split(comm).hidden == 0


def _random_rank(rng: random.Random, rank: int) -> list[dict]:
    """A rank's main thread (compute, blocking collectives, waits in sequence) and async collectives."""
    out, t, pending = [], 0.0, []
    for i in range(60):
        choice = rng.random()
        d = rng.uniform(0.1, 3.0)
        if choice < 0.45:
            out.append(ev(rng.choice(["compute_fwd", "compute_bwd", "optimizer", "straggle"]), t, t + d, rank))
        elif choice < 0.6:
            out.append(ev("all_gather", t, t + d, rank, unit=i, group="shard", overlapped=False, exposed=d * MS))
        elif choice < 0.85:
            pending.append((i, t, t + rng.uniform(0.5, 12.0)))  # issued now, completes later
            out.append(ev("checksum", t, t, rank))
        elif pending:
            unit, t0, done = pending.pop(rng.randrange(len(pending)))
            end = max(done, t)
            out.append(ev("wait", t, end + rng.uniform(0, 0.2), rank, unit=unit, group="sync", on="sync_reduce"))
            out.append(ev("sync_reduce", t0, end, rank, unit=unit, group="sync", overlapped=True,
                          exposed=(end - t) * MS))
            t = end
        t += d if choice < 0.6 else rng.uniform(0, 0.3)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_invariants_on_random_ranks(seed):
    rng = random.Random(seed)
    events = _random_rank(rng, 0) + _random_rank(rng, 1)
    ov = Overlap(events)
    comm = [e for e in events if e.get("group") is not None and e["kind"] != "wait"]
    assert comm
    for e in comm:
        s = ov.split(e)
        assert min(s.hidden, s.exposed, s.other) >= -1e-12
        assert s.hidden + s.exposed + s.other == pytest.approx(e["t1"] - e["t0"], abs=1e-12)
    for rank, tot in ov.rank_totals(comm).items():
        assert tot["hidden_s"] + tot["exposed_s"] + tot["other_s"] == pytest.approx(tot["comm_s"], abs=1e-12)
        compute = length(merge((e["t0"], e["t1"]) for e in events if e["rank"] == rank
                               and e["kind"] in ("compute_fwd", "compute_bwd", "optimizer", "straggle")))
        assert tot["hidden_s"] <= compute + 1e-12  # a rank's hidden time never exceeds its compute
        span = max(e["t1"] for e in events if e["rank"] == rank) - min(e["t0"] for e in events if e["rank"] == rank)
        assert tot["comm_s"] <= span + 1e-12  # each instant counted once


def test_under_work_counts_collectives_in_flight_under_one_kind_of_work_once():
    # sync's overlapped backward: unit 2's backward computes 4..10, unit 1's 10..13 (blocked 11..12 on unit 2's
    # reduce-scatter, which is not work); unit 2's gradient all-reduce leaves at 10, unit 1's at 13; the rank
    # waits on them 13..16 and 16..20, then steps its optimizer 20..22
    events = [ev("compute_fwd", 0, 4, unit=1), ev("compute_bwd", 4, 10, unit=2), ev("compute_bwd", 10, 13, unit=1),
              ev("reduce_scatter", 4, 12, unit=2, group="shard", overlapped=True),
              ev("wait", 11, 12, unit=2, group="shard", on="reduce_scatter"),
              ev("grad_all_reduce", 10, 16, unit=2, group="sync", overlapped=True),
              ev("grad_all_reduce", 13, 20, unit=1, group="sync", overlapped=True),
              ev("wait", 13, 16, unit=2, group="sync", on="grad_all_reduce"),
              ev("wait", 16, 20, unit=1, group="sync", on="grad_all_reduce"),
              ev("optimizer", 20, 22), ev("compute_bwd", 0, 5, rank=1)]
    ov = Overlap(events)
    ar = [e for e in events if e["kind"] == "grad_all_reduce"]
    under = ov.under_work(ar, {"compute_bwd"})
    assert list(under) == [0]  # rank 1 issued none of them
    u = under[0]
    assert u["comm_s"] == pytest.approx(10 * MS)  # 10..20, each instant once
    assert u["work_s"] == pytest.approx(8 * MS)  # 4..13 less the wait 11..12
    assert u["under_s"] == pytest.approx(2 * MS)  # 10..11 and 12..13
    # with every kind of work it is the rank's hidden time; the optimizer and the forward lie outside 10..20
    assert ov.under_work(ar, {"compute_fwd", "compute_bwd", "optimizer"})[0]["under_s"] == pytest.approx(
        ov.rank_totals(ar)[0]["hidden_s"])
    assert ov.under_work(ar, {"optimizer"})[0] == pytest.approx({"comm_s": 10 * MS, "work_s": 2 * MS, "under_s": 0})
    with pytest.raises(ValueError, match="wait"):
        ov.under_work(ar, {"compute_bwd", "wait"})
