"""The checks of `RunConfig.validate` that join several fields, one method each (`RunConfigChecks`).

`config.py` declares every knob and runs the generic checks (types, bounds, choices); the rules that need
several fields at once, or a reader's rule to be probed, live here, each named for what it checks:
backup workers' quorum, SparseLoCo's format, Streaming DiLoCo's schedule, the readers' rules, A-EDiT's
replayed schedule and the virtual clock. `RunConfig` inherits them; `bad(field, allowed)` raises the
`ConfigError` that names the field. Torch-free unless a rule must be run to be judged (said where).
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from edit_lab.registry import METHODS, capabilities
from edit_lab.sizes import SIZES


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field and the allowed values."""


class RunConfigChecks:
    """The cross-field checks of `RunConfig` (a mixin: every attribute read here is a `RunConfig` field)."""

    def _bad(self, name: str, allowed: str) -> typing.NoReturn:
        """Refuse knob `name` (its flag) with what is allowed: the one shape of every refusal."""
        raise ConfigError(f"{name}={self.get(name)!r} is not allowed: {allowed}")

    def _check_joined(self, world_size: int | None) -> None:
        """The rules that join knobs, after each knob's own bounds; each names the knob it refuses."""
        from edit_lab.config.penalty import PenaltyValueError

        try:  # the detector's own check, so that the config refuses exactly what the detector would
            self.penalty.validate()
        except PenaltyValueError as e:
            self._bad("penalty_" + e.field, e.allowed)
        self._check_shapes(world_size)
        self._check_rules()
        self._check_methods()
        self._check_devices()
        self._check_survival(self._bad)

    def _check_shapes(self, world_size: int | None) -> None:
        """What must fit the model, the mesh or the run: betas, the sequence, replica/rank/unit indices, steps."""
        bad = self._bad
        if len(self.inner.betas) != 2 or not all(_is_number(b) and 0.0 <= b < 1.0 for b in self.inner.betas):
            bad("betas", "two numbers in [0, 1)")
        size = SIZES[self.data.model]
        if self.data.seq_len > size.max_seq_len:
            bad("seq_len", f"at most {size.max_seq_len} for model {self.data.model!r}")
        for name in ("corrupt_replica", "spike_replica"):
            v = self.get(name)
            if isinstance(v, bool) or not isinstance(v, int) or not -1 <= v < self.replicas:
                bad(name, f"-1 (none) or a replica index in 0..{self.replicas - 1}")
        if isinstance(self.trouble.fault_rank, bool) or not isinstance(self.trouble.fault_rank, int) or not (
                -1 <= self.trouble.fault_rank < self.world_size):
            bad("fault_rank", f"-1 (none) or a rank in 0..{self.world_size - 1}")
        if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < self.replicas
                   for r in self.stragglers.replicas):
            bad("straggler_replicas", f"replica indices in 0..{self.replicas - 1}")
        n_units = 1 + size.n_layers
        if len(set(self.trouble.spike_units)) != len(self.trouble.spike_units) or not all(
                isinstance(u, int) and not isinstance(u, bool) and 0 <= u < n_units for u in self.trouble.spike_units):
            bad("spike_units", f"distinct unit indices in 0..{n_units - 1} (0 is the root unit), or () for all")
        if self.data.corpus is not None:
            from edit_lab.corpus import check_corpus_file

            problem = check_corpus_file(self.data.corpus, self.data.seq_len)
            if problem:
                bad("data", problem)
        if self.runtime.resume is not None and not Path(self.runtime.resume).is_dir():
            bad("resume", "an existing run or checkpoint directory")
        if self.time_budget and self.runtime.resume is not None:
            bad("time_budget", "0 when resuming: a resumed run trains up to `steps`")
        if self.trouble.fault_rank >= 0 and not self.time_budget and self.trouble.fault_step >= self.steps:
            bad("fault_step", f"a step in 0..{self.steps - 1} (steps={self.steps}), or the fault never happens")
        if world_size is not None and world_size != self.world_size:
            raise ConfigError(
                f"shards×replicas={self.shards}×{self.replicas}={self.world_size} does not match the "
                f"launcher's world size {world_size}: set --shards/--replicas so that their product is {world_size}"
            )

    def _check_rules(self) -> None:
        """The reader's rules (edit_lab.rules), each where its method runs it, probed before any process starts."""
        if self.rules.straggler is not None:
            from edit_lab.rules import straggler_problem  # no torch: the rule is called on a few inputs here

            if (why := straggler_problem(self.rules.straggler)) is not None:
                raise ConfigError(f"straggler_rule={_first_line(self.rules.straggler)!r} is not allowed: {why}")
        if self.rules.outer_step is not None:
            self._check_outer_step_rule()
        if self.rules.sync_group is not None:
            from edit_lab.rules import (
                sync_groups_problem,  # no torch: the rule is called for every rank of the mesh here
            )

            timed = bool(self.time_budget) or capabilities(self.method).time_triggered
            if (why := sync_groups_problem(self.rules.sync_group, self.shards, self.replicas, timed)) is not None:
                raise ConfigError(f"sync_group_rule={_first_line(self.rules.sync_group)!r} is not allowed: {why}")
        if self.rules.sync_schedule is not None:
            self._check_sync_schedule_rule(1 + SIZES[self.data.model].n_layers)
        if self.rules.grad_all_reduce is not None:
            self._check_grad_all_reduce_rule()
        if self.rules.fragment_schedule is not None:
            self._check_fragment_schedule_rule()
        if self.rules.donor is not None:
            from edit_lab.rules import donor_problem  # no torch: called on every view the run can publish

            first = _first_line(self.rules.donor)
            if not self.runtime.survive:
                raise ConfigError(f"donor_rule={first!r} is not allowed: None without survive=True (the rule names "
                                  "who hands a replacement its state)")
            if (why := donor_problem(self.rules.donor, self.replicas)) is not None:
                raise ConfigError(f"donor_rule={first!r} is not allowed: {why}")
        if self.rules.weighting is not None:
            from edit_lab.rules import weighting_problem

            first = _first_line(self.rules.weighting)
            if (why := weighting_problem(self.rules.weighting)) is not None:
                raise ConfigError(f"penalty_weighting_rule={first!r} is not allowed: {why}")
            if not self.penalty.weighting:
                raise ConfigError(f"penalty_weighting_rule={first!r} is not allowed: None while weighting is off (a "
                                  "rule replaces the softmax weights)")

    def _check_methods(self) -> None:
        """What a method needs of the other knobs, asked of the registry's capabilities (no torch)."""
        bad = self._bad
        caps = capabilities(self.method)
        if self.trouble.spike_replica >= 0 and self.trouble.spike_step < self.schedule.warmup_steps and caps.is_local_sgd:
            # the anchors are created from each replica's own θ at step W: a spike before that would give
            # the replicas different anchors, and no sync could ever bring them together again
            bad("spike_step", f"a step >= warmup_steps={self.schedule.warmup_steps} (after warm-up) for method {self.method!r}")
        if self.runtime.checkpoint_every and not caps.checkpointable:
            bad("checkpoint_every", f"0 with method {self.method!r}: the mean of its last round is always in flight "
                "(it lands at the next boundary), so there is no moment where the whole state is in hand to "
                "checkpoint")
        if self.aedit.sync_period > self.runtime.timeout_s / 2 and caps.time_triggered:
            # a replica that has finished waits in a meeting until the others' timers expire: up to one
            # period plus a step, which must fit in the collective timeout with room to spare
            bad("sync_period", f"at most timeout_s/2 = {self.runtime.timeout_s / 2:g} s (raise timeout_s for longer "
                "A-EDiT periods): a finished replica waits up to one period in a meeting")
        if self.aedit.schedule is not None:
            self._check_aedit_schedule(bad)
        if caps.fragmented:
            self._check_streaming(bad, 1 + SIZES[self.data.model].n_layers)
        if caps.quorum:
            self._check_quorum(bad)
        elif self.stragglers.backup_m:
            bad("backup_m", f"0 with method={self.method!r}: only {_methods_with('quorum')} drops late replicas")
        if self.wire.format != "none" and not caps.is_local_sgd:
            bad("wire_format", f"none with method={self.method!r}: only the local-SGD methods "
                f"({_methods_with('is_local_sgd')}) send pseudo-gradients")
        if self.wire.error_feedback and self.wire.format == "none":
            bad("error_feedback", "false with wire_format='none': float32 rounds nothing away to feed back")
        self._check_sparseloco(bad)

    def _check_more_deaths(self, bad: Any, local: bool) -> None:
        """`fault_replica_more` (edit_lab/config/deaths.py): well formed, each death of a live replica inside the run,
        one death per step, and never fewer live replicas than `survive_min_replicas`. A replacement counts as back
        from its due step plus a sync interval (it joins at the first sync at or after the due step: an upper bound)."""
        from edit_lab.config import deaths

        field = "fault_replica_more"
        try:
            extra = deaths.parse_more(self.trouble.fault_replica_more)
        except ValueError as e:
            return bad(field, f"replica@step entries separated by commas, e.g. '2@35,0@50' ({e})")
        if self.trouble.fault_replica < 0:
            return bad(field, "'' without a first death (fault_replica=-1)")
        first = self.schedule.warmup_steps + 1 if local else 1
        for r, s in extra:
            if not (0 <= r < self.replicas and first <= s < self.steps):
                return bad(field, f"replica@step with a replica in 0..{self.replicas - 1} and a step in "
                           f"{first}..{self.steps - 1} (got {r}@{s})")
        every = deaths.schedule(self)
        if self.clock.kind == "virtual" and local:
            steps = [s for _, s in every]
            if any(b - a <= self.schedule.sync_interval for a, b in zip(steps, steps[1:])):
                return bad(field, f"deaths more than sync_interval={self.schedule.sync_interval} steps apart on the "
                           "virtual clock (two deaths between the same two syncs hang its scheduler: a known bug, "
                           "docs/edit-method.md §16; real processes run them)")
        if len({s for _, s in every}) < len(every):
            return bad(field, f"one death per step (fault_replica_step={self.trouble.fault_replica_step} and "
                       f"{self.trouble.fault_replica_more!r} share a step)")
        delay, tau = deaths.rejoin_delay(self), self.schedule.sync_interval if local else 1
        back = {}  # replica -> the step from which it is surely back (None: never)
        for r, s in every:
            if r in back and (back[r] is None or s <= back[r]):
                return bad(field, f"a death of replica {r} at {s} only after its replacement joined: "
                           + ("rejoin_step=-1 brings none back" if back[r] is None else
                              f"after step {back[r]} (its previous death's due step + sync_interval)"))
            back[r] = None if delay is None else s + delay + tau
            dead = sum(1 for q, b in back.items() if b is None or b > s)
            if self.replicas - dead < self.runtime.survive_min_replicas:
                return bad(field, f"deaths that leave at least survive_min_replicas={self.runtime.survive_min_replicas} "
                           f"live replicas: at step {s} only {self.replicas - dead} would be")

    def _check_survival(self, bad: Any) -> None:
        """Surviving a replica's death (edit_lab/core/survival.py): what it needs, and what it does not run yet.

        Survival re-forms the sync group of the methods whose sync can be rolled back and retried by fewer
        replicas (sync's gradient all-reduce, diloco's and edit's outer sync); the rest is refused naming the field,
        before any process starts."""
        survivable, n_units = _methods_with("survivable"), 1 + SIZES[self.data.model].n_layers
        if not 0 <= self.trouble.fault_replica + 1 <= self.replicas:
            bad("fault_replica", f"-1 (none) or a replica index in 0..{self.replicas - 1}")
        if self.trouble.fault_replica >= 0 and not self.time_budget and self.trouble.fault_replica_step >= self.steps:
            bad("fault_replica_step", f"a step in 0..{self.steps - 1} (steps={self.steps}), or the fault never happens")
        if self.trouble.fault_replica_unit > n_units - 1:
            bad("fault_replica_unit", f"-1 (the step's start) or a unit in 0..{n_units - 1} of model "
                f"{self.data.model!r}")
        if not self.runtime.survive:
            for name, off in (("rejoin_step", -1), ("survive_min_replicas", 1), ("survive_on_failure", "retry"),
                              ("fault_join_delay_s", 0.0), ("fault_replica_more", "")):
                if self.get(name) != off:
                    bad(name, f"{off!r} with survive=False (it is a setting of surviving a replica's death)")
            return
        if not capabilities(self.method).survivable:
            bad("method", f"one of {survivable} with survive=True (their sync can be rolled back and "
                "retried by the survivors; the others cannot survive a death "
                "yet)")
        if self.replicas < 2:
            bad("replicas", "at least 2 with survive=True: one replica has nobody to survive it")
        if self.runtime.survive_min_replicas > self.replicas:
            bad("survive_min_replicas", f"at most replicas={self.replicas}")
        local = capabilities(self.method).is_local_sgd  # its warm-up all-reduces gradients every step
        first = self.schedule.warmup_steps if local else 0
        if self.runtime.rejoin_step >= 0 and (self.runtime.rejoin_step < first or self.runtime.rejoin_step >= self.steps):
            bad("rejoin_step", (f"-1 (none) or a step in {first}..{self.steps - 1}" if first < self.steps else
                                f"-1 (none): steps={self.steps} leaves no step after warmup_steps={first}")
                + ": a replacement joins at a sync" + (", after the warm-up" if local else "") + " and before the end")
        if local and self.trouble.fault_replica >= 0 and self.trouble.fault_replica_step <= self.schedule.warmup_steps:
            bad("fault_replica_step", f"a step after warmup_steps={self.schedule.warmup_steps} with survive=True: the "
                "warm-up all-reduces gradients every step, which the survivors of a local-SGD method cannot roll "
                "back")
        if not local and self.runtime.survive_on_failure == "discard":
            bad("survive_on_failure", f"retry with method={self.method!r}: its round is one step, with no local steps "
                "to drop")
        if self.trouble.fault_replica_more:
            self._check_more_deaths(bad, local)
        if self.trouble.fault_rank >= 0 and self.trouble.fault_kind == "nan":
            bad("fault_kind", "raise, kill or hang with survive=True (a NaN loss is not a death; a raise is a bug, "
                "which ends a surviving run too, with the rank and its traceback)")
        if self.clock.kind == "virtual" and self.shards > 1:  # clock/survive_virtual.py: one rank per replica
            bad("shards", "1 with survive=True on the virtual clock (a replica's ranks agree on a view through a "
                "shard-group max that the virtual clock does not model yet)")
        if self.trouble.fault_join_delay_s and (self.runtime.rejoin_step < 0 or self.clock.kind == "virtual"):
            bad("fault_join_delay_s", "0 " + ("with rejoin_step=-1 (no replacement joins)" if self.runtime.rejoin_step < 0
                else "on the virtual clock (a slow replacement is a real process's; the virtual clock charges the "
                     "join its modelled costs)"))
        if self.clock.kind == "virtual" and self.clock.compute != "real":
            bad("virtual_compute", "real with survive=True (a time-only run's donor has no state to hand over)")
        refused = (("time_budget", 0.0, "a time budget's meetings are not survivable yet"),
                   ("checkpoint_every", 0, "a checkpoint's barrier spans every replica"),
                   ("resume", None, "a resumed run starts a new world"),
                   ("wire_format", "none", "a compressed sync is not survivable yet"),
                   ("sync_group_rule", None, "the view is the sync group"),
                   ("grad_all_reduce_rule", None, "the warm-up's all-reduce is the library's"),
                   ("sync_schedule_rule", None, "EDiT's prefetch is the order a rollback drains"),
                   ("backend", "auto", "the views are gloo groups"),
                   ("device", "cpu", "the views are gloo groups on the CPU: auto computes there too"))
        for name, want, why in refused:
            if self.get(name) != want and not (name, self.get(name)) in (("backend", "gloo"),
                                                                                  ("device", "auto")):
                bad(name, f"{want!r} with survive=True ({why})")

    def _check_devices(self) -> None:
        """The clock, the device and the backend agree, and a GPU asked for is there."""
        bad = self._bad
        if self.clock.kind == "virtual":
            self._check_virtual(bad)
        elif self.clock.compute != "real":
            bad("virtual_compute", "real with clock='wall' (charged is a mode of the virtual clock)")
        if self.runtime.backend == "nccl" and self.runtime.device == "cpu":
            bad("backend", "gloo or auto with device='cpu' (NCCL moves only GPU tensors)")
        if self.runtime.device == "cuda" or self.runtime.backend == "nccl":
            import torch

            if not torch.cuda.is_available():
                bad("device" if self.runtime.device == "cuda" else "backend",
                    "auto or cpu/gloo here: no CUDA device is visible on this machine")

    def _check_quorum(self, bad: Any) -> None:
        """Backup workers: m of the R replicas, every one of them in one quorum (core/methods/backup.py)."""
        if self.replicas < 2:
            bad("replicas", f"at least 2 with method={self.method!r}: one replica has nobody to leave behind")
        if not 0 <= self.stragglers.backup_m <= self.replicas:
            bad("backup_m", f"0 (replicas - 1) or 1..{self.replicas} (replicas={self.replicas}): the number of "
                "replicas whose gradients each step averages")
        for field_, value in (("grad_all_reduce_rule", self.rules.grad_all_reduce),
                              ("sync_group_rule", self.rules.sync_group)):
            if value is not None:
                bad(field_, f"None with method={self.method!r}: the quorum averages over every replica with the "
                    "library's own all-reduce")

    def _check_sparseloco(self, bad: Any) -> None:
        """SparseLoCo's format and outer step (edit_lab/core/wire.py), refused before any process starts."""
        defaults = {f.name: f.default for f in fields(self.wire)}
        if self.wire.format != "sparseloco":
            for name in ("sparseloco_chunk", "sparseloco_topk", "sparseloco_beta"):
                if self.get(name) != defaults[name]:
                    bad(name, f"{defaults[name]!r} with wire_format={self.wire.format!r}: it is a parameter of "
                        "wire_format='sparseloco'")
            return
        c = self.wire.sparseloco_chunk
        if c & (c - 1):
            bad("sparseloco_chunk", "a power of two from 2 to 65536 (an index is its position in the chunk)")
        if capabilities(self.method).stale_outer:
            bad("wire_format", f"not sparseloco with method={self.method!r}: its outer step keeps its own outer "
                "momentum, and SparseLoCo's error feedback takes the place of outer momentum")
        if not self.wire.error_feedback:
            bad("error_feedback", "true with wire_format='sparseloco': its error feedback (decay sparseloco_beta) "
                "is part of the format, and without it top-k would drop the rest of every pseudo-gradient")
        if self.outer.momentum != 0.0:
            bad("outer_momentum", "0 with wire_format='sparseloco': SparseLoCo's error feedback takes the place of "
                "outer momentum, its outer step is theta <- theta - outer_lr * mean(delta_hat) (the authors' "
                "outer_lr is 1)")

    def _check_streaming(self, bad: Any, n_units: int) -> None:
        """What Streaming DiLoCo needs of the schedule, and what it does not run: refused before any process."""
        H, P = self.schedule.sync_interval, self.streaming.fragments
        if P > n_units:
            bad("fragments", f"at most {n_units}, the sync units of model {self.data.model!r} (a fragment is a run of "
                "whole units)")
        if H % P:
            bad("sync_interval", f"a multiple of fragments={P} (fragment p syncs every sync_interval steps, offset by "
                "p*sync_interval/fragments steps)")
        if self.streaming.fragment_sync_delay >= H // P:
            bad("fragment_sync_delay", f"an integer in 0..{H // P - 1}: below sync_interval/fragments = {H // P}, "
                "so a fragment lands before the next one leaves")
        if self.trouble.exclude and not capabilities(self.method).has_penalty:
            bad("exclude_trouble", f"false with method={self.method!r}: it has no pseudo-gradient penalty to "
                f"leave a replica out ({_methods_with('has_penalty')})")

    def _check_fragment_schedule_rule(self) -> None:
        """A reader's fragment schedule (edit_lab.rules): streaming_diloco only; probed on the run's steps with its
        W, H, P and τ (no torch), after `_check_streaming` has accepted those."""
        first = _first_line(self.rules.fragment_schedule)
        if not capabilities(self.method).fragmented:
            raise ConfigError(f"fragment_schedule_rule={first!r} is not allowed with method={self.method!r}: "
                              f"the rule says which fragment lands when in {_methods_with('fragmented')} only")
        from edit_lab.rules import fragment_schedule_problem

        steps = None if self.time_budget else self.steps
        if (why := fragment_schedule_problem(self.rules.fragment_schedule, self.schedule.warmup_steps, self.schedule.sync_interval,
                                             self.streaming.fragments, self.streaming.fragment_sync_delay, steps)) is not None:
            raise ConfigError(f"fragment_schedule_rule={first!r} is not allowed: {why}")

    def _check_outer_step_rule(self) -> None:
        """A reader's outer step (edit_lab.rules): only where OuterState's SGD is the outer step; probed on tensors."""
        first, m, caps = _first_line(self.rules.outer_step), self.method, capabilities(self.method)
        if not caps.outer_sgd:
            why = (f"{m}'s outer step is its own, on a one-round-stale mean with co2_* settings" if caps.stale_outer
                   else f"{m} averages the parameters themselves, no outer optimizer (lr 1, no momentum: diloco "
                   "with outer_lr=1, outer_momentum=0 runs a rule there)" if caps.is_local_sgd
                   else f"{m} has no outer step")
            raise ConfigError(f"outer_step_rule={first!r} is not allowed with method={m!r}: the rule replaces the "
                              f"outer optimizer of {_methods_with('outer_sgd')} only; {why}")
        from edit_lab.rules import outer_step_problem  # imports torch: the rule is called on a few small tensors

        if (why := outer_step_problem(self.rules.outer_step, self.outer.lr, self.outer.momentum)) is not None:
            raise ConfigError(f"outer_step_rule={first!r} is not allowed: {why}")

    def _check_sync_schedule_rule(self, n_units: int) -> None:
        """A reader's layer-wise sync order (edit_lab.rules): EDiT and A-EDiT only; called once for the model's
        unit count (no torch)."""
        first = _first_line(self.rules.sync_schedule)
        methods = [m for m in METHODS if capabilities(m).layerwise_sync]
        if self.method not in methods:
            raise ConfigError(f"sync_schedule_rule={first!r} is not allowed with method={self.method!r}: the "
                              f"rule orders the layer-wise sync inside the forward of {', '.join(methods)} only")
        from edit_lab.rules import sync_schedule_problem

        if (why := sync_schedule_problem(self.rules.sync_schedule, n_units)) is not None:
            raise ConfigError(f"sync_schedule_rule={first!r} is not allowed: {why}")

    def _check_grad_all_reduce_rule(self) -> None:
        """A reader's gradient all-reduce (edit_lab.rules): only where a gradient all-reduce over the sync group
        runs; probed on stand-in collectives of `replicas` threads (imports torch)."""
        first = _first_line(self.rules.grad_all_reduce)

        def refuse(why: str) -> None:
            raise ConfigError(f"grad_all_reduce_rule={first!r} is not allowed: {why}")

        every = [m for m in METHODS if not capabilities(m).is_local_sgd and not capabilities(m).quorum]
        warm = [m for m in METHODS if capabilities(m).is_local_sgd]
        where = (f"{', '.join(every)} all-reduce{'s' * (len(every) == 1)} the gradients every step, "
                 f"{', '.join(warm)} only in their warmup_steps")
        if capabilities(self.method).is_local_sgd and self.schedule.warmup_steps == 0:
            refuse(f"None with method={self.method!r} and warmup_steps=0: that run never all-reduces gradients "
                   f"({where})")
        if self.replicas < 2:
            refuse("None with replicas=1: a single replica has no gradient all-reduce over the sync group")
        from edit_lab.rules import grad_all_reduce_problem  # imports torch: the rule runs on small stand-in tensors

        if (why := grad_all_reduce_problem(self.rules.grad_all_reduce, self.replicas)) is not None:
            refuse(why)

    def _check_aedit_schedule(self, bad: Any) -> None:
        """A replayed schedule must be an A-EDiT run's, of as many replicas, with a time budget to replace."""
        from edit_lab.protocol import ScheduleReplay

        if not capabilities(self.method).time_triggered:
            bad("aedit_schedule", f"None with method={self.method!r} (only A-EDiT, {_methods_with('time_triggered')}, has a "
                "timed schedule to replay)")
        if not self.time_budget:
            bad("aedit_schedule", "None without a time_budget (a replay stops each replica where the replayed run's "
                "budget stopped it)")
        try:
            replay = ScheduleReplay.of_run(self.aedit.schedule, replica=0)
        except (OSError, ValueError, KeyError) as e:
            bad("aedit_schedule", f"the directory of a finished A-EDiT run ({e})")
        if replay.replicas != self.replicas:
            bad("aedit_schedule", f"a run of {self.replicas} replicas (that run had {replay.replicas})")
        # the replayed steps hold only under the settings that made them: W places the anchors the meetings
        # count from, N_min decides which meetings sync, the period is what the records say the timers were
        try:
            replayed = type(self).load(Path(self.aedit.schedule) / "config.json")
        except (OSError, ValueError) as e:
            bad("aedit_schedule", f"the directory of a finished A-EDiT run (it has no readable config.json: {e})")
        for name in ScheduleReplay.SETTINGS:
            if self.get(name) != (theirs := replayed.get(name)):
                bad(name, f"{theirs!r}, the value of the run whose schedule aedit_schedule replays (a replay "
                    f"under {name}={self.get(name)!r} would run another schedule than the one it names)")

    def _check_virtual(self, bad: Any) -> None:
        """What the virtual clock (edit_lab/clock/virtual.py) does not run yet, refused naming the field."""
        if self.runtime.device == "cuda":
            bad("device", "auto or cpu with clock='virtual' (the virtual clock computes on the CPU)")
        if self.runtime.backend == "nccl":
            bad("backend", "auto or gloo with clock='virtual' (its collectives are in-process)")
        if self.trouble.fault_rank >= 0 and self.trouble.fault_kind in ("kill", "hang"):
            bad("fault_kind", "raise or nan with clock='virtual' (every rank is a thread of this process: kill and "
                "hang would take the caller with it)")
        if self.clock.costs is not None and not Path(self.clock.costs).exists():
            bad("clock_costs", "a run directory or a costs JSON that exists, or None")
        if self.clock.compute == "charged":  # time only (edit_lab/clock/time_only.py): no model state to keep or compute on
            for name, off in (("checkpoint_every", 0), ("resume", None), ("grad_all_reduce_rule", None)):
                if self.get(name) != off:
                    bad(name, f"{off!r} with virtual_compute='charged' (a time-only run has no model state to save "
                        f"or resume, and times the built-in gradient all-reduce only)")


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and not math.isnan(v)


def _first_line(source: Any) -> str:
    """A rule's first line (80 characters at most), to name it in a refusal without printing all its source."""
    return next((ln.strip() for ln in str(source).splitlines() if ln.strip()), "")[:80]


def _methods_with(capability: str) -> str:
    """The methods that have `capability`, as a refusal lists them."""
    return ", ".join(m for m in METHODS if getattr(capabilities(m), capability))
