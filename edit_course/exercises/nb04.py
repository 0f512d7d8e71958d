"""Checks for notebook 04 (layer-wise sync and prefetch): what prefetch can hide, and what the link costs.

The answers follow from three rules the notebook shows on real runs: on the simulated sync link a
transfer of n bytes takes `latency + n / bandwidth`, one transfer at a time (edit_lab.core.comm.LinkModel);
with prefetch, unit l+1's transfer is issued when unit l's sync starts, so it overlaps unit l's
compute, while unit 0 has nothing before it to overlap with; and a unit is all-gathered only once its
own sync is done, so that every shard group gathers the parameters the outer step has just updated.

A sync step's forward is written here as a *schedule*: a list of operations `(kind, unit)` with kind
one of "issue" (start the unit's sync all-reduce), "wait" (block until it is done), "all_gather" and
"compute". `schedule_problems` checks a schedule against the rule, `replay_exposed_ms` times it on an
idealised link, and `recorded_schedule` reads the same list from a real run's events.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from edit_course.exercises import (
    CheckResult,
    compare_yes_no,
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

#: One operation of a sync step's forward on one rank: (kind, unit).
Op = tuple[str, int]
OP_KINDS = ("issue", "wait", "all_gather", "compute")


def transfer_ms(nbytes: int, latency_ms: float, bandwidth_mbps: float) -> float:
    """One transfer on the simulated link, in ms: latency + bytes / bandwidth (MB/s = 10⁶ bytes per second)."""
    return latency_ms + nbytes / (bandwidth_mbps * 1e6) * 1e3


def exposed_ms(n_units: int, transfer: float, compute: float, prefetch: bool) -> float:
    """Milliseconds a rank stands blocked on one sync's `sync_reduce`s, every unit alike (an idealised model).

    Without prefetch every transfer is waited for in full: n·x. With prefetch unit 0 is waited for in full
    (x); each later unit's transfer starts when the link frees (one transfer at a time) and overlaps the
    previous unit's compute c, so it adds max(0, x − c): x + (n − 1)·max(0, x − c).
    """
    if n_units <= 0:
        return 0.0
    if not prefetch:
        return n_units * transfer
    return transfer + (n_units - 1) * max(0.0, transfer - compute)


def check_transfer_ms(answer: Any, nbytes: int = 99_072, latency_ms: float = 2.0,
                      bandwidth_mbps: float = 20.0) -> CheckResult:
    """Milliseconds of one transfer of `nbytes` on a link of `latency_ms` and `bandwidth_mbps`."""
    want = transfer_ms(nbytes, latency_ms, bandwidth_mbps)
    return judge_number(
        answer, want, what="milliseconds", tol=0.01, unit="ms",
        hint=("a transfer takes latency + bytes / bandwidth; 20 MB/s is 20·10⁶ bytes per second, and the answer "
              "is in milliseconds."),
        why=(f"The bandwidth part is {nbytes} B / {bandwidth_mbps:g}·10⁶ B/s = "
             f"{nbytes / (bandwidth_mbps * 1e6) * 1e3:.4f} ms; do not forget the latency of {latency_ms:g} ms "
             f"(and keep MB = 10⁶ bytes)."),
        right=(f"Correct: {latency_ms:g} + {nbytes / (bandwidth_mbps * 1e6) * 1e3:.4f} = {want:.4f} ms per "
               f"transfer. A sync sends one such transfer per unit, one after the other."))


def check_exposed_with_prefetch(answer: Any, n_units: int = 5, transfer: float = 7.0,
                                compute: float = 3.0) -> CheckResult:
    """Blocked ms per sync with prefetch, for `n_units` alike units (transfer x, compute c)."""
    want = exposed_ms(n_units, transfer, compute, prefetch=True)
    without = exposed_ms(n_units, transfer, compute, prefetch=False)
    return judge_number(
        answer, want, what="milliseconds", tol=0.01, unit="ms",
        hint=("unit 0's transfer is waited for in full; each later unit's transfer runs on the link right after "
              "the previous one and overlaps the previous unit's compute."),
        named=[(lambda got: abs(got - without) <= 0.01,
                f"is every transfer waited for in full: that is the blocked time without prefetch. With prefetch "
                f"each unit's transfer after unit 0 overlaps the previous unit's compute.")],
        why=(f"Unit 0: {transfer:g} ms in full. Each of the other {n_units - 1} units: its transfer starts when the "
             f"link frees and overlaps {compute:g} ms of the previous unit's compute, so only "
             f"max(0, {transfer:g} − {compute:g}) ms of it is exposed. (Without prefetch: {without:g} ms.)"),
        right=(f"Correct: {transfer:g} + {n_units - 1}·({transfer:g} − {compute:g}) = {want:g} ms instead of "
               f"{without:g} ms. Prefetch saves at most one unit's compute per unit: on a very slow link the "
               f"transfers dominate either way."))


# ------------------------------------------------------------------------- schedules of a sync step
def _as_op(op: Any) -> Op | None:
    """`op` as a (kind, unit) pair of a string and an int, or None when it is not one."""
    if isinstance(op, (str, bytes)):
        return None
    try:
        kind, unit = op
    except Exception:
        return None
    if not isinstance(kind, str) or isinstance(unit, bool) or not isinstance(unit, numbers.Integral):
        return None
    return kind, int(unit)


def schedule_problems(ops: Sequence[Op], n_units: int) -> list[str]:
    """Why a schedule of one sync step's forward breaks EDiT's rule; an empty list when it keeps it.

    Every unit must be issued, waited for, all-gathered and computed exactly once; its wait must come
    after its issue and before its all-gather (else the shard group gathers parameters the outer step
    has not updated yet), its all-gather before its compute, and the units computed in order 0, 1, …
    """
    seen: dict[tuple[str, int], int] = {}
    problems = []
    for i, op in enumerate(ops):
        pair = _as_op(op)
        if pair is None:
            problems.append(f"operation {i} ({show(op)}) is not a pair (kind, unit) with kind one of {OP_KINDS} "
                            f"and unit a whole number")
            continue
        kind, unit = pair
        if kind not in OP_KINDS or not 0 <= unit < n_units:
            problems.append(f"operation {i} ({kind!r}, {unit}) is not one of {OP_KINDS} on a unit 0…{n_units - 1}")
        elif (kind, unit) in seen:
            problems.append(f"unit {unit} is given {kind!r} twice")
        else:
            seen[(kind, unit)] = i
    for unit in range(n_units):
        missing = [k for k in OP_KINDS if (k, unit) not in seen]
        if missing:
            problems.append(f"unit {unit} has no {', '.join(missing)}")
            continue
        at = {k: seen[(k, unit)] for k in OP_KINDS}
        if at["wait"] < at["issue"]:
            problems.append(f"unit {unit}'s sync is waited for before it is issued")
        if at["all_gather"] < at["wait"]:
            problems.append(f"unit {unit} is all-gathered before its sync is done: the shard group would gather "
                            f"parameters the outer step has not updated yet (sync before all-gather)")
        if at["compute"] < at["all_gather"]:
            problems.append(f"unit {unit} computes before it is all-gathered")
        if unit and (("compute", unit - 1) in seen) and at["compute"] < seen[("compute", unit - 1)]:
            problems.append(f"unit {unit} computes before unit {unit - 1}: the forward goes unit by unit")
    return problems


def replay_exposed_ms(ops: Sequence[Op], transfer: float, compute: float) -> float:
    """Milliseconds a rank stands blocked on sync transfers when it runs `ops` in order (an idealised model).

    The link carries one transfer at a time, in the order they are issued, each `transfer` ms; every
    unit computes for `compute` ms; issuing and all-gathering take no time. A "wait" blocks until that
    unit's transfer is done.
    """
    t = link_free = blocked = 0.0
    done: dict[int, float] = {}
    for kind, unit in ops:
        if kind == "issue":
            link_free = done[unit] = max(t, link_free) + transfer
        elif kind == "wait":
            blocked += max(0.0, done[unit] - t)
            t = max(t, done[unit])
        elif kind == "compute":
            t += compute
    return blocked


def prefetch_schedule(n_units: int) -> list[Op]:
    """The engine's order with prefetch: unit l+1's sync is issued as soon as unit l's starts."""
    ops: list[Op] = [("issue", 0)]
    for unit in range(n_units):
        if unit + 1 < n_units:
            ops.append(("issue", unit + 1))
        ops += [("wait", unit), ("all_gather", unit), ("compute", unit)]
    return ops


def no_prefetch_schedule(n_units: int) -> list[Op]:
    """Without prefetch: each unit's sync is issued and waited for right before its own all-gather."""
    return [op for unit in range(n_units)
            for op in (("issue", unit), ("wait", unit), ("all_gather", unit), ("compute", unit))]


def recorded_schedule(events: Any) -> list[Op]:
    """A real sync step's schedule, read from `analysis.events_table(run, steps=sync_step, ranks=[r])`.

    issue = a unit's `sync_reduce` starts, wait = it completes, then the unit's first `all_gather` and
    first `compute_fwd` (a unit is gathered again in the backward); sorted by time.
    """
    timed: list[tuple[float, int, Op]] = []
    for unit, ev in events[events["unit"].notna()].groupby("unit"):
        unit = int(unit)
        sync = ev[ev["kind"] == "sync_reduce"]
        if len(sync):
            timed += [(float(sync["t0"].min()), 0, ("issue", unit)), (float(sync["t1"].max()), 1, ("wait", unit))]
        for order, (kind, name) in enumerate((("all_gather", "all_gather"), ("compute_fwd", "compute")), start=2):
            first = ev[ev["kind"] == kind]
            if len(first):
                timed.append((float(first["t0"].min()), order, (name, unit)))
    return [op for *_, op in sorted(timed)]


def _replayed(schedule: Any, n_units: int, transfer: float, compute: float) -> tuple[bool | None, str, list]:
    """(passes, what check_schedule says, its problems) for `schedule(n_units)` replayed; never raises.
    passes None: it returns None, as the notebook's shipped cell does: not answered yet."""
    try:
        ops = schedule(n_units)
    except Exception as exc:  # the reader's code: explain, do not crash the notebook
        return False, f"schedule({n_units}) raised {short_error(exc)}", []
    if ops is None:  # the notebook's shipped cell
        return None, "the schedule returns None; return a list of (kind, unit) operations.", []
    try:
        ops = list(ops) if not isinstance(ops, (str, bytes)) else None
    except Exception:
        ops = None
    if ops is None:
        return False, (f"schedule({n_units}) returned something that is not a list; return a list of (kind, unit) "
                       f"operations, kind one of {OP_KINDS}."), []
    problems = schedule_problems(ops, n_units)
    if problems:
        more = len(problems) - 1
        after = f" ({more} more problem{'s' * (more > 1)} after this one.)" if more else ""
        return False, f"{problems[0]}.{after}", problems
    ops = [_as_op(op) for op in ops]
    blocked = replay_exposed_ms(ops, transfer, compute)
    without = replay_exposed_ms(no_prefetch_schedule(n_units), transfer, compute)
    best = replay_exposed_ms(prefetch_schedule(n_units), transfer, compute)
    if blocked >= without:
        return False, (f"the rule holds, but the rank stands blocked {blocked:g} ms per sync, as without prefetch "
                       f"({without:g} ms): issue unit l+1's sync before unit l computes."), []
    return True, (f"The rule holds (every unit synced before it is gathered), and the rank stands blocked "
                  f"{blocked:g} ms per sync instead of {without:g} ms without prefetch (the engine's order: "
                  f"{best:g} ms)."), []


def check_schedule(schedule: Callable[[int], Sequence[Op] | None], n_units: int = 5, transfer: float = 7.0,
                   compute: float = 3.0) -> CheckResult:
    """Replay `schedule(n_units)`: "Not yet" names the first broken rule; else the blocked ms are printed
    against prefetch off, and a schedule that keeps the rule but hides nothing is 'not yet'. Never raises."""
    if (refused := not_a_function(schedule, "schedule(n_units) -> list of (kind, unit) operations")) is not None:
        return refused
    passed, message, _ = _replayed(schedule, n_units, transfer, compute)
    if passed is None:
        return not_answered(message)
    return correct(message) if passed else not_yet(message)


def check_prediction_cheaper(prediction: Any, edit_ms: float, diloco_ms: float, setting: str) -> CheckResult:
    """Predict, then run: was EDiT's exposed sync time per sync below DiLoCo's? Prints the answer; never raises."""
    cheaper = edit_ms < diloco_ms
    measured = (f"{setting}: EDiT exposed {edit_ms:.1f} ms per sync, DiLoCo {diloco_ms:.1f} ms, so EDiT "
                f"was {'cheaper' if cheaper else 'dearer'}.")
    return compare_yes_no(prediction, cheaper, measured)


# ------------------------------------------------------------------------- the schedule in a real run
GATHERED_EARLY = "is all-gathered before its sync is done"  # schedule_problems' words for a gather before the wait


def executed_schedule(events: Any) -> list[Op]:
    """What one rank executed in a sync step, read from `analysis.events_table(run, steps=sync_step, ranks=[r])`:
    issue = a unit's `sync_reduce` is issued, wait = the rank starts waiting for it (its `wait` event), then the
    unit's first `all_gather` and first `compute_fwd`; sorted by time (unlike `recorded_schedule`, a wait is when
    the rank called it, not when the transfer ended)."""
    timed: list[tuple[float, int, Op]] = []
    ev = events[events["unit"].notna()]
    for unit, rows in ev.groupby("unit"):
        unit = int(unit)
        for order, (name, sel) in enumerate((
                ("issue", rows["kind"] == "sync_reduce"),
                ("wait", (rows["kind"] == "wait") & (rows["on"] == "sync_reduce")),
                ("all_gather", rows["kind"] == "all_gather"),
                ("compute", rows["kind"] == "compute_fwd"))):
            if sel.any():
                timed.append((float(rows.loc[sel, "t0"].min()), order, (name, unit)))
    return [op for *_, op in sorted(timed)]


def as_executed(ops: Sequence[Op]) -> list[Op]:
    """The order the engine runs `ops` in: its issues, waits and all-gathers as listed, each unit computed right
    after its all-gather (a unit's issues and waits run in its pre-forward, before the all-gather)."""
    out: list[Op] = []
    for kind, unit in ops:
        if kind == "compute":
            continue
        out.append((kind, unit))
        if kind == "all_gather":
            out.append(("compute", unit))
    return out


def issued_early(ops: Sequence[Op]) -> list[int]:
    """The units whose sync the schedule leaves in flight across a unit's compute (issued in one unit's
    pre-forward, waited for in a later one's): the only transfers the run can hide."""
    at, gathered = {}, 0
    for kind, unit in ops:
        if kind == "all_gather":
            gathered += 1
        elif kind in ("issue", "wait"):
            at[(kind, unit)] = gathered
    return sorted(u for (k, u), g in at.items() if k == "issue" and at.get(("wait", u), g) > g)


def prefetch_off_reference(cfg: Any, out: Any) -> Any:
    """The run of `cfg` with prefetch off and no rule, in `<out>-prefetch-off` next to `out` (reused when it is
    there)."""
    return reference_run(cfg.replace(prefetch=False, sync_schedule_rule=None), out, "prefetch-off")


def _train_losses(run: Any) -> dict[tuple[int, int], float]:
    return {(int(m["step"]), int(m["replica"])): float(m["loss"]) for m in run.metrics if m.get("kind") == "train"}


def _ops_line(ops: Sequence[Op]) -> str:
    return ", ".join(f"{kind} {unit}" for kind, unit in ops)


def check_schedule_in_a_run(schedule: Any, base: Any, out: Any) -> CheckResult:
    """Replay `schedule`, then run it on every rank of a real EDiT run of `base` and judge it by that run.

    First `check_schedule`'s replay (on `base`'s unit count): a schedule it refuses is told so, and nothing is
    launched, except one whose only fault is a unit all-gathered before its sync is done, which the engine can
    run (`edit_lab.rules.sync_schedule_plan`): it runs, to show the damage. The schedule travels as the source of
    `RunConfig.rules.sync_schedule` into a run of `base` written to `out` (overwritten); a reference with
    `prefetch=False` and no rule is launched into `<out>-prefetch-off` (reused when it holds this very run).
    Right: the final parameters (every tensor, `torch.equal`) and every training loss are bit-for-bit the
    reference's, the sync step every rank executed is the listed order, and the transfers the schedule leaves in
    flight across a compute were hidden under it for some time (`comm_split`'s `sync_reduce` hidden seconds > 0:
    structure, never a wall-clock comparison of two runs). Wrong, from the run: how many tensors differ and the
    first loss that differs, or bit-identical but nothing in flight during compute. Never raises.
    """
    from edit_lab.rules import RuleError, rule_source, sync_schedule_problem
    from edit_lab.core.model import SIZES
    from edit_lab.runtime.launch import launch

    call = "schedule(n_units) -> list of (kind, unit) operations"
    if (refused := not_a_function(schedule, call)) is not None:
        return refused
    if getattr(base, "method", None) not in ("edit", "aedit") or getattr(base, "replicas", 0) < 2:
        return not_yet("`base` must be an EDiT (method='edit') RunConfig with at least 2 replicas, so that there "
                       "is a layer-wise sync to order.")
    try:
        n_units = 1 + SIZES[base.data.model].n_layers
    except Exception:  # noqa: BLE001
        return not_yet(f"`base` has an unknown model {show(getattr(getattr(base, 'data', None), 'model', None))}.")
    passed, message, problems = _replayed(schedule, n_units, 7.0, 3.0)
    if passed is None:
        return not_answered(f"{message} This check then runs it on every rank of a real EDiT run (nothing was "
                            f"launched).")
    early_gather = bool(problems) and all(GATHERED_EARLY in p for p in problems)
    if not passed and not early_gather:
        return not_yet(f"{message} Nothing was launched.")
    try:
        source = rule_source(schedule)
    except RuleError as e:
        return not_yet(f"{e}. Nothing was launched.")
    if early_gather and (why := sync_schedule_problem(source, n_units)) is not None:
        return not_yet(f"{message} Nothing was launched: {why}")
    ops = [_as_op(op) for op in schedule(n_units)]
    cfg = base.replace(sync_schedule_rule=None, out=str(out))
    run, failed = run_a_rule(lambda: launch(cfg.replace(sync_schedule_rule=source), overwrite=True))
    if failed is not None:
        return failed
    try:
        ref = prefetch_off_reference(cfg, out)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the reference run with prefetch off did not finish: {short_error(e, 300)}")
    return _judge_run(run, ref, cfg, ops, message if early_gather else None)


def _judge_run(run: Any, ref: Any, cfg: Any, ops: list[Op], broken: str | None) -> CheckResult:
    """The verdict of a schedule's run against the prefetch-off reference (see check_schedule_in_a_run)."""
    import torch

    from edit_lab.records.analysis import comm_split, events_table

    try:
        mine, theirs = run.state_dict(), ref.state_dict()
        losses, ref_losses = _train_losses(run), _train_losses(ref)
        syncs = events_table(run, steps=(0, cfg.steps - 1), kinds=["sync_reduce"])
        split = comm_split(run, by=("kind", "unit"), steps=(0, cfg.steps - 1))
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the run's records could not be read: {short_error(e, 300)}")
    differ = [k for k in theirs if k not in mine or not torch.equal(mine[k], theirs[k])]
    off = sorted(k for k in ref_losses if losses.get(k) != ref_losses[k])
    if differ or off or set(losses) != set(ref_losses):
        first = (f"the first loss that differs is step {off[0][0]} (replica {off[0][1]}: "
                 f"{losses.get(off[0], float('nan')):.6f} against {ref_losses[off[0]]:.6f})" if off
                 else "every training loss is the same")
        said = f"{len(differ)} of {len(theirs)} tensors differ from the prefetch-off run; {first}"
        if broken is not None:
            unit = next((u for k, u in ops if k == "all_gather" and
                         ops.index(("all_gather", u)) < ops.index(("wait", u))), None)
            return not_yet(f"{broken} The run shows it: {said}: unit {unit}'s shard group computed with its "
                           f"parameters from before the outer step. Wait for a unit's sync before its all-gather.")
        return not_yet(f"{said}: your schedule changed the arithmetic, which prefetch never does.")
    if syncs.empty:
        return not_yet("the run trained no sync step, so nothing ran your schedule: give `base` steps beyond "
                       "warmup_steps + sync_interval.")
    sync_step = int(syncs["step"].min())
    want = as_executed(ops)
    for rank in range(cfg.world_size):
        try:
            got = executed_schedule(events_table(run, steps=sync_step, ranks=[rank]))
        except Exception as e:  # noqa: BLE001
            return not_yet(f"the run's events could not be read: {short_error(e, 300)}")
        # one shard per replica: nothing to all-gather, so the run records none
        runs = want if any(k == "all_gather" for k, _ in got) else [op for op in want if op[0] != "all_gather"]
        if got != runs:
            return not_yet(f"rank {rank} executed sync step {sync_step} as {_ops_line(got)}, not as your "
                           f"schedule runs ({_ops_line(runs)}).")
    if broken is not None:  # ran bit-identical although a unit was gathered before its sync: say the rule still
        return not_yet(f"{broken} (This run happened to end bit-identical; the rule is broken all the same.)")
    rows = split[split["kind"] == "sync_reduce"]
    early = issued_early(ops)
    hidden_s = float(rows.loc[rows["unit"].isin(early), "hidden_s"].sum()) if early else 0.0
    moved = ("" if want == ops else f" The engine ran it as {_ops_line(want)}: a unit's issues and waits run in its "
             f"pre-forward, before its all-gather.")
    if not early or hidden_s <= 0.0:
        total = float(rows["hidden_s"].sum())
        return not_yet(f"bit-identical to the prefetch-off run, but no sync transfer was in flight during compute "
                       f"(sync_reduce hidden {1e3 * total:.3g} ms over the run): issue unit l+1 before unit l "
                       f"computes.{moved}")
    n_losses = len(losses)
    return correct(f"Correct: your schedule ran on all {cfg.world_size} ranks (sync step {sync_step}: "
                   f"{_ops_line(want)}); the final parameters ({len(theirs)} tensors) and all {n_losses} training "
                   f"losses are bit-for-bit the prefetch-off run's, and the transfers of unit(s) "
                   f"{', '.join(map(str, early))} were hidden under compute for {1e3 * hidden_s:.1f} ms "
                   f"(sync_reduce, all ranks): prefetch moves waits, not arithmetic.{moved}")
