"""EDiT: layer-wise sync inside the forward pass, with prefetch and the pseudo-gradient penalty.

At the start of a sync step's forward (edit-method.md §4):

1. *norms* — for every unit, this replica's pseudo-gradient norm G_l = ‖a_l − θ_l‖ over the whole
   unit (a squared-norm all-reduce in the shard group, all units in one message);
2. *decisions* — one small all-gather over the sync group shares every replica's G and local steps k
   for every unit; every rank then runs every replica's anomaly detectors on the same numbers
   (`penalty.judge_replicas`, D15: each replica's G/k over the median of its peers', q, judged by its
   detector's history of q; a new flag needs q > κ_e, and with fewer than 3 peers its own G/k above its
   own memory `EDiTMethod.memory` by δ_m σ, to enter and to stay out; a flagged replica is out of every
   unit), so every rank takes the same decisions and computes the same softmax weights.

Then, unit by unit, right before the shard group all-gathers unit l:

3. *aggregate* — all-reduce of w_r·Δ_r over the sync group (the big transfer);
4. *clip* the aggregated pseudo-gradient of the unit at φ (its norm: a shard-group all-reduce);
5. *outer step* on the anchor shard, unless no replica that trained in the round (k > 0) was
   admitted (`penalty.outer_step_skipped`); then θ ← a. With error feedback the unit's residual is then
   decided (`OuterState.keep_residual`): kept where this replica's Δ̂ was used (weight not 0, finite G, the
   step taken), back to its value before the sync otherwise, so a rejected Δ never returns through it.

With prefetch, unit l+1's aggregate is issued asynchronously in unit l's pre-forward and waited for
in unit l+1's, so its transfer travels while unit l computes. The arithmetic is identical either
way — prefetch only moves *when* we wait — so results are bit-for-bit the same.

Why steps 1–2 are done once per sync, for all units together, rather than per unit: the weights
of unit l must be known before its aggregate can be issued; fetching them per unit would put one
small blocking exchange (a full network latency) in front of every unit's transfer.

Time-only twin: `EDiTProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from edit_lab.core.comm import Handle
from edit_lab.core.methods.local_sgd import LocalSGDMethod
from edit_lab.core.penalty import (
    AnomalyDetector,
    PenaltyConfig,
    clip_factor,
    judge_replicas,
    excluded_from_weights,
    outer_step_skipped,
    step_scaled_norms,
)
from edit_lab.core.sharding import squared_norm
from edit_lab.protocol import COLUMN, DECISION_FIELDS, Decision, is_sync_step


def _finite(x: float) -> float | None:
    """JSON has no NaN or infinity: a non-finite value is recorded as null."""
    return x if math.isfinite(x) else None


class EDiTMethod(LocalSGDMethod):
    name = "edit"

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.penalty: PenaltyConfig = cfg.penalty
        # every replica's detectors on every rank ([replica][unit]): all fed the same gathered numbers (D11)
        self.detectors: list[list[AnomalyDetector]] = [[self.penalty.new_detector() for _ in range(engine.n_units)]
                                                       for _ in range(self.mesh.replicas)]
        # D15: every replica's own history of G/k, asked where there is no majority of peers (R <= 3)
        self.memory: list[list[AnomalyDetector]] = [[self.penalty.new_detector() for _ in range(engine.n_units)]
                                                    for _ in range(self.mesh.replicas)]
        self.peer: list[list[float]] = []  # [unit][replica]: G/k over the peers' median at the last sync
        self.closing = False  # the sync under way is the closing one of `finalize` (not judged)
        self.syncing = False
        self.weights: list[list[float]] = []  # [unit][replica]
        self.decisions: torch.Tensor | None = None  # [replica, unit, COLUMN.<a Decision field>]
        self.readmissions: list[dict[str, int]] = []  # every re-admission of the run (D10), for summary.json
        self.pending: dict[int, tuple[Handle, torch.Tensor]] = {}
        self.deltas: dict[int, torch.Tensor] = {}  # Δ of the units not yet issued, from stage 1
        self.join_pending = False  # a replacement (core/survival.py) before its first sync: it syncs with k = 0
        # per unit, the issues and waits its pre-forward runs during a sync: prefetch's, or a reader's order
        self.plan = self.rules.sync_plan(engine.n_units)

    # ------------------------------------------------------------ when to sync
    def should_sync(self, step: int) -> bool:
        return is_sync_step(step, self.cfg.schedule.warmup_steps, self.cfg.schedule.sync_interval)

    def begin_step(self, step: int) -> None:
        super().begin_step(step)  # creates the anchors at step W
        self.syncing = (self.outer is not None and (step != self.last_sync_step or self.join_pending)
                        and self.should_sync(step))
        if self.syncing:
            self.start_sync(step)

    def after_optimizer(self, step: int) -> None:
        """EDiT syncs inside the forward, never between steps."""

    def may_gather_early(self, unit: int) -> bool:
        """During a sync a unit's shard changes in its own pre_unit, so its all-gather must come after it."""
        return not self.syncing

    def pre_unit(self, unit: int) -> None:
        """The issues and waits planned before this unit's all-gather (and after the previous one's), in their
        order (`Rules.sync_plan`: prefetch's, each unit issued one ahead so it travels while the previous one
        computes, or a reader's order); every rank runs the same plan, so every group sees the same collectives
        in the same order. A unit a reader gathers before its wait is gathered with its shard from before the
        outer step (the wait then runs in a later pre-forward, resetting the shard in place): it runs, and
        differs from prefetch's run."""
        if not self.syncing:
            return
        for kind, u in self.plan[unit]:
            if kind == "issue":
                self.issue(u)
            else:
                self.finish(u)
        if unit == self.engine.n_units - 1:
            self.end_sync()

    def stop_here(self, step: int, spent: bool) -> bool:
        """EDiT's sync point is the start of a sync step, before its forward: the budget exchange goes there."""
        if (self.outer is not None and not self.stopping and step != self.last_sync_step
                and self.should_sync(step) and not self.go_on(step, spent)):
            return True
        return super().stop_here(step, spent)

    def finalize(self, step: int) -> None:
        """A last sync outside any forward, so every replica ends on the same model.

        Its round is judged when it is a full τ round (steps − W a multiple of τ, as in the default 60/10/10
        run, where the closing sync is the only armed one: left unjudged, that run could never flag a finite
        norm); a shorter round is not (its norm per step is noisier): every replica keeps the verdict of its
        last judged sync. Decided from the gathered k of every replica (a time budget stops replicas at different
        steps), so every rank decides alike."""
        if self.survival is not None:
            self.survival.attempt(step, lambda: self.closing_sync(step), rerun_after_discard=True)
        else:
            self.closing_sync(step)

    def closing_sync(self, step: int) -> None:
        """`finalize`'s sync, when one is needed (a replacement that has not synced yet always needs one)."""
        if self.outer is None or not (self.final_sync_needed(step) or self.join_pending):
            return
        self.start_sync(step, judge=False, judge_full_round=True)
        for unit in range(self.engine.n_units):
            self.pre_unit(unit)

    # ------------------------------------------------------------ the sync, in stages
    @torch.no_grad()
    def full_round(self, steps: list[int]) -> bool:
        """Does a closing sync whose replicas trained `steps` local steps end a full round, one the schedule would
        have synced anyway (and so is judged)? EDiT's: every replica trained τ steps."""
        return all(k == self.cfg.schedule.sync_interval for k in steps)

    def start_sync(self, step: int, judge: bool = True, judge_full_round: bool = False) -> None:
        """Stages 1–2: every unit's norm, everyone's norms and steps, the anomaly decisions, the weights.

        The decisions are `penalty.judge_replicas`'s, taken on every rank from the gathered G and k with every
        replica's detectors (D11), so every rank agrees without a second exchange.

        `judge=False` for the closing sync of `finalize`: its round is whatever was left when training
        ended (with a time budget, a few steps against the usual dozens), and the norm per step of a short
        round is larger (its noise does not average out: up to 1.75× a full round's, measured in
        benchmarks/aedit_loss.py's runs), so judging it would flag healthy replicas. Its norms are neither
        judged nor learnt: every replica keeps the verdict of its last judged sync (a replica left out there
        stays out), a non-finite norm is still excluded, and the softmax weights and the clip apply as always.
        """
        assert self.outer is not None
        if self.survival is not None:
            self.survival.before_sync(step)  # the newest view, a replacement's state, the snapshot to roll back to
            judge = judge and not self.survival.unjudged  # a view change flags nobody (edit-method.md §16)
            judge_full_round = judge_full_round and not self.survival.unjudged
        self.syncing = True
        self.sync_step = step
        n_units, R = self.engine.n_units, self.mesh.sync_size
        # Δ is kept until the unit is issued: θ of a unit does not change before its own sync, so the
        # same values would only be computed twice (a pass over the unit's shard saved per unit).
        self.deltas = {u: self.outer.pseudo_gradient(u, th) for u, th in enumerate(self.engine.shards)}
        sq = torch.stack([squared_norm(d) for d in self.deltas.values()])
        self.comm.all_reduce(sq, group="shard", kind="sync_norms")
        dev = self.comm.device  # collective tensors live on the comm device (NCCL moves only CUDA tensors)
        assert self.last_sync_step is not None
        k = step - self.last_sync_step  # this replica's local steps in the round (the same on its every rank)
        # only G and k are needed by the others (and `exclude_trouble`'s verdict, in the outlier column); the
        # rest of the row is filled in after the gather
        rows = [Decision(G=float(sq[u].sqrt()), z=0.0, threshold=0.0, outlier=float(self.in_trouble(step, u)),
                         readmitted=0.0, steps=float(k), flagged_in_a_row=0.0) for u in range(n_units)]
        mine = torch.tensor(rows, dtype=torch.float64, device=dev).reshape(-1)
        everyone = torch.zeros(R * n_units * len(DECISION_FIELDS), dtype=torch.float64, device=dev)
        self.comm.all_gather(everyone, mine, group="sync", kind="sync_decisions")
        self.decisions = everyone.reshape(R, n_units, len(DECISION_FIELDS)).cpu()
        if not judge and judge_full_round:  # the closing sync: judged when it ends a full round (`full_round`)
            judge = self.full_round([int(k) for k in self.decisions[:, 0, COLUMN.steps].tolist()])
        self.closing = not judge
        self.decide(judge)
        self.weights = []
        for u in range(n_units):
            norms = self.decisions[:, u, COLUMN.G].tolist()
            if self.penalty.weight_per_step:
                norms = step_scaled_norms(norms, [int(k) for k in self.decisions[:, u, COLUMN.steps].tolist()])
            anomalous = [bool(x) for x in self.decisions[:, u, COLUMN.outlier].tolist()]
            # a replica that trained no step (A-EDiT's finished one) holds Δ = 0 and stays out of the softmax:
            # its G = 0 beside G ≳ 745·T would take every weight (exp underflows) and leave momentum alone
            anomalous = excluded_from_weights(anomalous, [int(k) for k in self.decisions[:, u, COLUMN.steps].tolist()])
            self.weights.append(self.rules.weighting(norms, self.penalty.temperature, anomalous))

    def decide(self, judge: bool) -> None:
        """The anomaly decisions of this sync (`penalty.judge_replicas`) written into the gathered decisions.

        Every rank runs every replica's detectors on the same gathered G and k, so every rank takes the same
        decisions (and holds the same detector states, checkpointed with the method)."""
        assert self.decisions is not None
        d = self.decisions
        trouble = d[:, :, COLUMN.outlier].clone()  # `exclude_trouble`: 1 where a replica knows it is in trouble
        steps = [int(v) for v in d[:, 0, COLUMN.steps].tolist()]
        members = self.mesh.sync_replicas  # the view's replicas (all R without survival), in group order
        verdicts = judge_replicas(self.penalty, [self.detectors[r] for r in members], d[:, :, COLUMN.G].tolist(),
                                  steps, judge=judge, memory=[self.memory[r] for r in members])
        for r, per_unit in enumerate(verdicts):
            for u, j in enumerate(per_unit):
                d[r, u, COLUMN.z], d[r, u, COLUMN.threshold] = j.z, j.threshold
                d[r, u, COLUMN.outlier], d[r, u, COLUMN.readmitted] = float(j.outlier), float(j.readmitted)
                d[r, u, COLUMN.flagged_in_a_row] = float(j.streak)
        d[:, :, COLUMN.outlier] = torch.maximum(d[:, :, COLUMN.outlier], trouble)
        self.peer = [[verdicts[r][u].peer for r in range(len(verdicts))] for u in range(self.engine.n_units)]

    def in_trouble(self, step: int, unit: int) -> bool:
        """`exclude_trouble` (for measuring detectors, benchmarks/penalty_rule.py): is this replica's round, which
        ends at `step`, one a perfect detector leaves out? The corrupted replica from its first sync after
        `corrupt_from_step` on (its round holds corrupted steps), the spiked replica at the sync that ends the
        round of its spike (the units it struck). Each replica answers for itself (under A-EDiT the replicas
        are at different steps); the answer travels in the gathered outlier column."""
        cfg, me = self.cfg, self.mesh.replica
        if not cfg.trouble.exclude:
            return False
        if me == cfg.trouble.corrupt_replica and step > cfg.trouble.corrupt_from_step:
            return True
        assert self.last_sync_step is not None
        return (me == cfg.trouble.spike_replica and self.last_sync_step <= cfg.trouble.spike_step < step
                and (not cfg.trouble.spike_units or unit in cfg.trouble.spike_units))

    # region edit-unit-sync
    @torch.no_grad()
    def issue(self, unit: int) -> None:
        """Stage 3: start the sync-group all-reduce of w_r·Δ_r for one unit (async)."""
        assert self.outer is not None
        w = self.weights[unit][self.mesh.sync_index]
        delta = self.deltas.pop(unit)
        if w == 0.0:  # an anomalous replica sends zeros: 0·NaN would still be NaN
            contrib = delta.zero_()
        else:
            contrib = delta.mul_(w)
        h = self.comm.compressed_all_reduce(contrib, group="sync", kind="sync_reduce", unit=unit, async_op=True)
        self.pending[unit] = (h, contrib)

    @torch.no_grad()
    def finish(self, unit: int) -> None:
        """Stages 4–5: wait for the aggregate, clip it, step the anchor, restart θ from it."""
        assert self.outer is not None and self.decisions is not None
        h, delta_bar = self.pending.pop(unit)
        h.wait()
        factor = 1.0
        if self.penalty.clip:
            sq = squared_norm(delta_bar).reshape(1)
            self.comm.all_reduce(sq, group="shard", kind="sync_clip", unit=unit)
            factor = clip_factor(float(sq.sqrt()), self.penalty.clip_norm)
            if factor < 1.0:
                delta_bar.mul_(factor)
        anomalous = [bool(x) for x in self.decisions[:, unit, COLUMN.outlier].tolist()]
        steps = [int(k) for k in self.decisions[:, unit, COLUMN.steps].tolist()]
        skipped = outer_step_skipped(anomalous, steps)  # no replica that trained is admitted
        theta = self.engine.shards[unit]
        with self.log.span("outer_step", unit=unit, skipped=skipped):
            if not skipped:
                self.outer.step(unit, delta_bar)
            self.outer.reset(unit, theta)
        me = self.mesh.sync_index
        finite = math.isfinite(float(self.decisions[me, unit, COLUMN.G]))
        # error feedback keeps the residual of a Δ̂ that reached the anchor only (outer.py's module docstring)
        self.outer.keep_residual(unit, used=self.weights[unit][me] != 0.0 and not skipped and finite)
        if not finite:
            self.forget_inner_state(unit)
        if self.cfg.runtime.checksums:
            self.log_checksums(unit)
        for i, r in enumerate(self.mesh.sync_replicas):  # i: the replica's row in the gathered decisions
            d = Decision(*self.decisions[i, unit].tolist())
            self.log.record("penalty", step=self.sync_step, unit=unit, replica=r, G=_finite(d.G), z=_finite(d.z),
                            threshold=_finite(d.threshold), outlier=bool(d.outlier), readmitted=bool(d.readmitted),
                            steps=int(d.steps), peer=_finite(self.peer[unit][i]),
                            flagged_in_a_row=int(d.flagged_in_a_row), closing=self.closing,
                            weight=self.weights[unit][i], clip=factor, skipped=skipped)
            if d.readmitted:
                self.readmissions.append({"step": self.sync_step, "unit": unit, "replica": r})
    # endregion edit-unit-sync

    def forget_inner_state(self, unit: int) -> None:
        """Drop the inner optimizer's state of this rank's shard of `unit` (after a non-finite G).

        θ ← a has just given the replica finite parameters again, but a replica whose parameters or
        gradients went NaN/inf also has NaN/inf in its AdamW moments, and those would make θ non-finite
        again at its very next step: the replica would stay excluded for the rest of the run. Without
        state, the optimizer restarts that unit as at step 0. Every rank of the replica sees the same G
        (it is summed over the shard group), so the whole replica forgets together. Error feedback's residual
        needs no clearing here: `finish` has just put it back to its value before this sync (a Δ with a
        non-finite G is never used, and a non-finite residual is never kept).
        """
        if self.optimizer is not None:
            self.optimizer.state.pop(self.engine.shards[unit], None)

    def end_sync(self) -> None:
        self.syncing = False
        self.join_pending = False
        self.sync_finished(self.sync_step)  # mid-forward of step sync_step, with θ = a and the sync done

    # ------------------------------------------------------------ surviving a death (core/survival.py)
    def abandon_sync(self) -> None:
        """Drain the prefetched transfers of a failed sync (each ends, or fails on the dead peer) and forget it."""
        super().abandon_sync()
        for h, _ in self.pending.values():
            try:
                h.work.wait()
            except Exception:  # the same lost peer: nothing of this transfer is used
                pass
        self.pending, self.deltas, self.syncing, self.decisions = {}, {}, False, None

    def syncs_in_step(self, step: int) -> bool:
        return True

    def on_view(self, view: Any) -> None:
        """A replacement's detectors start afresh (they arm after E syncs, as at the start of a run or for a new
        replica of an elastic resume); a dead replica's keep its history, frozen while it is away."""
        for r in view.joined:
            self.detectors[r] = [self.penalty.new_detector() for _ in range(self.engine.n_units)]
            self.memory[r] = [self.penalty.new_detector() for _ in range(self.engine.n_units)]

    def join_first_sync(self, step: int) -> None:
        """A replacement's first sync is the one inside the forward of `step` (or `finalize`'s): k = 0 there."""
        self.last_sync_step = step
        self.join_pending = True

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "detectors": [[d.state_dict() for d in per] for per in self.detectors],
                "memory": [[d.state_dict() for d in per] for per in self.memory]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state["detectors"]
        if not saved or not isinstance(saved[0], list):
            # before D11 a checkpoint held only its own replica's detectors; every rank now needs every replica's
            raise ValueError("the checkpoint's detectors are not one list per replica (a checkpoint from before "
                             "D11 of edit-method.md cannot be resumed)")
        # an elastic resume: the replicas both runs have keep their history; a new replica starts its own
        # (its detectors arm after E syncs, as at the start of a run); a replica gone takes its history along
        for per, states in zip(self.detectors, saved):
            for d, s in zip(per, states):
                d.load_state_dict(s)
        # D15's own histories; a checkpoint from before D15 has none: they start afresh (they arm after E syncs)
        for per, states in zip(self.memory, state.get("memory", [])):
            for d, s in zip(per, states):
                d.load_state_dict(s)

    def summary(self) -> dict[str, Any]:
        """`penalty_readmissions`: each (step, unit, replica) re-admitted after K flags in a row (D10,
        `penalty.readmitted_replicas`); the launcher warns about them."""
        return {"syncs": self.n_syncs, "penalty_readmissions": self.readmissions}
