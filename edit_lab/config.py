"""RunConfig: the one object that travels from a notebook, the CLI or a test to every worker.

Every knob of a run is a field here, declared with `knob(...)`: its default (from `edit-method.md`),
its section, its help text and its bounds or choices sit next to it, and everything else is derived
from that one declaration: `validate()` checks every declared bound, the command line's flags, their
groups and their `--help` are generated from it (`edit_lab.__main__`), and so are the docs' tables.
`validate()` refuses a bad value *before* any process starts, with one line that names the field and
what is allowed, because a typo found by a spawned worker costs a minute of waiting and a traceback
from four processes. The rules that join several fields (a replica index below `replicas`, a
sequence that fits the model) cannot be declared on one field; they follow the generic checks, each
once. Nothing on that path imports torch unless a rule needs it, so the command line refuses a bad
configuration in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from edit_lab.registry import METHODS, WIRE_FORMATS, capabilities
from edit_lab.sizes import SIZES


def cores() -> int:
    """The cores this process may run on (the affinity mask where the OS has one: a container's share).

    The lab's one core count: the virtual clock's lanes (`virtual_lanes = 0`: one per core) and the lessons'
    reasons for a timing (ranks per core) both read it."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1

INNER_OPTIMIZERS = ("adamw", "sgd")
BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
CORRUPT_MODES = ("random", "shuffle", "corpus")
FAULT_KINDS = ("raise", "kill", "hang", "nan")  # edit_lab.train.faults implements them
CLOCKS = ("wall", "virtual")  # edit_lab.clock.virtual: every rank in one process, on a clock a cost model advances
#: The virtual clock's compute: "real" runs the model; "charged" (time-only) only charges its cost (edit_lab/clock/time_only.py)
VIRTUAL_COMPUTE = ("real", "charged")

#: Old field name -> its new name. Old config.json files and the old CLI flags keep working.
RENAMED = {"link_bandwidth_mbps": "link_bandwidth_mb_s"}

# The sections of a configuration, in the order `--help` and the docs list them.
S_RUN = "what to run"
S_DATA = "model and data"
S_INNER = "inner optimizer"
S_SCHEDULE = "local SGD schedule"
S_OUTER = "outer optimizer"
S_PENALTY = "pseudo-gradient penalty (edit, aedit)"
S_AEDIT = "A-EDiT"
S_STREAM = "Streaming DiLoCo and compressed pseudo-gradients"
S_LINK = "stragglers and the simulated sync link"
S_TROUBLE = "trouble on purpose (teaching the penalty and failure handling)"
S_SYSTEM = "processes and devices"
S_CHECKPOINT = "checkpoints"
SECTIONS = (S_RUN, S_DATA, S_INNER, S_SCHEDULE, S_OUTER, S_PENALTY, S_AEDIT, S_STREAM, S_LINK, S_TROUBLE,
            S_SYSTEM, S_CHECKPOINT)


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field and the allowed values."""


@dataclass(frozen=True)
class Knob:
    """What a field declares about itself: where it belongs, what it means, what it may be.

    `ge`/`gt`/`le`/`lt` bound a number; `finite` refuses ±inf; NaN is refused unless `nan_ok`;
    `choices` lists the allowed strings; `checked_by` names the module whose own check is the one
    definition of this field's bounds (the penalty's detector), so none is repeated here.
    """

    section: str
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    finite: bool = False
    nan_ok: bool = False
    checked_by: str | None = None

    def allowed(self, hint: Any) -> str:
        """The allowed values in words, as the refusal and the `--help` line say them."""
        if hint is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if hint is str or hint == str | None:
            return "a path (text)" + (", or None" if hint != str else "")
        noun = "an integer" if hint is int else "a finite number" if self.finite else "a number"
        lo = (self.ge, "[", ">=") if self.ge is not None else (self.gt, "(", ">") if self.gt is not None else None
        hi = (self.le, "]", "<=") if self.le is not None else (self.lt, ")", "<") if self.lt is not None else None
        if lo and hi:
            return f"{noun} in {lo[1]}{_num(lo[0])}, {_num(hi[0])}{hi[1]}"
        if lo:
            return f"{noun} {lo[2]} {_num(lo[0])}"
        if hi:
            return f"{noun} {hi[2]} {_num(hi[0])}"
        return noun

    def admits(self, value: Any, hint: Any) -> bool:
        """Whether `value` has the field's type and lies within its declared bounds."""
        if hint is bool:
            return isinstance(value, bool)
        if hint is str or hint == str | None:
            if value is None:
                return hint != str
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if hint not in (int, float):
            return True  # tuples: their rules join fields (replica indices, units), see `validate`
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (hint is int and not isinstance(value, int)):
            return False
        if math.isnan(value):
            return self.nan_ok
        if self.finite and math.isinf(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def knob(default: Any, help: str, *, section: str, ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None, choices: Sequence[str] = (), finite: bool = False,
         nan_ok: bool = False, checked_by: str | None = None) -> Any:
    """A RunConfig field with its section, help text and bounds next to it (see `Knob`)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; one of {SECTIONS}")
    return dataclasses.field(default=default, metadata={"knob": Knob(section, help, ge, gt, le, lt, tuple(choices),
                                                                      finite, nan_ok, checked_by)})


@dataclass
class RunConfig:
    """Everything that defines a run. Field names are the CLI flags (`--sync-interval` for `sync_interval`)."""

    # --- what to run ---
    method: str = knob("sync", "the training method", section=S_RUN, choices=METHODS)
    shards: int = knob(2, "S: ranks holding one replica (shard group size)", section=S_RUN, ge=1)
    replicas: int = knob(2, "R: sync group size", section=S_RUN, ge=1)
    sync_group_rule: str | None = knob(
        None, "the source of a Python function fn(rank, shards, replicas) -> list of ranks, the sync group of that "
        "rank, from which every rank builds the sync groups instead of the mesh's own (edit_lab.hooks; None: the "
        "mesh's, the same shard index in every replica)", section=S_RUN)
    steps: int = knob(60, "inner optimizer steps (ignored with a time budget)", section=S_RUN, ge=1)
    time_budget: float = knob(0.0, "seconds of wall clock to train for; every replica trains as many steps as fit "
                              "(0: train `steps` steps)", section=S_RUN, ge=0.0, finite=True)
    seed: int = knob(0, "seed of the model's initialisation and of every batch", section=S_RUN, ge=0)
    out: str | None = knob(None, "run directory (None: runs/<method>-<time>); one that already holds a run is "
                           "refused unless overwritten (--overwrite)", section=S_RUN)
    grad_all_reduce_rule: str | None = knob(
        None, "the source of a Python function fn(grad, reduce_scatter, all_gather) -> this rank's gradient after "
        "the all-reduce, run on every rank for each unit's gradient shard instead of the built-in all-reduce over "
        "the sync group, given the run's real collectives (reduce_scatter: this rank's slice of the mean); sync, "
        "and the warm-up of the local-SGD methods (edit_lab.hooks; None: the built-in all-reduce)", section=S_RUN)
    # --- model and data ---
    model: str = knob("tiny", "model size (edit_lab.model.SIZES)", section=S_DATA, choices=tuple(SIZES))
    seq_len: int = knob(64, "tokens (bytes) per sequence, at most the model's max_seq_len", section=S_DATA, ge=1)
    batch_size: int = knob(8, "sequences per rank per step (a replica's batch is shards × batch_size)",
                           section=S_DATA, ge=1)
    data: str | None = knob(None, "a text file; None: Python's own reference docs (pydoc_data)", section=S_DATA)
    eval_every: int = knob(20, "steps between validation losses (0: only at the end; ignored with a time budget)",
                           section=S_DATA, ge=0)
    eval_every_s: float = knob(0.0, "seconds between timed validations of the agreed model (0: none)",
                               section=S_DATA, ge=0.0, finite=True)
    eval_batches: int = knob(4, "held-out batches per validation", section=S_DATA, ge=1)
    # --- inner optimizer ---
    inner_optimizer: str = knob("adamw", "the optimizer of every local step", section=S_INNER,
                                choices=INNER_OPTIMIZERS)
    lr: float = knob(3e-3, "inner learning rate", section=S_INNER, gt=0.0, finite=True)
    weight_decay: float = knob(0.0, "inner weight decay", section=S_INNER, ge=0.0, finite=True)
    betas: tuple[float, float] = knob((0.9, 0.95), "AdamW's betas, two numbers in [0, 1)", section=S_INNER)
    grad_clip: float = knob(1.0, "largest norm of the inner gradient (0: no clipping)", section=S_INNER, ge=0.0)
    # --- local SGD family ---
    warmup_steps: int = knob(10, "W: fully synchronous steps before local steps begin", section=S_SCHEDULE, ge=0)
    sync_interval: int = knob(10, "tau: inner steps between syncs", section=S_SCHEDULE, ge=1)
    prefetch: bool = knob(True, "overlap unit l+1's sync with unit l's compute", section=S_SCHEDULE)
    sync_schedule_rule: str | None = knob(
        None, "the source of a Python function fn(n_units) -> list of (kind, unit) operations (issue, wait, "
        "all_gather, compute): the order of one EDiT/A-EDiT sync step's forward, run on every rank instead of "
        "prefetch's (edit_lab.hooks; None: prefetch's)", section=S_SCHEDULE)
    cpu_offload: bool = knob(False, "keep anchor and outer momentum on the CPU between syncs", section=S_SCHEDULE)
    # --- outer optimizers ---
    outer_lr: float = knob(0.7, "outer learning rate of diloco, edit and aedit (co2 has its own: co2_outer_lr)",
                           section=S_OUTER, gt=0.0, finite=True)
    outer_momentum: float = knob(0.8, "its momentum (co2: co2_outer_momentum)", section=S_OUTER, ge=0.0, lt=1.0)
    outer_nesterov: bool = knob(True, "Nesterov (true) or heavy-ball (false) outer momentum; co2 is always "
                                "heavy-ball", section=S_OUTER)
    outer_step_rule: str | None = knob(
        None, "the source of a Python function fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf), "
        "run on every rank's anchor shards instead of torch's SGD, with outer_lr and outer_momentum (diloco, edit, "
        "aedit; outer_nesterov is then the rule's to decide; edit_lab.hooks; None: the library's SGD)",
        section=S_OUTER)
    co2_outer_lr: float = knob(1.0, "CO2's outer learning rate (the authors' default 1.0)", section=S_OUTER,
                               gt=0.0, finite=True)
    co2_outer_momentum: float = knob(0.5, "CO2's heavy-ball outer momentum μ (the authors' default 0.5)",
                                     section=S_OUTER, ge=0.0, lt=1.0)
    co2_staleness_penalty: float = knob(1.0, "λ: the pull of the anchor towards the replicas' one-round-stale mean "
                                        "(a − x̄) enters the outer momentum divided by λ (1: no penalty, the authors' "
                                        "default)", section=S_OUTER,
                                        gt=0.0, finite=True)
    co2_momentum_clip: float = knob(0.0, "c: clamp every outer-momentum value to [−c, c] before the anchor moves "
                                    "(0: off, the authors' default)", section=S_OUTER, ge=0.0, finite=True)
    # --- pseudo-gradient penalty (edit / aedit); the detector's own check is the one definition of the bounds ---
    penalty_anomaly: bool = knob(True, "anomaly elimination: a flagged replica's pseudo-gradient is left out",
                                 section=S_PENALTY, checked_by="penalty")
    penalty_weighting: bool = knob(True, "weighted averaging: softmax weights from the pseudo-gradient norms",
                                   section=S_PENALTY, checked_by="penalty")
    penalty_clip: bool = knob(True, "gradient clip of the aggregated pseudo-gradient at phi", section=S_PENALTY,
                              checked_by="penalty")
    penalty_alpha: float = knob(0.3, "alpha: EWMA smoothing of the anomaly detector, in (0, 1)", section=S_PENALTY,
                                checked_by="penalty")
    penalty_arming: int = knob(4, "E: syncs of history before the detector may flag, >= 1", section=S_PENALTY,
                               checked_by="penalty")
    penalty_threshold: float = knob(3.0, "delta: flag a norm this many standard deviations above the mean, finite "
                                    "> 0", section=S_PENALTY, checked_by="penalty")
    penalty_temperature: float = knob(1.0, "T of the softmax weights, > 0 (inf: equal weights)", section=S_PENALTY,
                                      checked_by="penalty")
    penalty_clip_norm: float = knob(10.0, "phi: the largest norm of the aggregated pseudo-gradient, > 0 (inf: no "
                                    "clip)", section=S_PENALTY, checked_by="penalty")
    penalty_bias_correction: bool = knob(True, "mean and variance divided by 1-(1-alpha)^n, as Adam's (false: the "
                                         "reference)", section=S_PENALTY, checked_by="penalty")
    penalty_readmit_after: int = knob(3, "K, with penalty_peers off: a replica flagged K syncs in a row is re-admitted "
                                      "if its norm is in line with its unflagged peers' (or all are flagged); 0: never",
                                      section=S_PENALTY, checked_by="penalty")
    penalty_min_rel_std: float = knob(0.15, "epsilon: the detector's sigma is never below epsilon times its mean, a "
                                      "noise floor (0: the reference)", section=S_PENALTY, checked_by="penalty")
    penalty_weight_per_step: bool = knob(True, "softmax weights from G times mean k over k: a longer round (A-EDiT's "
                                         "fast replica) is not down-weighted for its steps", section=S_PENALTY,
                                         checked_by="penalty")
    penalty_per_step: bool = knob(True, "the detector judges G/k, k = local steps in the round (false: G, as the "
                                  "reference)", section=S_PENALTY, checked_by="penalty")
    penalty_peers: bool = knob(True, "the detector judges G/k over the median of the other replicas' at the same sync, "
                               "and a replica flagged on one unit is left out of all (a rise every replica shares "
                               "flags none; false: each unit alone on G/k, as the authors)", section=S_PENALTY,
                               checked_by="penalty")
    penalty_stay_ratio: float = knob(1.3, "kappa_s: a flagged replica stays out while a unit of it is above kappa_s "
                                     "times its peers' median (0: no; with penalty_peers)", section=S_PENALTY,
                                     checked_by="penalty")
    penalty_enter_ratio: float = knob(1.6, "kappa_e: a replica is newly flagged only on a unit above kappa_e times its "
                                      "peers' median, so one in line with its peers never is (0: no such test; with "
                                      "penalty_peers)", section=S_PENALTY, checked_by="penalty")
    penalty_memory_threshold: float = knob(1.5, "delta_m: with fewer than 3 peers (no majority) a replica is newly "
                                           "flagged only where its own G/k is above its own history's mean by "
                                           "delta_m sigma (0: not asked; with penalty_peers)", section=S_PENALTY,
                                           checked_by="penalty")
    penalty_majority_ratio: float = knob(1.5, "kappa_m: with 3 peers or more (a majority) a replica is flagged on a "
                                         "unit above kappa_m times their median, its detector armed or not (0: no; "
                                         "with penalty_peers)", section=S_PENALTY, checked_by="penalty")
    penalty_weighting_rule: str | None = knob(
        None, "the source of a Python function fn(norms, temperature, anomalous) -> one weight per replica, run on "
        "every rank instead of the softmax weights (edit_lab.hooks; None: the library's softmax_weights)",
        section=S_PENALTY, checked_by="penalty")
    # --- A-EDiT ---
    sync_period: float = knob(1.0, "T_sync, seconds of wall clock between syncs (aedit: at most timeout_s/2)",
                              section=S_AEDIT, gt=0.0, finite=True)
    min_sync_steps: int = knob(1, "N_min: fewer steps in a round over the sync group -> no sync, timers restart",
                               section=S_AEDIT, ge=1)
    step_weighting: bool = knob(True, "mix each replica's share of the round's steps into its weight (on: measured, "
                                "benchmarks/aedit_loss.py)", section=S_AEDIT)
    step_weight_mix: float = knob(0.5, "rho: how much of the weight is the step share", section=S_AEDIT,
                                  ge=0.0, le=1.0)
    aedit_schedule: str | None = knob(None, "an A-EDiT run directory whose schedule to replay instead of the timers: "
                                      "each replica meets at the steps it met there and stops where it stopped "
                                      "(None: the timers)", section=S_AEDIT)
    # --- Streaming DiLoCo (Douillard et al., 2025) and compressed pseudo-gradients ---
    fragments: int = knob(2, "P: fragments of streaming_diloco, each a run of consecutive sync units; fragment p syncs "
                          "every sync_interval steps, offset by p*sync_interval/P (at most the model's units; "
                          "sync_interval a multiple of P)", section=S_STREAM, ge=1)
    fragment_sync_delay: int = knob(1, "tau (overlap): inner steps a fragment's pseudo-gradient travels before its "
                                    "outer step lands, below sync_interval/fragments (torchft's fragment_sync_delay)",
                                    section=S_STREAM, ge=0)
    fragment_update_alpha: float = knob(0.5, "alpha: at a fragment's outer step theta <- anchor + alpha*(theta - "
                                        "anchor) with the new anchor, keeping alpha of the replica's whole "
                                        "deviation from it, not only of the steps trained while the fragment "
                                        "travelled (0: theta <- anchor; torchft's fragment_update_alpha and "
                                        "_merge_parameters)", section=S_STREAM, ge=0.0, le=1.0)
    fragment_schedule_rule: str | None = knob(
        None, "the source of a Python function fn(step, warmup, interval, fragments) -> the fragment whose outer "
        "step lands at the start of step, or None, run on every rank of streaming_diloco with W, H and P instead "
        "of the staggered schedule (each fragment leaves fragment_sync_delay steps before it lands; "
        "edit_lab.hooks; None: the library's fragment_landing)", section=S_STREAM)
    wire_format: str = knob("none", "how pseudo-gradients travel over the sync group, every local-SGD method: none "
                            "(float32), bf16 (an all-reduce in bf16), int8 or int4 (codes and a scale per 256 "
                            "values, a quantised reduce-scatter then all-gather), sparseloco (SparseLoCo: per chunk "
                            "the top-k values in 2 bits, an all-gather of every replica's sparse payload; needs "
                            "error_feedback and outer_momentum 0; edit_lab/core/wire.py)", section=S_STREAM,
                            choices=WIRE_FORMATS)
    error_feedback: bool = knob(False, "keep what the wire format rounded away and add it to the next sync's "
                                "pseudo-gradient (with wire_format other than none)", section=S_STREAM)
    sparseloco_chunk: int = knob(4096, "sparseloco: values per chunk, a power of two from 2 to 65536 (an index costs "
                                 "log2 of it in bits; the authors' 4096)", section=S_STREAM, ge=2, le=65536)
    sparseloco_topk: float = knob(0.015625, "sparseloco: the fraction of each chunk kept, k = round(chunk*topk) "
                                  "values, at least 1 (the authors' 64 of 4096; the paper's range 1-3 %)",
                                  section=S_STREAM, gt=0.0, le=1.0)
    sparseloco_beta: float = knob(0.95, "sparseloco: decay of the error-feedback accumulator, e <- beta*e + delta "
                                  "before compressing (the authors' 0.95; it stands in for outer momentum)",
                                  section=S_STREAM, ge=0.0, le=1.0)
    # --- stragglers and the simulated sync link ---
    straggler_replicas: tuple[int, ...] = knob((), "consistent stragglers: replica indices", section=S_LINK)
    straggler_factor: float = knob(1.0, "their steps take k× as long", section=S_LINK, ge=1.0, finite=True)
    backup_m: int = knob(0, "backup: each step averages the gradients of the first m replicas to be ready and drops "
                         "the rest (m of n = replicas; 0: replicas - 1)", section=S_LINK, ge=0)
    random_pause_prob: float = knob(0.0, "each step, each replica pauses with this probability", section=S_LINK,
                                    ge=0.0, le=1.0)
    random_pause_ms: float = knob(0.0, "length of such a pause, in milliseconds", section=S_LINK, ge=0.0,
                                  finite=True)
    straggler_rule: str | None = knob(
        None, "the source of a Python function fn(step, replica, compute_s) -> seconds that replica pauses after "
        "that step (0: none), run on every rank after every step, on top of the stragglers above (edit_lab.hooks; "
        "None: no rule)", section=S_LINK)
    link_latency_ms: float = knob(0.0, "latency of the simulated sync-group link, in milliseconds (0 and bandwidth "
                                  "0: no simulation)", section=S_LINK, ge=0.0, finite=True)
    link_bandwidth_mb_s: float = knob(0.0, "bandwidth of the simulated sync-group link, in megabytes per second "
                                      "(0: unlimited)", section=S_LINK, ge=0.0)
    # --- trouble on purpose (teaching the penalty) ---
    corrupt_replica: int = knob(-1, "replica fed corrupted data, -1 for none", section=S_TROUBLE)
    corrupt_from_step: int = knob(0, "first step of corrupted data", section=S_TROUBLE, ge=0)
    corrupt_mode: str = knob("random", "random bytes; shuffle (each row's own bytes permuted); corpus (the byte "
                             "ramp 0,1,…,255,0,…)", section=S_TROUBLE, choices=CORRUPT_MODES)
    spike_replica: int = knob(-1, "replica whose parameters are scaled once, -1 for none", section=S_TROUBLE)
    spike_step: int = knob(0, "step after whose optimizer step the spike happens", section=S_TROUBLE, ge=0)
    spike_scale: float = knob(10.0, "θ ← scale·θ (inf or nan: a non-finite replica)", section=S_TROUBLE,
                              nan_ok=True)
    spike_units: tuple[int, ...] = knob((), "units scaled by the spike (0 root, 1.. blocks); empty: every unit",
                                        section=S_TROUBLE)
    exclude_trouble: bool = knob(False, "for measuring detectors: the corrupted replica (from its first sync after "
                                 "corrupt_from_step) and the spiked one (at its sync after the spike) are left out "
                                 "whatever the detector says, a perfect detector (edit, aedit)", section=S_TROUBLE)
    fault_rank: int = knob(-1, "rank that fails on purpose, -1 for none", section=S_TROUBLE)
    fault_step: int = knob(0, "step at whose start (after whose forward, for nan) it fails", section=S_TROUBLE, ge=0)
    fault_kind: str = knob("raise", "raise, kill (SIGKILL itself), hang (peers hit timeout_s) or nan (its loss)",
                           section=S_TROUBLE, choices=FAULT_KINDS)
    # --- processes and devices ---
    backend: str = knob("auto", "collectives' backend (auto: nccl when every rank has a GPU of its own)",
                        section=S_SYSTEM, choices=BACKENDS)
    device: str = knob("auto", "where the ranks compute (auto: cuda when visible)", section=S_SYSTEM,
                       choices=DEVICES)
    threads: int = knob(1, "torch threads per worker", section=S_SYSTEM, ge=1)
    bf16: bool = knob(False, "autocast compute to bfloat16 (GPUs); parameters and collectives stay float32",
                      section=S_SYSTEM)
    reshard_after_forward: bool = knob(True, "as FSDP: free a block's gathered params after its forward, all-gather "
                                       "again in the backward", section=S_SYSTEM)
    timeout_s: float = knob(45.0, "a collective that waits longer ends the run (so a hung rank is found within a "
                            "minute)", section=S_SYSTEM, gt=0.0, finite=True)
    progress: bool = knob(True, "show a progress bar while the run trains", section=S_SYSTEM)
    clock: str = knob("wall", "wall: one process per rank, timed by this machine; virtual: every rank in this "
                      "process, real numerics, time advanced by a cost model (same timeline on any machine)",
                      section=S_SYSTEM, choices=CLOCKS)
    clock_costs: str | None = knob(None, "the virtual clock's costs: a run directory to calibrate from, or a costs "
                                   "JSON (None: the shipped example edit-straggler's calibration)", section=S_SYSTEM)
    virtual_lanes: int = knob(0, "the virtual clock's ranks computing at once, each on a core (0: one per core of "
                              "this machine, at most 4); the run's numbers do not depend on it", section=S_SYSTEM,
                              ge=0)
    virtual_compute: str = knob("real", "the virtual clock's compute: real (the model's forward and backward) or "
                                "charged (time only: the same timeline, no model, no data; losses are NaN)",
                                section=S_SYSTEM, choices=VIRTUAL_COMPUTE)
    # --- checkpoints ---
    checkpoint_every: int = knob(0, "in syncs; 0 disables", section=S_CHECKPOINT, ge=0)
    resume: str | None = knob(None, "a run or checkpoint directory to resume from (into a new --out)",
                              section=S_CHECKPOINT)
    checksums: bool = knob(False, "record a CRC of θ and of the anchor per unit after every sync (for tests)",
                           section=S_CHECKPOINT)

    # ------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.shards * self.replicas

    def progress_total(self) -> tuple[int, str]:
        """What the progress file counts up to, and in what: the budget's seconds, or the steps."""
        return (int(self.time_budget), "s") if self.time_budget else (self.steps, "step")

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **_renamed(changes))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """A config from a dict such as a config.json; old field names (`RENAMED`) are read as the new ones."""
        d = _renamed(d)
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
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

        First every field's declared type and bounds (`knob`), then the rules that join fields.
        `world_size` is the process count imposed from outside (torchrun's WORLD_SIZE), if any.
        """

        def bad(name: str, allowed: str) -> None:
            raise ConfigError(f"{name}={getattr(self, name)!r} is not allowed: {allowed}")

        hints = _hints()
        for f in fields(self):
            k = knob_of(f)
            if k.checked_by is None and not k.admits(getattr(self, f.name), hints[f.name]):
                bad(f.name, k.allowed(hints[f.name]))

        from edit_lab.penalty_config import PenaltyConfig, PenaltyValueError

        try:  # the detector's own check, so that the config refuses exactly what the detector would
            PenaltyConfig.of(self).validate()
        except PenaltyValueError as e:
            bad("penalty_" + e.field, e.allowed)
        if len(self.betas) != 2 or not all(_is_number(b) and 0.0 <= b < 1.0 for b in self.betas):
            bad("betas", "two numbers in [0, 1)")
        size = SIZES[self.model]
        if self.seq_len > size.max_seq_len:
            bad("seq_len", f"at most {size.max_seq_len} for model {self.model!r}")
        for name in ("corrupt_replica", "spike_replica"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not -1 <= v < self.replicas:
                bad(name, f"-1 (none) or a replica index in 0..{self.replicas - 1}")
        if isinstance(self.fault_rank, bool) or not isinstance(self.fault_rank, int) or not (
                -1 <= self.fault_rank < self.world_size):
            bad("fault_rank", f"-1 (none) or a rank in 0..{self.world_size - 1}")
        if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < self.replicas
                   for r in self.straggler_replicas):
            bad("straggler_replicas", f"replica indices in 0..{self.replicas - 1}")
        if self.straggler_rule is not None:
            from edit_lab.hooks import straggler_problem  # no torch: the rule is called on a few inputs here

            if (why := straggler_problem(self.straggler_rule)) is not None:
                first = next((ln.strip() for ln in self.straggler_rule.splitlines() if ln.strip()), "")
                raise ConfigError(f"straggler_rule={first[:80]!r} is not allowed: {why}")
        if self.outer_step_rule is not None:
            self._check_outer_step_rule()
        if self.sync_group_rule is not None:
            from edit_lab.hooks import (
                sync_groups_problem,  # no torch: the rule is called for every rank of the mesh here
            )

            timed = bool(self.time_budget) or capabilities(self.method).time_triggered
            if (why := sync_groups_problem(self.sync_group_rule, self.shards, self.replicas, timed)) is not None:
                first = next((ln.strip() for ln in str(self.sync_group_rule).splitlines() if ln.strip()), "")
                raise ConfigError(f"sync_group_rule={first[:80]!r} is not allowed: {why}")
        n_units = 1 + size.n_layers
        if self.sync_schedule_rule is not None:
            self._check_sync_schedule_rule(n_units)
        if len(set(self.spike_units)) != len(self.spike_units) or not all(
                isinstance(u, int) and not isinstance(u, bool) and 0 <= u < n_units for u in self.spike_units):
            bad("spike_units", f"distinct unit indices in 0..{n_units - 1} (0 is the root unit), or () for all")
        if self.backend == "nccl" and self.device == "cpu":
            bad("backend", "gloo or auto with device='cpu' (NCCL moves only GPU tensors)")
        if self.data is not None:
            from edit_lab.corpus import check_corpus_file

            problem = check_corpus_file(self.data, self.seq_len)
            if problem:
                bad("data", problem)
        if self.resume is not None and not Path(self.resume).is_dir():
            bad("resume", "an existing run or checkpoint directory")
        if self.time_budget and self.resume is not None:
            bad("time_budget", "0 when resuming: a resumed run trains up to `steps`")
        if self.fault_rank >= 0 and not self.time_budget and self.fault_step >= self.steps:
            bad("fault_step", f"a step in 0..{self.steps - 1} (steps={self.steps}), or the fault never happens")
        if world_size is not None and world_size != self.world_size:
            raise ConfigError(
                f"shards×replicas={self.shards}×{self.replicas}={self.world_size} does not match the "
                f"launcher's world size {world_size}: set --shards/--replicas so that their product is {world_size}"
            )
        caps = capabilities(self.method)  # the registry's: no torch
        if self.spike_replica >= 0 and self.spike_step < self.warmup_steps and caps.is_local_sgd:
            # the anchors are created from each replica's own θ at step W: a spike before that would give
            # the replicas different anchors, and no sync could ever bring them together again
            bad("spike_step", f"a step >= warmup_steps={self.warmup_steps} (after warm-up) for method {self.method!r}")
        if self.checkpoint_every and not caps.checkpointable:
            bad("checkpoint_every", "0 with method co2: the mean of CO2's last round is always in flight (it "
                "lands at the next boundary), so there is no moment where the whole state is in hand to checkpoint")
        if self.sync_period > self.timeout_s / 2 and caps.time_triggered:
            # a replica that has finished waits in a meeting until the others' timers expire: up to one
            # period plus a step, which must fit in the collective timeout with room to spare
            bad("sync_period", f"at most timeout_s/2 = {self.timeout_s / 2:g} s (raise timeout_s for longer "
                "A-EDiT periods): a finished replica waits up to one period in a meeting")
        if self.grad_all_reduce_rule is not None:
            self._check_grad_all_reduce_rule()
        if self.aedit_schedule is not None:
            self._check_aedit_schedule(bad)
        if self.method == "streaming_diloco":
            self._check_streaming(bad, n_units)
        if self.fragment_schedule_rule is not None:
            self._check_fragment_schedule_rule()
        if caps.quorum:
            self._check_quorum(bad)
        elif self.backup_m:
            bad("backup_m", f"0 with method={self.method!r}: only {', '.join(m for m in METHODS if capabilities(m).quorum)}"
                " drops late replicas")
        if self.wire_format != "none" and not caps.is_local_sgd:
            bad("wire_format", f"none with method={self.method!r}: only the local-SGD methods "
                f"({', '.join(m for m in METHODS if capabilities(m).is_local_sgd)}) send pseudo-gradients")
        if self.error_feedback and self.wire_format == "none":
            bad("error_feedback", "false with wire_format='none': float32 rounds nothing away to feed back")
        self._check_sparseloco(bad)
        if self.clock == "virtual":
            self._check_virtual(bad)
        elif self.virtual_compute != "real":
            bad("virtual_compute", "real with clock='wall' (charged is a mode of the virtual clock)")
        if self.device == "cuda" or self.backend == "nccl":
            import torch

            if not torch.cuda.is_available():
                name = "device" if self.device == "cuda" else "backend"
                bad(name, "auto or cpu/gloo here: no CUDA device is visible on this machine")
        return self

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

    @property
    def quorum_m(self) -> int:
        """How many replicas' gradients a step of backup workers averages: `backup_m`, or R - 1 when it is 0."""
        return self.backup_m or self.replicas - 1

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
        """A reader's fragment schedule (edit_lab.hooks): streaming_diloco only; probed on the run's steps with its
        W, H, P and τ (no torch), after `_check_streaming` has accepted those."""
        first = next((ln.strip() for ln in str(self.fragment_schedule_rule).splitlines() if ln.strip()), "")
        if self.method != "streaming_diloco":
            raise ConfigError(f"fragment_schedule_rule={first[:80]!r} is not allowed with method={self.method!r}: "
                              f"the rule says which fragment lands when in streaming_diloco only")
        from edit_lab.hooks import fragment_schedule_problem

        steps = None if self.time_budget else self.steps
        if (why := fragment_schedule_problem(self.fragment_schedule_rule, self.warmup_steps, self.sync_interval,
                                             self.fragments, self.fragment_sync_delay, steps)) is not None:
            raise ConfigError(f"fragment_schedule_rule={first[:80]!r} is not allowed: {why}")

    def _check_outer_step_rule(self) -> None:
        """A reader's outer step (edit_lab.hooks): only where OuterState's SGD is the outer step; probed on tensors."""
        first = next((ln.strip() for ln in self.outer_step_rule.splitlines() if ln.strip()), "")
        methods = ("diloco", "edit", "aedit", "streaming_diloco")
        if self.method not in methods:
            why = {"sync": "sync has no outer step", "post_local_sgd": "post_local_sgd averages the parameters "
                   "themselves, no outer optimizer (lr 1, no momentum: diloco with outer_lr=1, outer_momentum=0 "
                   "runs a rule there)", "co2": "co2's outer step is its own, on a one-round-stale mean with "
                   "co2_* settings"}.get(self.method, f"{self.method} has no outer optimizer")
            raise ConfigError(f"outer_step_rule={first[:80]!r} is not allowed with method={self.method!r}: the rule "
                              f"replaces the outer optimizer of {', '.join(methods)} only; {why}")
        from edit_lab.hooks import outer_step_problem  # imports torch: the rule is called on a few small tensors

        if (why := outer_step_problem(self.outer_step_rule, self.outer_lr, self.outer_momentum)) is not None:
            raise ConfigError(f"outer_step_rule={first[:80]!r} is not allowed: {why}")

    def _check_sync_schedule_rule(self, n_units: int) -> None:
        """A reader's layer-wise sync order (edit_lab.hooks): EDiT and A-EDiT only; called once for the model's
        unit count (no torch)."""
        first = next((ln.strip() for ln in str(self.sync_schedule_rule).splitlines() if ln.strip()), "")
        methods = [m for m in METHODS if capabilities(m).layerwise_sync]
        if self.method not in methods:
            raise ConfigError(f"sync_schedule_rule={first[:80]!r} is not allowed with method={self.method!r}: the "
                              f"rule orders the layer-wise sync inside the forward of {', '.join(methods)} only")
        from edit_lab.hooks import sync_schedule_problem

        if (why := sync_schedule_problem(self.sync_schedule_rule, n_units)) is not None:
            raise ConfigError(f"sync_schedule_rule={first[:80]!r} is not allowed: {why}")

    def _check_grad_all_reduce_rule(self) -> None:
        """A reader's gradient all-reduce (edit_lab.hooks): only where a gradient all-reduce over the sync group
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
        from edit_lab.hooks import grad_all_reduce_problem  # imports torch: the rule runs on small stand-in tensors

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


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and not math.isnan(v)


def _renamed(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with old field names (`RENAMED`) replaced by the new ones; both at once is refused."""
    d = dict(d)
    for old, new in RENAMED.items():
        if old in d:
            if new in d:
                raise ConfigError(f"{old} and {new} are the same field ({old} is its old name): give only {new}")
            d[new] = d.pop(old)
    return d


def knob_of(f: dataclasses.Field) -> Knob:
    """The `Knob` a RunConfig field was declared with."""
    return f.metadata["knob"]


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig)


def field_hint(name: str) -> Any:
    """The resolved type of field `name` (`int`, `float`, `str | None`, `tuple[int, ...]`…)."""
    return _hints()[name]


def knobs() -> dict[str, Knob]:
    """Field name -> its declaration, in field order."""
    return {f.name: knob_of(f) for f in fields(RunConfig)}


def field_help() -> dict[str, str]:
    """Each field's help text (the CLI's `--help` and the docs show it)."""
    return {name: k.help for name, k in knobs().items()}


# ---------------------------------------------------------------- ready-made configurations
# The lab panel's starting point, next to the config it fills in: the CLI, the example generator and the
# benchmarks build the very configuration the panels start from without importing ipywidgets or plotly.
#: seconds an A-EDiT run from the lab panel trains when no budget was chosen (edit-method.md §12)
AEDIT_PANEL_BUDGET_S = 6.0


def default_lab_config() -> RunConfig:
    """A 2×2 run of the nano model that takes seconds on a laptop: enough steps for a few syncs.

    The penalty keeps RunConfig's defaults, measured on this very configuration (edit-method.md D10).
    """
    return RunConfig(method="sync", shards=2, replicas=2, steps=24, model="nano", seq_len=32, batch_size=4,
                     eval_every=0, eval_batches=2, warmup_steps=4, sync_interval=4, progress=False)


def panel_time_budget(method: str, time_budget: float) -> float:
    """The time budget a panel run of `method` starts from: A-EDiT never 0.

    A-EDiT's promise is about time: with a step count its fast replica finishes its steps early and idles
    until the slow one is done, which shows the opposite of the method. So choosing A-EDiT in the panel
    with no budget sets one (AEDIT_PANEL_BUDGET_S); any other method, or a budget already chosen, is kept.
    """
    if method == "aedit" and time_budget <= 0:
        return AEDIT_PANEL_BUDGET_S
    return time_budget
