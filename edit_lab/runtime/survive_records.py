"""What a run that survived deaths says about them in `summary.json`: the views, the deaths, the loss, the costs.

Read from the launcher's rows (`survival.jsonl`: deaths, fencing, views) and the ranks' records (each survivor's
`detection`, `rollback`, `view`, `transfer`, `retry` rows, in `syncs.jsonl` for the first rank): plain data in,
plain data out, so a test and a lesson read the same numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edit_lab.config import RunConfig, deaths
from edit_lab.records import rundir
from edit_lab.registry import capabilities


def _ms(rows: list[dict[str, Any]], kind: str, field: str = "ms", **match: Any) -> list[float]:
    return [float(r[field]) for r in rows if r.get("kind") == kind and r.get(field) is not None
            and all(r.get(k) == v for k, v in match.items())]


def _stat(values: list[float]) -> dict[str, float] | None:
    return None if not values else {"n": len(values), "mean": sum(values) / len(values), "max": max(values)}


def lost_work(cfg: RunConfig, launcher: list[dict[str, Any]], syncs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per death: the replica-steps the run went without that replica, from its last sync (its Δ since then never
    reached the anchor) to the sync its replacement joined at (or the end), and their tokens.

    Read from the launcher's rows (each death, then the view that admitted its replacement, with the step it was
    asked at: a survivor that met two views between two syncs records only the newest) and the schedule of deaths
    (`config.deaths`: a replica's n-th death is its n-th scheduled one); the last sync is the last one whose members
    held the replica at or before its death step (DiLoCo's sync at that step comes before the death, EDiT's is
    inside a step the dead replica never began). Under `sync` every step syncs: it trained with the others up to its
    death. A death that no schedule names (a replacement fenced in its join: it never trained) counts from the step
    its join was asked at."""
    per_step = cfg.shards * cfg.data.batch_size * cfg.data.seq_len  # tokens a replica trains per step
    scheduled: dict[int, list[int]] = {}
    for r, step in deaths.schedule(cfg):
        scheduled.setdefault(r, []).append(step)
    member_syncs = [(int(x["step"]), x.get("members") or []) for x in syncs if x.get("kind") == "sync"]
    out, seen, last_back = [], {}, {}  # last_back: replica -> the step its latest replacement's join was asked at
    for i, death in enumerate(launcher):
        if death["kind"] != "death":
            continue
        r = death["replica"]
        n, seen[r] = seen.get(r, 0), seen.get(r, 0) + 1
        died_at = scheduled[r][n] if n < len(scheduled.get(r, [])) else None
        back = next((v for v in launcher[i + 1:] if v["kind"] == "view" and r in v.get("joined", ())), None)
        until = int(back["asked_at_step"]) if back else cfg.steps
        if died_at is None:  # a replacement fenced in its join: without the replica since that join was asked
            left_at = last_back.get(r, until)
        elif not capabilities(cfg.method).is_local_sgd:
            left_at = died_at
        else:
            left_at = max((s for s, members in member_syncs if r in members and s <= died_at),
                          default=cfg.schedule.warmup_steps)
        if back:
            last_back[r] = until
        out.append({"replica": r, "last_sync_step": left_at, "rejoined_at_step": until if back else None,
                    "replica_steps": until - left_at, "tokens": (until - left_at) * per_step})
    return out


def survival_summary(cfg: RunConfig, out: Path, launcher: list[dict[str, Any]], records: list[Any]) -> None:
    """Add `survival` to summary.json (its other keys are `rundir.SUMMARY_KEYS`, unchanged)."""
    every = [row for rec in records for row in rec.records]
    first = list(records[0].records) if records else []
    lost = lost_work(cfg, launcher, first)
    costs = {
        "launcher_detect_kill_ms": _stat([float(r["since_last_step_ms"]) for r in launcher if r["kind"] == "death"
                                          and r.get("exits") and r.get("since_last_step_ms") is not None]),
        "survivor_blocked_in_failed_sync_ms": _stat(_ms(every, "detection", "blocked_ms")),
        "rollback_ms": _stat(_ms(every, "rollback")),
        # from the failure to the new view's group built (waiting for the launcher's confirmation included)
        "view_change_after_failure_ms": _stat(_ms(every, "view", after="failure")),
        # a death's view met at a sync's start (no failure), and a replacement's view (the donor's hand-over in it)
        "view_change_at_sync_start_ms": _stat([r["ms"] for r in every if r.get("kind") == "view"
                                               and r.get("after") == "sync_start" and not r.get("joined")]),
        "view_change_join_ms": _stat([r["ms"] for r in every if r.get("kind") == "view" and r.get("joined")]),
        "transfer_donor_ms": _stat(_ms(every, "transfer", side="donor")),
        "transfer_joiner_ms": _stat(_ms(every, "transfer", side="joiner")),
        "retried_sync_ms": _stat(_ms(every, "retry")),
    }
    survival = {
        "views": [{k: r[k] for k in ("view", "members", "joined", "died", "reason", "t")} for r in launcher
                  if r["kind"] == "view"],
        "deaths": [{k: r.get(k) for k in ("replica", "view", "cause", "t")} for r in launcher if r["kind"] == "death"],
        "lost": lost,
        "lost_replica_steps": sum(x["replica_steps"] for x in lost),
        "lost_tokens": sum(x["tokens"] for x in lost),
        "costs_ms": costs,
        "on_failure": cfg.runtime.survive_on_failure,
    }
    path = out / rundir.SUMMARY
    summary = json.loads(path.read_text())
    summary["survival"] = survival
    path.write_text(json.dumps(summary, indent=2))
