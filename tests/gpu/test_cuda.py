"""The GPU paths: configuration and backend choice everywhere; real CUDA runs only where CUDA is present."""

from __future__ import annotations

import pytest
import torch

from edit_lab import ConfigError, launch
from edit_lab.config import METHODS, RunConfig
from edit_lab.runtime.worker import resolve_backend
from tests.helpers import small

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_refused_without_a_device():
    with pytest.raises(ConfigError, match="device='cuda'.*no CUDA device"):
        RunConfig(device="cuda").validate()
    with pytest.raises(ConfigError, match="backend='nccl'"):
        RunConfig(backend="nccl").validate()


def test_nccl_refused_on_cpu_tensors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="backend='nccl'.*device='cpu'"):
        RunConfig(backend="nccl", device="cpu").validate()


def test_backend_choice(monkeypatch):
    cfg = RunConfig(shards=2, replicas=2)
    assert resolve_backend(cfg, torch.device("cpu")) == "gloo"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert resolve_backend(cfg, torch.device("cuda", 0)) == "nccl"  # one GPU per rank
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_backend(cfg, torch.device("cuda", 0)) == "gloo"  # ranks share a GPU: gloo through CPU copies
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert resolve_backend(cfg, torch.device("cuda", 0)) == "nccl"  # torchrun: one rank on this machine
    assert resolve_backend(cfg.replace(backend="gloo"), torch.device("cuda", 0)) == "gloo"


@cuda
@pytest.mark.gpu
def test_prefetch_bit_for_bit_on_cuda(tmp_path):
    kw = dict(method="edit", device="cuda", shards=1, replicas=2, steps=10, warmup_steps=2, sync_interval=3)
    on = launch(small(prefetch=True, out=str(tmp_path / "on"), **kw))
    off = launch(small(prefetch=False, out=str(tmp_path / "off"), **kw))
    a, b = on.state_dict(), off.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [e for e in on.events if e["kind"] == "sync_reduce"]


@cuda
@pytest.mark.gpu
def test_bf16_and_cpu_offload_on_cuda(tmp_path):
    kw = dict(method="edit", device="cuda", shards=1, replicas=2, steps=12, warmup_steps=2, sync_interval=3,
              model="tiny", seq_len=64)
    plain = launch(small(out=str(tmp_path / "plain"), **kw))
    offload = launch(small(cpu_offload=True, out=str(tmp_path / "offload"), **kw))
    bf16 = launch(small(bf16=True, out=str(tmp_path / "bf16"), **kw))
    losses = [loss for _, loss in bf16.train_losses()]
    assert losses[-1] < losses[0]
    peak = lambda run: max(m["peak_cuda"] for m in run.summary["memory"].values())  # noqa: E731
    assert peak(offload) < peak(plain)  # anchor and momentum left the GPU
    a, b = plain.state_dict(), offload.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)  # offloading moves state, not results


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("method", METHODS)
def test_every_method_keeps_its_collectives_on_the_gpu(tmp_path, method):
    """Every method's collective paths on CUDA (time budget, timed validations, penalty, prefetch, checkpoints):
    `Comm` refuses any tensor off the GPU, so a CPU tensor fails here whatever the backend. With two GPUs or
    more the two ranks talk NCCL; on one GPU they share it over gloo with CPU copies (NCCL refuses that)."""
    kw = dict(method=method, device="cuda", shards=1, replicas=2, time_budget=3.0, eval_every_s=1.0,
              sync_period=0.2, warmup_steps=2, sync_interval=3, checksums=True, out=str(tmp_path / method))
    if method != "co2":
        kw["checkpoint_every"] = 2
    run = launch(small(**kw))
    assert run.summary["steps"] > 2 and [m for m in run.metrics if m["kind"] == "eval" and "at_s" in m]
    if method != "sync":
        assert [e for e in run.events if e["kind"] in ("sync_reduce", "param_average", "co2_reduce")]


@cuda
@pytest.mark.gpu
def test_one_rank_on_nccl(tmp_path):
    """A 1x1 run forced onto NCCL, possible on a single GPU: the process group, its subgroups with their timeout,
    the start-time exchange, barriers, checkpoints and the run directory's gather all on NCCL."""
    run = launch(small(method="edit", device="cuda", backend="nccl", shards=1, replicas=1, steps=8,
                       checkpoint_every=1, out=str(tmp_path / "nccl")))
    assert run.summary["steps"] == 8 and sorted((tmp_path / "nccl" / "checkpoints").glob("sync-*"))
