"""Every tensor handed to a collective lives on the comm device (the `comm` module's device rule).

NCCL accepts only CUDA tensors, so on a machine with one GPU per rank a single `torch.tensor(...)`
created without `device=` and then all-reduced ends the run; on this CPU-only machine gloo takes it
and nothing fails. These tests make the two devices differ without a GPU: the worker's test hook
(`EDIT_LAB_STRAY_DEVICE=meta`, `worker.stray_tensors_to`) makes torch's default device "meta" once the
model and data are placed on the CPU, so every tensor created without a device lands on "meta", and
`Comm` refuses any tensor that is not on `comm.device` (cpu), naming the collective. Every method's
collective paths run: warm-up, syncs, stop checks and budget meetings, A-EDiT's timer and meetings,
the penalty's norms, decisions and clip, prefetch, timed and step evaluations, checkpoints, CO2's
overlapped reduce, the closing syncs; a tensor computed without a device next to CPU tensors fails too.
"""

from __future__ import annotations

import pytest
import torch

from edit_lab.config import METHODS
from edit_lab.core.comm import Comm
from edit_lab.core.mesh import Mesh
from edit_lab.records.events import Clock, EventLog
from edit_lab.runtime.worker import STRAY_DEVICE_ENV, stray_tensors_to
from tests.helpers import small


@pytest.fixture
def strict(monkeypatch):
    """Workers launched from here create device-less tensors on "meta" (the launcher passes the environment on)."""
    monkeypatch.setenv(STRAY_DEVICE_ENV, "meta")


def _one_rank_comm(device: str = "cpu") -> Comm:
    """A Comm of a 1x1 mesh: every group has one member, so no process group is needed."""
    mesh = Mesh(rank=0, world_size=1, shards=1, replicas=1, shard_group=None, sync_group=None)
    return Comm(mesh, EventLog(0, 0, 0, Clock()), device=device)


def test_comm_refuses_a_tensor_off_its_device_and_names_the_collective():
    comm = _one_rank_comm()
    assert comm.device == torch.device("cpu")
    wrong = r"'stop_check' \(all_reduce over the sync group\).* on meta.*comm.device = cpu"
    with pytest.raises(RuntimeError, match=wrong):
        comm.all_reduce(torch.zeros(1, device="meta"), group="sync", kind="stop_check")
    with pytest.raises(RuntimeError, match=r"'step_count' \(all_gather over the sync group\)"):
        comm.all_gather(torch.zeros(2), torch.zeros(2, device="meta"), group="sync", kind="step_count")
    with pytest.raises(RuntimeError, match=r"'start_time' \(broadcast over the world group\)"):
        comm.broadcast(torch.zeros(1, device="meta"), src=0, kind="start_time")
    t = torch.ones(3)
    assert comm.all_reduce(t, group="shard").wait() is t  # on the comm device: accepted


def test_stray_device_hook_puts_a_device_less_tensor_off_the_comm_device():
    """What the hook does inside a worker, here: `torch.tensor([...])` without a device (the worker's
    start-time broadcast before the rule) is no longer on the comm device, and the collective refuses it."""
    comm = _one_rank_comm()
    try:
        stray_tensors_to("meta")
        stray = torch.tensor([1.0], dtype=torch.float64)
        placed = torch.tensor([1.0], dtype=torch.float64, device=comm.device)
    finally:
        torch.set_default_device(None)
    assert stray.device == torch.device("meta") and placed.device == comm.device
    with pytest.raises(RuntimeError, match="start_time"):
        comm.broadcast(stray, src=0, kind="start_time")
    comm.broadcast(placed, src=0, kind="start_time")


def _kinds(run) -> set[str]:
    return {e["kind"] for e in run.events}


@pytest.mark.parametrize("method", METHODS)
def test_every_collective_of_a_time_budget_run_is_on_the_comm_device(strict, run_small, method):
    """A 1x2 time-budget run per method: stop checks or budget meetings, timed validations, the closing
    sync; A-EDiT's timer start and meetings. (The Comm check runs on one-member groups too, so 1x2 sees the
    shard-group collectives as well.)"""
    # Streaming DiLoCo: its default 2 fragments and 1 step of overlap need H / P > 1 (H = 4: a fragment every 2 steps)
    run = run_small(method=method, shards=1, replicas=2, time_budget=1.2, eval_every_s=0.4, sync_period=0.1,
                    warmup_steps=2, sync_interval=4 if method == "streaming_diloco" else 2, checksums=True)
    # past warm-up: the local phase and its syncs ran (a nano step takes milliseconds even on two busy cores,
    # so 1.2 s holds a hundred or more: this count needs no more than 3)
    assert run.summary["steps"] > 2
    kinds = _kinds(run)
    assert "grad_all_reduce" in kinds  # one-member groups are checked but not recorded: no shard-group kinds here
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    assert any("at_s" in m for m in evals) and evals[-1].get("final")
    if method == "sync":
        assert "stop_check" in kinds
    if method in ("edit", "aedit"):
        assert {"sync_decisions", "sync_reduce"} <= kinds
    if method == "aedit":
        assert {"timer_start", "step_count"} <= kinds
    if method == "co2":
        assert "co2_reduce" in kinds


def test_checkpoints_evaluations_and_cpu_offload_keep_collectives_on_the_comm_device(strict, run_small, tmp_path):
    """A-EDiT (EDiT's sync and penalty under meetings) by step count on 2x2, so that the shard groups are real:
    a checkpoint at every sync, step evaluations, anchors offloaded to the CPU, prefetch; then a resume
    from the last checkpoint (restore, and the timer restarted by an exchange)."""
    out = tmp_path / "aedit"
    run = run_small(method="aedit", shards=2, replicas=2, steps=7, warmup_steps=2, sync_interval=2, eval_every=3,
                    checkpoint_every=1, cpu_offload=True, prefetch=True, sync_period=1e-9, out=str(out))
    assert len([m for m in run.metrics if m["kind"] == "eval"]) >= 2
    assert {"all_gather", "reduce_scatter", "grad_norm", "checkpoint", "clock", "sync_norms", "sync_clip",
            "sync_decisions", "sync_reduce", "step_count", "timer_start"} <= _kinds(run)
    assert sorted((out / "checkpoints").glob("sync-*")), "no checkpoint was written"
    resumed = run_small(method="aedit", shards=2, replicas=2, steps=9, warmup_steps=2, sync_interval=2,
                        eval_every=0, cpu_offload=True, sync_period=1e-9, resume=str(out))
    assert resumed.summary["steps"] == 9 and resumed.syncs[0]["kind"] == "resume"
