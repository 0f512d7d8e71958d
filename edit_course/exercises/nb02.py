"""Checks for notebook 02 (Local SGD and DiLoCo): the outer Nesterov step, the sync schedule, the bytes saved.

Nesterov's first outer step moves the anchor by lr·(1+μ)·Δ̄ (the momentum buffer starts at Δ̄ and
is looked ahead once more): `check_outer_step` runs the reader's step against the lab's
`OuterState`. The first sync that changes the model is at step W+τ (step W only creates the
anchors). A Local-SGD method sends one model shard over the sync group every τ steps instead of
one gradient shard every step. And the reader's outer step in a real run (`outer_step_rule`,
edit_lab/rules/): `check_outer_step_in_a_run` ships it to every rank and judges the run's losses
against the same run with the library's step.
"""

from __future__ import annotations

import math
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


def nesterov_first_step(lr: float, momentum: float) -> float:
    """The factor of Δ̄ by which torch's SGD(nesterov=True) moves its parameter on its first step."""
    return lr * (1.0 + momentum)


def first_model_sync(warmup: int, interval: int) -> int:
    """The first step whose parameters come from a sync that changed the model: W + τ."""
    return warmup + interval


def check_first_sync_step(answer: Any, warmup: int = 3, interval: int = 2) -> CheckResult:
    """With W warm-up steps and sync interval τ, at the start of which step is the model first synced?"""
    want = first_model_sync(warmup, interval)
    return judge_number(
        answer, want, what="a step number (a whole number)", whole=True,
        hint=("steps 0…W−1 are synchronous; at step W the anchors are created (a = θ, nothing changes); "
              "then τ local steps."),
        why=(f"Steps 0…{warmup - 1} all-reduce gradients; the 'sync' at step {warmup} only copies θ into the "
             f"anchor; then each replica trains alone for τ={interval} steps, and the first sync that averages "
             f"anything comes at the start of the step after those."),
        right=f"Correct: step {want}; then {want + interval}, {want + 2 * interval}, …")


# --- a code exercise: the outer Nesterov step, checked against the lab's OuterState ---------------------


def check_outer_step(fn: Any, lr: float = 0.7, momentum: float = 0.8) -> CheckResult:
    """Does `fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)` move the anchor as the lab's
    outer optimizer does (`edit_lab.core.outer.OuterState`: torch's SGD with Nesterov momentum)?

    Three steps with changing Δ̄ on a 3-value anchor; `buf` starts at zeros. Never raises: the notebook
    ships `fn` wrong on purpose (heavy-ball fed Δ̄); a wrong one prints "Not yet" and why.
    """
    import torch

    from edit_lab.core.outer import OuterState

    if (refused := not_a_function(fn, "fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)")) is not None:
        return refused
    deltas = [torch.tensor([0.2, -0.1, 0.05]), torch.tensor([0.1, 0.1, -0.2]), torch.tensor([0.3, 0.0, 0.1])]
    a0 = torch.tensor([1.0, 2.0, 0.5])

    def trajectory(nesterov: bool, mu: float) -> list[torch.Tensor]:
        outer = OuterState([a0.clone()], lr=lr, momentum=mu, nesterov=nesterov)
        out = []
        for d in deltas:
            outer.step(0, d.clone())
            out.append(outer.anchors[0].detach().clone())
        return out

    want = trajectory(True, momentum)
    anchor, buf, got = a0.clone(), torch.zeros(3), []
    for k, d in enumerate(deltas, start=1):
        try:
            out = fn(anchor.clone(), d.clone(), buf.clone(), lr, momentum)
        except Exception as exc:  # the reader's code: explain, do not crash the notebook
            return not_yet(f"at step {k} your function raised {short_error(exc)}")
        try:
            anchor, buf = out
            anchor, buf = torch.as_tensor(anchor, dtype=torch.float32), torch.as_tensor(buf, dtype=torch.float32)
        except Exception:
            return not_yet(f"at step {k} your function returned {show(out)}; return the pair (new_anchor, new_buf), "
                           f"two tensors of {a0.numel()} values.")
        if anchor.shape != a0.shape or buf.shape != a0.shape:
            return not_yet(f"at step {k} your function returned a new anchor of shape {tuple(anchor.shape)} and a "
                           f"buffer of shape {tuple(buf.shape)}; both must have the anchor's shape {tuple(a0.shape)}.")
        got.append(anchor)

    def same(path: list[torch.Tensor]) -> bool:
        return all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, path))

    if not same(want):
        if same(trajectory(False, momentum)):  # the notebook's shipped step
            return not_answered("this is still heavy-ball momentum fed Δ̄: b ← μ·b + Δ̄, a ← a − lr·b (CO2's outer "
                                "step is heavy-ball too, fed a − x̄ = Δ̄ − lr·b). Nesterov looks ahead once more: "
                                "after b ← μ·b + Δ̄, a ← a − lr·(Δ̄ + μ·b).")
        if same(trajectory(False, 0.0)):
            return not_yet(f"that is plain SGD on Δ̄ (no momentum): the anchor moves by lr·Δ̄, "
                           f"{lr:g}× Δ̄ on the first "
                           f"step, where the lab's outer step moves by {nesterov_first_step(lr, momentum):.3g}×.")
        k = next(i for i, (g, w) in enumerate(zip(got, want)) if not torch.allclose(g, w, atol=1e-6))
        moved = float((a0[0] - got[0][0]) / deltas[0][0])
        return not_yet(f"after step {k + 1} the anchor is {[round(x, 4) for x in got[k].tolist()]}; the lab's "
                       f"OuterState has {[round(x, 4) for x in want[k].tolist()]} (your first step moved it by "
                       f"{moved:.3g}× Δ̄, the lab's by {lr * (1 + momentum):.3g}×).")
    return correct(f"Correct: three steps equal to edit_lab.core.outer.OuterState (torch's SGD, Nesterov, lr {lr:g}, "
                   f"μ {momentum:g}). The first moved the anchor by {lr * (1 + momentum):.3g}× Δ̄.")


def check_bytes_ratio_prediction(prediction: Any, measured: float, interval: int) -> CheckResult:
    """Predict, then run: how many times more sync-group bytes per step `sync` sends than DiLoCo after warm-up."""
    from edit_course.exercises import compare_prediction

    why = (f"sync all-reduces one gradient shard every step; DiLoCo one parameter shard (the same size) every "
           f"τ = {interval} steps, the final sync included.")
    return compare_prediction(prediction, measured, what="sync's bytes per step ÷ DiLoCo's, after warm-up", why=why,
                              rel_tol=0.1)


# --- the same outer step, run by every rank of a real run ---------------------------------------------------

#: Right: every training loss and the final validation loss within this relative difference of the library's
#: run. The natural formula (b ← μ·b + Δ̄; a ← a − lr·(Δ̄ + μ·b)) rounds differently from torch's fused kernel,
#: about one float32 ulp per step (3e-8 on a nano run's losses); `a.add(delta_bar.add(b, alpha=momentum),
#: alpha=-lr)` with `b = buf.mul(momentum).add(delta_bar)` is the kernel's vector loop bit for bit (edit_lab/core/outer.py).
LOSS_REL_TOL = 1e-5
RULE_CALL = "fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)"
_IGNORED = ("out", "progress")  # fields a reference run may differ in


def _toy() -> tuple[Any, list[Any]]:
    """check_outer_step's 3-value anchor and its three Δ̄."""
    import torch

    return torch.tensor([1.0, 2.0, 0.5]), [torch.tensor([0.2, -0.1, 0.05]), torch.tensor([0.1, 0.1, -0.2]),
                                           torch.tensor([0.3, 0.0, 0.1])]


def outer_path(kind: str, lr: float, momentum: float) -> list[Any]:
    """The anchors after each of three steps on the toy, for the right step ("nesterov") or a named wrong one."""
    import torch

    a, deltas = _toy()
    b, out, mu = torch.zeros(3), [], momentum
    for d in deltas:
        if kind == "nesterov":
            b = mu * b + d
            a = a - lr * (d + mu * b)
        elif kind == "heavy_ball":  # the shipped body
            b = mu * b + d
            a = a - lr * b
        elif kind == "flipped":  # along the pseudo-gradient
            b = mu * b + d
            a = a + lr * (d + mu * b)
        elif kind == "forgotten":  # the buffer handed back as it came: every step a first step
            a = a - lr * (1 + mu) * d
        elif kind == "plain":  # outer SGD without momentum
            a = a - lr * d
        elif kind == "lr_ignored":
            b = mu * b + d
            a = a - (d + mu * b)
        else:
            raise ValueError(kind)
        out.append(a)
    return out


def _readers_path(fn: Any, lr: float, momentum: float) -> list[Any] | None:
    """The anchors `fn` gives on the toy (None when it raises or answers in the wrong shape there)."""
    import torch

    a, deltas = _toy()
    buf, got = torch.zeros(3), []
    try:
        for d in deltas:
            a, buf = fn(a.clone(), d.clone(), buf.clone(), lr, momentum)
            a, buf = torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(buf, dtype=torch.float32)
            if a.shape != (3,) or buf.shape != (3,):
                return None
            got.append(a)
    except Exception:  # noqa: BLE001 - the run's validation says why
        return None
    return got


def _same_path(got: list[Any] | None, want: list[Any]) -> bool:
    import torch

    return got is not None and all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, want))


def named_mistake(fn: Any, lr: float, momentum: float) -> str | None:
    """Which known wrong step `fn` is on the toy (heavy_ball, flipped, forgotten, plain, lr_ignored), or None.

    A kind that coincides with the right step at this lr and momentum (μ = 0, lr = 1) is never named."""
    got = _readers_path(fn, lr, momentum)
    right = outer_path("nesterov", lr, momentum)
    if got is None or _same_path(got, right):
        return None
    for kind in ("heavy_ball", "flipped", "forgotten", "plain", "lr_ignored"):
        if not _same_path(outer_path(kind, lr, momentum), right) and _same_path(got, outer_path(kind, lr, momentum)):
            return kind
    a0, deltas = _toy()
    if float(((a0 - got[0]) * deltas[0]).sum()) < 0:  # the first step moved the anchor along Δ̄
        return "flipped"
    return None


def _differs(a: Any, b: Any) -> list[str]:
    """The config fields (but `_IGNORED`) in which two RunConfigs differ."""
    da, db = a.to_dict(), b.to_dict()
    return [k for k in da if k not in _IGNORED and da[k] != db.get(k)]


def _library_run(cfg: Any, out: Any, reference: Any) -> tuple[Any, str | None]:
    """(the library's run of `cfg`, None), or (None, why `reference` cannot be one). `reference` None: the run
    `<out>-library` next to `out`, reused when it is a finished run of `cfg`, else launched (overwritten)."""
    from edit_lab.records.run import Run

    if reference is not None:
        ref = reference if isinstance(reference, Run) else Run(reference)
        if diff := _differs(ref.config, cfg):
            return None, (f"`reference` ({ref.path}) is not a run of `base` with the library's step: it differs in "
                          f"{', '.join(diff[:5])}")
        return ref, None
    return reference_run(cfg, out, "library"), None


def _where(step: int | None, syncs: list[int], steps: int) -> tuple[int, str]:
    """(the number of the sync a step's loss follows, 1 for the first, and that sync in words)."""
    if step is None:
        return len(syncs), f"the final sync (after step {steps - 1})"
    i = sum(1 for s in syncs if s <= step)
    return i, (f"sync {i} (the start of step {syncs[i - 1]})" if i else f"step {step}, before any sync")


def judge_outer_run(run: Any, ref: Any, fn: Any = None) -> tuple[bool, str]:
    """(right, what to say) for a run of the reader's outer step against the library's run of the same config.

    Right: the same steps, every mean training loss and the final validation loss within `LOSS_REL_TOL` of the
    library's, and the loss went down (the final validation loss below the first step's training loss). Wrong:
    where the runs part (which sync, the losses there), with the mistake named when `fn` is a known one."""
    cfg = run.config
    mine, lib = dict(run.train_losses()), dict(ref.train_losses())
    syncs = [int(s["step"]) for s in ref.syncs if s.get("kind") == "sync"]
    v_mine, v_lib = run.summary.get("final_val_loss"), ref.summary.get("final_val_loss")

    def rel(x: Any, y: Any) -> float:
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        return abs(x - y) / max(abs(y), 1e-12)

    parted = [s for s in sorted(lib) if rel(mine.get(s), lib[s]) > LOSS_REL_TOL]
    final_off = rel(v_mine, v_lib) > LOSS_REL_TOL
    if not parted and not final_off and sorted(mine) == sorted(lib):
        first = lib[min(lib)]
        if not v_mine < first:
            return False, (f"your run equals the library's, but its loss did not go down (step 0: {first:.4f}, final "
                           f"validation: {v_mine:.4f}): give `base` more steps, so that the check can see it learn.")
        worst = max([rel(mine[s], lib[s]) for s in lib] + [rel(v_mine, v_lib)])
        bit = worst == 0.0
        n = sum(1 for s in run.syncs if s.get("kind") == "sync")
        how = "bit for bit" if bit else (f"within {LOSS_REL_TOL:g} (largest relative difference {worst:.1e}: your "
                                         f"float operations round a little differently from torch's fused kernel)")
        return True, (f"Correct: your outer step ran on all {cfg.world_size} ranks, each on its own shard, at the "
                      f"{n} syncs of this {cfg.method} run; its {len(mine)} training losses and its final validation "
                      f"loss {v_mine:.4f} equal the library's run {how}, and the loss fell from {first:.3f} "
                      f"(step 0) to {v_mine:.3f}.")
    step = parted[0] if parted else None
    i, where = _where(step, syncs, cfg.steps)
    at = (f"at step {step} your mean training loss is {mine.get(step, math.nan):.4f}, the library's "
          f"{lib[step]:.4f}" if step is not None else "")
    final = (f"final validation loss {v_mine:.4f} against the library's {v_lib:.4f}"
             if v_mine is not None and v_lib is not None else "no final validation loss to compare")
    evidence = f"{at}; {final}" if at else final
    lr, mu = float(cfg.outer.lr), float(cfg.outer.momentum)
    kind = named_mistake(fn, lr, mu) if fn is not None else None
    if kind == "flipped":
        rises = [(s, mine[s] - mine[s - 1]) for s in syncs if s in mine and s - 1 in mine and mine[s] > mine[s - 1]]
        if rises:
            s, up = rises[0]
            k = syncs.index(s) + 1
            shown = (f"after sync {k} (the start of step {s}) its mean training loss rose from {mine[s - 1]:.4f} "
                     f"(step {s - 1}) to {mine[s]:.4f}, +{up:.4f}, where the library's went to {lib[s]:.4f}")
        else:
            shown = f"the runs part at {where}: {at}" if at else f"the runs part at {where}"
        return False, (f"the sign is flipped: your anchor moves along the pseudo-gradient Δ̄ = a − θ̄, away from where "
                       f"the replicas went. The run shows it: {shown}; {final}. An outer step descends, as a gradient "
                       f"step does.")
    if kind == "forgotten":
        if step is not None and i >= 2:
            return False, (f"the momentum is forgotten: your step hands back the buffer it was given, so every sync "
                           f"is a first step ({lr * (1 + mu):.3g}× Δ̄ each time). The run shows it: your losses equal "
                           f"the library's through sync 1 and part from {where}: {evidence}. Return the new "
                           f"buffer, so that it carries over to the next sync.")
        return False, (f"the momentum is forgotten (every step a first step: the buffer you return is the one you were "
                       f"given); the runs part at {where}: {evidence}.")
    if kind == "plain":
        return False, (f"that is plain SGD on Δ̄, without momentum: the anchor moves by lr·Δ̄ = {lr:g}× Δ̄ at the "
                       f"first sync, the library's by lr·(1+μ) = {lr * (1 + mu):.3g}×. The runs part from {where}: "
                       f"{evidence}.")
    if kind == "lr_ignored":
        return False, (f"the learning rate is ignored: your first step moves the anchor by (1+μ) = {1 + mu:.3g}× Δ̄, "
                       f"the library's by lr·(1+μ) = {lr * (1 + mu):.3g}× (lr {lr:g}). The runs part from {where}: "
                       f"{evidence}.")
    return False, (f"your run parts from the library's at {where}: {evidence}. The library's step is torch's "
                   f"SGD with Nesterov momentum "
                   f"(lr {lr:g}, μ {mu:g}); check_outer_step above compares single steps.")


def check_outer_step_in_a_run(fn: Any, base: Any, out: Any, reference: Any = None) -> CheckResult:
    """Run the reader's outer step on every rank of a real run, and judge it by that run's losses.

    `fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)` is shipped to the ranks as source
    (`edit_lab.rules`, the RunConfig field `outer_step_rule`) and replaces torch's SGD in every rank's
    `OuterState.step`, on its own shard of each unit, in a run of `base` (diloco or edit; aedit on the virtual
    clock) written to `out` (overwritten). The same config with the library's step is the reference:
    `reference` (a Run or its directory, a run of `base`), or by default `<out>-library` next to `out`, reused
    when it is already a finished run of `base`, else launched. Right: the same steps, every mean training loss
    and the final validation loss within `LOSS_REL_TOL` (relative) of the reference's, and the loss went down.
    Wrong: where the runs part, and, for a known mistake (found by calling `fn` on check_outer_step's toy), what
    it is: the sign flipped (the loss rises after a sync: which one, by how much), the momentum forgotten (the
    runs agree through sync 1 and part from sync 2), plain SGD, the lr ignored. The shipped body (heavy-ball fed
    Δ̄) is "not answered yet" and launches nothing; a rule that cannot work is refused before any process
    starts, one that fails on a rank names the rank. Never raises.
    """
    from edit_lab.rules import rule_source
    from edit_lab.runtime.launch import launch

    if (refused := not_a_function(fn, RULE_CALL)) is not None:
        return refused
    try:
        lr, mu, method = float(base.outer.lr), float(base.outer.momentum), base.method
        cfg = base.replace(out=str(out), outer_step_rule=None)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"`base` should be a RunConfig (diloco or edit); got {show(base)} ({short_error(e)}).")
    if named_mistake(fn, lr, mu) == "heavy_ball":
        return not_answered("your outer_step is still the shipped heavy-ball step (a ← a − lr·b): fix it as the "
                            "exercise above says; this check then runs it on every rank of a real run.")
    if cfg.time_budget or (method == "aedit" and cfg.clock.kind != "virtual"):
        return not_yet(f"`base` stops or syncs by the wall clock (method {method!r}, time_budget "
                       f"{cfg.time_budget:g}), so two runs of it differ whatever the outer step: give it a step "
                       f"count and method diloco or edit (or clock='virtual').")
    run, failed = run_a_rule(lambda: launch(cfg.replace(outer_step_rule=rule_source(fn)), overwrite=True))
    if failed is not None:
        return failed
    try:
        ref, why = _library_run(cfg, out, reference)
    except Exception as e:  # noqa: BLE001 - a check never raises at a student
        return not_yet(f"the library's reference run did not finish: {short_error(e, 300)}")
    if why is not None:
        return not_yet(why)
    try:
        right, said = judge_outer_run(run, ref, fn)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the runs' records could not be read: {short_error(e, 300)}")
    return correct(said) if right else not_yet(said)
