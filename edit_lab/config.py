"""RunConfig: the one object that travels from a notebook, the CLI or a test to every worker.

Every knob of a run lives here, with its default from `edit-method.md`. `validate()` refuses a bad
value *before* any process starts, with one line that names the field and what is allowed, because a
typo found by a spawned worker costs a minute of waiting and a traceback from four processes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

METHODS = ("sync", "post_local_sgd", "diloco", "co2", "edit", "aedit")
LOCAL_METHODS = ("post_local_sgd", "diloco", "co2", "edit", "aedit")
INNER_OPTIMIZERS = ("adamw", "sgd")
BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
CORRUPT_MODES = ("random", "shuffle", "corpus")
FAULT_KINDS = ("raise", "kill", "hang", "nan")  # edit_lab.faults implements them


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field and the allowed values."""


@dataclass
class RunConfig:
    """Everything that defines a run. Field names are the CLI flags (`--sync-interval` for `sync_interval`)."""

    # --- what to run ---
    method: str = "sync"  # one of METHODS
    shards: int = 2  # S: ranks holding one replica (shard group size)
    replicas: int = 2  # R: sync group size
    steps: int = 60  # inner optimizer steps (ignored with a time budget)
    time_budget: float = 0.0  # seconds of wall clock to train for; every replica trains as many steps as fit (0: train `steps` steps)
    seed: int = 0
    out: str | None = None  # run directory; None -> runs/<method>-<time>
    # --- model and data ---
    model: str = "tiny"  # a name of edit_lab.model.SIZES
    seq_len: int = 64
    batch_size: int = 8  # sequences per rank per step (a replica's batch is shards × batch_size)
    data: str | None = None  # a text file; None -> Python's own reference docs (pydoc_data)
    eval_every: int = 20  # steps between validation losses (0: only at the end; ignored with a time budget)
    eval_every_s: float = 0.0  # seconds between timed validations of the agreed model (0: none)
    eval_batches: int = 4
    # --- inner optimizer ---
    inner_optimizer: str = "adamw"
    lr: float = 3e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # 0 disables inner gradient clipping
    # --- local SGD family ---
    warmup_steps: int = 10  # W: fully synchronous steps before local steps begin
    sync_interval: int = 10  # tau: inner steps between syncs
    outer_lr: float = 0.7  # outer optimizer of diloco, edit and aedit (co2 has its own: co2_outer_lr)
    outer_momentum: float = 0.8  # its momentum, in [0, 1) (co2: co2_outer_momentum)
    outer_nesterov: bool = True  # Nesterov (true) or heavy-ball (false) outer momentum; co2 is always heavy-ball
    prefetch: bool = True  # overlap unit l+1's sync with unit l's compute
    cpu_offload: bool = False  # keep anchor and outer momentum on the CPU between syncs
    # --- pseudo-gradient penalty (edit / aedit) ---
    penalty_anomaly: bool = True
    penalty_weighting: bool = True
    penalty_clip: bool = True
    penalty_alpha: float = 0.3  # EWMA smoothing of the anomaly detector, in (0, 1)
    penalty_arming: int = 4  # E, in syncs
    penalty_threshold: float = 3.0  # delta
    penalty_temperature: float = 1.0  # T
    penalty_clip_norm: float = 10.0  # phi
    penalty_bias_correction: bool = True  # mean and variance divided by 1-(1-alpha)^n, as Adam's (false: the reference)
    penalty_readmit_after: int = 3  # K: a replica flagged K syncs in a row is re-admitted if its norm is in line with its unflagged peers' (or all are flagged); 0: never
    penalty_min_rel_std: float = 0.15  # epsilon: the detector's sigma is never below epsilon times its mean, a noise floor (0: the reference)
    penalty_weight_per_step: bool = True  # softmax weights from G times mean k over k: a longer round (A-EDiT's fast replica) is not down-weighted for its steps
    penalty_per_step: bool = True  # the detector judges G/k, k = local steps in the round (false: G, as the reference)
    # --- trouble on purpose (teaching the penalty) ---
    corrupt_replica: int = -1  # replica fed corrupted data, -1 for none
    corrupt_from_step: int = 0
    corrupt_mode: str = "random"  # random bytes; shuffle (each row's own bytes permuted); corpus (the byte ramp 0,1,…,255,0,…)
    spike_replica: int = -1  # replica whose parameters are scaled once, -1 for none
    spike_step: int = 0
    spike_scale: float = 10.0  # θ ← scale·θ after the optimizer step of spike_step (inf or nan: a non-finite replica)
    spike_units: tuple[int, ...] = ()  # units scaled by the spike (0 root, 1.. blocks); empty: every unit
    # --- A-EDiT ---
    sync_period: float = 1.0  # T_sync, seconds of wall clock between syncs
    min_sync_steps: int = 1  # N_min: fewer steps in a round over the sync group -> no sync, timers restart
    step_weighting: bool = True  # A-EDiT: mix each replica's share of the round's steps into its weight (on: measured, benchmarks/aedit_loss.py)
    step_weight_mix: float = 0.5  # rho
    # --- CO2: its own outer optimizer, heavy-ball, with its authors' defaults (edit-method.md §9) ---
    co2_outer_lr: float = 1.0  # CO2's outer learning rate (the authors' default 1.0)
    co2_outer_momentum: float = 0.5  # CO2's heavy-ball outer momentum μ, in [0, 1) (the authors' default 0.5)
    co2_staleness_penalty: float = 1.0  # λ > 0: the one-round-stale mean pseudo-gradient enters the outer momentum divided by λ (1: no penalty, the authors' default)
    co2_momentum_clip: float = 0.0  # c: clamp every outer-momentum value to [−c, c] before the anchor moves (0: off, the authors' default)
    # --- stragglers and the simulated sync link ---
    straggler_replicas: tuple[int, ...] = ()  # consistent stragglers
    straggler_factor: float = 1.0  # their steps take k× as long
    random_pause_prob: float = 0.0  # each step, each replica pauses with this probability
    random_pause_ms: float = 0.0
    link_latency_ms: float = 0.0  # simulated sync-group link; 0 and bandwidth 0 -> no simulation
    link_bandwidth_mbps: float = 0.0  # megabytes per second; 0 -> unlimited
    # --- processes and devices ---
    backend: str = "auto"
    device: str = "auto"
    threads: int = 1  # torch threads per worker
    bf16: bool = False  # autocast compute to bfloat16 (GPUs); parameters and collectives stay float32
    reshard_after_forward: bool = True  # as FSDP: free a block's gathered params after its forward, all-gather again in the backward
    timeout_s: float = 45.0  # a collective that waits longer ends the run (so a hung rank is found within a minute)
    # --- checkpoints ---
    checkpoint_every: int = 0  # in syncs; 0 disables
    resume: str | None = None
    checksums: bool = False  # record a CRC of θ and of the anchor per unit after every sync (for tests)
    # --- faults on purpose (teaching and testing failure handling) ---
    fault_rank: int = -1  # rank that fails on purpose, -1 for none
    fault_step: int = 0  # step at whose start (after whose forward, for nan) it fails
    fault_kind: str = "raise"  # raise, kill (SIGKILL itself), hang (peers hit timeout_s) or nan (its loss)
    progress: bool = True

    # ------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.shards * self.replicas

    def progress_total(self) -> tuple[int, str]:
        """What the progress file counts up to, and in what: the budget's seconds, or the steps."""
        return (int(self.time_budget), "s") if self.time_budget else (self.steps, "step")

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        d = dict(d)
        for tuple_field in ("betas", "straggler_replicas", "spike_units"):
            if tuple_field in d and d[tuple_field] is not None:
                d[tuple_field] = tuple(d[tuple_field])
        return cls(**d)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------
    def validate(self, world_size: int | None = None) -> "RunConfig":
        """Raise ConfigError naming the first bad field; return self so calls chain.

        `world_size` is the process count imposed from outside (torchrun's WORLD_SIZE), if any.
        """
        from .model import SIZES  # late import: config must stay importable without torch

        def bad(name: str, allowed: str) -> None:
            raise ConfigError(f"{name}={getattr(self, name)!r} is not allowed: {allowed}")

        def choice(name: str, allowed: tuple[str, ...]) -> None:
            if getattr(self, name) not in allowed:
                bad(name, "one of " + ", ".join(allowed))

        def at_least(name: str, lo: float) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
                bad(name, f"a number >= {lo}")

        choice("method", METHODS)
        choice("inner_optimizer", INNER_OPTIMIZERS)
        choice("backend", BACKENDS)
        choice("device", DEVICES)
        choice("corrupt_mode", CORRUPT_MODES)
        if not isinstance(self.reshard_after_forward, bool):
            bad("reshard_after_forward", "true or false")
        if self.model not in SIZES:
            bad("model", "one of " + ", ".join(SIZES))
        for name in ("shards", "replicas", "steps", "seq_len", "batch_size", "sync_interval", "threads",
                     "eval_batches", "min_sync_steps"):
            at_least(name, 1)
        for name in ("warmup_steps", "eval_every", "checkpoint_every", "seed", "corrupt_from_step", "spike_step"):
            at_least(name, 0)
        for name in ("weight_decay", "grad_clip", "outer_momentum", "link_latency_ms", "link_bandwidth_mbps",
                     "random_pause_ms", "time_budget", "eval_every_s"):
            at_least(name, 0.0)
        for name in ("lr", "outer_lr", "sync_period", "timeout_s"):
            at_least(name, 0.0)
            if getattr(self, name) <= 0:
                bad(name, "a number > 0")
        at_least("straggler_factor", 1.0)
        from .penalty import PenaltyConfig, PenaltyValueError

        try:  # the detector's own check, so that the config refuses exactly what the detector would
            PenaltyConfig.of(self).validate()
        except PenaltyValueError as e:
            bad("penalty_" + e.field, e.allowed)
        if not 0.0 <= self.random_pause_prob <= 1.0:
            bad("random_pause_prob", "a probability in [0, 1]")
        if not 0.0 <= self.step_weight_mix <= 1.0:
            bad("step_weight_mix", "a number in [0, 1]")
        if self.outer_momentum >= 1.0:
            bad("outer_momentum", "a number in [0, 1)")
        # CO2's outer optimizer (methods/co2.py `CO2Outer`): finite, and λ divides, so it must be > 0
        for name, ok, allowed in (
                ("co2_outer_lr", lambda v: 0.0 < v < math.inf, "a finite number > 0"),
                ("co2_outer_momentum", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)"),
                ("co2_staleness_penalty", lambda v: 0.0 < v < math.inf, "a finite number > 0 (1: no penalty)"),
                ("co2_momentum_clip", lambda v: 0.0 <= v < math.inf, "0 (off) or a finite number > 0")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
                bad(name, allowed)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            bad("betas", "two numbers in [0, 1)")
        from .model import get_size

        if self.seq_len > get_size(self.model).max_seq_len:
            bad("seq_len", f"at most {get_size(self.model).max_seq_len} for model {self.model!r}")
        for name in ("corrupt_replica", "spike_replica"):
            v = getattr(self, name)
            if not -1 <= v < self.replicas:
                bad(name, f"-1 (none) or a replica index in 0..{self.replicas - 1}")
        n_units = 1 + get_size(self.model).n_layers
        if len(set(self.spike_units)) != len(self.spike_units) or not all(
                isinstance(u, int) and 0 <= u < n_units for u in self.spike_units):
            bad("spike_units", f"distinct unit indices in 0..{n_units - 1} (0 is the root unit), or () for all")
        if self.spike_replica >= 0 and self.method in LOCAL_METHODS and self.spike_step < self.warmup_steps:
            # the anchors are created from each replica's own θ at step W: a spike before that would give
            # the replicas different anchors, and no sync could ever bring them together again
            bad("spike_step", f"a step >= warmup_steps={self.warmup_steps} (after warm-up) for method {self.method!r}")
        for r in self.straggler_replicas:
            if not 0 <= r < self.replicas:
                bad("straggler_replicas", f"replica indices in 0..{self.replicas - 1}")
        if self.device == "cuda" or self.backend == "nccl":
            import torch

            if not torch.cuda.is_available():
                name = "device" if self.device == "cuda" else "backend"
                bad(name, "auto or cpu/gloo here: no CUDA device is visible on this machine")
        if self.backend == "nccl" and self.device == "cpu":
            bad("backend", "gloo or auto with device='cpu' (NCCL moves only GPU tensors)")
        if self.data is not None and not Path(self.data).is_file():
            bad("data", "a readable text file (or None for the default corpus)")
        if self.checkpoint_every and self.method == "co2":
            bad("checkpoint_every", "0 with method co2: the mean of CO2's last round is always in flight (it "
                "lands at the next boundary), so there is no moment where the whole state is in hand to checkpoint")
        if self.resume is not None and not Path(self.resume).is_dir():
            bad("resume", "an existing run or checkpoint directory")
        choice("fault_kind", FAULT_KINDS)
        if not -1 <= self.fault_rank < self.world_size:
            bad("fault_rank", f"-1 (none) or a rank in 0..{self.world_size - 1}")
        at_least("fault_step", 0)
        if self.method == "aedit" and self.sync_period > self.timeout_s / 2:
            # a replica that has finished waits in a meeting until the others' timers expire: up to one
            # period plus a step, which must fit in the collective timeout with room to spare
            bad("sync_period", f"at most timeout_s/2 = {self.timeout_s / 2:g} s (raise timeout_s for longer "
                "A-EDiT periods): a finished replica waits up to one period in a meeting")
        if self.time_budget and self.resume is not None:
            bad("time_budget", "0 when resuming: a resumed run trains up to `steps`")
        if self.fault_rank >= 0 and not self.time_budget and self.fault_step >= self.steps:
            bad("fault_step", f"a step in 0..{self.steps - 1} (steps={self.steps}), or the fault never happens")
        if world_size is not None and world_size != self.world_size:
            raise ConfigError(
                f"shards×replicas={self.shards}×{self.replicas}={self.world_size} does not match the "
                f"launcher's world size {world_size}: set --shards/--replicas so that their product is {world_size}"
            )
        return self


def field_help() -> dict[str, str]:
    """The trailing comment of each field, used as CLI help so docs and code never drift apart."""
    import inspect
    import re

    src = inspect.getsource(RunConfig)
    out: dict[str, str] = {}
    for line in src.splitlines():
        m = re.match(r"\s+(\w+): [^=]+= .*?#\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out
