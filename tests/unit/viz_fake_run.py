"""A synthetic run directory with exactly known events, for the analysis and figure unit tests.

Real runs are tested in tests/distributed/test_viz_runs.py; here every duration is chosen, so the
tests can assert exact sums (hidden + exposed, capacity bound, bar counts) in milliseconds of CPU.

Layout: 2 shards × 2 replicas, 4 steps, 3 units (nano), method `edit`, warm-up 1, sync interval 2,
so step 0 all-reduces gradients, the anchor is created at step 1 and the replicas sync at step 3
(and a final sync at step 4). Every step of every rank:

    all_gather  unit u        blocking, 10 ms, exposed 10 ms (+0.1 ms over, as real blocking ones report)
    compute_fwd unit u        5 ms
    compute_bwd unit u        5 ms
    reduce_scatter unit u     async, 20 ms, exposed 5 ms, with a 5 ms `wait`
    grad_all_reduce unit u    step 0 only: async, 30 ms, exposed 12 ms, with a 12 ms `wait`
    optimizer                 2 ms
    sync (step 3, 4):         sync_decisions blocking 4 ms; sync_reduce unit u async 40 ms, exposed 8 ms
                              (+ `wait`); outer_step 1 ms
    straggle                  replica 1, step 2: 50 ms
    legacy                    rank 0, step 2: a shard-group `all_reduce` recorded without data.exposed
    mystery                   rank 3, step 1: an event kind no figure knows
"""

from __future__ import annotations

import json
from pathlib import Path

from edit_lab import RunConfig

S, R, STEPS, UNITS = 2, 2, 4, 3
STEP_S = 1.0
AG, FWD, BWD, RS, RS_EXP, GAR, GAR_EXP, OPT = 0.010, 0.005, 0.005, 0.020, 0.005, 0.030, 0.012, 0.002
DEC, SR, SR_EXP, OUTER, STRAGGLE = 0.004, 0.040, 0.008, 0.001, 0.050
SYNC_STEPS = (3, 4)
TOKENS = 256  # per rank and step


def _ev(rank, step, kind, t0, t1, unit=None, nbytes=0, group=None, **data):
    return {"rank": rank, "replica": rank // S, "shard": rank % S, "step": step, "unit": unit, "kind": kind,
            "t0": t0, "t1": t1, "bytes": nbytes, "group": group, "data": data}


def rank_events(rank: int) -> list[dict]:
    out = []
    for step in range(STEPS + 1):  # step STEPS: the final sync and eval, after training
        t = step * STEP_S
        if step in SYNC_STEPS:
            out.append(_ev(rank, step, "sync_decisions", t, t + DEC, nbytes=96, group="sync", exposed=DEC,
                           overlapped=False))
            t += DEC
            for u in range(UNITS):
                out.append(_ev(rank, step, "sync_reduce", t, t + SR, unit=u, nbytes=1000, group="sync",
                               exposed=SR_EXP, overlapped=True))
                out.append(_ev(rank, step, "wait", t + SR - SR_EXP, t + SR, unit=u, group="sync", on="sync_reduce"))
                out.append(_ev(rank, step, "outer_step", t + SR, t + SR + OUTER, unit=u, skipped=False))
                t += SR + OUTER
        if step == STEPS:
            out.append(_ev(rank, step, "eval", t, t + 0.1))
            continue
        for u in range(UNITS):
            out.append(_ev(rank, step, "all_gather", t, t + AG, unit=u, nbytes=2000, group="shard",
                           exposed=AG + 1e-4, overlapped=False))
            t += AG
            out.append(_ev(rank, step, "compute_fwd", t, t + FWD, unit=u, **({"part": "embed"} if u == 0 else {})))
            t += FWD
        for u in reversed(range(UNITS)):
            out.append(_ev(rank, step, "compute_bwd", t, t + BWD, unit=u))
            out.append(_ev(rank, step, "reduce_scatter", t, t + RS, unit=u, nbytes=2000, group="shard",
                           exposed=RS_EXP, overlapped=True))
            out.append(_ev(rank, step, "wait", t + RS - RS_EXP, t + RS, unit=u, group="shard", on="reduce_scatter"))
            t += RS
        if step == 0:
            for u in range(UNITS):
                out.append(_ev(rank, step, "grad_all_reduce", t, t + GAR, unit=u, nbytes=1000, group="sync",
                               exposed=GAR_EXP, overlapped=True))
                out.append(_ev(rank, step, "wait", t + GAR - GAR_EXP, t + GAR, unit=u, group="sync",
                               on="grad_all_reduce"))
                t += GAR
        if step == 2 and rank // S == 1:
            out.append(_ev(rank, step, "straggle", t, t + STRAGGLE, reason="consistent", planned=STRAGGLE))
            t += STRAGGLE
        if step == 2 and rank == 0:
            out.append(_ev(rank, step, "all_reduce", t, t + 0.003, nbytes=8, group="shard"))  # no data.exposed
            t += 0.003
        if step == 1 and rank == 3:
            out.append(_ev(rank, step, "mystery", t, t + 0.001))
        out.append(_ev(rank, step, "optimizer", t, t + OPT))
    return out


def step_end(step: int, replica: int) -> float:
    """When replica `replica` finished training step `step` (its metrics row's t)."""
    return step * STEP_S + 0.5 + (0.05 if replica == 1 else 0.0)


def penalty_rows() -> list[dict]:
    rows = []
    for step in SYNC_STEPS:
        for u in range(UNITS):
            outlier_rep = 1 if (step == 4 and u == 1) else None
            for rep in range(R):
                out = rep == outlier_rep
                g = 50.0 if out else 0.5 + 0.1 * rep
                w = 0.0 if out else (1.0 if outlier_rep is not None else 0.5)
                rows.append({"kind": "penalty", "step": step, "unit": u, "replica": rep, "G": g,
                             "z": 40.0 if out else 0.5, "threshold": 3.0 if step == 4 else None, "outlier": out,
                             "weight": w, "clip": 0.8 if u == 2 else 1.0, "skipped": False})
    return rows


def make_fake_run(path: Path, method_info: dict | None = None, penalty: bool = True) -> Path:
    """Write the synthetic run directory at `path` and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig(method="edit", shards=S, replicas=R, steps=STEPS, model="nano", seq_len=32, batch_size=4,
                    warmup_steps=1, sync_interval=2, eval_every=2, progress=False, out=str(path))
    (path / "config.json").write_text(cfg.to_json())
    for rank in range(S * R):
        with open(path / f"events-rank{rank}.jsonl", "w") as f:
            for e in rank_events(rank):
                f.write(json.dumps(e) + "\n")
    metrics = []
    for step in range(STEPS):
        for rep in range(R):
            metrics.append({"kind": "train", "step": step, "replica": rep, "loss": 5.0 - 0.5 * step + 0.1 * rep,
                            "tokens": TOKENS * S, "t": step_end(step, rep), "dt": 0.5})
    metrics += [{"kind": "eval", "step": 2, "val_loss": 4.2, "val_loss_spread": 0.0},
                {"kind": "eval", "step": 4, "val_loss": 3.9, "val_loss_spread": 0.0}]
    with open(path / "metrics.jsonl", "w") as f:
        for m in metrics:
            f.write(json.dumps(m) + "\n")
    with open(path / "penalty.jsonl", "w") as f:
        for p in penalty_rows() if penalty else []:
            f.write(json.dumps(p) + "\n")
    with open(path / "syncs.jsonl", "w") as f:
        for rec in [{"kind": "anchor", "step": 1}] + [{"kind": "sync", "step": s} for s in SYNC_STEPS]:
            f.write(json.dumps(rec) + "\n")
    # the mid-run eval happened on every rank after step 1 (its span carries step 1, its metric step 2)
    for rank in range(S * R):
        with open(path / f"events-rank{rank}.jsonl", "a") as f:
            f.write(json.dumps(_ev(rank, 1, "eval", 1.6, 1.7)) + "\n")
    wall = step_end(STEPS - 1, 1)
    summary = {
        "method": "edit", "shards": S, "replicas": R, "steps": STEPS, "model": "nano", "start_unix": 0.0,
        "wall_s": wall, "tokens": TOKENS * S * R * STEPS, "tokens_per_s": TOKENS * S * R * STEPS / wall,
        "step_time_s": wall / STEPS, "final_val_loss": 3.9, "final_train_loss": 3.55,
        "per_replica": {str(r): {"tokens": TOKENS * S * STEPS, "steps": STEPS,
                                 "tokens_per_s": TOKENS * S * STEPS / step_end(STEPS - 1, r), "sync_wait_s": 0.1,
                                 "final_train_loss": 3.5 + 0.1 * r} for r in range(R)},
        "memory": {str(k): {"params": 1000, "optimizer": 2000, "method_state": 2000, "peak_rss": 3 * 2**20}
                   for k in range(S * R)},
        "method_info": method_info or {"syncs": 2},
    }
    (path / "summary.json").write_text(json.dumps(summary))
    return path
