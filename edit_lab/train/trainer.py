"""One rank's training: the step loop that calls the method's hooks (edit-method.md §2), and its optimizer.

`Trainer.train_step` is one step (forward with the method's `pre_unit` before each unit, `before_backward`,
backward, the method's `after_backward`, the inner optimizer, `after_optimizer`); `Trainer.run` is the loop, the time
budget's meetings and the final sync. Kept apart from the process that runs it (`runtime/worker.py`: process
bootstrap, devices, torchrun), so that the virtual clock (`clock/virtual.py`) and the tests drive the very
same loop in a thread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from edit_lab.config import RunConfig
from edit_lab.core.comm import Comm, LinkModel
from edit_lab.core.mesh import Mesh
from edit_lab.core.methods import make_method
from edit_lab.core.model import build_model
from edit_lab.core.quorum import Pause
from edit_lab.core.sharding import ShardedModel
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.records import rundir
from edit_lab.records.events import Clock, EventLog, own_compute_s
from edit_lab.records.rundir import ProgressFile, RankRecord
from edit_lab.registry import capabilities
from edit_lab.train import checkpoint, faults
from edit_lab.train.data import Corpus, corrupt_batch, load_corpus, mix_seed, train_batch, val_batches
from edit_lab.train.stragglers import StragglerModel


def local_world_size(cfg: RunConfig) -> int:
    """Ranks on this machine: torchrun says so; our own launcher puts every rank here."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", cfg.world_size))


def resolve_backend(cfg: RunConfig, device: torch.device) -> str:
    """NCCL when every local rank has a GPU of its own; otherwise gloo (on GPUs: through CPU copies)."""
    if cfg.runtime.backend != "auto":
        return cfg.runtime.backend
    if device.type == "cuda" and torch.cuda.device_count() >= local_world_size(cfg):
        return "nccl"
    return "gloo"


def make_optimizer(cfg: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The inner optimizer, on this rank's shards only (elementwise, so sharding does not change it)."""
    if cfg.inner.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.inner.lr, betas=cfg.inner.betas, weight_decay=cfg.inner.weight_decay)
    return torch.optim.SGD(params, lr=cfg.inner.lr, weight_decay=cfg.inner.weight_decay)


class Trainer:
    """Holds one rank's state and runs the steps; separated from `main` so tests can drive it."""

    def __init__(self, cfg: RunConfig, mesh: Mesh, device: torch.device, clock: Clock,
                 comm_factory: Callable[[EventLog], Comm] | None = None) -> None:
        """`comm_factory`: builds the rank's `Comm` from its log instead (the virtual clock's, virtual.py)."""
        self.cfg, self.mesh, self.device = cfg, mesh, device
        self.log = EventLog(mesh.rank, mesh.replica, mesh.shard, clock, cuda=device.type == "cuda")
        link = LinkModel.of(cfg.link.latency_ms, cfg.link.bandwidth_mb_s)
        stage = device.type == "cuda" and resolve_backend(cfg, device) == "gloo"  # ranks sharing a GPU
        self.comm = (Comm(mesh, self.log, link, stage_to_cpu=stage, device=device,
                          wire=wire_spec_of(cfg)) if comm_factory is None
                     else comm_factory(self.log))
        self.engine = self.make_engine()
        self.method = make_method(cfg, self.engine)
        self.optimizer = make_optimizer(cfg, self.engine.shards)
        self.method.optimizer = self.optimizer
        self.other_corpus: Corpus | None = None
        self.load_data()
        self.stragglers = StragglerModel.from_config(cfg)
        self.quorum = capabilities(cfg.method).quorum  # backup workers: the pause is spent before the backward
        self.metrics: list[dict] = []
        self._step_compute_s = 0.0  # the own compute of the last step that ran its backward (`planned_pause`)
        self.start_step = 0
        self.syncs_done = 0
        self.train_end_s: float | None = None
        self._checkpoint_due: int | None = None
        self.life = 0  # survival: 0 for a rank of the run's start, n for its replica's n-th replacement
        self.survival: Any = None  # survival (`core.survival.Survival`, set by `attach`): None, one death ends the run
        self.hooks: Any = self.method  # what the forward calls before each unit (faults.unit_fault's with survival)
        self.method.on_synced = self.after_sync
        if cfg.runtime.resume:
            self.restore(Path(cfg.runtime.resume))

    # ------------------------------------------------------------------ what a rank computes on
    def make_engine(self) -> ShardedModel:
        """This rank's sharded model; the virtual clock's time-only mode puts a stand-in here (edit_lab/clock/time_only.py)."""
        cfg = self.cfg
        model = build_model(cfg.data.model, cfg.seed)
        return ShardedModel(model, self.comm, self.device, bf16=cfg.runtime.bf16,
                            reshard_after_forward=cfg.runtime.reshard_after_forward)

    def load_data(self) -> None:
        """The corpus and the validation batches (a time-only run computes on none: edit_lab/clock/time_only.py)."""
        cfg = self.cfg
        self.corpus = Corpus.from_bytes(load_corpus(cfg.data.corpus))
        self.val = val_batches(self.corpus, cfg.data.eval_batches, cfg.data.batch_size, cfg.data.seq_len, cfg.seed)

    # ------------------------------------------------------------------ checkpoints
    def after_sync(self, next_step: int) -> None:
        """Every replica holds the agreed model: save a checkpoint every `checkpoint_every` syncs.

        A sync between steps (after the optimizer step of `next_step − 1`) is saved at the end of that
        step, once its metrics are recorded; nothing changes θ in between. EDiT's sync, inside the
        forward of `next_step`, is saved at once, before the step's local update moves θ away from a.
        """
        self.syncs_done += 1
        if self.cfg.runtime.checkpoint_every and self.syncs_done % self.cfg.runtime.checkpoint_every == 0:
            if next_step == self.log.step + 1:
                self._checkpoint_due = next_step
            else:
                self.save_checkpoint(next_step)

    def save_checkpoint(self, next_step: int) -> None:
        with self.log.span("checkpoint", next_step=next_step, sync=self.syncs_done):
            checkpoint.save(Path(self.cfg.runtime.out), self.syncs_done, self.mesh.rank, self.mesh.world_size,
                            self.state_dict(next_step), {"config": self.cfg.to_dict()}, barrier=self.comm.barrier)

    def state_dict(self, next_step: int) -> dict:
        return {"step": next_step, "rank": self.mesh.rank, "replica": self.mesh.replica,
                "shards": [p.detach().cpu().clone() for p in self.engine.shards],
                "optimizer": self.optimizer.state_dict(), "method": self.method.state_dict(),
                "syncs_done": self.syncs_done, "metrics": list(self.metrics)}

    def restore(self, ckpt: Path) -> None:
        state, manifest = checkpoint.load(ckpt, self.mesh.rank, self.mesh.shards)
        with torch.no_grad():
            for p, v in zip(self.engine.shards, state["shards"]):
                p.copy_(v.to(p.device))
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state_dict(state["method"])
        self.start_step, self.syncs_done = state["step"], state["syncs_done"]
        # a new replica (elastic resume) starts its own history; an old one keeps its metrics
        # (their times belong to the earlier session, so throughput ignores rows marked `carried`)
        self.metrics = [dict(m, carried=True) for m in state["metrics"]] if state["rank"] == self.mesh.rank else []
        old_replicas = manifest["config"]["replicas"]
        self.log.record("resume", step=self.start_step, checkpoint=str(ckpt), from_replicas=old_replicas,
                        to_replicas=self.mesh.replicas)

    # ------------------------------------------------------------------ surviving a death (core/survival.py)
    def attach(self, survival: Any, life: int) -> None:
        """Train through deaths: the sync group is `survival`'s view, this rank the `life`-th of its replica."""
        self.survival, self.life = survival, life
        self.method.survival = survival
        self.comm.backend = survival.backend(self.comm)
        survival.method = self.method
        survival.state_for_joiner = self.state_for_joiner
        self.hooks = faults.unit_fault(self.cfg, self.mesh.rank, life, self.method)  # a death inside a step

    def state_for_joiner(self, next_step: int) -> dict:
        """What a donor hands a replacement at the start of the sync at `next_step`: the agreed model (anchor,
        outer momentum, the penalty's detectors), its inner optimizer state and the counters."""
        state = {"step": next_step, "method": self.method.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "syncs_done": self.syncs_done}
        if getattr(self.method, "outer", None) is None:  # sync: θ itself (a local-SGD method's θ = a is in "method")
            state["shards"] = [p.detach().cpu() for p in self.engine.shards]
        return state

    @torch.no_grad()
    def take_state(self, state: dict) -> None:
        """A replacement takes a donor's state: θ = a (so its Δ is 0; `sync`: the donor's θ, the same on every
        replica), and the run's step: its data stream is its replica id's, at that step (the streams are stateless)."""
        self.method.load_state_dict(state["method"])
        self.optimizer.load_state_dict(state["optimizer"])
        outer = getattr(self.method, "outer", None)
        for p, a in zip(self.engine.shards, outer.anchors if outer is not None else state["shards"]):
            p.copy_(a.detach().to(p.device))
        self.start_step, self.syncs_done = state["step"], state["syncs_done"]

    def is_leader(self) -> bool:
        """Does this replica do replica 0's duties (the progress file)? Replica 0, or with survival the view's
        lowest live replica."""
        return self.survival is None or self.survival.view.leader == self.mesh.replica

    # ------------------------------------------------------------------ data
    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, m = self.cfg, self.mesh
        x, y = train_batch(self.corpus, step, m.replica, m.shard, cfg.data.batch_size, cfg.data.seq_len, cfg.seed)
        if m.replica == cfg.trouble.corrupt_replica and step >= cfg.trouble.corrupt_from_step:
            if cfg.trouble.corrupt_mode == "corpus" and self.other_corpus is None:
                self.other_corpus = Corpus.from_bytes(bytes(range(256)) * 4096)
            gen = torch.Generator().manual_seed(mix_seed(cfg.seed, m.replica, m.shard, step, 7))
            x, y = corrupt_batch(x, y, cfg.trouble.corrupt_mode, gen, self.other_corpus)
        return x.to(self.device), y.to(self.device)

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> float:
        faults.inject(self.cfg, self.mesh.rank, step, self.life)
        cfg, log, clock = self.cfg, self.log, self.log.clock
        log.step = step
        t_begin = clock.now()
        first_event = len(log.events)
        if self.survival is not None:
            self.survival.heartbeat(step)
        if self.survival is not None and self.method.syncs_in_step(step):  # EDiT's sync, sync's: retried whole
            x, loss, member = self.survival.attempt(step, lambda: self.until_optimizer(step, first_event, retry=True),
                                                    rerun_after_discard=True)
        else:
            x, loss, member = self.until_optimizer(step, first_event)
        if cfg.inner.grad_clip > 0:
            self.engine.grad_norm_(cfg.inner.grad_clip)
        with log.span("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        if not self.quorum:
            self.straggle(step, first_event)
        if step == cfg.trouble.spike_step and self.mesh.replica == cfg.trouble.spike_replica:
            with torch.no_grad():  # a one-off blow-up of this replica (on `spike_units`, or every unit)
                for unit, p in enumerate(self.engine.shards):
                    if not cfg.trouble.spike_units or unit in cfg.trouble.spike_units:
                        p.mul_(cfg.trouble.spike_scale)
        self.method.after_optimizer(step)
        value = float(loss.detach())  # waits for the device, so t_end is the step's real end
        t_end = clock.now()
        log.resolve()
        row = {"kind": "train", "step": step, "rank": self.mesh.rank, "replica": self.mesh.replica,
               "shard": self.mesh.shard, "loss": value, "tokens": x.numel() if member else 0, "t": t_end,
               "dt": t_end - t_begin}
        if not member:  # its forward's loss is real, its tokens were not trained on
            row["dropped"] = True
        self.metrics.append(row)
        if member and self.quorum and self.stragglers.needs_compute(self.mesh.replica):  # `planned_pause`'s
            self._step_compute_s = own_compute_s(self.log.events[first_event:])
        if self._checkpoint_due is not None:
            self.save_checkpoint(self._checkpoint_due)
            self._checkpoint_due = None
        return value

    def until_optimizer(self, step: int, first_event: int, retry: bool = False) -> tuple[torch.Tensor, torch.Tensor,
                                                                                          bool]:
        """Step `step` up to its optimizer: `begin_step`, the forward (EDiT syncs inside it), the backward,
        `after_backward` (sync's gradient all-reduce); (the batch, the loss, whether it ran its backward).

        `retry`: survival may run this again after a failed sync (core/survival.py): nothing before the optimizer
        moves θ, and a failed attempt's gradients are dropped first."""
        cfg = self.cfg
        if retry:
            self.optimizer.zero_grad(set_to_none=True)
        self.method.begin_step(step)
        x, y = self.batch(step)
        loss = self.engine.forward(x, y, hooks=self.hooks)
        loss = faults.maybe_poison_loss(cfg, self.mesh.rank, step, loss)
        faults.check_finite(cfg, self.mesh.rank, step, loss)
        member = self.method.before_backward(step, self.planned_pause(step, first_event))
        if member:
            self.engine.backward(loss)
        else:  # a late replica of backup workers: its gradient would be dropped, so it computes none
            self.engine.drop_backward()
        self.method.after_backward(step)
        return x, loss, member

    def planned_pause(self, step: int, first_event: int) -> Pause | None:
        """For a method that spends the straggler's pause before the backward (`quorum`: backup workers), the
        pause it owes this step; None for the others (they pause after the optimizer, `straggle`). The step's
        own compute is not known before its backward: the last whole step's stands for it (at the first, three
        times this forward's: a backward costs about two forwards)."""
        if not self.quorum:
            return None
        compute_s = 0.0
        if self.stragglers.needs_compute(self.mesh.replica):
            self.log.resolve()
            compute_s = self._step_compute_s or 3 * own_compute_s(self.log.events[first_event:])
        return self.stragglers.plan(step, self.mesh.replica, compute_s)

    def straggle(self, step: int, first_event: int) -> None:
        """A straggler's pause: (k − 1) × this step's own compute (its events from `first_event` on), plus
        random pauses and a reader's rule (given the same compute); collectives and waits are not stretched (stragglers.py)."""
        compute_s = 0.0
        if self.stragglers.needs_compute(self.mesh.replica):
            self.log.resolve()  # on a GPU the compute spans are timed on the device
            compute_s = own_compute_s(self.log.events[first_event:])
        self.stragglers.pause(step, self.mesh.replica, compute_s, self.log)

    @torch.no_grad()
    def evaluate(self, step: int, at_s: float | None = None, final: bool = False) -> float:
        """Validation loss of the model the replicas agree on (`Method.eval_shards`).

        `at_s`: the scheduled time of a timed validation (`eval_every_s`), recorded so that rows of
        replicas that were at different steps at that moment are merged by time, not by step.
        """
        with self.log.span("eval"):
            shards = self.method.eval_shards()
            losses = [float(self.engine.forward(x.to(self.device), y.to(self.device), shards=shards, grad=False))
                      for x, y in self.val]
        value = sum(losses) / len(losses)
        self.log.resolve()
        row = {"kind": "eval", "step": step, "rank": self.mesh.rank, "replica": self.mesh.replica,
               "shard": self.mesh.shard, "val_loss": value, "t": self.log.clock.now()}
        if at_s is not None:
            row["at_s"] = at_s
        if final:
            row["final"] = True
        self.metrics.append(row)
        return value

    def rank_record(self) -> RankRecord:
        """What this rank hands the run directory at the end (rundir.py), as plain data."""
        return RankRecord(
            rank=self.mesh.rank, events=self.log.events, records=self.log.records, metrics=self.metrics,
            memory=rundir.memory_report(self.engine.shards, self.optimizer.state, self.method.extra_state_numel(),
                                        self.engine.peak_gathered_bytes, cuda=self.device.type == "cuda"),
            method_info=self.method.summary() if hasattr(self.method, "summary") else {},
            train_end_s=self.train_end_s)

    def run(self, progress: ProgressFile | None = None) -> None:
        """Train `steps` steps, or, with a time budget, until the budget is spent (edit-method.md §12).

        With a time budget every replica trains as many steps as its speed allows: at each step start the
        replica's clock (agreed over its shard group) is compared with the budget, and `Method.stop_here`
        decides, with the other replicas where the method needs it, whether to stop. `finalize` then ends
        with one sync every replica takes part in. Timed validations (`eval_every_s`) run at the first step
        start at or after each multiple of the period.
        """
        cfg = self.cfg
        budget, every_s = cfg.time_budget, cfg.data.eval_every_s
        next_eval = every_s if every_s > 0 else math.inf
        step = self.start_step
        # region time-budget-stop
        while True:
            t = self.method.replica_clock() if (budget or every_s) else 0.0
            if budget:
                if self.method.stop_here(step, t >= budget):
                    break
            elif step >= cfg.steps:
                break
            # endregion time-budget-stop
            if t >= next_eval:
                self.evaluate(step, at_s=next_eval)
                while next_eval <= t:
                    next_eval += every_s
            self.train_step(step)
            step += 1
            if not budget and cfg.data.eval_every and step % cfg.data.eval_every == 0 and step < cfg.steps:
                self.evaluate(step)
            if progress is not None and self.is_leader():
                progress.write(int(t) if budget else step, cfg.progress_total()[0])
        self.log.step = step
        self.method.finalize(step)
        self.train_end_s = self.log.clock.now()  # the final sync is done: the end of training
        self.evaluate(step, final=True)


def configure_cpu(threads: int) -> None:
    """CPU math of a training process: ours, and the oracle processes we are measured against (tests/oracles).

    `threads` per process, because several processes share the cores. Denormals flushed, because they
    appear as training goes on (tiny gradients, Adam moments) and x86 CPUs compute on them some 100×
    slower: unflushed, a run's steps got 1.5× slower after a few dozen steps.
    """
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
