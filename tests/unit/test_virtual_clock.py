"""The virtual clock's parts without a training run: its config refusals, its cost model, its fabric."""

from __future__ import annotations

import threading

import pytest
import torch

from edit_lab.clock import virtual
from edit_lab.clock.costs import Costs
from edit_lab.config import ConfigError, RunConfig
from edit_lab.core.mesh import Mesh
from edit_lab.records.events import Clock, EventLog


def run_ranks(fabric: virtual.Fabric, body) -> list[threading.Thread]:
    """Start every rank of `fabric` on `body`, hand out the first token, join them (as `run_virtual` does)."""
    threads = [threading.Thread(target=fabric.rank_main, args=(r, body)) for r in range(fabric.world)]
    for t in threads:
        t.start()
    fabric.start()
    for t in threads:
        t.join(timeout=10)
    return threads


def refusal(**kw) -> str:
    with pytest.raises(ConfigError) as e:
        RunConfig(**kw).validate()
    return str(e.value)


def test_the_clock_field_and_what_the_virtual_clock_refuses():
    assert RunConfig().clock.kind == "wall" and RunConfig(clock="virtual").validate().clock.kind == "virtual"
    assert refusal(clock="lunar") == "clock='lunar' is not allowed: one of wall, virtual"
    RunConfig(clock="virtual", checkpoint_every=2).validate()  # checkpoints are written on the virtual clock too
    assert refusal(clock="virtual", fault_rank=0, fault_kind="kill").startswith("fault_kind='kill' is not allowed")
    assert refusal(clock="virtual", clock_costs="/no/such/run").startswith("clock_costs='/no/such/run' is not allowed")
    RunConfig(checkpoint_every=2, fault_rank=0, fault_kind="kill").validate()  # the wall clock is unchanged


def test_the_wall_clock_charge_is_a_no_op():
    c = Clock()
    assert not c.virtual and c.charge("fwd", 1) is None


def test_cost_model_charges():
    costs = Costs.uniform(units=3, fwd_ms=2, bwd_ms=3, other_ms=1, unit_mb=1, latency_ms=5, bandwidth_gbps=1,
                          outer_step_ms=0.5, clock_ms=0.25)
    m = virtual.CostModel(costs)
    assert m.charge("fwd", 1, None) == pytest.approx(2e-3) and m.charge("fwd", 0, "head") == pytest.approx(1e-3)
    assert m.charge("bwd", 0, "embed") == pytest.approx(1.5e-3) and m.charge("optimizer", None, None) == 1e-3
    assert m.charge("outer_step", None, None) == pytest.approx(1.5e-3) and m.charge("eval_fwd", 1, None) == 0.0
    assert m.collective("sync", "sync_reduce", 10**6) == pytest.approx(5e-3 + 1e-3)
    assert m.collective("shard", "all_gather", 10**6) == 0.0 and m.collective("shard", "clock", 8) == 2.5e-4


def test_default_costs_are_the_example_calibration_scaled_to_another_model():
    nano = virtual.costs_for(RunConfig(model="nano", shards=2, seq_len=32, batch_size=4, clock="virtual"))
    assert nano.source.endswith("edit-straggler") and nano.units == 3
    tiny = virtual.costs_for(RunConfig(model="tiny", shards=2, seq_len=32, batch_size=4, clock="virtual"))
    assert tiny.units == 5 and "scaled" in tiny.source and tiny.compute_s > 4 * nano.compute_s
    with pytest.raises(ConfigError, match="model='tiny' is not allowed: the costs were measured with model='nano'"):
        virtual.costs_for(RunConfig(model="tiny", clock="virtual", clock_costs=str(virtual.example_dir())))


def test_fabric_sums_in_rank_order_and_completes_after_the_last_arrival():
    costs = Costs.uniform(units=1, fwd_ms=1, bwd_ms=1, other_ms=0, unit_mb=1, latency_ms=5, bandwidth_gbps=0)
    cfg = RunConfig(shards=1, replicas=2, clock="virtual", link_latency_ms=10.0)
    fabric = virtual.Fabric(cfg, virtual.CostModel(costs))
    VirtualComm = virtual.virtual_comm_class()
    seen: dict[int, tuple] = {}

    def body(rank: int) -> None:
        mesh = Mesh(rank, 2, 1, 2, None, None)
        log = EventLog(rank, rank, 0, fabric.clocks[rank])
        comm = VirtualComm(mesh, log, fabric)
        fabric.clocks[rank].advance(0.1 * (rank + 1))  # rank 1 arrives last, at 0.2
        t = torch.tensor([float(rank + 1)])
        h = comm.all_reduce(t, group="sync", kind="probe", async_op=True)
        h.wait()
        seen[rank] = (float(t), fabric.clocks[rank].now(), [e["kind"] for e in log.events])

    threads = run_ranks(fabric, body)
    assert fabric.failure is None
    for rank in (0, 1):  # 0.2 + 5 ms backend + 10 ms link
        assert seen[rank][0] == 3.0 and seen[rank][1] == pytest.approx(0.215)
        assert seen[rank][2] == ["probe", "wait"]


def test_a_collective_some_member_never_issues_is_a_deadlock_naming_the_waiting_rank():
    costs = Costs.uniform(units=1, fwd_ms=1, bwd_ms=1, other_ms=0, unit_mb=1, latency_ms=5, bandwidth_gbps=0)
    fabric = virtual.Fabric(RunConfig(shards=1, replicas=2, clock="virtual"), virtual.CostModel(costs))
    VirtualComm = virtual.virtual_comm_class()

    def body(rank: int) -> None:
        if rank == 1:
            return  # never arrives
        comm = VirtualComm(Mesh(0, 2, 1, 2, None, None), EventLog(0, 0, 0, fabric.clocks[0]), fabric)
        comm.all_reduce(torch.zeros(1), group="sync", kind="probe")

    threads = run_ranks(fabric, body)
    assert not any(t.is_alive() for t in threads)
    rank, why = fabric.failure
    assert rank == 0 and why.startswith("deadlock on the virtual clock") and "'probe'" in why


@pytest.mark.parametrize("lanes", [1, 2])
def test_lanes_let_that_many_ranks_compute_at_once(lanes):
    """Each rank holds its lane until it blocks: with two lanes the two ranks meet inside their compute (a
    threading barrier they both reach), with one the first gives up waiting for the other."""
    fabric = virtual.Fabric(RunConfig(shards=1, replicas=2, clock="virtual", virtual_lanes=lanes),
                            virtual.CostModel(Costs.uniform(units=1, fwd_ms=1, bwd_ms=1, other_ms=0, unit_mb=1,
                                                            latency_ms=5, bandwidth_gbps=0)))
    meet = threading.Barrier(2, timeout=0.5)
    met: list[bool] = []

    def body(rank: int) -> None:
        try:
            meet.wait()
            met.append(True)
        except threading.BrokenBarrierError:
            met.append(False)

    threads = run_ranks(fabric, body)
    assert fabric.failure is None and not any(t.is_alive() for t in threads)
    assert met == ([True, True] if lanes == 2 else [False, False])
