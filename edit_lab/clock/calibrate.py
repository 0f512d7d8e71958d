"""`calibrate(run_dir) -> Costs`: the preview simulator's numbers, measured from one real run's events.

Everything is a (trimmed) mean or a median over the run's steps (on the shard-0 rank of every replica), so the few steps
that sync, pause, validate or wait do not move it:

- per-unit forward / backward: each unit's `compute_fwd` / `compute_bwd` time, stretched so that the
  units together fill the measured forward and backward phases (the shard group's all-gathers and
  reduce-scatters that compute did not hide are then part of the units' time);
- `other_s`: the rest of a step's cycle (from the end of one step to the end of the next) once the
  phases, the sync-group waiting (overlap.py's exposed) and the spans the simulator adds itself
  (`SEPARATE_KINDS`: pauses, validations, clock exchanges, outer steps, EDiT's norm exchanges) are
  taken out;
- the sync group: collectives matched across replicas in issue order; the time from the last
  replica's issue (or the end of the group's previous collective) to completion, minus the run's
  simulated link, gives a fixed latency (small messages) and a bandwidth (large ones).

A cost the run never paid (a `sync` run has no outer step) falls back on a stated neighbour
(`FALLBACKS`), so any run calibrates every method.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.records.events import OWN_COMPUTE_KINDS, is_comm
from edit_lab.records.overlap import Interval, clip, length, merge
from edit_lab.records.run import Run

#: Spans the simulator adds on its own (`Costs` fields), so they are taken out of a step's "rest".
SEPARATE_KINDS = ("straggle", "eval", "clock", "outer_step", "sync_clip", "sync_norms")
TRIM = 0.02  # share of the slowest samples left out of a mean
SMALL_BYTES = 4096  # a sync-group collective this small costs its latency only
SYNC_UNIT_KINDS = ("grad_all_reduce", "sync_reduce", "param_average")  # per unit, one rank's shard
FALLBACKS = {
    "clock_s": "the gradient-norm exchange (the same tiny shard-group all-reduce)",
    "outer_step_s": "the inner optimizer's time, shared out by unit size (an outer step is one such pass)",
    "shard_exchange_s": "the clock exchange",
    "sync_Bps": "unlimited (only small collectives were measured)",
}


def _median(xs: Iterable[float], default: float = 0.0) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else default


def _mean(xs: Iterable[float], default: float = 0.0, trim: float = TRIM) -> float:
    """The mean without the top `trim` share: a step's time has a long tail on a busy machine (the mean
    is what throughput sees), but a single stall of the whole machine should not count for every step."""
    xs = sorted(xs)
    if not xs:
        return default
    keep = xs[:max(1, int(round(len(xs) * (1.0 - trim))))]
    return sum(keep) / len(keep)


def _by_rank_step(events: Iterable[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    out: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        out[(e["rank"], e["step"])].append(e)
    return out


def _phases(evs: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(forward wall, backward wall) of one rank's step: first gather to last forward compute, then to the
    end of the last backward compute or shard-group reduce-scatter."""
    fwd = [e for e in evs if e["kind"] == "compute_fwd"]
    bwd_end = [e["t1"] for e in evs if e["kind"] in ("compute_bwd", "reduce_scatter")
               or (e["kind"] == "wait" and e["group"] == "shard" and (e["data"] or {}).get("on") == "reduce_scatter")]
    if not fwd or not bwd_end:
        return None
    start = min([e["t0"] for e in fwd] + [e["t0"] for e in evs if e["kind"] == "all_gather"])
    fwd_end = max(e["t1"] for e in fwd)
    if any(e["group"] == "sync" and e["t0"] < fwd_end and e["t1"] > start for e in evs):
        return None  # EDiT's sync inside this forward: not a plain forward (the simulator adds the sync itself)
    if max(bwd_end) <= fwd_end:
        # a forward compute recorded after the step's last backward span (a step cut short, or its spans out of
        # order): no phase to measure. Kept, it gave a negative backward wall, the stretch factor of every
        # unit's backward turned negative, and Costs refused the calibration (seen on a short 1 x 2 run)
        return None
    return fwd_end - start, max(bwd_end) - fwd_end


def _sync_costs(run: Run, ranks: list[int]) -> tuple[float, float, int]:
    """(latency s, bandwidth B/s, collectives matched) of the sync group of shard 0, link time taken out."""
    cfg = run.config
    per_rank = [sorted((e for e in run.events
                        if e["rank"] == r and e["group"] == "sync" and is_comm(e["kind"], "sync")),
                       key=lambda e: e["t0"]) for r in ranks]
    n = min(len(x) for x in per_rank) if per_rank else 0
    link_lat, link_bps = cfg.link.latency_ms / 1e3, cfg.link.bandwidth_mb_s * 1e6
    small, large = [], []
    prev_end = 0.0
    for i in range(n):
        group = [x[i] for x in per_rank]
        if len({e["kind"] for e in group}) != 1:
            break  # the sequences no longer pair up (a run cut short): stop matching
        start = max(max(e["t0"] for e in group), prev_end)
        end = max(e["t1"] for e in group)
        prev_end = end
        nbytes = group[0]["bytes"]
        d = end - start - link_lat - (nbytes / link_bps if link_bps > 0 else 0.0)
        (small if nbytes <= SMALL_BYTES else large).append((max(d, 0.0), nbytes))
    latency = _mean((d for d, _ in small), default=_mean((d for d, _ in large), 0.0))
    per_byte = _mean((max(d - latency, 0.0) / b for d, b in large), default=0.0)
    return latency, (1.0 / per_byte if per_byte > 0 else 0.0), n


def calibrate(run_dir: str | Path | Run) -> Costs:
    """The costs of one replica's step and of a sync-group collective, measured from a real run."""
    run = run_dir if isinstance(run_dir, Run) else Run(run_dir)
    cfg = run.config
    ranks = [r * cfg.shards for r in range(cfg.replicas)]
    events = [e for e in run.events if e["rank"] in ranks]
    if not events:
        raise ValueError(f"{run.path}: no events to calibrate from")
    steps = _by_rank_step(events)
    units = 1 + max(e["unit"] for e in events if e["kind"] == "compute_fwd" and e["unit"] is not None)

    # per-unit compute, stretched to the measured phases
    cf: dict[int, list[float]] = defaultdict(list)
    cb: dict[int, list[float]] = defaultdict(list)
    fwd_wall, bwd_wall = [], []
    for evs in steps.values():
        per_unit: dict[tuple[str, int], float] = defaultdict(float)
        for e in evs:
            if e["kind"] in ("compute_fwd", "compute_bwd") and e["unit"] is not None:
                per_unit[(e["kind"], e["unit"])] += e["t1"] - e["t0"]
        for (kind, u), v in per_unit.items():
            (cf if kind == "compute_fwd" else cb)[u].append(v)
        ph = _phases(evs)
        if ph is not None:
            fwd_wall.append(ph[0])
            bwd_wall.append(ph[1])
    f = [_mean(cf[u]) for u in range(units)]
    b = [_mean(cb[u]) for u in range(units)]
    kf = _mean(fwd_wall) / sum(f) if sum(f) > 0 else 1.0
    kb = _mean(bwd_wall) / sum(b) if sum(b) > 0 else 1.0
    fwd_s = tuple(x * kf for x in f)
    bwd_s = tuple(x * kb for x in b)

    # bytes of one rank's shard of each unit: from the model's sizes (one float32 shard of each unit, as
    # sharding pads it), so that runs recorded under either counting rule calibrate the same (before issue 48
    # an event's bytes were the tensor's size, now what a rank sends on a ring: `wire.ring_bytes`)
    from edit_lab.sizes import SIZES

    size = SIZES.get(cfg.data.model)
    if size is not None and size.n_layers + 1 == units:
        pad = lambda n: -(-n // cfg.shards) * 4  # noqa: E731
        unit_bytes = [pad(size.root_params())] + [pad(size.block_params())] * size.n_layers
    else:  # from the events, by the ring rule
        unit_bytes = [0] * units
        for e in events:
            if e["unit"] is not None and e["unit"] < units and not unit_bytes[e["unit"]]:
                if e["kind"] in SYNC_UNIT_KINDS and cfg.replicas > 1:
                    unit_bytes[e["unit"]] = round(int(e["bytes"]) * cfg.replicas / (2 * (cfg.replicas - 1)))
                elif e["kind"] == "all_gather" and cfg.shards > 1:
                    unit_bytes[e["unit"]] = int(e["bytes"]) // (cfg.shards - 1)
    if not all(unit_bytes):
        raise ValueError(f"{run.path}: the run recorded no per-unit transfer to size the units from")

    def durations(kind: str) -> list[float]:
        return [e["t1"] - e["t0"] for e in events if e["kind"] == kind]

    clock_s = _median(durations("clock"), default=_median(durations("grad_norm")))
    eval_s = _median(durations("eval"))
    optimizer_s = _median(durations("optimizer"))
    shard_exchange_s = _median(durations("sync_clip") + durations("sync_norms"), default=clock_s)
    total_bytes = sum(unit_bytes)
    per_unit_outer = [_median(e["t1"] - e["t0"] for e in events if e["kind"] == "outer_step" and e["unit"] == u)
                      for u in range(units)]
    whole = _median(e["t1"] - e["t0"] for e in events if e["kind"] == "outer_step" and e["unit"] is None)
    if all(x > 0 for x in per_unit_outer):
        outer_step_s = tuple(per_unit_outer)
    else:
        pool = whole if whole > 0 else optimizer_s
        outer_step_s = tuple(pool * ub / total_bytes for ub in unit_bytes)

    # the rest of a step's cycle
    ov = run.overlap
    exposed: dict[int, list[Interval]] = defaultdict(list)
    skip: dict[int, list[Interval]] = defaultdict(list)
    for e in events:
        if e["group"] == "sync" and is_comm(e["kind"], "sync"):
            exposed[e["rank"]].extend(ov.split(e).exposed_at)
        elif e["kind"] in SEPARATE_KINDS:
            skip[e["rank"]].append((e["t0"], e["t1"]))
    busy = []
    train = [m for m in run.metrics if m["kind"] == "train" and not m.get("carried")]
    for r, rank in enumerate(ranks):
        cut = merge(exposed[rank] + skip[rank])
        ends = [m["t"] for m in sorted(train, key=lambda m: m["step"]) if m["replica"] == r]
        prev = 0.0
        for t in ends:
            busy.append((t - prev) - length(clip(cut, prev, t)))
            prev = t
    other_s = max(_mean(busy) - sum(fwd_s) - sum(bwd_s), 0.0)

    own = defaultdict(float)  # (rank, step): the step's own compute, as a straggler's pause measures it
    for e in events:
        if e["kind"] in OWN_COMPUTE_KINDS and e["step"] is not None:
            own[(e["rank"], e["step"])] += e["t1"] - e["t0"]
    own_compute_s = _median(own.values())

    latency, bps, _ = _sync_costs(run, ranks)
    return Costs(fwd_s=fwd_s, bwd_s=bwd_s, other_s=other_s, own_compute_s=own_compute_s, unit_bytes=tuple(unit_bytes), sync_latency_s=latency,
                 sync_Bps=bps, clock_s=clock_s, eval_s=eval_s, outer_step_s=outer_step_s,
                 shard_exchange_s=shard_exchange_s, model=cfg.data.model, shards=cfg.shards, batch_size=cfg.data.batch_size,
                 seq_len=cfg.data.seq_len, source=str(run.path), state_bytes=_state_bytes(run))


def _state_bytes(run: Run) -> int:
    """The bytes of the state a donor handed a replacement (a run that survived a death: its `transfer` record in
    syncs.jsonl), for the simulator's join (`Costs.state_bytes`); 0 when the run had none (it is then estimated)."""
    from edit_lab.records.events import read_jsonl

    path = run.path / "syncs.jsonl"
    rows = read_jsonl(path) if path.exists() else []
    return next((int(r["bytes"]) for r in rows if r.get("kind") == "transfer" and r.get("side") == "donor"), 0)
