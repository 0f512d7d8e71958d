"""Writing the run directory: the only thing a launcher, a notebook or a test reads back.

At the end of a run every rank sends its events, records and metrics to rank 0 (one
`gather_object`, outside the training timeline), and rank 0 writes the whole directory. Doing it
through rank 0 rather than each rank writing its own files means a `torchrun` run spread over
several machines still ends with one complete directory on the first machine.

    config.json          the RunConfig
    events-rank{r}.jsonl one span per line (see events.py)
    penalty.jsonl        one record per sync, unit and replica (EDiT's decisions)
    metrics.jsonl        per step and replica: loss, tokens, time; eval rows: val_loss
    summary.json         throughput, final losses, memory, per-replica accounting
    model.pt             the final parameters every replica agrees on, as a plain state dict
    trace.json           Chrome / Perfetto trace
"""

from __future__ import annotations

import json
import resource
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from .config import RunConfig
from .events import write_jsonl
from .overlap import Overlap, is_comm
from .trace import chrome_trace

if TYPE_CHECKING:
    from .worker import Trainer


def memory_report(trainer: "Trainer") -> dict[str, int]:
    """Bytes this rank holds: parameter shards, inner optimizer state, method state (anchor, momentum…)."""
    engine, opt = trainer.engine, trainer.optimizer
    params = sum(p.numel() * p.element_size() for p in engine.shards)
    opt_bytes = 0
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v) and v.dim() > 0:
                opt_bytes += v.numel() * v.element_size()
    method = trainer.method.extra_state_numel() * 4
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # full parameters the shard group gathered, the most alive at once in a training step (not stacked
    # with the rest by a sum over time: it is a peak, reached inside the forward/backward)
    out = {"params": params, "optimizer": opt_bytes, "method_state": method,
           "gathered_peak": engine.peak_gathered_bytes, "peak_rss": peak_rss}
    if trainer.device.type == "cuda":
        out["peak_cuda"] = int(torch.cuda.max_memory_allocated())
    return out


class RunWriter:
    def __init__(self, out: Path, cfg: RunConfig, trainer: "Trainer", start_unix: float) -> None:
        self.out, self.cfg, self.trainer, self.start_unix = out, cfg, trainer, start_unix

    def write(self) -> None:
        t = self.trainer
        state = t.engine.full_state_dict(t.method.eval_shards())  # a shard-group collective: every rank joins
        mine = {
            "rank": t.mesh.rank,
            "events": t.log.events,
            "records": t.log.records,
            "metrics": t.metrics,
            "memory": memory_report(t),
            "method": t.method.summary() if hasattr(t.method, "summary") else {},
            "train_end_s": t.train_end_s,
        }
        gathered: list[Any] | None = [None] * t.mesh.world_size if t.mesh.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if t.mesh.rank != 0:
            return
        assert gathered is not None
        self.write_all(gathered, state)

    def write_all(self, ranks: list[dict[str, Any]], state: dict[str, torch.Tensor]) -> None:
        out, cfg = self.out, self.cfg
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(cfg.to_json())
        events_all = []
        for r in ranks:
            write_jsonl(out / f"events-rank{r['rank']}.jsonl", r["events"])
            events_all.extend(r["events"])
        records = [rec for rec in ranks[0]["records"]]  # every rank holds the same per-sync records
        write_jsonl(out / "penalty.jsonl", [x for x in records if x.get("kind") == "penalty"])
        write_jsonl(out / "syncs.jsonl", [x for x in records if x.get("kind") != "penalty"])
        metrics = merge_metrics([m for r in ranks for m in r["metrics"]])
        write_jsonl(out / "metrics.jsonl", metrics)
        torch.save(state, out / "model.pt")
        overlap = Overlap(events_all)  # one split of every collective, for the summary and the trace
        summary = summarize(cfg, ranks, metrics, self.start_unix, overlap)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        (out / "trace.json").write_text(json.dumps(chrome_trace(events_all, cfg, overlap)))


def eval_key(m: dict[str, Any]) -> tuple:
    """Which rows of the ranks are one validation: a timed one by its scheduled time (the replicas may be at
    different steps then), the final one by itself, any other by its step."""
    if m.get("final"):
        return (2, 0.0)
    if m.get("at_s") is not None:
        return (1, float(m["at_s"]))
    return (0, float(m["step"]))


def merge_metrics(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (step, replica): the mean loss over the replica's shards, their tokens, the latest time.

    Validation rows: one per validation (see `eval_key`), the mean over every rank, their spread, the
    latest time, and `step` the largest step any replica had reached (with a time budget they differ).
    """
    train: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    evals: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for m in rows:
        if m["kind"] == "train":
            train[(m["step"], m["replica"])].append(m)
        else:
            evals[eval_key(m)].append(m)
    out: list[dict[str, Any]] = []
    for (step, replica), ms in sorted(train.items()):
        out.append({"kind": "train", "step": step, "replica": replica,
                    "loss": sum(m["loss"] for m in ms) / len(ms), "tokens": sum(m["tokens"] for m in ms),
                    "t": max(m["t"] for m in ms), "dt": max(m["dt"] for m in ms),
                    "carried": any(m.get("carried", False) for m in ms)})
    # in the order they happened: by the most steps any replica had reached (times restart at 0 in a
    # resumed run, whose carried rows come first), the final one last
    for key, ms in sorted(evals.items(), key=lambda kv: (kv[0][0] == 2, max(m["step"] for m in kv[1]), kv[0])):
        vals = [m["val_loss"] for m in ms]
        row = {"kind": "eval", "step": max(m["step"] for m in ms), "val_loss": sum(vals) / len(vals),
               "val_loss_spread": max(vals) - min(vals), "t": max(m["t"] for m in ms)}
        if key[0] == 1:
            row["at_s"] = key[1]
        if key[0] == 2:
            row["final"] = True
        out.append(row)
    return out


def summarize(cfg: RunConfig, ranks: list[dict[str, Any]], metrics: list[dict[str, Any]],
              start_unix: float, overlap: Overlap) -> dict[str, Any]:
    """summary.json; `overlap` splits the collectives of every rank's events (the very same dicts)."""
    train = [m for m in metrics if m["kind"] == "train" and not m.get("carried")]  # this session's steps
    evals = [m for m in metrics if m["kind"] == "eval"]
    wall = max((m["t"] for m in train), default=0.0)
    per_replica: dict[int, dict[str, Any]] = {}
    for r in range(cfg.replicas):
        mine = [m for m in train if m["replica"] == r]
        tokens = sum(m["tokens"] for m in mine)
        end = max((m["t"] for m in mine), default=0.0)
        # time the replica waited on cross-replica communication (its shard-0 rank speaks for it);
        # overlap.py's "exposed", each instant once
        sync_comm = [e for rk in ranks for e in rk["events"] if e["replica"] == r and e["shard"] == 0
                     and e["group"] == "sync" and is_comm(e["kind"], e["group"])]
        blocked = overlap.rank_totals(sync_comm)
        per_replica[r] = {
            "tokens": tokens,
            "steps": len(mine),
            "tokens_per_s": tokens / end if end > 0 else 0.0,
            "sync_wait_s": sum(v["exposed_s"] for v in blocked.values()),
            "final_train_loss": mine[-1]["loss"] if mine else None,
        }
    total_tokens = sum(v["tokens"] for v in per_replica.values())
    method_info = next((r["method"] for r in ranks if r["rank"] == 0), {})
    # with a time budget the replicas ran different step counts: `steps` is the most any replica ran
    steps = max((v["steps"] for v in per_replica.values()), default=0) if cfg.time_budget else cfg.steps
    ends = [r.get("train_end_s") for r in ranks if r.get("train_end_s") is not None]
    return {
        "method": cfg.method,
        "shards": cfg.shards,
        "replicas": cfg.replicas,
        "steps": steps,
        "time_budget_s": cfg.time_budget,
        "train_end_s": max(ends) if ends else None,
        "model": cfg.model,
        "start_unix": start_unix,
        "wall_s": wall,
        "tokens": total_tokens,
        "tokens_per_s": total_tokens / wall if wall > 0 else 0.0,
        "step_time_s": wall / steps if steps else 0.0,
        "final_val_loss": evals[-1]["val_loss"] if evals else None,
        "final_train_loss": sum(v["final_train_loss"] or 0.0 for v in per_replica.values()) / cfg.replicas,
        "per_replica": {str(k): v for k, v in per_replica.items()},
        "memory": {str(r["rank"]): r["memory"] for r in ranks},
        "method_info": method_info,
    }
