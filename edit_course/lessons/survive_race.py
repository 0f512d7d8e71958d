"""Notebook 10's race: survival against a restart from a checkpoint, on the virtual clock, over seeds.

Each seed draws 2 to 4 deaths over the run (`draw_deaths`: replicas and steps at random, after the first sync and at
least two rounds before the end, a replica dying again only after its replacement is back) in a DiLoCo run of
`replicas` × 1 shard of nano, and runs the same training two ways on the virtual clock (every rank a thread, time
from the cost model, so the race is the same on any machine):

- **survive**: `survive=True`, each death a SIGKILL on the virtual clock (`fault_replica`, then
  `fault_replica_more`), the survivors go on, each replacement joins `rejoin_after` steps after its death;
- **restart**: each death ends the run; it is restarted from its newest checkpoint (one every `checkpoint_every`
  syncs, `--resume`) after `restart_s` virtual seconds (process start, rendezvous, the checkpoint's load: a constant
  of this race, stated in every row, since the virtual clock does not model a job scheduler), and trains on until
  the next death, and so on to the end. Each segment is run to the end without its death (the virtual clock is
  deterministic, so up to the death it is the run that dies there) and cut at its death: its validations before it,
  its time to it, its newest checkpoint at or before it.

What a row holds (definitions, checked on hand-built values by tests/course/unit/test_survive_race.py):

- `lost_tokens`: tokens trained and then thrown away. Survive: `summary.json`'s `survival.lost_tokens` (per death,
  the dead replica's from its last sync to its replacement's join). Restart: every replica's since the checkpoint,
  Σ over the deaths of (death step − checkpoint step) × replicas × tokens per replica-step.
- `end_s`: virtual seconds to the run's last record (its last step, or the validation after it). Restart: Σ over
  the segments of the time to their death + `restart_s`, then the last segment's own time.
- `val_at_equal_time`: the validation loss each way at the survive run's end time: the newest validation at or
  before it of the model each way holds (the restart's: its checkpoint's until the resumed run validates again).
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from edit_course.verdict import Verdict, verdict


def draw_deaths(seed: int, replicas: int, steps: int, warmup: int, tau: int, rejoin_after: int = 10,
                most: int = 4) -> list[tuple[int, int]]:
    """The seed's deaths, (replica, step) by step: 2 to `most` of them (fewer where a short run cannot hold that
    many), each any replica at a step after the first
    sync and at least 2τ before the end, more than τ apart (the virtual clock refuses two between the same two
    syncs), a replica dying again only once its replacement is surely
    back (`rejoin_after` + τ steps after its death), never fewer than half the replicas alive; drawn again until
    the schedule holds (the config's own check, `fault_replica_more`, would refuse it otherwise)."""
    rng = random.Random(seed)
    first, last = warmup + tau + 1, steps - 2 * tau
    for n in range(min(rng.randint(2, most), last - first), 0, -1):  # fewer where a short run cannot hold them
        for _ in range(200):
            drawn = [(rng.randrange(replicas), s) for s in sorted(rng.sample(range(first, last), n))]
            if any(b[1] - a[1] <= tau for a, b in zip(drawn, drawn[1:])):  # the virtual clock's rule (fault_replica_more)
                continue
            back: dict[int, int] = {}
            for r, s in drawn:
                if s <= back.get(r, -1) or sum(1 for b in back.values() if b >= s) + 1 > replicas // 2:
                    break
                back[r] = s + rejoin_after + tau
            else:
                return drawn
    raise ValueError(f"no death fits a run of {steps} steps (warm-up {warmup}, τ {tau})")


def lost_by_restarts(deaths: Sequence[int], checkpoints: Sequence[int], replicas: int, tokens: int) -> int:
    """Tokens a chain of restarts throws away: at each death, every replica's steps since the checkpoint it goes
    back to (`checkpoints[k]`, the newest at or before death k)."""
    return sum((d - c) * replicas * tokens for d, c in zip(deaths, checkpoints))


def restart_timeline(segments: Sequence[tuple[Sequence[tuple[int, float, float]], int, float, float | None]],
                     restart_s: float) -> tuple[list[tuple[int, float, float]], float]:
    """The restarts' validations (step, loss, time since the first start) and the time the last segment starts.

    `segments`: per run of the chain, (its validations (step, loss, t on its own clock), the step it starts from (0,
    or its checkpoint's), the step up to which its validations stand (the next checkpoint's step: a validation after
    it is of a model the next restart throws away; inf for the last), the time of its death on its own clock (None
    for the last)). Each segment's clock starts where the previous one died plus `restart_s`; a resumed run's rows
    at or before its checkpoint (carried over, on the old clock) are left out."""
    out, offset = [], 0.0
    for evals, start, keep_until, death_t in segments:
        out += [(s, v, offset + t) for s, v, t in evals if start < s <= keep_until]
        if death_t is None:
            break
        offset += death_t + restart_s
    return out, offset


def loss_at(evals: Sequence[tuple[int, float, float]], t: float) -> float | None:
    """The newest validation loss at or before time `t` (None if none)."""
    seen = [(tt, v) for _, v, tt in evals if tt <= t + 1e-12]
    return max(seen)[1] if seen else None


def _evals(run: Any) -> list[tuple[int, float, float]]:
    return [(int(m["step"]), float(m["val_loss"]), float(m["t"])) for m in run.metrics if m.get("kind") == "eval"]


def _step_end(run: Any, step: int) -> float:
    """Virtual time at which every replica has ended `step` (the next step's start)."""
    return max(float(m["t"]) for m in run.metrics if m.get("kind") == "train" and int(m["step"]) == step)


def _end(run: Any, after: int = -1) -> float:
    """Virtual time of the run's last record (its last step, or the validation after it) among the steps after
    `after`: a resumed run also lists the rows it carried over from before its checkpoint, on the old clock."""
    return max(float(m["t"]) for m in run.metrics
               if m.get("kind") in ("train", "eval") and m.get("t") is not None and int(m["step"]) > after)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The library's warnings (every survivor says its sync failed; each rank of the dead replica says it will
    die) would print a screenful per seed: the race's rows say what happened."""
    log = logging.getLogger("edit_lab")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the faults' "will kill ... on purpose" lines
            yield
    finally:
        log.setLevel(level)


def race_seed(seed: int, out: Path, *, replicas: int = 16, steps: int = 120, warmup: int = 10, tau: int = 5,
              rejoin_after: int = 10, checkpoint_every: int = 2, restart_s: float = 2.0,
              eval_every: int = 10, deaths: Sequence[tuple[int, int]] | None = None) -> dict[str, Any]:
    """One seed of the race (both ways); the row of its numbers. `deaths`: the schedule, (replica, step) by step, to
    place the deaths by hand (a test's edge); default `draw_deaths`' for the seed."""
    from edit_lab import RunConfig

    deaths = list(deaths) if deaths is not None else draw_deaths(seed, replicas, steps, warmup, tau, rejoin_after)
    base = RunConfig(method="diloco", shards=1, replicas=replicas, steps=steps, warmup_steps=warmup,
                     sync_interval=tau, model="nano", seq_len=32, batch_size=4, eval_every=eval_every,
                     eval_batches=1, progress=False, clock="virtual", seed=seed)
    tokens = base.data.seq_len * base.data.batch_size  # per replica-step (one shard)
    with _quiet():
        return _race_seed(base, seed, deaths, tokens, out, rejoin_after, checkpoint_every, restart_s)


def _checkpoint_at_or_before(run_dir: Path, step: int) -> tuple[Path | None, int]:
    """The newest checkpoint a run saved at or before `step` (the sync at a death's step comes before it), and its
    step (None, 0: none yet; the restart then goes back to the checkpoint the run started from)."""
    found = [(int((c / "rank0.step").read_text()), c) for c in sorted((run_dir / "checkpoints").glob("sync-*"))]
    found = [(s, c) for s, c in found if s <= step]
    return (found[-1][1], found[-1][0]) if found else (None, 0)


def _race_seed(base: Any, seed: int, deaths: list[tuple[int, int]], tokens: int, out: Path, rejoin_after: int,
               checkpoint_every: int, restart_s: float) -> dict[str, Any]:
    from edit_lab import launch

    steps, replicas = base.steps, base.replicas
    (r0, d0), more = deaths[0], ",".join(f"{r}@{d}" for r, d in deaths[1:])
    survive = launch(base.replace(survive=True, fault_replica=r0, fault_replica_step=d0, fault_replica_more=more,
                                  rejoin_step=min(steps - 1, d0 + rejoin_after), out=str(out / f"s{seed}-survive")),
                     overwrite=True)
    # the restart: segment k starts from segment k-1's checkpoint and dies at death k (the last runs to the end)
    ckpt, start, runs = None, -1, []  # the first segment keeps every validation before its death
    for _, d in deaths + [(None, None)]:
        seg = launch(base.replace(checkpoint_every=checkpoint_every, resume=str(ckpt) if ckpt else None,
                                  out=str(out / f"s{seed}-restart{len(runs)}")), overwrite=True)
        if d is None:
            runs.append((seg, start, float("inf"), None))
            break
        # up to its death the run to the end is the one that dies there; a death right after its checkpoint's step
        # comes at the resumed run's start (its rows at or before the checkpoint are carried over, on the old clock)
        death_t = _step_end(seg, d - 1) if d - 1 > start else 0.0
        found, nxt = _checkpoint_at_or_before(seg.path, d)
        if found is None:  # no checkpoint of its own before the death: back to the one it started from
            nxt = max(start, 0)
        else:
            ckpt = found
        runs.append((seg, start, nxt, death_t))
        start = nxt
    restart, last_start = restart_timeline([(_evals(r), a, b, t) for r, a, b, t in runs], restart_s)
    ckpt_steps = [b for _, _, b, t in runs if t is not None]
    end = last_start + _end(runs[-1][0], after=runs[-1][1])
    s_end, s_evals = _end(survive), _evals(survive)
    return {"seed": seed, "replicas": replicas, "steps": steps, "deaths": [list(x) for x in deaths],
            "checkpoint_steps": ckpt_steps, "restart_s": restart_s,
            "survive": {"lost_tokens": int(survive.summary["survival"]["lost_tokens"]), "end_s": s_end,
                        "val_at_equal_time": loss_at(s_evals, s_end), "val_end": s_evals[-1][1]},
            "restart": {"lost_tokens": lost_by_restarts([d for _, d in deaths], ckpt_steps, replicas, tokens),
                        "end_s": end, "val_at_equal_time": loss_at(restart, s_end),
                        "val_end": restart[-1][1] if restart else None}}


def race(seeds: Sequence[int], out: Path, **kw: Any) -> list[dict[str, Any]]:
    return [race_seed(s, Path(out), **kw) for s in seeds]


def survival_loses_less(rows: Sequence[Mapping[str, Any]]) -> Verdict:
    """Survival throws away fewer tokens than a restart, in every seed."""
    pairs = [(r["survive"]["lost_tokens"], r["restart"]["lost_tokens"]) for r in rows]
    return verdict("Survival throws away fewer tokens than a restart from the checkpoint, in every seed",
                   bool(pairs) and all(s < r for s, r in pairs),
                   "; ".join(f"seed {r['seed']}: {s:,} against {x:,}" for r, (s, x) in zip(rows, pairs)),
                   "a death right after a checkpoint costs a restart little, and survival the dead replica's "
                   "steps until its replacement")


def survival_ahead_at_equal_time(rows: Sequence[Mapping[str, Any]]) -> Verdict:
    """At the survive run's end time the restart has a higher validation loss (or none yet), in every seed."""
    def ahead(r: Mapping[str, Any]) -> bool:
        x = r["restart"]["val_at_equal_time"]
        return x is None or r["survive"]["val_at_equal_time"] < x

    def show(v: float | None) -> str:
        return "none yet" if v is None else f"{v:.3f}"

    return verdict("At the time survival finishes, its validation loss is below the restarted run's, in every seed",
                   bool(rows) and all(ahead(r) for r in rows),
                   "; ".join(f"seed {r['seed']}: {show(r['survive']['val_at_equal_time'])} against "
                             f"{show(r['restart']['val_at_equal_time'])} at {r['survive']['end_s']:.2f} s "
                             f"(restart ends at {r['restart']['end_s']:.2f} s)" for r in rows),
                   "the restart caught up: a short restart_s and a checkpoint just before the death")
