"""`simulate(cfg, costs)`: a run's throughput and waiting, predicted in milliseconds instead of measured.

The result's `summary` has summary.json's throughput keys, computed with `rundir.summarize`'s very
definitions: `wall_s` the end of the last step of any replica, `tokens_per_s` all tokens over
`wall_s`, per replica `tokens_per_s` its tokens over the end of its own last step and `sync_wait_s`
the seconds it stood blocked on the sync group (`Overlap.replica_blocked_s`, overlap.py's "exposed"),
`steps` the configured steps (with a time budget: the most any replica ran).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Engine, events_all_shards
from edit_lab.clock.sim.programs import PROGRAMS, ReplicaProgram
from edit_lab.config import ConfigError, RunConfig
from edit_lab.records.overlap import Overlap, length, merge
from edit_lab.rules.rules import Rules, mesh_columns


@dataclass
class Prediction:
    """A simulated run: summary.json's throughput keys, its events (shard-0 ranks), metrics and rounds."""

    config: RunConfig
    costs: Costs
    summary: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)  # A-EDiT's meetings (replica 0's view)

    def write(self, out: str | Path) -> Path:
        """A run directory the lab's figures can read (config, events of every rank, metrics, summary)."""
        from edit_lab.records.events import write_jsonl

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(self.config.replace(out=str(out)).to_json())
        events = events_all_shards(self.events, self.config.shards)
        for rank in range(self.config.world_size):
            write_jsonl(out / f"events-rank{rank}.jsonl", [e for e in events if e["rank"] == rank])
        write_jsonl(out / "metrics.jsonl", self.metrics)
        for name in ("penalty.jsonl", "syncs.jsonl"):
            write_jsonl(out / name, [])
        summary = {**self.summary, "final_val_loss": None, "final_train_loss": None, "memory": {},
                   "method_info": {"simulated": True, "costs": self.costs.source}}
        for v in summary["per_replica"].values():
            v.setdefault("final_train_loss", None)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        return out


def costs_fit(cfg: RunConfig, costs: Costs) -> Costs:
    """The costs for `cfg`'s batch size; a ConfigError when they were measured on another model or mesh.

    Compute scales with the tokens a rank processes per step (batch_size × seq_len at a fixed model);
    anything else changes what a unit costs in ways a linear rule would get wrong.
    """
    for name in ("model", "shards", "seq_len"):
        measured = getattr(costs, name)
        if measured is not None and cfg.get(name) != measured:
            raise ConfigError(f"{name}={cfg.get(name)!r} is not allowed: the costs were measured with "
                              f"{name}={measured!r} ({costs.source}); calibrate from a run with {name}="
                              f"{cfg.get(name)!r}")
    if costs.batch_size and cfg.data.batch_size != costs.batch_size:
        return costs.scaled(cfg.data.batch_size / costs.batch_size)
    return costs


def simulate(cfg: RunConfig, costs: Costs, keep_events: bool = True) -> Prediction:
    """Simulate `cfg` with `costs`; `keep_events=False` keeps only the accounting (large clusters)."""
    if cfg.runtime.survive:
        refuse_unmodelled_survival(cfg)
    if cfg.rules.grad_all_reduce is not None:  # notebook 01's exercise: it would time the built-in
        first = next((ln.strip() for ln in cfg.rules.grad_all_reduce.splitlines() if ln.strip()), "")
        raise ConfigError(f"grad_all_reduce_rule={first[:80]!r} is not allowed in a preview: None (the simulator "
                          f"times the built-in all-reduce, one collective per unit, not the collectives a rule "
                          f"issues; launch the run to time yours)")
    costs = costs_fit(cfg, costs)
    if Rules.from_config(cfg).sync_groups(cfg.shards, cfg.replicas) != mesh_columns(cfg.shards, cfg.replicas):
        raise ConfigError("sync_group_rule=... is not allowed in the preview simulator unless it gives the mesh's "
                          "own sync groups (one shard index in every replica), the only ones it models: launch "
                          "the run instead")  # notebook 03's exercise: other sync groups
    programs: list[ReplicaProgram] = []

    def program(replica: int, life: int = 0) -> Any:
        p = PROGRAMS[cfg.method](cfg, costs, replica, life)
        p.coarse = not keep_events
        programs.append(p)
        return p.run()

    link = (cfg.link.latency_ms / 1e3, cfg.link.bandwidth_mb_s * 1e6)
    engine: Engine
    if cfg.runtime.survive:  # deaths and joins: sim/survive.py
        from edit_lab.clock.sim.survive import SurvivingEngine
        from edit_lab.config import deaths
        from edit_lab.registry import capabilities

        engine = SurvivingEngine(costs, cfg.replicas, cfg.shards, *link, keep_events=keep_events,
                                 timeout_s=cfg.runtime.timeout_s, rejoin=cfg.runtime.rejoin_step >= 0,
                                 min_replicas=cfg.runtime.survive_min_replicas,
                                 state_bytes=costs.joiner_state_bytes(capabilities(cfg.method).is_local_sgd),
                                 spawn=program, due_now=lambda missing, step: deaths.due_now(cfg, missing, step))
    else:
        engine = Engine(costs, cfg.replicas, cfg.shards, *link, keep_events=keep_events)
    engine.run([program(r) for r in range(cfg.replicas)])
    rows = [row for st in engine.states if not st.lost for row in st.rows]
    train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: (r["step"], r["replica"]))
    waits = sync_wait(engine) if keep_events else {st.replica: length(merge(st.exposed)) for st in engine.states
                                                   if not st.lost}
    summary = predicted_summary(cfg, train, waits, [p.end_s for p in programs])
    if cfg.runtime.survive:
        summary["survival"] = engine.episode.summary()  # type: ignore[attr-defined]
    rounds = getattr(programs[0], "rounds", [])
    return Prediction(cfg, costs, summary, engine.events, train, rounds)


def refuse_unmodelled_survival(cfg: RunConfig) -> None:
    """What the simulator's deaths and joins leave out (docs/edit-method.md §16), refused naming the field."""
    if cfg.shards > 1:
        raise ConfigError(f"shards={cfg.shards} is not allowed with survive=True in the preview simulator: 1 (one "
                          f"rank per replica, as on the virtual clock: a replica's ranks agree on a view through a "
                          f"shard-group max it does not model)")
    if cfg.trouble.fault_replica >= 0 and cfg.replicas - 1 < cfg.runtime.survive_min_replicas:
        raise ConfigError(f"survive_min_replicas={cfg.runtime.survive_min_replicas} is not allowed with a death in "
                          f"the preview simulator: at most {cfg.replicas - 1} (replicas - 1; below it the run ends "
                          f"at the death, with nothing left to predict)")


def sync_wait(engine: Engine) -> dict[int, float]:
    """Per replica, the seconds it stood blocked on the sync group: `Overlap.replica_blocked_s` over every
    rank's events, as `rundir.summarize` takes it (a replica's ranks are copies of its shard-0 rank here)."""
    events = events_all_shards(engine.events, engine.S)
    return Overlap(events).replica_blocked_s(events, engine.S)


def predicted_summary(cfg: RunConfig, train: list[dict[str, Any]], waits: dict[int, float],
              ends: list[float]) -> dict[str, Any]:
    """summary.json's throughput keys, with `rundir.summarize`'s definitions."""
    wall = max((m["t"] for m in train), default=0.0)
    per_replica: dict[str, dict[str, Any]] = {}
    for r in range(cfg.replicas):
        mine = [m for m in train if m["replica"] == r]
        tokens = sum(m["tokens"] for m in mine)
        end = max((m["t"] for m in mine), default=0.0)
        per_replica[str(r)] = {"tokens": tokens, "steps": len(mine), "tokens_per_s": tokens / end if end > 0 else 0.0,
                               "sync_wait_s": waits.get(r, 0.0)}
    total = sum(v["tokens"] for v in per_replica.values())
    steps = max((v["steps"] for v in per_replica.values()), default=0) if cfg.time_budget else cfg.steps
    return {"method": cfg.method, "shards": cfg.shards, "replicas": cfg.replicas, "steps": steps,
            "time_budget_s": cfg.time_budget, "train_end_s": max(ends) if ends else None, "model": cfg.data.model,
            "wall_s": wall, "tokens": total, "tokens_per_s": total / wall if wall > 0 else 0.0,
            "step_time_s": wall / steps if steps else 0.0, "per_replica": per_replica, "simulated": True}
