"""The virtual clock (`RunConfig.clock.kind = "virtual"`, docs/edit-method.md "The virtual clock").

The lab's own `Trainer`, methods, penalty, outer optimizer and sharded model, with real numerics, every
rank a thread of *this* process, on a clock that a cost model advances instead of this machine's time:

- **A few ranks compute at once, and it does not matter which.** `virtual_lanes` ranks hold a lane (a
  turn to run; 0: one per core of this machine); when a running rank blocks on a collective some peer
  has not reached yet, or ends, its lane goes to the runnable rank with the smallest virtual time, ties
  by rank. Ranks meet only in collectives, and a collective's result and virtual completion time are
  functions of its inputs and its members' virtual arrival times, whichever thread arrives last in
  real time; every random draw has its own seeded generator. So the run is the same on any machine,
  under any load and at any number of lanes: the timeline is a function of the config, the seed and the
  costs (tests/distributed/test_virtual_clock.py runs 1, 2 and 4 lanes side by side). Lanes are what
  takes the wall time down: each computes with one torch thread, on its own core.
- **Collectives are in-process** (`Fabric`, the backend of `VirtualComm`, a `Comm`): the real reduction
  (an all-reduce adds in gloo's ring order, `ring_order.py`), completed once the last participant arrived, at
  `max(arrivals, the group's previous collective's end) + cost`, then across the config's simulated
  link exactly as `comm.LinkModel` does. An async handle completes at that virtual time; `wait()`
  advances the waiter's clock to it and records the wait as a real run does (`Comm._complete`).
- **Compute advances the clock** by the cost model where the wall clock would have measured it:
  `Clock.charge` in sharding.py (each unit's forward and backward) and in `EventLog.span` (the optimizer,
  the outer step, a validation). A straggler's pause is (k − 1) × its step's own compute, which the
  costs state (`Costs.stretched_s`: a real run's kernels, measured when calibrating), not the spans
  recorded here: those hold the shard group's transfers folded into the calibrated per-unit compute,
  which a real straggler does not stretch (stragglers.py). A random pause advances the clock by its length.

Deaths and joins (`survive=True`, clock/survive_virtual.py): a replica's death ends its thread, its peers'
collectives fail as gloo's do, and the real `core.survival.Survival` reacts; the launcher's side publishes the
views on an in-process store read as of each rank's clock.

Time only (`virtual_compute = "charged"`, time_only.py): the same ranks, methods and fabric on a stand-in model
that issues the engine's collectives with the real model's bytes and charges the same costs, computing nothing;
the same timeline, event for event, without losses (NaN).

The costs (`sim.costs.Costs`): `--clock-costs` / `--calibrate RUN_DIR` (calibrated from a real run:
`sim.calibrate.calibrate`), a costs JSON, or by default the calibration of the shipped example
`edit-straggler` (nano, 2 shards), scaled to another model by parameters × tokens per rank.

In-process rather than in one worker process: a notebook gets its `Run` without a process start, and
there is nothing to rendezvous. Every rank thread ends when the run ends or fails (a failure wakes
every blocked rank, which then stops): `run_virtual` joins them all before it returns or raises, and a
rank's exception surfaces as `launch.WorkerError` with its rank and traceback.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from edit_lab.clock.fabric import (  # noqa: F401 - the fabric's names, as they were before it had its own file
    MAX_AUTO_LANES,
    SHARD_COSTS,
    Collective,
    CostModel,
    Fabric,
    PeerLost,
    RankBackend,
    VirtualClock,
    VirtualWork,
    lanes_for,
    virtual_comm_class,
)
from edit_lab.config import ConfigError, RunConfig
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.records.rundir import ProgressFile

#: The default costs: the calibration of this shipped example run (nano, 2 shards × 2 replicas, seq_len 32).
DEFAULT_EXAMPLE = "edit-straggler"


# ------------------------------------------------------------------------------------------- costs
def example_dir(name: str = DEFAULT_EXAMPLE) -> Path:
    import edit_lab.records.examples

    return Path(edit_lab.records.examples.__file__).parent / name


#: Calibrations already computed in this process, by (run directory, its files' sizes and mtimes): calibrating
#: the shipped example takes seconds, and every virtual run with the default costs needs it.
_CALIBRATED: dict[tuple, Any] = {}


def load_costs(source: str | Path) -> Any:
    """`Costs` from a run directory (calibrated; each directory once per process while its files are unchanged)
    or a costs JSON (`Costs.to_json`). The caller gets its own copy."""
    import copy

    from edit_lab.clock.calibrate import calibrate
    from edit_lab.clock.costs import Costs

    path = Path(source)
    if path.is_dir():
        key = (str(path.resolve()), tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                                                 for f in path.iterdir() if f.is_file())))
        if key not in _CALIBRATED:
            _CALIBRATED[key] = calibrate(path)
        return copy.deepcopy(_CALIBRATED[key])
    return Costs.from_dict(json.loads(path.read_text()))


def costs_for(cfg: RunConfig) -> Any:
    """The costs the virtual clock runs `cfg` on.

    Given ones (`clock_costs`) must have been measured on cfg's model, shards and seq_len (a batch size is
    scaled linearly: `sim.predict.costs_fit`, which refuses the rest). The default, the shipped
    example's calibration, is scaled to any model: each unit's compute by its parameters and by the tokens
    a rank computes per step (batch_size × seq_len), which is a FLOP proxy, not a measurement.
    """
    from edit_lab.clock.sim.predict import costs_fit

    if cfg.clock.costs is not None:
        try:
            costs = load_costs(cfg.clock.costs)
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"clock_costs={cfg.clock.costs!r} is not allowed: a real run directory or a costs "
                              f"JSON ({e})") from None
        return costs_fit(cfg, costs)
    costs = load_costs(example_dir())
    if (costs.model, costs.shards, costs.seq_len) == (cfg.data.model, cfg.shards, cfg.data.seq_len):
        return costs_fit(cfg, costs)
    return scaled_to(costs, cfg)


def scaled_to(costs: Any, cfg: RunConfig) -> Any:
    """`costs` (measured on `costs.model`) for cfg's model, seq_len and batch size: per unit × parameters, × tokens."""
    import dataclasses

    from edit_lab.sizes import SIZES

    old, new = SIZES[costs.model], SIZES[cfg.data.model]
    tokens = (cfg.data.batch_size * cfg.data.seq_len) / (costs.batch_size * costs.seq_len)
    root, block = new.root_params() / old.root_params(), new.block_params() / old.block_params()
    whole = new.num_params() / old.num_params()

    def per_unit(xs: tuple[float, ...], k: float) -> tuple[float, ...]:
        b = sum(xs[1:]) / max(1, len(xs) - 1)
        return (xs[0] * root * k,) + (b * block * k,) * new.n_layers

    pad = lambda n: -(-n // cfg.shards) * 4  # noqa: E731 — one rank's float32 shard of n parameters
    return dataclasses.replace(
        costs, fwd_s=per_unit(costs.fwd_s, tokens), bwd_s=per_unit(costs.bwd_s, tokens),
        outer_step_s=per_unit(costs.outer_step_s, 1.0), other_s=costs.other_s * whole * tokens,
        own_compute_s=costs.own_compute_s * whole * tokens, eval_s=costs.eval_s * whole * tokens,
        unit_bytes=(pad(new.root_params()),) + (pad(new.block_params()),) * new.n_layers,
        model=cfg.data.model, shards=cfg.shards, batch_size=cfg.data.batch_size, seq_len=cfg.data.seq_len,
        source=(f"{costs.source} (measured on model {costs.model}, shards {costs.shards}, seq_len {costs.seq_len}, "
                f"batch_size {costs.batch_size}; compute scaled by parameters x tokens per rank)"))




# ------------------------------------------------------------------------------------------- a run
def costed_stragglers(cfg: RunConfig, costs: Any) -> Any:
    """cfg's `StragglerModel`, stretching the step's own compute as the costs state it (`Costs.stretched_s`).

    On this clock a unit's compute span is its calibrated cost, which includes the shard group's unhidden
    transfers, and the optimizer span is the whole rest of a step; a real straggler stretches its kernels
    only (`Costs.own_compute_s`, measured so by calibration). The simulator pauses the same."""
    from edit_lab.train.stragglers import StragglerModel

    class CostedStragglers(StragglerModel):
        def own_compute(self, compute_s: float) -> float:  # what `pause` records and `delay` (a rule too) gets
            return costs.stretched_s

        def delay(self, step: int, replica: int, compute_s: float) -> tuple[float, str | None]:
            return super().delay(step, replica, costs.stretched_s)

    return CostedStragglers.from_config(cfg)


class _BarProgress(ProgressFile):
    """Rank 0's progress file, and the caller's tqdm bar (None: no bar) moved with it."""

    def __init__(self, path: Path, bar: Any) -> None:
        super().__init__(path)
        self.bar = bar

    def write(self, step: int, total: int) -> None:
        super().write(step, total)
        if self.bar is not None and step > self.bar.n:
            self.bar.update(step - self.bar.n)


def train_ranks(cfg: RunConfig, costs: Any, progress: ProgressFile | None = None, out: Path | None = None,
                episode_rows: list | None = None) -> tuple[list[Any], dict[str, Any], tuple[int, str] | None]:
    """Train every rank of `cfg` on the virtual clock with `costs`: (rank records, rank 0's full state, failure).

    `failure` is (rank, traceback) of the rank that failed (-1: interrupted), else None, and then the records
    are incomplete. `progress`: rank 0's progress file; `out`: where a failed rank writes its events (None:
    nowhere, as for the preview, which keeps everything in memory: `predict_time_only`); `episode_rows`: gets the
    launcher's rows of a run that survives deaths (survival.jsonl)."""
    import torch

    from edit_lab.core.mesh import Mesh, configured_sync_groups, members_of
    from edit_lab.records import rundir
    from edit_lab.train.trainer import Trainer

    trainer_class: type = Trainer
    declared = None
    if cfg.clock.compute == "charged":  # time only: the same Trainer on a stand-in model that only charges
        from edit_lab.clock.time_only import ChargedTrainer, DeclaredSizes

        trainer_class, declared = ChargedTrainer, DeclaredSizes(cfg)
    groups = configured_sync_groups(cfg)  # a sync_group_rule's groups (None: the mesh's own)
    fabric = Fabric(cfg, CostModel(costs))
    records: dict[int, Any] = {}
    state: dict[str, Any] = {}
    VirtualComm = virtual_comm_class()
    episode = None
    if cfg.runtime.survive:  # deaths and joins: the real Survival on the fabric (clock/survive_virtual.py)
        from edit_lab.clock.survive_virtual import Episode

        episode = Episode(cfg, fabric, lambda rank, life, t: fabric.respawn(rank, lambda r: body(r, life), t))
    fabric.episode = episode

    def body(rank: int, life: int = 0) -> None:
        mesh = Mesh(rank, cfg.world_size, cfg.shards, cfg.replicas, None, None, members_of(rank, groups))
        trainer = trainer_class(cfg, mesh, torch.device("cpu"), fabric.clocks[rank],
                                comm_factory=lambda log: VirtualComm(mesh, log, fabric, declared,
                                                                     wire=wire_spec_of(cfg)))
        trainer.stragglers = costed_stragglers(cfg, costs)
        try:
            if episode is not None:
                episode.begin(trainer, life, costs)
            trainer.run(progress if rank == 0 or (episode is not None and mesh.shard == 0) else None)
            full = trainer.engine.full_state_dict(trainer.method.eval_shards())  # a shard-group collective
            if trainer.is_leader() and mesh.shard == 0:  # replica 0, or the lowest live one
                state.clear()
                state.update(full)
            records[rank] = trainer.rank_record()
            if episode is not None:
                episode.lives[rank] = life
        except BaseException:
            if out is not None:
                trainer.log.write(out / rundir.events_file(rank))
            raise

    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.runtime.threads)
    torch.set_flush_denormal(True)  # as every worker process does (worker.configure_cpu)
    threads = [threading.Thread(target=fabric.rank_main, args=(r, body), name=f"edit_lab-virtual-rank{r}", daemon=True)
               for r in range(cfg.world_size)]
    try:
        for t in threads:
            t.start()
        fabric.start()
        for t in threads + fabric.threads:  # replacements' threads join the list while the first ones run
            while t.is_alive():
                t.join(timeout=0.2)
        for t in fabric.threads:
            t.join()
    except BaseException:  # Ctrl-C in a notebook: stop every rank at its next collective, leave no thread
        fabric.stop("interrupted")
        for t in threads + fabric.threads:
            t.join()
        raise
    finally:
        torch.set_num_threads(threads_before)
        if episode is not None and episode_rows is not None:
            episode_rows.extend(episode.rows)
    if episode is not None:  # the first record's per-sync rows become syncs.jsonl: a rank of the start that lived
        order = sorted(records, key=lambda r: (episode.lives[r] > 0, r))
        return [records[r] for r in order], state, fabric.failure
    return [records[r] for r in sorted(records)], state, fabric.failure


def run_virtual(cfg: RunConfig, out: Path, error: type = RuntimeError, costs: Any = None,
                survival_summary: Any = None) -> Any:
    """Run the accepted configuration `cfg` on the virtual clock into the claimed directory `out`; the `Run`.

    A failed rank raises `error(rank, traceback, out)` (`launch.WorkerError`, which `launch` passes in).
    `costs`: the `Costs` to run on, already checked against cfg; None: `costs_for(cfg)`.
    With `virtual_compute="charged"` every rank trains a stand-in of the model (edit_lab/clock/time_only.py).
    `survival_summary(cfg, out, rows, records)`: what adds `survival` to summary.json for a run that survives deaths
    (the launcher's, `runtime/survive_records.py`, passed in from the layer above)."""
    from edit_lab.records import rundir
    from edit_lab.records.run import Run
    from edit_lab.records.rundir import RunWriter

    costs = costs_for(cfg) if costs is None else costs
    (out / rundir.CONFIG).write_text(cfg.to_json())
    bar = None
    if cfg.runtime.progress:  # no launcher loop polls the progress file here: rank 0 moves the bar as it writes it
        from tqdm.auto import tqdm

        total, unit = cfg.progress_total()
        bar = tqdm(total=total, desc=f"{cfg.method} {cfg.shards}×{cfg.replicas} (virtual clock)", unit=unit,
                   leave=False)
    progress = _BarProgress(out / rundir.PROGRESS, bar)
    start_unix = time.time()
    failure: tuple[int, str] | None = (-1, "interrupted")
    episode_rows: list[dict[str, Any]] = []
    try:
        records, state, failure = train_ranks(cfg, costs, progress, out, episode_rows)
    finally:
        if bar is not None:
            if failure is None:  # full when the run succeeded, as the launcher's (launch.close_bar)
                bar.update(bar.total - bar.n)
            bar.close()
    if failure is not None:
        rank, tb = failure
        if rank >= 0:
            (out / rundir.error_file(rank)).write_text(tb)
        raise error(rank, tb, out)
    RunWriter(out, cfg, start_unix, clock_costs=costs.source).write_all(records, state)
    if cfg.runtime.survive:
        from edit_lab.records.events import write_jsonl

        write_jsonl(out / "survival.jsonl", episode_rows)
        if survival_summary is not None:
            survival_summary(cfg, out, episode_rows, records)
    return Run(out)


# ------------------------------------------------------------------------------------------- the preview
def predict_time_only(cfg: RunConfig, costs: Any) -> Any:
    """`sim.predict.simulate`'s `Prediction` of `cfg` on `costs`, from a time-only virtual run kept in memory.

    The summary is summary.json's (`rundir.summarize`, the same definitions the simulator copies); the
    events are the shard-0 ranks' (a replica's ranks move together), as the simulator's; the rounds are
    A-EDiT's meetings as replica 0 saw them. No file is written."""
    from edit_lab.clock.sim.predict import Prediction, costs_fit
    from edit_lab.records.events import CROSS_REPLICA_GROUPS, is_cross_replica
    from edit_lab.records.overlap import Overlap
    from edit_lab.records.rundir import merge_metrics, summarize

    costs = costs_fit(cfg, costs)
    cfg = cfg.replace(clock="virtual", virtual_compute="charged", progress=False, out=None)
    if cfg.rules.grad_all_reduce is not None:
        raise ConfigError("grad_all_reduce_rule=... is not allowed in a preview: None (a time-only run times the "
                          "built-in all-reduce; launch the run to time yours)")
    records, _, failure = train_ranks(cfg, costs)
    if failure is not None:
        raise RuntimeError(f"the time-only preview failed on rank {failure[0]}:\n{failure[1]}")
    events = [e for r in records for e in r.events]
    metrics = merge_metrics([m for r in records for m in r.metrics])
    # summarize asks the overlap for one thing, each replica's time blocked on the sync group, which depends on
    # the cross-replica collectives and the waits on them alone: split only those (the same numbers, a fraction
    # of the events)
    cross = Overlap(e for e in events
                    if is_cross_replica(e) or (e["kind"] == "wait" and e["group"] in CROSS_REPLICA_GROUPS))
    summary = summarize(cfg, records, metrics, 0.0, cross, clock_costs=costs.source)
    summary["simulated"] = True
    train = [m for m in metrics if m["kind"] == "train"]
    rounds = list(records[0].method_info.get("meetings", [])) if records else []
    return Prediction(cfg, costs, summary, [e for e in events if e["shard"] == 0], train, rounds)
