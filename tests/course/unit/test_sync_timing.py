"""sync_timing.py (notebook 04's per-sync timings) on synthetic runs whose every duration is known.

The base run is viz_fake_run.py's: 2 shards × 2 replicas, 3 units, steps 0–3, warm-up 1, syncs at step 3
(training) and step 4 (the closing one, after training). At a sync every rank starts at t = step s:
sync_decisions 4 ms (blocking), then per unit a sync_reduce of 40 ms whose last 8 ms are waited for,
followed by a 1 ms outer step; then each unit's all-gather (10 ms) and forward (5 ms). Nothing computes
while a sync_reduce is in flight, so the base run hides nothing.

The variant moves rank 3's whole sync step 7 ms later (it arrives last, 7 ms after the others), puts
10 ms of compute under its last transfer (hidden), and simulates a 2 ms + 1 MB/s link.
"""

from __future__ import annotations

import json

import pytest

from edit_course.lessons import sync_timing as T
from edit_lab.records.run import Run

from tests.unit import viz_fake_run as F

SKEW, HIDDEN, LATENCY_MS, MBPS = 0.007, 0.010, 2.0, 1.0
SYNC = 3  # the one training sync of the fake run
ms = pytest.approx


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run"))


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    path = F.make_fake_run(tmp_path_factory.mktemp("variant") / "run")
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(link_latency_ms=LATENCY_MS, link_bandwidth_mb_s=MBPS)
    (path / "config.json").write_text(json.dumps(cfg))
    f = path / "events-rank3.jsonl"
    events = [json.loads(line) for line in f.read_text().splitlines()]
    for e in events:
        if e["step"] == SYNC:
            e["t0"] += SKEW
            e["t1"] += SKEW
    last = max((e for e in events if e["step"] == SYNC and e["kind"] == "sync_reduce"), key=lambda e: e["t0"])
    start = last["t0"] + 0.003  # inside the transfer, well before its 8 ms wait
    events.append({**last, "kind": "compute_fwd", "t0": start, "t1": start + HIDDEN, "bytes": 0, "group": None,
                   "data": {}})
    f.write_text("".join(json.dumps(e) + "\n" for e in events))
    return Run(path)


def test_training_syncs_leave_out_the_closing_sync_after_the_last_step(fake):
    assert T.training_syncs(fake) == [SYNC]  # step 4 = steps: the closing sync, after training


def test_unit_order_times_every_unit_from_the_first_issue(fake):
    t = T.unit_order(fake, SYNC, rank=0)
    assert list(t.index) == [0, 1, 2]
    step = F.SR + F.OUTER  # a unit's transfer and its outer step, one after the other: 41 ms
    assert t["sync issued"].tolist() == ms([0.0, 41.0, 82.0])
    assert t["sync done"].tolist() == ms([40.0, 81.0, 122.0])
    first_gather = 3 * step * 1e3  # 123 ms: every unit synced before unit 0 is gathered
    assert t["all-gather starts"].tolist() == ms([first_gather + 15.0 * u for u in range(3)])
    assert t["forward starts"].tolist() == ms([first_gather + 10.0 + 15.0 * u for u in range(3)])
    assert t["sync done before all-gather"].all()
    assert t["bytes sent"].tolist() == [1000, 1000, 1000]
    assert t["exposed (ms)"].tolist() == ms([8.0, 8.0, 8.0])


def test_sync_group_split_sums_each_kinds_own_split_over_the_ranks(fake):
    t = T.sync_group_split(fake)
    assert set(t.index) == {"grad_all_reduce", "sync_decisions", "sync_reduce"}  # no shard-group kind
    sr = t.loc["sync_reduce"]  # step 3 only: 4 ranks × 3 units; the closing sync (step 4) is out
    assert sr["count"] == 12 and sr["bytes"] == 12_000
    assert (sr["total_s"], sr["hidden_s"], sr["exposed_s"], sr["other_s"]) == ms((0.480, 0.0, 0.096, 0.384))
    dec = t.loc["sync_decisions"]
    assert dec["count"] == 4 and (dec["total_s"], dec["exposed_s"]) == ms((0.016, 0.016))
    gar = t.loc["grad_all_reduce"]  # step 0's synchronous gradient all-reduce: 30 ms, 12 waited for
    assert gar["count"] == 12 and (gar["exposed_s"], gar["other_s"]) == ms((0.144, 0.216))


def test_per_sync_ms_counts_each_instant_once(fake, variant):
    # three transfers of 40 ms, 1 ms apart: 120 ms in flight, 3 × 8 ms waited for, nothing computed
    assert T.per_sync_ms(fake) == {"comm": ms(120.0), "hidden": ms(0.0), "exposed": ms(24.0), "other": ms(96.0),
                                   "syncs": 1}
    # only rank 3 hides 10 ms: the median over the four ranks does not move
    assert T.per_sync_ms(variant)["hidden"] == ms(0.0)


def test_link_ms_per_sync_is_latency_plus_bytes_over_bandwidth_per_transfer(fake, variant):
    assert T.link_ms_per_sync(fake) == 0.0  # no simulated link
    per_unit = LATENCY_MS + 1000 / (MBPS * 1e6) * 1e3  # 2 ms + 1 ms
    assert T.link_ms_per_sync(variant) == ms(3 * per_unit)


def test_last_to_arrive_and_the_arrival_skew(fake, variant):
    assert T.last_to_arrive(fake) == {SYNC: (0, 0.0)}  # all at once: the lowest rank
    (rank, skew), = T.last_to_arrive(variant).values()
    assert rank == 3 and skew == ms(SKEW)


def test_per_sync_group_ms_reads_the_rank_that_arrived_last(fake, variant):
    # rank 0: the decisions exchange (4 ms, blocking) then the transfers: 124 ms in flight, 28 exposed
    assert T.per_sync_group_ms(fake) == {"link ms": 0.0, "hidden ms": ms(0.0), "exposed ms": ms(28.0),
                                         "other ms": ms(96.0), "arrival skew ms": ms(0.0), "syncs": 1}
    # rank 3, 7 ms late: its own 10 ms of compute under the last transfer are hidden, taken from `other`
    assert T.per_sync_group_ms(variant) == {"link ms": ms(9.0), "hidden ms": ms(10.0), "exposed ms": ms(28.0),
                                            "other ms": ms(86.0), "arrival skew ms": ms(7.0), "syncs": 1}


def test_exposed_parts_by_what_the_rank_waited_on(fake, variant):
    want = {"decisions exchange": ms(4.0), "unit 0": ms(8.0), "unit 1": ms(8.0), "units 2…": ms(8.0),
            "latencies per sync": 4}  # the decisions exchange and one transfer per unit
    assert T.exposed_parts(fake) == want
    assert T.exposed_parts(variant) == want  # hiding part of a transfer's flight does not shorten its wait


def test_a_run_without_a_training_sync_gives_zeros(tmp_path):
    path = F.make_fake_run(tmp_path / "run")
    for rank in range(F.S * F.R):
        f = path / f"events-rank{rank}.jsonl"
        kept = [line for line in f.read_text().splitlines() if json.loads(line)["step"] != SYNC]
        f.write_text("".join(line + "\n" for line in kept))
    run = Run(path)
    assert T.training_syncs(run) == [] and T.last_to_arrive(run) == {}
    assert T.per_sync_ms(run)["syncs"] == 0 and T.per_sync_group_ms(run)["syncs"] == 0
    assert T.exposed_parts(run)["latencies per sync"] == 0


def test_wait_parts_split_the_exposed_time_into_a_late_peer_the_link_and_the_rest(fake, variant):
    """The variant's rank 3 issues every unit 7 ms after its peer, rank 1; each unit's 8 ms waited for on the
    2 ms + 1 MB/s link (1000 B: 3 ms). Rank 1: 7 ms peer later, 1 ms of link left, 0 rest per unit; every other
    rank: no late peer, 3 ms link, 5 ms rest per unit. Medians over the four ranks of the one training sync."""
    t = T.unit_waits(variant, SYNC, rank=1)
    assert list(t.index) == [0, 1, 2]
    assert t["exposed ms"].tolist() == ms([8.0] * 3) and t["peer later ms"].tolist() == ms([7.0] * 3)
    assert t["link ms"].tolist() == ms([1.0] * 3) and t["rest ms"].tolist() == ms([0.0] * 3, abs=1e-9)
    assert T.unit_waits(variant, SYNC, rank=3)["peer later ms"].tolist() == ms([0.0] * 3)
    assert T.wait_parts(variant) == {"link ms": ms(9.0), "peer later ms": ms(0.0), "rest ms": ms(15.0)}
    assert "unit 2 waited 8.0 ms: its peer issued the transfer 7.0 ms after this rank" in \
        T.exposure_reason(variant, SYNC, rank=1)
    # no simulated link: the whole wait beyond a late peer is the rest
    assert T.wait_parts(fake) == {"link ms": ms(0.0), "peer later ms": ms(0.0), "rest ms": ms(24.0)}


def test_local_step_ms_is_the_median_step_without_a_sync_and_leaves_out_step_0(tmp_path):
    """The machine's pace during a run: steps with a sync-group collective (step 3 here) and step 0 are out."""
    path = F.make_fake_run(tmp_path / "run")
    dt = {0: 9.0, 1: 0.2, 2: 0.4, SYNC: 5.0}  # seconds: the start-up and the sync step would dominate a mean
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for m in rows:
        if m["kind"] == "train":
            m["dt"] = dt[m["step"]]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    assert T.local_step_ms(Run(path)) == ms(300.0)  # steps 1 and 2, both replicas: median of 0.2, 0.2, 0.4, 0.4 s
