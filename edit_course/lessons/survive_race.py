"""Notebook 10's race: survival against a restart from a checkpoint, on the virtual clock, over seeds.

Each seed draws one death (a replica and a step, uniformly, after the first sync and before the last two) in a
DiLoCo run of `replicas` × 1 shard of nano, and runs the same training three ways on the virtual clock (every rank
a thread, time from the cost model, so the race is the same on any machine):

- **survive**: `survive=True`, the replica dies (SIGKILL on the virtual clock: `faults.ReplicaDeath`), the
  survivors go on, a replacement joins `rejoin_after` steps later;
- **restart**: the same death without survival ends the run (`WorkerError`); it is restarted from its newest
  checkpoint (one every `checkpoint_every` syncs, `--resume`) after `restart_s` virtual seconds (process start,
  rendezvous, the checkpoint's load: a constant of this race, stated in every row, since the virtual clock does not
  model a job scheduler), and trains to the end.

What a row holds (definitions, checked on hand-built values by tests/course/unit/test_survive_race.py):

- `lost_tokens`: tokens trained and then thrown away. Survive: `summary.json`'s `survival.lost_tokens` (the dead
  replica's from its last sync to its replacement's join). Restart: every replica's since the checkpoint,
  (death step − checkpoint step) × replicas × tokens per replica-step.
- `end_s`: virtual seconds to the run's last record (its last step, or the validation after it). Restart: the death's time + `restart_s` + the resumed run's own.
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


def draw_death(seed: int, replicas: int, steps: int, warmup: int, tau: int) -> tuple[int, int]:
    """(replica, step) of the seed's death: any replica, a step after the first sync and at least 2τ before the end."""
    lo, hi = warmup + tau + 1, steps - 2 * tau
    if hi <= lo:
        raise ValueError(f"steps={steps} leaves no step to die at: a death falls in {lo}..{hi - 1} (after the first "
                         f"sync, 2τ before the end), so steps must be at least warmup + 3τ + 2 = {lo + 2 * tau + 1}")
    rng = random.Random(seed)
    return rng.randrange(replicas), rng.randrange(lo, hi)


def restart_timeline(death_t: float, restart_s: float, resumed_evals: Sequence[tuple[int, float, float]],
                     checkpoint_step: int, first_evals: Sequence[tuple[int, float, float]] = ()
                     ) -> list[tuple[int, float, float]]:
    """The restart's validations (step, loss, time since the first start): the first run's up to its checkpoint
    (the model the restart goes back to; `first_evals`, on the first run's clock), then the resumed run's own after
    the checkpoint's step, shifted by the death's time and the restart."""
    return ([(s, v, t) for s, v, t in first_evals if s <= checkpoint_step]
            + [(s, v, death_t + restart_s + t) for s, v, t in resumed_evals if s > checkpoint_step])


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
              eval_every: int = 10, death: tuple[int, int] | None = None) -> dict[str, Any]:
    """One seed of the race (both ways); the row of its numbers. `death`: (replica, step) instead of the seed's
    draw, to put a death where a question asks (right after a checkpoint, at the last step)."""
    from edit_lab import RunConfig

    replica, step = death if death is not None else draw_death(seed, replicas, steps, warmup, tau)
    base = RunConfig(method="diloco", shards=1, replicas=replicas, steps=steps, warmup_steps=warmup,
                     sync_interval=tau, model="nano", seq_len=32, batch_size=4, eval_every=eval_every,
                     eval_batches=1, progress=False, clock="virtual", seed=seed,
                     fault_replica=replica, fault_replica_step=step)
    tokens = base.data.seq_len * base.data.batch_size  # per replica-step (one shard)
    with _quiet():
        return _race_seed(base, seed, replica, step, tokens, out, rejoin_after, checkpoint_every, restart_s)


def _race_seed(base: Any, seed: int, replica: int, step: int, tokens: int, out: Path, rejoin_after: int,
               checkpoint_every: int, restart_s: float) -> dict[str, Any]:
    from edit_lab import WorkerError, launch

    steps, replicas = base.steps, base.replicas
    survive = launch(base.replace(survive=True, rejoin_step=min(steps - 1, step + rejoin_after),
                                  out=str(out / f"s{seed}-survive")), overwrite=True)
    plain = out / f"s{seed}-plain"
    try:
        launch(base.replace(checkpoint_every=checkpoint_every, out=str(plain)), overwrite=True)
        raise RuntimeError("the run without survival did not stop at its death")
    except WorkerError:
        pass
    ckpts = sorted((plain / "checkpoints").glob("sync-*"))
    ckpt_step = int((ckpts[-1] / "rank0.step").read_text()) if ckpts else 0
    resumed = launch(base.replace(fault_replica=-1, checkpoint_every=checkpoint_every, out=str(out / f"s{seed}-resumed"),
                                  resume=str(ckpts[-1]) if ckpts else None), overwrite=True)
    death_t = _step_end(survive, step - 1)  # the same schedule as the plain run's up to the death
    s_end = _end(survive)
    s_evals = _evals(survive)  # up to the death the same runs as the plain one: its validations are the plain's
    restart = restart_timeline(death_t, restart_s, _evals(resumed), ckpt_step,
                               [e for e in s_evals if e[0] < step])
    return {"seed": seed, "replicas": replicas, "steps": steps, "dead_replica": replica, "death_step": step,
            "checkpoint_step": ckpt_step, "restart_s": restart_s,
            "survive": {"lost_tokens": int(survive.summary["survival"]["lost_tokens"]), "end_s": s_end,
                        "val_at_equal_time": loss_at(s_evals, s_end), "val_end": s_evals[-1][1]},
            "restart": {"lost_tokens": (step - ckpt_step) * replicas * tokens,
                        "end_s": death_t + restart_s + _end(resumed, after=ckpt_step),
                        "val_at_equal_time": loss_at(restart, s_end), "val_end": restart[-1][1] if restart else None}}


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
