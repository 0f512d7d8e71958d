"""Oracles our engine is checked against (tests) and timed against (benchmarks).

- `single_process(cfg)`: one process, the full model, the global batch of every step (all ranks'
  micro-batches concatenated): what synchronous data parallel must equal, to float tolerance.
- `fsdp2(cfg)`: PyTorch's own FSDP2 (`fully_shard` on a 2-D replica × shard mesh, i.e. HSDP) on the
  same model, data and seeds, in as many processes as our run uses. Each block is sharded with
  `reshard_after_forward=cfg.runtime.reshard_after_forward` (FSDP2's default, True, re-gathers in the
  backward; False keeps the gathered parameters), the root with FSDP2's own choice for a root (it
  is never resharded), which is what our engine does in both settings.

Both use the same data functions and the same inner optimizer and clipping as the engine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edit_lab.config import RunConfig
from edit_lab.core.mesh import Mesh
from edit_lab.core.model import build_model
from edit_lab.train.data import Corpus, load_corpus, train_batch, val_batches
from edit_lab.train.trainer import configure_cpu, make_optimizer

from .spawn import run_processes


def _global_batch(corpus: Corpus, cfg: RunConfig, step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [train_batch(corpus, step, r, s, cfg.data.batch_size, cfg.data.seq_len, cfg.seed)
            for r in range(cfg.replicas) for s in range(cfg.shards)]


def _train_step(cfg: RunConfig, model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor) -> float:
    """One step exactly as the engine takes it: mean loss, backward, clip the whole gradient, optimizer."""
    loss = model(x, y)
    loss.backward()
    if cfg.inner.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.inner.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def single_process(cfg: RunConfig) -> dict[str, Any]:
    """Train the full model on the global batches; returns per-step losses, val loss and the state dict."""
    torch.manual_seed(cfg.seed)
    corpus = Corpus.from_bytes(load_corpus(cfg.data.corpus))
    model = build_model(cfg.data.model, cfg.seed)
    opt = make_optimizer(cfg, list(model.parameters()))
    losses = []
    for step in range(cfg.steps):
        parts = _global_batch(corpus, cfg, step)
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        losses.append(_train_step(cfg, model, opt, x, y))
    with torch.no_grad():
        val = [float(model(x, y)) for x, y in val_batches(corpus, cfg.data.eval_batches, cfg.data.batch_size, cfg.data.seq_len,
                                                          cfg.seed)]
    return {"losses": losses, "val_loss": sum(val) / len(val),
            "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


# ---------------------------------------------------------------------------------------- FSDP2
def _fsdp2_rank(cfg: RunConfig, rank: int, world: int, port: int, out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    configure_cpu(cfg.runtime.threads)  # as the engine's workers do
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg.runtime.timeout_s))
    mesh = init_device_mesh("cpu", (cfg.replicas, cfg.shards), mesh_dim_names=("replica", "shard"))
    replica, shard = Mesh.coords(rank, cfg.shards)
    corpus = Corpus.from_bytes(load_corpus(cfg.data.corpus))
    model = build_model(cfg.data.model, cfg.seed)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=cfg.runtime.reshard_after_forward)
    fully_shard(model, mesh=mesh)
    opt = make_optimizer(cfg, list(model.parameters()))
    losses, times = [], []
    dist.barrier()
    for step in range(cfg.steps):
        t0 = time.perf_counter()
        x, y = train_batch(corpus, step, replica, shard, cfg.data.batch_size, cfg.data.seq_len, cfg.seed)
        losses.append(_train_step(cfg, model, opt, x, y))
        times.append(time.perf_counter() - t0)
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
             for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save({"state": state}, out / "fsdp2_state.pt")
    (out / f"fsdp2-rank{rank}.json").write_text(json.dumps({"losses": losses, "step_times": times}))
    dist.barrier()
    dist.destroy_process_group()


def fsdp2(cfg: RunConfig, out: str | Path) -> dict[str, Any]:
    """Run FSDP2 HSDP in cfg.world_size fresh processes; returns losses (mean over ranks), step times, state."""
    out = Path(out)
    run_processes(cfg, out, "tests.oracles.fsdp2", "fsdp2_config.json", "--rank", cfg.world_size, "FSDP2")
    per_rank = [json.loads((out / f"fsdp2-rank{r}.json").read_text()) for r in range(cfg.world_size)]
    losses = [sum(pr["losses"][i] for pr in per_rank) / len(per_rank) for i in range(cfg.steps)]
    step_times = [max(pr["step_times"][i] for pr in per_rank) for i in range(cfg.steps)]
    state = torch.load(out / "fsdp2_state.pt", weights_only=True)["state"]
    return {"losses": losses, "step_times": step_times, "state": state}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = RunConfig.load(a.config)
    _fsdp2_rank(cfg, a.rank, cfg.world_size, a.port, Path(a.out))


if __name__ == "__main__":
    main()
