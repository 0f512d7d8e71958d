"""An independent Post Local SGD: PyTorch's own `PeriodicModelAverager` on plain, unsharded replicas.

What `post_local_sgd` must equal, to float tolerance. Each of R fresh gloo processes is one replica
holding the *full* model (no sharding, no engine, no hooks, no Comm layer): it trains on the
replica's batches with the same AdamW and gradient clipping as the engine, all-reduces (averages)
its gradients during the W warm-up steps, and after every optimizer step hands its parameters to
`torch.distributed.algorithms.model_averaging.averagers.PeriodicModelAverager`.

Why `warmup_steps = W + τ − 1`: our schedule averages after the optimizer step of steps W+τ−1,
W+2τ−1, … (so that the parameters entering step W+kτ are the average, see `methods/local_sgd.py`);
the averager averages at its calls number `warmup_steps`, `warmup_steps + period`, …, and it is
called once per step, so its call number is the step. A final average after the last step, when
that step was not an averaging step, mirrors our `finalize`.

A replica's batch is every one of its shards' micro-batches concatenated (for S = 1: just
`train_batch(corpus, step, replica, 0, ...)`), whose mean loss is what the engine's shard-group
gradient mean (decision D5) optimises.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edit_lab.config import RunConfig
from edit_lab.core.model import build_model
from edit_lab.train.data import Corpus, load_corpus, train_batch
from edit_lab.train.trainer import configure_cpu, make_optimizer

from .spawn import run_processes


def averaging_steps(cfg: RunConfig) -> list[int]:
    """Steps after whose optimizer step the replicas average: W+τ−1, W+2τ−1, … (< cfg.steps)."""
    W, tau = cfg.schedule.warmup_steps, cfg.schedule.sync_interval
    return list(range(W + tau - 1, cfg.steps, tau))


def _replica_batch(corpus: Corpus, cfg: RunConfig, step: int, replica: int) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [train_batch(corpus, step, replica, s, cfg.data.batch_size, cfg.data.seq_len, cfg.seed) for s in range(cfg.shards)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _replica_process(cfg: RunConfig, replica: int, port: int, out: Path) -> None:
    from torch.distributed.algorithms.model_averaging import averagers
    from torch.distributed.algorithms.model_averaging import utils as averaging_utils

    configure_cpu(cfg.runtime.threads)  # as the engine's workers do
    R = cfg.replicas
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=replica, world_size=R,
                            timeout=datetime.timedelta(seconds=cfg.runtime.timeout_s))
    corpus = Corpus.from_bytes(load_corpus(cfg.data.corpus))
    model = build_model(cfg.data.model, cfg.seed)
    opt = make_optimizer(cfg, list(model.parameters()))
    W, tau = cfg.schedule.warmup_steps, cfg.schedule.sync_interval
    averager = averagers.PeriodicModelAverager(period=tau, warmup_steps=W + tau - 1)
    losses: list[float] = []
    for step in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        x, y = _replica_batch(corpus, cfg, step, replica)
        loss = model(x, y)
        loss.backward()
        if step < W:  # warm-up: synchronous data parallel across the replicas
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(R)
        if cfg.inner.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.inner.grad_clip)
        opt.step()
        # Before the next zero_grad: the averager only averages parameters that have a gradient.
        averager.average_parameters(model.parameters())
        losses.append(float(loss.detach()))
    if cfg.steps > W and cfg.steps - 1 not in averaging_steps(cfg):
        averaging_utils.average_parameters(iter(model.parameters()), averager.process_group)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / f"averaging-replica{replica}.pt")
    (out / f"averaging-replica{replica}.json").write_text(json.dumps({"losses": losses}))
    dist.barrier()
    dist.destroy_process_group()


def periodic_averaging(cfg: RunConfig, out: str | Path) -> dict[str, Any]:
    """Run the oracle in cfg.replicas fresh processes.

    Returns {"losses": [replica][step] training losses, "states": [replica] final state dicts (equal
    when the last average happened), "state": replica 0's, "averaging_steps": the steps after which
    it averaged}.
    """
    out = Path(out)
    run_processes(cfg, out, "tests.oracles.averaging", "averaging_config.json", "--replica", cfg.replicas,
                  "periodic-averaging")
    losses = [json.loads((out / f"averaging-replica{r}.json").read_text())["losses"] for r in range(cfg.replicas)]
    states = [torch.load(out / f"averaging-replica{r}.pt", weights_only=True) for r in range(cfg.replicas)]
    return {"losses": losses, "states": states, "state": states[0], "averaging_steps": averaging_steps(cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description="one replica of the PeriodicModelAverager reference")
    ap.add_argument("--config", required=True)
    ap.add_argument("--replica", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    _replica_process(RunConfig.load(a.config), a.replica, a.port, Path(a.out))


if __name__ == "__main__":
    main()
