"""The statistics the lab defines once, on hand-built events and ranks with answers checked by hand:
what counts as a collective, sync-group bytes, communication totals, the time a replica stood blocked on
the sync group, rank → (replica, shard), and the methods' capabilities."""

from __future__ import annotations

import sys

import pytest

from edit_lab.config import METHODS, ConfigError, RunConfig
from edit_lab.core.mesh import Mesh
from edit_lab.records.events import is_comm, is_cross_replica, sync_group_bytes
from edit_lab.records.overlap import Overlap


def ev(rank, kind, t0, t1, group=None, nbytes=0, unit=None, **data):
    return {"rank": rank, "replica": rank // 2, "shard": rank % 2, "step": 0, "unit": unit, "kind": kind,
            "t0": t0, "t1": t1, "bytes": nbytes, "group": group, "data": data}


def test_what_counts_as_a_collective():
    assert is_comm("sync_reduce", "sync") and is_comm("all_gather", "shard")
    assert not is_comm("wait", "sync")  # the rank blocked on a collective, not one itself
    assert not is_comm("compute_fwd", None)
    assert is_cross_replica(ev(0, "grad_all_reduce", 0, 1, group="sync"))
    assert is_cross_replica(ev(0, "barrier", 0, 1, group="world"))
    assert not is_cross_replica(ev(0, "all_gather", 0, 1, group="shard"))
    assert not is_cross_replica(ev(0, "wait", 0, 1, group="sync"))


def test_sync_group_bytes_counts_one_ranks_sync_group_collectives():
    events = [ev(0, "sync_reduce", 0, 1, group="sync", nbytes=100), ev(0, "sync_reduce", 1, 2, group="sync", nbytes=50),
              ev(0, "wait", 1, 2, group="sync", nbytes=999), ev(0, "all_gather", 0, 1, group="shard", nbytes=7),
              ev(1, "sync_reduce", 0, 1, group="sync", nbytes=100)]
    assert sync_group_bytes(events, rank=0) == 150
    assert sync_group_bytes(events, rank=1) == 100
    assert sync_group_bytes(events, rank=2) == 0


def test_replica_blocked_time_and_communication_totals():
    # S = 2: replica 0 is ranks 0 and 1, replica 1 is ranks 2 and 3.
    # rank 0: computes 0..1, blocking sync all-reduce 1..3 (2 s blocked); shard all-gather 3..4 (not cross-replica)
    # rank 1: computes 0..2.5, blocking sync all-reduce 2.5..3 (0.5 s)
    # rank 2: asynchronous sync_reduce 0..2 hidden by compute 0..1.5, then waits on it 1.5..2 (0.5 s exposed)
    # rank 3: nothing blocked on the sync group
    events = [
        ev(0, "compute_fwd", 0, 1), ev(0, "grad_all_reduce", 1, 3, group="sync"),
        ev(0, "all_gather", 3, 4, group="shard"),
        ev(1, "compute_fwd", 0, 2.5), ev(1, "grad_all_reduce", 2.5, 3, group="sync"),
        ev(2, "compute_fwd", 0, 1.5), ev(2, "sync_reduce", 0, 2, group="sync", unit=1, overlapped=True),
        ev(2, "wait", 1.5, 2, group="sync", unit=1, on="sync_reduce"),
        ev(3, "compute_fwd", 0, 2),
    ]
    ov = Overlap(events)
    blocked = ov.replica_blocked_s(events, shards=2)
    assert blocked[0] == pytest.approx((2.0 + 0.5) / 2)  # the mean over the replica's two ranks
    assert blocked[1] == pytest.approx((0.5 + 0.0) / 2)  # rank 3 counts as 0
    # a window: only the events of rank 2 → replica 1 alone, still divided by its S ranks
    assert ov.replica_blocked_s([e for e in events if e["rank"] == 2], shards=2) == {1: pytest.approx(0.25)}
    tot = ov.totals([e for e in events if is_comm(e["kind"], e["group"])])
    assert tot["total_s"] == pytest.approx(2 + 1 + 0.5 + 2)
    assert tot["exposed_s"] == pytest.approx(2 + 1 + 0.5 + 0.5)
    assert tot["hidden_s"] == pytest.approx(1.5)
    assert tot["other_s"] == pytest.approx(0.0)
    assert ov.totals([]) == {"total_s": 0.0, "hidden_s": 0.0, "exposed_s": 0.0, "other_s": 0.0}


def test_mesh_coords_is_rank_equals_replica_times_s_plus_shard():
    S, R = 3, 4
    for rank in range(S * R):
        replica, shard = Mesh.coords(rank, S)
        assert replica * S + shard == rank and 0 <= shard < S and 0 <= replica < R
        m = Mesh(rank=rank, world_size=S * R, shards=S, replicas=R, shard_group=None, sync_group=None)
        assert (m.replica, m.shard) == (replica, shard)
    assert Mesh.coords(5, 2) == (2, 1)


def test_capabilities_are_the_registrys_and_the_classes_take_theirs_from_it():
    from dataclasses import asdict

    from edit_lab.core.methods import METHODS as CLASSES
    from edit_lab.registry import REGISTRY, capabilities

    assert METHODS == tuple(REGISTRY) == tuple(CLASSES)  # config.METHODS is the registry's: one list and order
    for name, cls in CLASSES.items():
        assert {k: getattr(cls, k) for k in asdict(REGISTRY[name])} == asdict(REGISTRY[name]), name
    with pytest.raises(TypeError, match="has_penalty"):  # a class restating one is refused
        type("Restated", (CLASSES["edit"],), {"name": "edit", "has_penalty": True})
    local = {m for m in METHODS if capabilities(m).is_local_sgd}
    assert local == {"post_local_sgd", "diloco", "co2", "edit", "aedit", "streaming_diloco"}
    assert {m for m in METHODS if capabilities(m).has_penalty} == {"edit", "aedit"}
    assert {m for m in METHODS if capabilities(m).time_triggered} == {"aedit"}
    assert {m for m in METHODS if capabilities(m).layerwise_sync} == {"edit", "aedit"}
    assert {m for m in METHODS if not capabilities(m).checkpointable} == {"co2"}


def test_the_config_refuses_by_capability():
    with pytest.raises(ConfigError, match="checkpoint_every"):
        RunConfig(method="co2", checkpoint_every=5).validate()
    RunConfig(method="diloco", checkpoint_every=5).validate()
    with pytest.raises(ConfigError, match="sync_period"):
        RunConfig(method="aedit", sync_period=40.0, timeout_s=60.0).validate()
    RunConfig(method="edit", sync_period=40.0, timeout_s=60.0).validate()  # not timer-triggered: ignored
    with pytest.raises(ConfigError, match="spike_step"):
        RunConfig(method="diloco", spike_replica=1, spike_step=2, warmup_steps=5).validate()
    RunConfig(method="sync", spike_replica=1, spike_step=2, warmup_steps=5).validate()


def test_importing_the_config_or_the_run_directory_does_not_import_torch():
    import subprocess

    code = ("import sys, edit_lab, edit_lab.config, edit_lab.core.penalty, edit_lab.records.rundir, edit_lab.records.run, edit_lab.core.mesh, "
            "edit_lab.registry, edit_lab.protocol; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_refusal_by_capability_does_not_import_torch():
    """The capability rules of `validate()` (test above) read the registry, not the torch-importing Method
    classes, so the command line refuses them as fast as any other bad value."""
    import subprocess

    code = ("import sys; from edit_lab.config import ConfigError, RunConfig\n"
            "try: RunConfig(method='aedit', sync_period=40.0, timeout_s=60.0).validate()\n"
            "except ConfigError as e: assert 'sync_period' in str(e), e\n"
            "else: raise AssertionError('not refused')\n"
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_link_model_in_the_configs_units():
    from edit_lab.core.comm import LinkModel

    link = LinkModel.of(latency_ms=2.0, bandwidth_mb_s=50.0)  # 2 ms + n / (50·10⁶ B/s)
    assert (link.latency_s, link.bandwidth_Bps) == (pytest.approx(0.002), pytest.approx(50e6))
    assert link.transfer_time(1_000_000) == pytest.approx(0.002 + 0.02)
    assert LinkModel.of(0.0, 0.0).transfer_time(10**9) == 0.0 and not LinkModel.of(0.0, 0.0).active


def test_a_time_budget_runs_blocked_time_counts_every_step_each_replica_trained():
    """replica_table's window is each replica's own step count with a time budget (the fast replica of the
    shipped A-EDiT example trained 157 steps, RunConfig.steps says 24): it leaves out only the closing sync."""
    from pathlib import Path

    import edit_lab.records.examples
    from edit_lab.records.analysis import replica_table
    from edit_lab.records.run import Run

    run = Run(Path(edit_lab.records.examples.__file__).parent / "aedit-straggler")
    assert run.config.time_budget > 0 and run.summary["steps"] > run.config.steps
    table = replica_table(run).set_index("replica")
    whole = run.overlap.replica_blocked_s(run.events, run.config.shards)  # the closing sync included
    for rep in range(run.config.replicas):
        assert 0.8 * whole[rep] <= table.loc[rep, "blocked_s"] <= whole[rep] + 1e-9


def test_the_launch_function_survives_its_submodule_being_imported_first():
    """`edit_lab.runtime.launch` is both a function and a submodule: importing the submodule first must not leave the
    package attribute pointing at the module (it did with a lazily bound function)."""
    import subprocess

    code = ("import edit_lab.runtime.launch, edit_lab.ui.lab; from edit_lab import launch; "
            "assert callable(launch) and launch.__module__ == 'edit_lab.runtime.launch', launch")
    subprocess.run([sys.executable, "-c", code], check=True)
