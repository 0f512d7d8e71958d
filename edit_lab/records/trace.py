"""Chrome / Perfetto trace of a run: open trace.json at ui.perfetto.dev or chrome://tracing.

One process per rank (named "replica r / shard s"), one thread for compute and one per group for
communication, so overlapped communication sits visibly beside the compute that hid it. Each
collective's arguments carry its hidden / exposed / other milliseconds (overlap.py's definition).
"""

from __future__ import annotations

from typing import Any

from edit_lab.config import RunConfig
from edit_lab.records.events import is_comm
from edit_lab.records.overlap import Overlap


def lane(ev: dict[str, Any]) -> tuple[int, str]:
    """(thread id, thread name) of an event inside its rank's process."""
    if is_comm(ev["kind"], ev.get("group")):
        return (2, "comm: shard group") if ev.get("group") == "shard" else (3, "comm: sync group")
    return 1, "compute"


def chrome_trace(events: list[dict[str, Any]], cfg: RunConfig | None = None,
                 overlap: Overlap | None = None) -> dict[str, Any]:
    """The trace of `events`; `overlap` (default: computed from `events`) splits each collective."""
    ov = overlap if overlap is not None else Overlap(events)
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    for ev in events:
        pid = ev["rank"]
        tid, tname = lane(ev)
        if (pid, -1) not in seen:
            seen.add((pid, -1))
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"rank {pid} (replica {ev['replica']}, shard {ev['shard']})"}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        if (pid, tid) not in seen:
            seen.add((pid, tid))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}})
        name = ev["kind"] if ev.get("unit") is None else f"{ev['kind']} u{ev['unit']}"
        args = {"step": ev["step"], "unit": ev.get("unit"), "bytes": ev.get("bytes", 0),
                "group": ev.get("group"), **(ev.get("data") or {})}
        if tid != 1:
            sp = ov.split(ev)
            args.update(hidden_ms=sp.hidden * 1e3, exposed_ms=sp.exposed * 1e3, other_ms=sp.other * 1e3)
        out.append({
            "ph": "X", "name": name, "cat": ev["kind"], "pid": pid, "tid": tid,
            "ts": ev["t0"] * 1e6, "dur": max(ev["t1"] - ev["t0"], 0.0) * 1e6,
            "args": args,
        })
    meta = {"method": cfg.method, "shards": cfg.shards, "replicas": cfg.replicas} if cfg else {}
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": meta}
