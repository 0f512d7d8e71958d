"""Checks for notebook 03 (sharding meets Local SGD): the 2-D mesh's groups and the memory of the outer state.

The mesh numbers ranks replica by replica (rank = r·S + s), so a shard group is a run of S
consecutive ranks and a sync group takes every S-th rank: `check_sync_group_fn` runs the reader's
function against `edit_lab.core.mesh.Mesh`. The anchor and the outer momentum are sharded like the
parameters: 2·P/S float32 values per rank, where an unsharded DiLoCo keeps 2·P. And the same function
used by a real run (`sync_group_rule`, edit_lab/rules/): `check_sync_group_in_a_run` builds the run's sync
groups from it and judges the run against one with the mesh's own groups.
"""

from __future__ import annotations

from typing import Any

from edit_course.exercises import (
    CheckResult,
    correct,
    is_whole,
    not_a_function,
    not_answered,
    not_yet,
    read_numbers,
    reference_run,
    run_a_rule,
    short_error,
    show,
)


def sync_group(rank: int, shards: int, replicas: int) -> list[int]:
    """The ranks holding the same shard index as `rank` in every replica (as edit_lab.core.mesh.Mesh)."""
    return [r * shards + rank % shards for r in range(replicas)]


# --- a code exercise: the sync group of a rank, checked against the lab's Mesh ---------------------------


def sync_group_problem(fn: Any) -> tuple[bool, str] | None:
    """Why `fn(rank, shards, replicas)` is not the mesh's sync group on every rank of five meshes: (shipped, why),
    `shipped` when it gives a rank's shard group (the notebook's body); None when it is right. Never raises."""
    from edit_lab.core.mesh import Mesh

    for shards, replicas in ((4, 3), (2, 2), (8, 4), (1, 3), (3, 1)):
        for rank in range(shards * replicas):
            want = Mesh(rank=rank, world_size=shards * replicas, shards=shards, replicas=replicas,
                        shard_group=None, sync_group=None).sync_group_ranks()
            try:
                out = fn(rank, shards, replicas)
            except Exception as exc:  # the reader's code: explain, do not crash the notebook
                return False, f"fn({rank}, {shards}, {replicas}) raised {short_error(exc)}"
            ranks = read_numbers(out)
            if ranks is None or not all(is_whole(x) for x in ranks):
                return False, (f"fn({rank}, {shards}, {replicas}) returned {show(out)}; return a list of ranks "
                               f"(whole numbers), one per replica.")
            got = sorted(int(x) for x in ranks)
            if got == want:
                continue
            shard_group = [rank // shards * shards + s for s in range(shards)]
            if got == shard_group:  # the notebook's shipped body
                return True, (f"for rank {rank} on S={shards} × R={replicas} this gives its shard group {got} "
                              f"(the ranks of its own replica); the sync group is the same shard in every "
                              f"replica: {want}.")
            return False, (f"for rank {rank} on S={shards} × R={replicas} you gave {got}; the mesh says {want} "
                           f"(rank = replica·S + shard).")
    return None


def check_sync_group_fn(fn: Any) -> CheckResult:
    """Does `fn(rank, shards, replicas) -> list of ranks` give the sync group `edit_lab.core.mesh.Mesh` computes,
    on every rank of several meshes? Never raises: the notebook ships `fn` wrong on purpose."""
    if (refused := not_a_function(fn, "fn(rank, shards, replicas) -> list of ranks")) is not None:
        return refused
    if (problem := sync_group_problem(fn)) is not None:
        shipped, why = problem
        return not_answered(why) if shipped else not_yet(why)
    return correct("Correct on every rank of five meshes: the same list as edit_lab.core.mesh.Mesh.sync_group_ranks().")


# --- the same function, used by a real run to build its sync groups ---------------------------------------

LOSS_RTOL = 1e-6  # "the same losses" when not bit for bit (the mesh's groups give a bit-for-bit equal run here)


def _coords(rank: int, shards: int) -> str:
    replica, shard = divmod(rank, shards)
    return f"replica {replica} shard {shard}"


def _same(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= LOSS_RTOL * max(abs(a), abs(b))


def _reference(cfg: Any, out: Any) -> Any:
    """The run of `cfg` with the mesh's own sync groups, in `<out>-mesh-groups` (reused when it is there)."""
    return reference_run(cfg.replace(sync_group_rule=None), out, "mesh-groups")


def _final_anchors(run: Any) -> dict[tuple[int, int], int]:
    """(rank, unit) -> the CRC of that rank's anchor shard at its last sync (`checksums`)."""
    last: dict[tuple[int, int], int] = {}
    for e in run.events_of("checksum"):
        last[(int(e["rank"]), int(e["unit"]))] = int(e["data"]["anchor"])
    return last


def replicas_disagree(run: Any) -> tuple[int, int]:
    """(unit shards on which the replicas' anchors differ after the final sync, unit shards compared)."""
    shards, replicas = run.config.shards, run.config.replicas
    crc = _final_anchors(run)
    units = sorted({u for _, u in crc})
    differ = sum(1 for s in range(shards) for u in units
                 if len({crc.get((r * shards + s, u)) for r in range(replicas)}) > 1)
    return differ, shards * len(units)


def judge_sync_group_run(run: Any, ref: Any) -> tuple[bool, str]:
    """(right, what the run showed) for a run with a `sync_group_rule` against `ref`, the same configuration with
    the mesh's own groups: right when every train and validation loss is the same (bit for bit, or within
    LOSS_RTOL) and after the final sync every replica holds the same model (anchor checksums, validation spread)."""
    from edit_lab.core.mesh import Mesh
    from edit_lab.rules import sync_groups

    cfg = run.config
    S, R = cfg.shards, cfg.replicas
    groups = sync_groups(cfg.rules.sync_group, S, R)
    own = [Mesh(rank=k, world_size=S * R, shards=S, replicas=R, shard_group=None, sync_group=None).sync_group_ranks()
           for k in range(S * R)]
    train = {(m["step"], m["replica"]): m["loss"] for m in run.metrics if m["kind"] == "train"}
    ref_train = {(m["step"], m["replica"]): m["loss"] for m in ref.metrics if m["kind"] == "train"}
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    ref_evals = [m for m in ref.metrics if m["kind"] == "eval"]
    pairs = [(train[k], ref_train[k]) for k in sorted(ref_train) if k in train]
    pairs += [(a["val_loss"], b["val_loss"]) for a, b in zip(evals, ref_evals)]
    complete = len(train) == len(ref_train) and len(evals) == len(ref_evals)
    exact = complete and all(a == b for a, b in pairs)
    close = complete and all(_same(a, b) for a, b in pairs)
    differ, compared = replicas_disagree(run)
    spread = max((m.get("val_loss_spread", 0.0) for m in evals if m.get("final")), default=0.0)
    agree = differ == 0 and spread == 0.0  # without anchors (method sync) the validation spread alone says it
    clock = "virtual" if cfg.clock.kind == "virtual" else "wall"
    if close and agree:
        how = "bit for bit" if exact else f"within {LOSS_RTOL:g} (relative)"
        final = evals[-1]["val_loss"] if evals else float("nan")
        return True, (f"Correct: your sync groups ran on all {S * R} ranks ({clock} clock) and the run is the mesh's "
                      f"own: its {len(pairs)} train and validation losses equal those of the run with "
                      f"Mesh.sync_group_ranks() {how}, and after the final sync every replica holds the same model "
                      f"({f'the anchors of all {compared} unit shards agree across replicas; ' if compared else ''}"
                      f"final validation loss {final:.4f} on every rank).")
    mine = next((g for g in groups if g not in own), groups[0])
    who = ", ".join(_coords(m, S) for m in mine)
    said = [f"your sync groups ran on all {S * R} ranks ({clock} clock), but they are not the mesh's: rank "
            f"{mine[0]}'s group was {mine} ({who}) where the mesh's is {own[mine[0]]}"]
    if len({m % S for m in mine}) > 1:
        said.append("so the sync group averaged shards that hold different parameters (the shards of a unit are "
                    "equal-sized slices of one flat buffer, so nothing failed)")
    if len({m // S for m in mine}) < len(mine):
        twice = max(range(R), key=lambda r: sum(1 for m in mine if m // S == r))
        said.append(f"and it holds {sum(1 for m in mine if m // S == twice)} ranks of replica {twice}, so not every "
                    f"replica takes part in it")
    steps = sorted(k for k in ref_train if k in train and not _same(train[k], ref_train[k]))
    if steps:
        step, replica = steps[0]
        said.append(f"the run departed from the mesh's at step {step}, the first loss after an exchange over your "
                    f"groups (replica {replica}'s training loss {train[(step, replica)]:.4f} against "
                    f"{ref_train[(step, replica)]:.4f})")
    first_sync = next((int(x["step"]) for x in run.syncs if x.get("kind") == "sync"), None)
    if first_sync is not None and len(evals) == len(ref_evals):
        landed = next((i for i in range(1, len(ref_evals)) if ref_evals[i]["step"] >= first_sync
                       and ref_evals[i]["val_loss"] != ref_evals[i - 1]["val_loss"]), None)
        if landed is not None:
            a, b, ra, rb = evals[landed - 1], evals[landed], ref_evals[landed - 1], ref_evals[landed]
            said.append(f"at the first sync (step {first_sync}) the validation loss went from {a['val_loss']:.4f} to "
                        f"{b['val_loss']:.4f}, where the mesh's groups go from {ra['val_loss']:.4f} to "
                        f"{rb['val_loss']:.4f}")
    if evals and ref_evals:
        a, b = evals[-1]["val_loss"], ref_evals[-1]["val_loss"]
        said.append(f"the final validation loss is {a:.4f} against {b:.4f} ({a - b:+.4f})")
    if not agree:
        anchors = f"their anchors differ on {differ} of {compared} unit shards and " if differ else ""
        said.append(f"and after the final sync the replicas do not hold the same model: {anchors}their final "
                    f"validation losses differ by {spread:.4f}")
    return False, "; ".join(said) + "."


def check_sync_group_in_a_run(fn: Any, base: Any, out: Any, *, plain_check: bool = True) -> CheckResult:
    """Build a real run's sync groups with the reader's `fn(rank, shards, replicas)` and judge it by that run.

    First the plain check (`check_sync_group_fn`'s five meshes, silently): the shipped body (the shard group) is
    "not answered yet", another wrong answer "not yet", and neither launches anything (`plain_check=False` skips
    this, to watch a wrong partition run). Then `base` (shards ≥ 2, replicas ≥ 2: EDiT or DiLoCo, a few syncs)
    runs into `out` with `sync_group_rule` = the function's source, validating after every step with checksums
    on, next to the same run with the mesh's own groups in `<out>-mesh-groups` (reused when it is already
    there). Right: every loss equal to that reference and, after the final sync, every replica holding the same
    model. A valid but wrong partition runs, and the verdict says what the run showed (where it departed, the
    validation loss at the first sync and at the end against the reference, the replicas that disagree); one
    that cannot run is refused before any process starts (`RunConfig` validation). Never raises.
    """
    from edit_lab.rules import rule_source
    from edit_lab.runtime.launch import launch

    if (refused := not_a_function(fn, "fn(rank, shards, replicas) -> list of ranks")) is not None:
        return refused
    if plain_check and (problem := sync_group_problem(fn)) is not None:
        shipped, why = problem
        nothing = " Nothing was launched: this check runs your function on a real run once it is right."
        return not_answered(why + nothing) if shipped else not_yet(why + nothing)
    if base.shards < 2 or base.replicas < 2:
        return not_yet(f"`base` is a {base.shards}×{base.replicas} mesh: give it shards >= 2 and replicas >= 2, so that "
                       f"a sync group can pair the wrong shards.")
    cfg = base.replace(eval_every=1, checksums=True, out=str(out), sync_group_rule=None)
    run, failed = run_a_rule(lambda: launch(cfg.replace(sync_group_rule=rule_source(fn)), overwrite=True))
    if failed is not None:
        return failed
    try:
        ref = _reference(cfg, out)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the reference run with the mesh's own groups did not finish: {short_error(e, 300)}")
    try:
        right, said = judge_sync_group_run(run, ref)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the run's records could not be read: {short_error(e, 300)}")
    return correct(said) if right else not_yet(said)


def check_state_prediction(prediction: Any, measured: float, shards: int) -> CheckResult:
    """Predict, then run: anchor + momentum of one rank, in units of one whole model (4·P bytes)."""
    from edit_course.exercises import compare_prediction

    why = (f"EDiT shards the anchor and the outer momentum like the parameters: each is 1/S of the model, "
           f"so together 2/S = 2/{shards}.")
    return compare_prediction(prediction, measured, what=f"anchor + momentum of one rank with S = {shards}, in whole "
                              "models", why=why, rel_tol=0.02)
