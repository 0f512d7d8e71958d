"""The run directory's contract: its file names, the progress protocol, the summary's keys, and its writer.

A run directory is the only thing a launcher, a notebook or a test reads back, so everything about its
layout lives here: the worker writes through `RunWriter` and `ProgressFile`, the launcher and the
panels follow `read_progress`, and `run.Run` reads the files named below.

    config.json          the RunConfig
    events-rank{r}.jsonl one span per line (see events.py)
    penalty.jsonl        one record per sync, unit and replica (EDiT's decisions)
    syncs.jsonl          one record per sync or anchor creation
    metrics.jsonl        per step and replica: loss, tokens, time; eval rows: val_loss
    summary.json         throughput, final losses, memory, per-replica accounting (`SUMMARY_KEYS`)
    model.pt             the final parameters every replica agrees on, as a plain state dict
    trace.json           Chrome / Perfetto trace
    progress             "step total": how far rank 0 got (while the run is going)
    error-rank{r}.txt    the traceback of a rank that failed

At the end of a run every rank sends its `RankRecord` to rank 0 (one `gather_object`, outside the
training timeline), and rank 0 writes the whole directory. Doing it through rank 0 rather than each
rank writing its own files means a `torchrun` run spread over several machines still ends with one
complete directory on the first machine. The worker hands over plain records, not its Trainer, so
this module depends on nothing of the training code (and imports torch only to write and gather).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_lab.config import RunConfig
from edit_lab.records.events import write_jsonl
from edit_lab.records.overlap import Overlap
from edit_lab.records.trace import chrome_trace

# ------------------------------------------------------------------------------------ file names
CONFIG = "config.json"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
PENALTY = "penalty.jsonl"
SYNCS = "syncs.jsonl"
MODEL = "model.pt"
TRACE = "trace.json"
PROGRESS = "progress"


def events_file(rank: int | str) -> str:
    """This rank's event log (written by rank 0 at the end, or by the rank itself when it fails);
    `events_file("*")` is the glob of every rank's."""
    return f"events-rank{rank}.jsonl"


def error_file(rank: int | str) -> str:
    """The traceback of a failed rank, which the launcher reads to say which rank failed first (`"*"`: a glob)."""
    return f"error-rank{rank}.txt"


#: What a finished run writes besides the per-rank files: a new run into the same directory clears them.
RUN_FILES = (PROGRESS, SUMMARY, METRICS, TRACE, MODEL, PENALTY, SYNCS)
#: What a run shipped with the package keeps (the examples): no model, trace or progress; events gzipped.
SHIPPED_FILES = (CONFIG, SUMMARY, METRICS, PENALTY, SYNCS)

def ship(src: Path, dest: Path) -> None:
    """Copy the finished run `src` into `dest` (replaced) as the package ships runs: `SHIPPED_FILES`, and
    each rank's events gzipped (`events.read_jsonl` reads the `.gz` twin), byte-for-byte reproducible."""
    import gzip
    import shutil

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in SHIPPED_FILES:
        shutil.copy(src / name, dest / name)
    for ev in sorted(src.glob(events_file("*"))):
        (dest / (ev.name + ".gz")).write_bytes(gzip.compress(ev.read_bytes(), mtime=0))


# ------------------------------------------------------------------------------------ summary schema
#: The keys of summary.json (examples, tests and notebooks read them; keep them stable).
SUMMARY_KEYS = (
    "method",            # RunConfig.method
    "shards",            # S
    "replicas",          # R
    "steps",             # steps trained (with a time budget: the most any replica trained)
    "time_budget_s",     # RunConfig.time_budget (0: a step count)
    "train_end_s",       # when the final sync ended (seconds from the common start), or None
    "model",             # the model size's name
    "start_unix",        # the common start, Unix seconds
    "wall_s",            # end of the last training step of this session (seconds from the start)
    "tokens",            # tokens of every replica, this session's steps
    "tokens_per_s",      # tokens / wall_s
    "step_time_s",       # wall_s / steps
    "final_val_loss",    # the last validation (of the agreed model), or None
    "final_train_loss",  # mean over replicas of each one's last training loss
    "per_replica",       # {"r": PER_REPLICA_KEYS}
    "memory",            # {"rank": memory_report(...)}
    "method_info",       # the method's own summary() (rank 0's), {} if it has none
    "clock",             # RunConfig.clock.kind: "wall" (this machine's time) or "virtual" (a cost model's, virtual.py)
    "clock_costs",       # the virtual clock's cost source (a run directory, a file, a sentence); None on the wall clock
)
#: A run recorded before the clock keys existed (the shipped examples) is a wall-clock run: `summary_clock`.
PRE_CLOCK_KEYS = SUMMARY_KEYS[:-2]


def summary_clock(summary: dict[str, Any]) -> str:
    """The clock a run's summary.json was recorded on ("wall" for runs recorded before the key existed)."""
    return summary.get("clock") or "wall"

#: The keys of each `summary["per_replica"][str(r)]`.
PER_REPLICA_KEYS = (
    "tokens", "steps", "tokens_per_s",
    "sync_wait_s",  # seconds blocked on the sync group over the whole run (`Overlap.replica_blocked_s`)
    "final_train_loss",
)


# ------------------------------------------------------------------------------------ progress
class ProgressFile:
    """Rank 0 tells the launcher how far it got, through a tiny file (works under torchrun too).

    The protocol: one line "step total", replaced atomically, at most every 0.1 s until the last step.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._last = 0.0

    def write(self, step: int, total: int) -> None:
        now = time.monotonic()
        if step < total and now - self._last < 0.1:
            return
        self._last = now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{step} {total}\n")
        os.replace(tmp, self.path)


def read_progress(path: Path) -> tuple[int, int] | None:
    """(step, total) from a progress file, or None while there is none (or it cannot be read)."""
    try:
        step, total = Path(path).read_text().split()
        return int(step), int(total)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------ what a rank hands over
@dataclass
class RankRecord:
    """Everything one rank contributes to the run directory, as plain data."""

    rank: int
    events: list[dict[str, Any]]
    records: list[dict[str, Any]]  # penalty decisions and other per-sync records (the same on every rank)
    metrics: list[dict[str, Any]]
    memory: dict[str, int]
    method_info: dict[str, Any] = field(default_factory=dict)
    train_end_s: float | None = None


def memory_report(params: list[Any], optimizer_state: dict[Any, dict[str, Any]], method_state_numel: int,
                  gathered_peak: int, cuda: bool = False) -> dict[str, int]:
    """Bytes this rank holds: parameter shards, inner optimizer state, method state (anchor, momentum…).

    `gathered_peak`: full parameters the shard group gathered, the most alive at once in a training step
    (not stacked with the rest by a sum over time: it is a peak, reached inside the forward/backward).
    """
    import torch

    opt_bytes = sum(v.numel() * v.element_size() for state in optimizer_state.values() for v in state.values()
                    if torch.is_tensor(v) and v.dim() > 0)
    out = {"params": sum(p.numel() * p.element_size() for p in params), "optimizer": opt_bytes,
           "method_state": method_state_numel * 4, "gathered_peak": gathered_peak,
           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if cuda:
        out["peak_cuda"] = int(torch.cuda.max_memory_allocated())
    return out


# ------------------------------------------------------------------------------------ writing
class RunWriter:
    def __init__(self, out: Path, cfg: RunConfig, start_unix: float, clock_costs: str | None = None) -> None:
        self.out, self.cfg, self.start_unix = Path(out), cfg, start_unix
        self.clock_costs = clock_costs  # the virtual clock's cost source (summary.json)

    def write(self, mine: RankRecord, state: dict[str, Any]) -> None:
        """Every rank calls this; rank 0 gathers the records and writes the directory (`state`: the agreed model)."""
        import torch.distributed as dist

        world = dist.get_world_size()
        gathered: list[Any] | None = [None] * world if mine.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)  # pickled as it is: plain lists and dicts
        if mine.rank != 0:
            return
        assert gathered is not None
        self.write_all(gathered, state)

    def write_all(self, ranks: list[RankRecord], state: dict[str, Any]) -> None:
        import torch

        out, cfg = self.out, self.cfg
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG).write_text(cfg.to_json())
        events_all = []
        for r in ranks:
            write_jsonl(out / events_file(r.rank), r.events)
            events_all.extend(r.events)
        records = list(ranks[0].records)  # every rank holds the same per-sync records
        write_jsonl(out / PENALTY, [x for x in records if x.get("kind") == "penalty"])
        write_jsonl(out / SYNCS, [x for x in records if x.get("kind") != "penalty"])
        metrics = merge_metrics([m for r in ranks for m in r.metrics])
        write_jsonl(out / METRICS, metrics)
        torch.save(state, out / MODEL)
        overlap = Overlap(events_all)  # one split of every collective, for the summary and the trace
        summary = summarize(cfg, ranks, metrics, self.start_unix, overlap, clock_costs=self.clock_costs)
        (out / SUMMARY).write_text(json.dumps(summary, indent=2))
        (out / TRACE).write_text(json.dumps(chrome_trace(events_all, cfg, overlap)))


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
        if any(m.get("dropped", False) for m in ms):  # backup workers: a late replica's step, abandoned
            out[-1]["dropped"] = True
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


def summarize(cfg: RunConfig, ranks: list[RankRecord], metrics: list[dict[str, Any]],
              start_unix: float, overlap: Overlap, clock_costs: str | None = None) -> dict[str, Any]:
    """summary.json (keys: `SUMMARY_KEYS`); `overlap` splits the collectives of every rank's events."""
    train = [m for m in metrics if m["kind"] == "train" and not m.get("carried")]  # this session's steps
    evals = [m for m in metrics if m["kind"] == "eval"]
    wall = max((m["t"] for m in train), default=0.0)
    blocked = overlap.replica_blocked_s((e for rk in ranks for e in rk.events), cfg.shards)
    per_replica: dict[int, dict[str, Any]] = {}
    for r in range(cfg.replicas):
        mine = [m for m in train if m["replica"] == r]
        tokens = sum(m["tokens"] for m in mine)
        end = max((m["t"] for m in mine), default=0.0)
        per_replica[r] = {
            "tokens": tokens,
            "steps": len(mine),
            "tokens_per_s": tokens / end if end > 0 else 0.0,
            "sync_wait_s": blocked.get(r, 0.0),
            "final_train_loss": mine[-1]["loss"] if mine else None,
        }
    total_tokens = sum(v["tokens"] for v in per_replica.values())
    method_info = next((r.method_info for r in ranks if r.rank == 0), {})
    # with a time budget the replicas ran different step counts: `steps` is the most any replica ran
    steps = max((v["steps"] for v in per_replica.values()), default=0) if cfg.time_budget else cfg.steps
    ends = [r.train_end_s for r in ranks if r.train_end_s is not None]
    summary = {
        "method": cfg.method,
        "shards": cfg.shards,
        "replicas": cfg.replicas,
        "steps": steps,
        "time_budget_s": cfg.time_budget,
        "train_end_s": max(ends) if ends else None,
        "model": cfg.data.model,
        "start_unix": start_unix,
        "wall_s": wall,
        "tokens": total_tokens,
        "tokens_per_s": total_tokens / wall if wall > 0 else 0.0,
        "step_time_s": wall / steps if steps else 0.0,
        "final_val_loss": evals[-1]["val_loss"] if evals else None,
        "final_train_loss": sum(v["final_train_loss"] or 0.0 for v in per_replica.values()) / cfg.replicas,
        "per_replica": {str(k): v for k, v in per_replica.items()},
        "memory": {str(r.rank): r.memory for r in ranks},
        "method_info": method_info,
        "clock": cfg.clock.kind,
        "clock_costs": clock_costs if cfg.clock.kind == "virtual" else None,
    }
    assert tuple(summary) == SUMMARY_KEYS, "summary.json's keys are the documented SUMMARY_KEYS"
    return summary
