"""Checks for notebook 01 (synchronous data parallel): an all-reduce built from two collectives, on plain tensors and
then run by every rank of a real run (`grad_all_reduce_rule`, edit_lab/rules/, judged by the run's losses and
checkpoints against the built-in all-reduce's run), and what a straggler costs.

Synchronous training all-reduces every gradient shard over the sync group every step, so the
slowest replica sets everybody's pace: the others stand blocked in that all-reduce. The sizes
(`model_parameters`, `sharded_values`) are shared with the later notebooks' checks.
"""

from __future__ import annotations

from typing import Any

from edit_course.exercises import (
    CheckResult,
    correct,
    judge_number,
    not_a_function,
    not_answered,
    not_yet,
    reference_run,
    run_a_rule,
    short_error,
    show,
)

BYTES_PER_VALUE = 4  # float32 gradients


def model_parameters(model: str) -> int:
    """P: the model's parameter count (from its size, without building it)."""
    from edit_lab.core.model import get_size

    return get_size(model).num_params()


def sharded_values(model: str, shards: int) -> int:
    """Values one rank holds of the whole model: its shard of every unit's buffer, padded to a multiple of S
    (as edit_lab.core.sharding.UnitLayout pads it)."""
    from edit_lab.core.model import get_size

    size = get_size(model)
    units = [size.root_params()] + [size.block_params()] * size.n_layers
    return sum(-(-n // shards) for n in units)


def check_throughput_fraction(answer: Any, replicas: int = 8, factor: float = 3.0) -> CheckResult:
    """Fraction of the straggler-free tokens/s that `sync` reaches with one replica `factor`× slower."""
    want = 1.0 / factor
    return judge_number(
        answer, want, what="a fraction between 0 and 1", tol=0.01, unit="fraction",
        hint="every step lasts as long as the slowest replica's step; the number of replicas does not enter.",
        named=[(lambda got: abs(got - factor) <= 0.01,
                f"is the slowdown factor itself; the question asks what fraction of the straggler-free tokens/s "
                f"is left, a number between 0 and 1.")],
        why=(f"Each step every one of the {replicas} replicas waits for the slowest, which takes "
             f"{factor:g}× as long, so all of them make 1/{factor:g} of their progress: one slow replica out of "
             f"{replicas} costs as much as all of them being slow."),
        right=(f"Correct: 1/{factor:g} ≈ {want:.3f}, whether {replicas} replicas or 2: synchronous training "
               f"runs at the slowest replica's pace."))


# --- a code exercise: all-reduce = reduce-scatter, then all-gather ------------------------------------


def reference_all_reduce_mean(grads: list) -> list:
    """What the sync group's gradient all-reduce gives every rank: the element-wise mean of all inputs."""
    import torch

    mean = torch.stack([g.detach().to(torch.float64) for g in grads]).mean(0)
    return [mean.clone() for _ in grads]


def check_all_reduce_mean(fn: Any) -> CheckResult:
    """Does `fn(grads) -> list of tensors` give every rank the mean of `grads`, as the lab's all-reduce does?

    Tried on groups of 2, 3 and 4 ranks with tensors whose length the group size divides. Never raises:
    the notebook ships `fn` wrong on purpose; a wrong one prints "Not yet" with the reason (a falsy result).
    """
    import torch

    if (refused := not_a_function(fn, "fn(grads) -> list of tensors, one per rank")) is not None:
        return refused
    gen = torch.Generator().manual_seed(0)
    for ranks in (2, 3, 4):
        grads = [torch.randn(4 * ranks, generator=gen, dtype=torch.float64) for _ in range(ranks)]
        inputs = [g.clone() for g in grads]
        want = reference_all_reduce_mean(grads)[0]
        try:
            got = fn(inputs)
        except Exception as exc:  # the reader's code: any failure is an answer to explain, not a crash
            return not_yet(f"with {ranks} ranks your function raised {short_error(exc)}")
        if not isinstance(got, (list, tuple)) or len(got) != ranks:
            return not_yet(f"with {ranks} ranks, return a list of {ranks} tensors (one per rank), "
                           f"not {type(got).__name__}"
                           + (f" of length {len(got)}" if isinstance(got, (list, tuple)) else ""))
        try:
            got = [torch.as_tensor(t, dtype=torch.float64).reshape(-1) for t in got]
        except Exception as exc:
            return not_yet(f"with {ranks} ranks your function returned {show(got)}, which is not a list of tensors "
                           f"({short_error(exc)}).")
        if any(t.numel() != want.numel() for t in got):
            return not_yet(f"every rank must receive the whole tensor ({want.numel()} values); you gave "
                           f"{[t.numel() for t in got]}: an all-gather is missing after the reduce-scatter.")
        if all(torch.allclose(t, g) for t, g in zip(got, grads)):  # the notebook's shipped TODO
            return not_answered("every rank still holds its own gradient (the shipped TODO): nothing is exchanged "
                                "yet, and the replicas would take different optimizer steps and drift apart. Use "
                                "reduce_scatter_mean, then all_gather.")
        total = torch.stack(grads).sum(0)
        if all(torch.allclose(t, total) for t in got):
            return not_yet(f"that is the sum over the {ranks} ranks; the lab averages (divides by the group size), "
                           f"so the step does not grow with the number of replicas.")
        if not all(torch.allclose(t, got[0]) for t in got):
            return not_yet("the ranks disagree: after an all-reduce every rank holds the very same values.")
        if not torch.allclose(got[0], want):
            return not_yet(f"with {ranks} ranks rank 0 got {got[0][:3].tolist()} …, "
                           f"the mean is {want[:3].tolist()} ….")
    return correct("Correct: a reduce-scatter then an all-gather is an all-reduce. Each rank sends and receives "
                   "about 2·(n−1)/n of the tensor, whatever the number of ranks n: that is how a ring all-reduce "
                   "works.")


def check_slowdown_prediction(prediction: Any, measured: float, factor: float,
                              expected: float | None = None) -> CheckResult:
    """Predict, then run: tokens/s with one replica `factor`× slower, as a fraction of the baseline's.

    `expected`: the cost model's s / (s + p) from the runs (`edit_course.lessons.cost_model`), said in the answer;
    the prediction is judged against the measurement."""
    from edit_course.exercises import compare_prediction

    model = (f" The cost model, from this run's step and pause, expects s / (s + p) = {expected:.2f}."
             if expected is not None else "")
    why = (f"Every step lasts as long as the straggler's, but the straggler stretches only its own compute (forward, "
           f"backward, optimizer), never a collective or the waiting: a step of s ms gains its pause p, so the "
           f"fraction is s / (s + p), above 1/{factor:g} = {1 / factor:.2f} (the fraction only if compute were all "
           f"of a step).{model}")
    return compare_prediction(prediction, measured, what="tokens/s with the straggler ÷ without", why=why,
                              rel_tol=0.15)


# --- the same all-reduce, run by every rank of a real run ---------------------------------------------

LOSS_RTOL = 1e-5  # the rule's losses against the built-in run's: the summation order may differ, nothing else
AGREE_RTOL = 1e-6  # the replicas' parameters after a step, against replica 0's (of the largest |value|)
JUDGED = dict(inner_optimizer="sgd", grad_clip=0.0, checkpoint_every=1)  # see check_all_reduce_in_a_run


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _checkpoints(run_dir: Any) -> list[tuple[int, list]]:
    """(the step after which it was taken, every rank's parameter shards) of each of a run's checkpoints."""
    from pathlib import Path

    import torch

    out = []
    for ckpt in sorted((Path(run_dir) / "checkpoints").glob("sync-*")):
        manifest = _json(ckpt / "manifest.json")
        shards = [torch.load(ckpt / f"rank{r}.pt", weights_only=False)["shards"]
                  for r in range(int(manifest["world_size"]))]
        out.append((int(manifest["step"]) - 1, shards))
    return out


def _json(path: Any) -> Any:
    import json
    from pathlib import Path

    return json.loads(Path(path).read_text())


def replicas_apart(checkpoints: list[tuple[int, list]], shards: int) -> tuple[int, int, float] | None:
    """(step, replica, largest difference) of the first step after which a replica's parameters differ from
    replica 0's beyond AGREE_RTOL; None when the replicas agree after every checkpointed step."""
    for step, ranks in checkpoints:
        for rank, mine in enumerate(ranks):
            replica, shard = divmod(rank, shards)
            if replica == 0:
                continue
            for p, q in zip(mine, ranks[shard]):  # the same shard of replica 0
                diff = float((p - q).abs().max()) if p.numel() else 0.0
                if diff > AGREE_RTOL * max(1.0, float(q.abs().max()) if q.numel() else 0.0):
                    return step, replica, diff
    return None


def update_ratio(rule_ckpts: list[tuple[int, list]], ref_ckpts: list[tuple[int, list]]) -> float | None:
    """How far rank 0's parameters moved in the second checkpointed step with the rule, over how far they moved
    with the built-in all-reduce (plain SGD: the ratio of the gradients' sizes); None without two checkpoints."""
    import torch

    if len(rule_ckpts) < 2 or len(ref_ckpts) < 2:
        return None

    def moved(ckpts: list[tuple[int, list]]) -> float:
        return float(torch.cat([(b - a).reshape(-1) for a, b in zip(ckpts[0][1][0], ckpts[1][1][0])]).norm())

    ref = moved(ref_ckpts)
    return moved(rule_ckpts) / ref if ref > 0 else None


def train_losses(run: Any) -> dict[tuple[int, int], float]:
    """(step, replica) -> that replica's training loss at that step (metrics.jsonl: merged over its ranks)."""
    return {(int(m["step"]), int(m["replica"])): float(m["loss"]) for m in run.metrics if m.get("kind") == "train"}


def builtin_reference(cfg: Any, out: Any) -> Any:
    """The run of `cfg` with the built-in all-reduce, in `<out>-builtin` next to `out` (reused when it is there)."""
    return reference_run(cfg.replace(grad_all_reduce_rule=None), out, "builtin")


def _stand_in_answers(fn: Any, replicas: int) -> list | None:
    """The reader's raw answers on in-process stand-in collectives (no run), or None when it fails there."""
    import torch

    from edit_lab.rules import on_stand_ins

    gen = torch.Generator().manual_seed(1)
    try:
        return on_stand_ins(fn, [torch.randn(4 * replicas, generator=gen) for _ in range(replicas)], timeout_s=2.0)
    except Exception:  # noqa: BLE001 - refused by the run's validation, with the reason
        return None


def check_all_reduce_in_a_run(fn: Any, base: Any, out: Any) -> CheckResult:
    """Run the reader's all-reduce on every rank of a real run, and judge it by that run's results.

    `fn(grad, reduce_scatter, all_gather)` is shipped to the ranks as source (`edit_lab.rules`, the RunConfig
    field `grad_all_reduce_rule`) and called by every rank for each unit's gradient shard at every step of a
    `method="sync"` run of `base` written to `out` (overwritten); `reduce_scatter` returns this rank's slice of the
    mean over the sync group, `all_gather` every replica's piece, both the run's real collectives. A reference run
    with the built-in all-reduce is launched into `<out>-builtin` (reused when it already holds this very run).
    Both train with plain SGD, unclipped, and checkpoint after every step (`JUDGED`): AdamW and the gradient clip
    divide a gradient's scale away, so a sum would pass unseen, and the checkpoints hold every replica's
    parameters. Right: the replicas' parameters agree after every step (within 1e-6), and every training loss and
    the final validation loss equal the built-in run's within 1e-5 (relative; the summation order may differ).
    Wrong, with the reason: replicas that drift apart (each kept its own gradient, or took a different one), the
    same gradient everywhere but not the mean (the sum: R× too large), a rule refused before launch (it fails on
    the stand-in collectives or answers the wrong shape: a reduce-scatter without the all-gather), or one that
    failed on a rank (named). Never raises.
    """
    from edit_lab.rules import rule_source
    from edit_lab.runtime.launch import launch

    call = "fn(grad, reduce_scatter, all_gather) -> this rank's gradient after the all-reduce"
    if (refused := not_a_function(fn, call)) is not None:
        return refused
    if getattr(base, "method", None) != "sync" or getattr(base, "replicas", 0) < 2 or getattr(base, "steps", 0) < 2:
        return not_yet("`base` must be a method='sync' RunConfig with at least 2 replicas and 2 steps, so that "
                       "there is a gradient all-reduce to replace and a second step to judge it by.")
    answers = _stand_in_answers(fn, base.replicas)
    if answers is not None and all(a is None for a in answers):
        return not_answered("your function still returns None: return this rank's gradient after the all-reduce "
                            "(a tensor shaped as grad); this check then runs it on every rank of a real run.")
    cfg = base.replace(**JUDGED, grad_all_reduce_rule=None, out=str(out))
    run, failed = run_a_rule(lambda: launch(cfg.replace(grad_all_reduce_rule=rule_source(fn)), overwrite=True))
    if failed is not None:
        return failed
    try:
        ref = builtin_reference(cfg, out)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the reference run with the built-in all-reduce did not finish: {short_error(e, 300)}")
    try:
        mine, theirs = train_losses(run), train_losses(ref)
        val, ref_val = run.summary.get("final_val_loss"), ref.summary.get("final_val_loss")
        rule_ckpts, ref_ckpts = _checkpoints(run.path), _checkpoints(ref.path)
        collectives = sum(1 for e in run.events_of("grad_all_reduce", rank=0) if e.get("group") == "sync")
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the run's records could not be read: {short_error(e, 300)}")
    R, steps = cfg.replicas, cfg.steps
    off = {k: _rel(mine[k], theirs[k]) for k in theirs if k in mine}
    worst = max(off, key=off.get) if off else None
    loss_line = (f"their losses differ from the built-in run's from step {min(s for (s, _), v in off.items() if v > LOSS_RTOL)} "
                 f"on (by up to {off[worst]:.2g} relative, at step {worst[0]})" if worst is not None and off[worst] > LOSS_RTOL
                 else "")
    apart = replicas_apart(rule_ckpts, cfg.shards)
    if apart is not None:
        step, replica, diff = apart
        why = ("your function called neither reduce_scatter nor all_gather, so nothing crossed the replicas: each "
               "stepped with its own gradient" if collectives == 0 else
               "the replicas were given different gradients by your function")
        return not_yet(f"after step {step} replica {replica}'s parameters differ from replica 0's (by up to "
                       f"{diff:.3g}): {why}, and the replicas drift apart" + (f"; {loss_line}" if loss_line else "")
                       + ". After an all-reduce every rank holds the very same mean.")
    if len(rule_ckpts) < steps or set(mine) != set(theirs):
        return not_yet(f"the run recorded {len(rule_ckpts)} checkpoints and {len(mine)} losses for {steps} steps × "
                       f"{R} replicas: it did not train as the built-in run did.")
    val_off = _rel(val, ref_val) if val is not None and ref_val is not None else float("inf")
    if loss_line or val_off > LOSS_RTOL:
        ratio = update_ratio(rule_ckpts, ref_ckpts)
        if ratio is not None and abs(ratio - R) <= 0.1 * R:
            return not_yet(f"every replica took the same step, but a {ratio:.2f}× larger one than the built-in "
                           f"all-reduce's with {R} replicas: that is the sum of the gradients, R× the mean, so "
                           f"{loss_line or 'the final validation loss differs'}. The lab averages: a step must not "
                           f"grow with the number of replicas.")
        size = f" (your steps were {ratio:.3g}× the built-in's size)" if ratio is not None else ""
        return not_yet(f"every replica took the same step, but not the mean gradient's{size}: "
                       f"{loss_line or f'the final validation loss differs by {val_off:.2g} relative'}.")
    return correct(f"Correct: your all-reduce ran on all {cfg.world_size} ranks, {collectives} collectives per rank "
                   f"over {steps} steps; the replicas' parameters were identical after every step, and the training "
                   f"losses and the final validation loss ({val:.4f}) equal the built-in all-reduce's (largest "
                   f"relative difference {max(off.values()):.1g}). A reduce-scatter then an all-gather is what a ring "
                   f"all-reduce does.")
