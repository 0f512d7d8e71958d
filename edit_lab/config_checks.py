"""The checks of `RunConfig.validate` that join several fields, one method each (`RunConfigChecks`).

`config.py` declares every knob and runs the generic checks (types, bounds, choices); the rules that need
several fields at once, or a reader's rule to be probed, live here, each named for what it checks:
backup workers' quorum, SparseLoCo's format, Streaming DiLoCo's schedule, the readers' rules, A-EDiT's
replayed schedule and the virtual clock. `RunConfig` inherits them; `bad(field, allowed)` raises the
`ConfigError` that names the field. Torch-free unless a rule must be run to be judged (said where).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from edit_lab.registry import METHODS, capabilities


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field and the allowed values."""


class RunConfigChecks:
    """The cross-field checks of `RunConfig` (a mixin: every attribute read here is a `RunConfig` field)."""

    def _check_quorum(self, bad: Any) -> None:
        """Backup workers: m of the R replicas, every one of them in one quorum (core/methods/backup.py)."""
        if self.replicas < 2:
            bad("replicas", f"at least 2 with method={self.method!r}: one replica has nobody to leave behind")
        if not 0 <= self.backup_m <= self.replicas:
            bad("backup_m", f"0 (replicas - 1) or 1..{self.replicas} (replicas={self.replicas}): the number of "
                "replicas whose gradients each step averages")
        for field_, value in (("grad_all_reduce_rule", self.grad_all_reduce_rule),
                              ("sync_group_rule", self.sync_group_rule)):
            if value is not None:
                bad(field_, f"None with method={self.method!r}: the quorum averages over every replica with the "
                    "library's own all-reduce")

    def _check_sparseloco(self, bad: Any) -> None:
        """SparseLoCo's format and outer step (edit_lab/core/wire.py), refused before any process starts."""
        defaults = {f.name: f.default for f in fields(self)}
        if self.wire_format != "sparseloco":
            for name in ("sparseloco_chunk", "sparseloco_topk", "sparseloco_beta"):
                if getattr(self, name) != defaults[name]:
                    bad(name, f"{defaults[name]!r} with wire_format={self.wire_format!r}: it is a parameter of "
                        "wire_format='sparseloco'")
            return
        c = self.sparseloco_chunk
        if c & (c - 1):
            bad("sparseloco_chunk", "a power of two from 2 to 65536 (an index is its position in the chunk)")
        if self.method == "co2":
            bad("wire_format", "not sparseloco with method='co2': CO2 keeps its own outer momentum, and SparseLoCo's "
                "error feedback takes the place of outer momentum")
        if not self.error_feedback:
            bad("error_feedback", "true with wire_format='sparseloco': its error feedback (decay sparseloco_beta) "
                "is part of the format, and without it top-k would drop the rest of every pseudo-gradient")
        if self.outer_momentum != 0.0:
            bad("outer_momentum", "0 with wire_format='sparseloco': SparseLoCo's error feedback takes the place of "
                "outer momentum, its outer step is theta <- theta - outer_lr * mean(delta_hat) (the authors' "
                "outer_lr is 1)")

    def _check_streaming(self, bad: Any, n_units: int) -> None:
        """What Streaming DiLoCo needs of the schedule, and what it does not run: refused before any process."""
        H, P = self.sync_interval, self.fragments
        if P > n_units:
            bad("fragments", f"at most {n_units}, the sync units of model {self.model!r} (a fragment is a run of "
                "whole units)")
        if H % P:
            bad("sync_interval", f"a multiple of fragments={P} (fragment p syncs every sync_interval steps, offset by "
                "p*sync_interval/fragments steps)")
        if self.fragment_sync_delay >= H // P:
            bad("fragment_sync_delay", f"an integer in 0..{H // P - 1}: below sync_interval/fragments = {H // P}, "
                "so a fragment lands before the next one leaves")
        if self.exclude_trouble:
            bad("exclude_trouble", "false with method='streaming_diloco': it has no pseudo-gradient penalty to "
                "leave a replica out (edit, aedit)")

    def _check_fragment_schedule_rule(self) -> None:
        """A reader's fragment schedule (edit_lab.rules): streaming_diloco only; probed on the run's steps with its
        W, H, P and τ (no torch), after `_check_streaming` has accepted those."""
        first = next((ln.strip() for ln in str(self.fragment_schedule_rule).splitlines() if ln.strip()), "")
        if self.method != "streaming_diloco":
            raise ConfigError(f"fragment_schedule_rule={first[:80]!r} is not allowed with method={self.method!r}: "
                              f"the rule says which fragment lands when in streaming_diloco only")
        from edit_lab.rules import fragment_schedule_problem

        steps = None if self.time_budget else self.steps
        if (why := fragment_schedule_problem(self.fragment_schedule_rule, self.warmup_steps, self.sync_interval,
                                             self.fragments, self.fragment_sync_delay, steps)) is not None:
            raise ConfigError(f"fragment_schedule_rule={first[:80]!r} is not allowed: {why}")

    def _check_outer_step_rule(self) -> None:
        """A reader's outer step (edit_lab.rules): only where OuterState's SGD is the outer step; probed on tensors."""
        first = next((ln.strip() for ln in self.outer_step_rule.splitlines() if ln.strip()), "")
        methods = ("diloco", "edit", "aedit", "streaming_diloco")
        if self.method not in methods:
            why = {"sync": "sync has no outer step", "post_local_sgd": "post_local_sgd averages the parameters "
                   "themselves, no outer optimizer (lr 1, no momentum: diloco with outer_lr=1, outer_momentum=0 "
                   "runs a rule there)", "co2": "co2's outer step is its own, on a one-round-stale mean with "
                   "co2_* settings"}.get(self.method, f"{self.method} has no outer optimizer")
            raise ConfigError(f"outer_step_rule={first[:80]!r} is not allowed with method={self.method!r}: the rule "
                              f"replaces the outer optimizer of {', '.join(methods)} only; {why}")
        from edit_lab.rules import outer_step_problem  # imports torch: the rule is called on a few small tensors

        if (why := outer_step_problem(self.outer_step_rule, self.outer_lr, self.outer_momentum)) is not None:
            raise ConfigError(f"outer_step_rule={first[:80]!r} is not allowed: {why}")

    def _check_sync_schedule_rule(self, n_units: int) -> None:
        """A reader's layer-wise sync order (edit_lab.rules): EDiT and A-EDiT only; called once for the model's
        unit count (no torch)."""
        first = next((ln.strip() for ln in str(self.sync_schedule_rule).splitlines() if ln.strip()), "")
        methods = [m for m in METHODS if capabilities(m).layerwise_sync]
        if self.method not in methods:
            raise ConfigError(f"sync_schedule_rule={first[:80]!r} is not allowed with method={self.method!r}: the "
                              f"rule orders the layer-wise sync inside the forward of {', '.join(methods)} only")
        from edit_lab.rules import sync_schedule_problem

        if (why := sync_schedule_problem(self.sync_schedule_rule, n_units)) is not None:
            raise ConfigError(f"sync_schedule_rule={first[:80]!r} is not allowed: {why}")

    def _check_grad_all_reduce_rule(self) -> None:
        """A reader's gradient all-reduce (edit_lab.rules): only where a gradient all-reduce over the sync group
        runs; probed on stand-in collectives of `replicas` threads (imports torch)."""
        first = next((ln.strip() for ln in self.grad_all_reduce_rule.splitlines() if ln.strip()), "")

        def refuse(why: str) -> None:
            raise ConfigError(f"grad_all_reduce_rule={first[:80]!r} is not allowed: {why}")

        every = [m for m in METHODS if not capabilities(m).is_local_sgd and not capabilities(m).quorum]
        warm = [m for m in METHODS if capabilities(m).is_local_sgd]
        where = (f"{', '.join(every)} all-reduce{'s' * (len(every) == 1)} the gradients every step, "
                 f"{', '.join(warm)} only in their warmup_steps")
        if capabilities(self.method).is_local_sgd and self.warmup_steps == 0:
            refuse(f"None with method={self.method!r} and warmup_steps=0: that run never all-reduces gradients "
                   f"({where})")
        if self.replicas < 2:
            refuse("None with replicas=1: a single replica has no gradient all-reduce over the sync group")
        from edit_lab.rules import grad_all_reduce_problem  # imports torch: the rule runs on small stand-in tensors

        if (why := grad_all_reduce_problem(self.grad_all_reduce_rule, self.replicas)) is not None:
            refuse(why)

    def _check_aedit_schedule(self, bad: Any) -> None:
        """A replayed schedule must be an A-EDiT run's, of as many replicas, with a time budget to replace."""
        from edit_lab.protocol import ScheduleReplay

        if self.method != "aedit":
            bad("aedit_schedule", f"None with method={self.method!r} (only A-EDiT has a timed schedule to replay)")
        if not self.time_budget:
            bad("aedit_schedule", "None without a time_budget (a replay stops each replica where the replayed run's "
                "budget stopped it)")
        try:
            replay = ScheduleReplay.of_run(self.aedit_schedule, replica=0)
        except (OSError, ValueError, KeyError) as e:
            bad("aedit_schedule", f"the directory of a finished A-EDiT run ({e})")
        if replay.replicas != self.replicas:
            bad("aedit_schedule", f"a run of {self.replicas} replicas (that run had {replay.replicas})")
        # the replayed steps hold only under the settings that made them: W places the anchors the meetings
        # count from, N_min decides which meetings sync, the period is what the records say the timers were
        try:
            settings = ScheduleReplay.settings_of_run(self.aedit_schedule)
        except ValueError as e:
            bad("aedit_schedule", f"the directory of a finished A-EDiT run ({e})")
        for name, theirs in settings.items():
            if getattr(self, name) != theirs:
                bad(name, f"{theirs!r}, the value of the run whose schedule aedit_schedule replays (a replay "
                    f"under {name}={getattr(self, name)!r} would run another schedule than the one it names)")

    def _check_virtual(self, bad: Any) -> None:
        """What the virtual clock (edit_lab/clock/virtual.py) does not run yet, refused naming the field."""
        if self.device == "cuda":
            bad("device", "auto or cpu with clock='virtual' (the virtual clock computes on the CPU)")
        if self.backend == "nccl":
            bad("backend", "auto or gloo with clock='virtual' (its collectives are in-process)")
        if self.fault_rank >= 0 and self.fault_kind in ("kill", "hang"):
            bad("fault_kind", "raise or nan with clock='virtual' (every rank is a thread of this process: kill and "
                "hang would take the caller with it)")
        if self.clock_costs is not None and not Path(self.clock_costs).exists():
            bad("clock_costs", "a run directory or a costs JSON that exists, or None")
        if self.virtual_compute == "charged":  # time only (edit_lab/clock/time_only.py): no model state to keep or compute on
            for name, off in (("checkpoint_every", 0), ("resume", None), ("grad_all_reduce_rule", None)):
                if getattr(self, name) != off:
                    bad(name, f"{off!r} with virtual_compute='charged' (a time-only run has no model state to save "
                        f"or resume, and times the built-in gradient all-reduce only)")

    def _n_units(self) -> int:
        from edit_lab.sizes import SIZES

        return 1 + SIZES[self.model].n_layers

    def _check_survival(self, bad: Any) -> None:
        """Surviving a replica's death (edit_lab/core/survival.py): what it needs, and what it does not run yet.

        Survival re-forms the sync group of the methods whose sync can be rolled back and retried by fewer
        replicas (sync's gradient all-reduce, diloco's and edit's outer sync); the rest is refused naming the field,
        before any process starts."""
        survivable = ("sync", "diloco", "edit")
        if not 0 <= self.fault_replica + 1 <= self.replicas:
            bad("fault_replica", f"-1 (none) or a replica index in 0..{self.replicas - 1}")
        if self.fault_replica >= 0 and not self.time_budget and self.fault_replica_step >= self.steps:
            bad("fault_replica_step", f"a step in 0..{self.steps - 1} (steps={self.steps}), or the fault never happens")
        if self.fault_replica_unit >= 0 and self.fault_replica_unit > self._n_units() - 1:
            bad("fault_replica_unit", f"-1 (the step's start) or a unit in 0..{self._n_units() - 1} of model "
                f"{self.model!r}")
        if not self.survive:
            for name, off in (("rejoin_step", -1), ("survive_min_replicas", 1), ("survive_on_failure", "retry")):
                if getattr(self, name) != off:
                    bad(name, f"{off!r} with survive=False (it is a setting of surviving a replica's death)")
            return
        if self.method not in survivable:
            bad("method", f"one of {', '.join(survivable)} with survive=True (their sync can be rolled back and "
                "retried by the survivors; backup, post_local_sgd, co2, aedit and streaming_diloco cannot survive a "
                "death yet)")
        if self.replicas < 2:
            bad("replicas", "at least 2 with survive=True: one replica has nobody to survive it")
        if self.survive_min_replicas > self.replicas:
            bad("survive_min_replicas", f"at most replicas={self.replicas}")
        local = self.method != "sync"  # a local-SGD method: its warm-up all-reduces gradients every step
        first = self.warmup_steps if local else 0
        if self.rejoin_step >= 0 and (self.rejoin_step < first or self.rejoin_step >= self.steps):
            bad("rejoin_step", f"-1 (none) or a step in {first}..{self.steps - 1}: a replacement joins at a sync"
                + (", after the warm-up" if local else "") + " and before the end")
        if local and self.fault_replica >= 0 and self.fault_replica_step <= self.warmup_steps:
            bad("fault_replica_step", f"a step after warmup_steps={self.warmup_steps} with survive=True: the "
                "warm-up all-reduces gradients every step, which the survivors of a local-SGD method cannot roll "
                "back")
        if not local and self.survive_on_failure == "discard":
            bad("survive_on_failure", "retry with method='sync': its round is one step, with no local steps to drop")
        if self.fault_rank >= 0 and self.fault_kind in ("raise", "nan"):
            bad("fault_kind", "kill or hang with survive=True (a rank that raises or turns NaN is a bug, not a death)")
        refused = (("clock", "wall", "the virtual clock does not model deaths yet"),
                   ("time_budget", 0.0, "a time budget's meetings are not survivable yet"),
                   ("checkpoint_every", 0, "a checkpoint's barrier spans every replica"),
                   ("resume", None, "a resumed run starts a new world"),
                   ("wire_format", "none", "a compressed sync is not survivable yet"),
                   ("sync_group_rule", None, "the view is the sync group"),
                   ("grad_all_reduce_rule", None, "the warm-up's all-reduce is the library's"),
                   ("sync_schedule_rule", None, "EDiT's prefetch is the order a rollback drains"),
                   ("backend", "auto", "the views are gloo groups"),
                   ("device", "cpu", "the views are gloo groups on the CPU: auto computes there too"))
        for name, want, why in refused:
            if getattr(self, name) != want and not (name, getattr(self, name)) in (("backend", "gloo"),
                                                                                  ("device", "auto")):
                bad(name, f"{want!r} with survive=True ({why})")
