"""The GPU paths: configuration and backend choice everywhere; real CUDA runs only where CUDA is present."""

from __future__ import annotations

import pytest
import torch

from edit_lab import ConfigError, launch
from edit_lab.config import RunConfig
from edit_lab.worker import resolve_backend
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
