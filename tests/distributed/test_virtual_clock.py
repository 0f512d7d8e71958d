"""The virtual clock (edit_lab/clock/virtual.py): the lab's own training, every rank a thread of this process, on a
clock a cost model advances. Deterministic by construction, the same numerics as a real run where timing
cannot change them, and the timeline the cost model says (hand-computed cases)."""

from __future__ import annotations

import json
import threading

import pytest

from edit_lab import launch
from edit_lab.clock.costs import Costs
from edit_lab.runtime.launch import WorkerError
from tests.helpers import small


def virtual(tmp_path, name: str, **kw):
    kw.setdefault("out", str(tmp_path / name))
    return launch(small(clock="virtual", **kw))


def uniform_costs(tmp_path, **kw) -> str:
    """A costs JSON: nano's 3 units at 2 ms forward, 3 ms backward, 1 ms for the rest of a step, 5 ms a sync
    collective, bytes free."""
    args = dict(units=3, fwd_ms=2.0, bwd_ms=3.0, other_ms=1.0, unit_mb=0.01, latency_ms=5.0, bandwidth_gbps=0.0)
    args.update(kw)
    path = tmp_path / "costs.json"
    path.write_text(Costs.uniform(**args, source="typed in by the test").to_json())
    return str(path)


def _events(run):
    return [(e["rank"], e["step"], e["unit"], e["kind"], e["t0"], e["t1"], e["bytes"]) for e in run.events]


def _losses(run):
    return [(m["step"], m["replica"], m["loss"]) for m in run.metrics if m["kind"] == "train"]


def _same_run(a, b) -> None:
    assert _events(a) == _events(b) and len(a.events) > 100
    assert a.metrics == b.metrics
    assert [p.read_text() for p in sorted(a.path.glob("penalty.jsonl"))] == \
        [p.read_text() for p in sorted(b.path.glob("penalty.jsonl"))]
    assert [p.read_text() for p in sorted(a.path.glob("syncs.jsonl"))] == \
        [p.read_text() for p in sorted(b.path.glob("syncs.jsonl"))]


def test_the_same_config_gives_the_same_timeline_and_numbers_at_any_number_of_lanes(tmp_path):
    """One rank computing at a time, two, or all four at once: ranks meet only in collectives, whose results
    and virtual times do not depend on which thread arrived last in real time."""
    kw = dict(method="aedit", shards=2, replicas=2, time_budget=1.5, eval_every_s=0.5, sync_period=0.3,
              straggler_replicas=(1,), straggler_factor=2.0, random_pause_prob=0.2, random_pause_ms=20.0)
    one = virtual(tmp_path, "one", virtual_lanes=1, **kw)
    assert one.summary["clock"] == "virtual" and "edit-straggler" in one.summary["clock_costs"]
    for lanes in (1, 2, 4):
        _same_run(one, virtual(tmp_path, f"lanes{lanes}", virtual_lanes=lanes, **kw))


@pytest.mark.parametrize("method", ["edit", "co2", "sync"])
def test_lanes_change_nothing_with_async_collectives_in_flight(tmp_path, method):
    """EDiT's prefetched layer-wise sync and CO2's one-round-late all-reduce travel while the rank computes: the
    last member to arrive may write into a buffer of a rank that is running, as a real backend does."""
    kw = dict(method=method, shards=2, replicas=2, steps=12, sync_interval=3, warmup_steps=2, eval_every=6,
              straggler_replicas=(0,), straggler_factor=1.5, random_pause_prob=0.3, random_pause_ms=5.0)
    _same_run(virtual(tmp_path, "one", virtual_lanes=1, **kw), virtual(tmp_path, "two", virtual_lanes=2, **kw))


def test_lanes_are_one_per_core_unless_set():
    from edit_lab.clock.virtual import MAX_AUTO_LANES, lanes_for
    from edit_lab.config import RunConfig

    assert lanes_for(RunConfig(shards=2, replicas=2, virtual_lanes=3)) == 3
    assert lanes_for(RunConfig(shards=1, replicas=2, virtual_lanes=3)) == 2  # never more than the ranks
    auto = lanes_for(RunConfig(shards=8, replicas=8))
    assert 1 <= auto <= MAX_AUTO_LANES


def _max_param_difference(a, b) -> float:
    """The largest |θ_a − θ_b| over every tensor of the two runs' final models (model.pt)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


@pytest.mark.parametrize("mesh", ["1x2", "2x2"])
@pytest.mark.parametrize("method,prefetch", [("sync", True), ("diloco", True), ("edit", True), ("edit", False),
                                             ("co2", True)])
def test_numerics_equal_a_real_run(tmp_path, method, prefetch, mesh):
    """A step-count run: nothing timing decides, so the virtual run trains the real multi-process run's model.
    Bit for bit, not only within the issue's 1e-6: the fabric adds in gloo's order (clock/ring_order.py; with two
    members any order gives the same bits), MKL pinned, so the kernels agree too."""
    _same_numerics(tmp_path, method, prefetch, mesh)


@pytest.mark.parametrize("mesh", ["1x3", "1x4"])
@pytest.mark.parametrize("method", ["sync", "diloco", "edit"])
def test_numerics_equal_a_real_run_with_three_or_four_replicas(tmp_path, method, mesh):
    """Sync groups of three and four: three-term sums depend on their order, and the fabric adds in gloo's ring
    order (test_ring_order.py checks the order against gloo itself): still bit for bit."""
    _same_numerics(tmp_path, method, True, mesh)


def _same_numerics(tmp_path, method: str, prefetch: bool, mesh: str) -> None:
    shards, replicas = map(int, mesh.split("x"))
    kw = dict(method=method, prefetch=prefetch, shards=shards, replicas=replicas, steps=8, eval_every=4)
    real = launch(small(out=str(tmp_path / "real"), **kw))
    virt = virtual(tmp_path, "virtual", **kw)
    assert _max_param_difference(virt, real) == 0.0
    assert _losses(virt) == _losses(real)
    assert virt.summary["final_val_loss"] == real.summary["final_val_loss"]
    kinds = lambda run: sorted((e["rank"], e["step"], e["kind"], -1 if e["unit"] is None else e["unit"],  # noqa: E731
                                e["bytes"]) for e in run.events if e["group"] is not None)
    assert kinds(virt) == kinds(real)  # the same collectives, of the same sizes, at the same steps
    assert real.summary["clock"] == "wall" and real.summary["clock_costs"] is None


def test_aedit_replaying_a_real_runs_schedule_trains_its_model(tmp_path):
    """A-EDiT's timers decide when the replicas meet, and that decides every sync's contents: given the real
    run's schedule (RunConfig.aedit.schedule: each replica meets at the steps it met there and stops where it
    stopped), the virtual run trains the real run's model bit for bit. (On its own timers it follows the cost
    model instead: test_time_budgets_and_aedit_timers_follow_the_cost_model. How many rounds the real run has
    depends on this machine's speed, so nothing here counts them.)"""
    kw = dict(method="aedit", shards=1, replicas=2, time_budget=1.5, sync_period=0.25, straggler_replicas=(1,),
              straggler_factor=2.0)
    real = launch(small(out=str(tmp_path / "real"), **kw))
    rounds = real.summary["method_info"]["local_steps_per_round"]
    assert rounds  # at least the closing sync
    replay = virtual(tmp_path, "replay", aedit_schedule=str(real.path), **kw)
    assert replay.summary["method_info"]["local_steps_per_round"] == rounds
    assert [m["at_steps"] for m in replay.summary["method_info"]["meetings"]] == \
        [m["at_steps"] for m in real.summary["method_info"]["meetings"]]
    assert _max_param_difference(replay, real) == 0.0
    assert replay.summary["final_val_loss"] == real.summary["final_val_loss"]
    assert replay.summary["clock"] == "virtual"


def test_sync_run_on_uniform_costs_is_hand_computed(tmp_path):
    """1 shard x 2 replicas, sync: a step is 3 units x 2 ms forward, then the backward (the head's 1.5 ms,
    3 ms a block, the embedding's 1.5 ms), 1 ms of the rest. Each unit's gradient all-reduce (5 ms) leaves at
    the end of its backward (`Method.grad_ready`): block 2's at 6 + 1.5 + 3 = 10.5 ms, and the three queue on
    the sync group from there, block 1's (13.5 ms) and the root's (15 ms) behind it, until 25.5 ms."""
    costs = uniform_costs(tmp_path)
    run = virtual(tmp_path, "sync", method="sync", shards=1, replicas=2, steps=6, clock_costs=costs)
    step = (6 + 1.5 + 3) / 1e3 + 3 * 5e-3 + 1e-3
    assert run.summary["wall_s"] == pytest.approx(6 * step, abs=1e-12)
    assert run.summary["clock_costs"] == "typed in by the test"
    ends = [m["t"] for m in run.metrics if m["kind"] == "train" and m["replica"] == 0]
    assert ends == pytest.approx([step * (i + 1) for i in range(6)], abs=1e-12)
    # with the config's simulated link on top, exactly as comm.LinkModel: each of the three transfers
    # starts at max(its backend completion, the link's previous transfer's end) and takes 10 ms: block 2's
    # backend completes at 15.5 ms, so the link carries the three from 15.5 to 45.5 ms
    linked = virtual(tmp_path, "link", method="sync", shards=1, replicas=2, steps=2, clock_costs=costs,
                     link_latency_ms=10.0)
    assert linked.summary["wall_s"] == pytest.approx(2 * (15.5e-3 + 30e-3 + 1e-3), abs=1e-12)


def test_time_budgets_and_aedit_timers_follow_the_cost_model(tmp_path):
    """Hand-computed on the uniform costs (a plain step: 3 x (2 + 3) + 1 = 16 ms of compute)."""
    costs = uniform_costs(tmp_path)
    # sync for 0.1 s: each step starts with the stop check (5 ms), then 26.5 ms (its three gradient all-reduces
    # queue from the end of block 2's backward, 10.5 ms in: test_sync_run_on_uniform_costs_is_hand_computed):
    # 31.5 ms a step, so the fifth step start, at 126 ms, is past the budget; the run ends after that stop check
    sync = virtual(tmp_path, "sync", method="sync", shards=1, replicas=2, time_budget=0.1, clock_costs=costs)
    assert [v["steps"] for v in sync.summary["per_replica"].values()] == [4, 4]
    assert sync.summary["wall_s"] == pytest.approx(0.126, abs=1e-12)
    assert sync.summary["train_end_s"] == pytest.approx(0.131, abs=1e-12)
    # A-EDiT, replica 1 a 2x straggler (+16 ms a step): two warm-up steps at the straggler's pace (5 + 26.5 +
    # 1 + 16 = 47.5 ms), the third step's stop check (5 ms), then the timer exchange (5 ms) starts the
    # timers from the clocks sent, 0.100; the fast replica's 16 ms local steps reach T_sync = 0.1 s at the
    # start of its step 8, at 0.105 + 6 x 0.016 = 0.201 (the slow one at its step 5, the same moment)
    aedit = virtual(tmp_path, "aedit", method="aedit", shards=1, replicas=2, time_budget=0.5, sync_period=0.1,
                    straggler_replicas=(1,), straggler_factor=2.0, clock_costs=costs)
    mine = [e for e in aedit.events if e["rank"] == 0 and e["kind"] in ("timer_start", "step_count")]
    assert (mine[0]["kind"], mine[0]["step"]) == ("timer_start", 2)
    assert (mine[0]["t0"], mine[0]["t1"]) == pytest.approx((0.100, 0.105), abs=1e-12)
    assert (mine[1]["kind"], mine[1]["step"]) == ("step_count", 8)
    assert mine[1]["t0"] == pytest.approx(0.201, abs=1e-12)
    slow = [e for e in aedit.events if e["rank"] == 1 and e["kind"] == "step_count"]
    assert slow[0]["step"] == 5 and slow[0]["t0"] == pytest.approx(0.201, abs=1e-12)


def test_a_straggler_pauses_k_minus_one_times_its_own_compute(tmp_path):
    run = virtual(tmp_path, "slow", method="edit", shards=2, replicas=2, steps=6, straggler_replicas=(1,),
                  straggler_factor=3.0, clock_costs=uniform_costs(tmp_path))
    pauses = [e for e in run.events if e["kind"] == "straggle"]
    assert pauses and {e["replica"] for e in pauses} == {1}
    for e in pauses:  # own compute: 3 x (2 + 3) ms + 1 ms
        assert e["t1"] - e["t0"] == pytest.approx(2 * 16e-3, abs=1e-12)


def test_aedit_lets_the_fast_replica_train_while_sync_waits(tmp_path):
    """Under a 2x straggler, in the same 1.5 virtual seconds, A-EDiT's fast replica trains about twice the
    steps of the slow one; sync's replicas train the same number."""
    kw = dict(shards=1, replicas=2, time_budget=1.5, straggler_replicas=(1,), straggler_factor=2.0,
              clock_costs=uniform_costs(tmp_path))
    aedit = virtual(tmp_path, "aedit", method="aedit", sync_period=0.2, **kw)
    sync = virtual(tmp_path, "sync", method="sync", **kw)
    fast, slow = (aedit.summary["per_replica"][r]["steps"] for r in ("0", "1"))
    assert 1.7 <= fast / slow <= 2.1, (fast, slow)
    assert sync.summary["per_replica"]["0"]["steps"] == sync.summary["per_replica"]["1"]["steps"]
    assert fast > sync.summary["steps"]
    assert 1.5 <= aedit.summary["train_end_s"] <= 1.5 + 0.2  # the budget, one slow step, the final sync


def test_a_failing_rank_is_named_and_leaves_no_thread(tmp_path):
    with pytest.raises(WorkerError) as err:
        virtual(tmp_path, "fail", method="edit", shards=2, replicas=2, steps=6, fault_rank=3, fault_step=4)
    assert err.value.rank == 3 and "Traceback" in err.value.traceback
    assert (tmp_path / "fail" / "error-rank3.txt").exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("edit_lab-virtual")]


def test_eight_replicas_in_one_process(tmp_path):
    run = virtual(tmp_path, "eight", method="edit", shards=1, replicas=8, steps=6, straggler_replicas=(7,),
                  straggler_factor=2.0)
    assert run.summary["replicas"] == 8 and len(run.summary["per_replica"]) == 8
    assert json.loads((run.path / "summary.json").read_text())["clock"] == "virtual"
    waits = [run.summary["per_replica"][str(r)]["sync_wait_s"] for r in range(8)]
    assert min(waits[:7]) > waits[7]  # the fast replicas wait for the straggler at every sync


def test_calibrating_a_virtual_run_gives_back_its_costs(tmp_path):
    """The loop closes: sim.calibrate measures, from a virtual run's events, the very costs it ran on."""
    from edit_lab.clock.calibrate import calibrate

    run = virtual(tmp_path, "edit", method="edit", shards=2, replicas=2, steps=12, straggler_replicas=(1,),
                  straggler_factor=2.0, clock_costs=uniform_costs(tmp_path))
    k = calibrate(run)
    assert k.fwd_s == pytest.approx((2e-3,) * 3, abs=1e-9) and k.bwd_s == pytest.approx((3e-3,) * 3, abs=1e-9)
    assert k.other_s == pytest.approx(1e-3, abs=1e-9) and k.sync_latency_s == pytest.approx(5e-3, abs=1e-9)


@pytest.mark.parametrize("method", ["edit", "sync"])
def test_a_failed_virtual_run_resumes_bit_for_bit(tmp_path, method):
    """Checkpoints on the virtual clock (the fabric's barrier stands for torch.distributed's): a run that fails at
    step 11 after its checkpoints resumes from the newest one into exactly the uninterrupted run's model and
    losses, and its clock restarts at 0 as a resumed real run's does."""
    import torch

    kw = dict(method=method, shards=2, replicas=2, steps=14, eval_every=7)
    full = virtual(tmp_path, "full", **kw)
    with pytest.raises(WorkerError):
        virtual(tmp_path, "failed", checkpoint_every=1, fault_rank=1, fault_step=11, fault_kind="raise", **kw)
    ckpts = sorted((tmp_path / "failed" / "checkpoints").glob("sync-*"))
    assert ckpts and all((c / "manifest.json").exists() for c in ckpts), ckpts
    resumed = virtual(tmp_path, "resumed", resume=str(tmp_path / "failed"), **kw)
    assert resumed.syncs[0]["kind"] == "resume" and resumed.syncs[0]["step"] <= 11
    a, b = full.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert full.train_losses() == resumed.train_losses() and full.val_losses() == resumed.val_losses()
    assert resumed.summary["clock"] == "virtual"
    first = min(e["t0"] for e in resumed.events if e["kind"] == "compute_fwd")
    assert 0.0 <= first < 0.05  # the resumed session's clock starts again at 0


def test_the_same_virtual_run_beside_a_busy_core_writes_the_same_events(tmp_path):
    """Deterministic under load: the run's clock is the cost model's, never this machine's, so a core kept busy
    by another process changes how long the run takes here and nothing it records."""
    import subprocess
    import sys

    kw = dict(method="edit", shards=1, replicas=2, steps=12, straggler_replicas=(1,), straggler_factor=2.0,
              random_pause_prob=0.3, random_pause_ms=10.0, eval_every=6)
    quiet = virtual(tmp_path, "quiet", **kw)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = virtual(tmp_path, "busy", **kw)
    finally:
        spin.kill()
        spin.wait()
    files = sorted(p.name for p in quiet.path.glob("events-rank*.jsonl"))
    assert files == ["events-rank0.jsonl", "events-rank1.jsonl"]
    for name in files:
        assert (quiet.path / name).read_bytes() == (busy.path / name).read_bytes(), name
    assert quiet.metrics == busy.metrics
