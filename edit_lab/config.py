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

from edit_lab.config_checks import ConfigError, RunConfigChecks
from edit_lab.knob import Knob
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
S_SURVIVE = "surviving a replica's death"
SECTIONS = (S_RUN, S_DATA, S_INNER, S_SCHEDULE, S_OUTER, S_PENALTY, S_AEDIT, S_STREAM, S_LINK, S_TROUBLE,
            S_SYSTEM, S_CHECKPOINT, S_SURVIVE)
#: What survival does with the sync a death interrupted (edit_lab/core/survival.py)
SURVIVE_ON_FAILURE = ("retry", "discard")
#: How a whole replica fails on purpose (`fault_replica`)
REPLICA_FAULT_KINDS = ("kill", "hang")


def knob(default: Any, help: str, *, section: str, ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None, choices: Sequence[str] = (), finite: bool = False,
         nan_ok: bool = False, checked_by: str | None = None) -> Any:
    """A RunConfig field with its section, help text and bounds next to it (see `Knob`)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; one of {SECTIONS}")
    return dataclasses.field(default=default, metadata={"knob": Knob(section, help, ge, gt, le, lt, tuple(choices),
                                                                      finite, nan_ok, checked_by)})


@dataclass
class RunConfig(RunConfigChecks):
    """Everything that defines a run. Field names are the CLI flags (`--sync-interval` for `sync_interval`)."""

    # --- what to run ---
    method: str = knob("sync", "the training method", section=S_RUN, choices=METHODS)
    shards: int = knob(2, "S: ranks holding one replica (shard group size)", section=S_RUN, ge=1)
    replicas: int = knob(2, "R: sync group size", section=S_RUN, ge=1)
    sync_group_rule: str | None = knob(
        None, "the source of a Python function fn(rank, shards, replicas) -> list of ranks, the sync group of that "
        "rank, from which every rank builds the sync groups instead of the mesh's own (edit_lab.rules; None: the "
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
        "and the warm-up of the local-SGD methods (edit_lab.rules; None: the built-in all-reduce)", section=S_RUN)
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
        "prefetch's (edit_lab.rules; None: prefetch's)", section=S_SCHEDULE)
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
        "aedit; outer_nesterov is then the rule's to decide; edit_lab.rules; None: the library's SGD)",
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
        "every rank instead of the softmax weights (edit_lab.rules; None: the library's softmax_weights)",
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
        "edit_lab.rules; None: the library's fragment_landing)", section=S_STREAM)
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
        "that step (0: none), run on every rank after every step, on top of the stragglers above (edit_lab.rules; "
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
    # --- surviving a replica's death (edit-method.md §16; sync, diloco and edit) ---
    survive: bool = knob(False, "train through a replica's death: the survivors re-form the sync group as a new "
                         "view and go on (false: one death ends the run)", section=S_SURVIVE)
    survive_min_replicas: int = knob(1, "the fewest live replicas to go on with; below it the run ends with the "
                                     "reason", section=S_SURVIVE, ge=1)
    survive_on_failure: str = knob("retry", "the sync a death interrupted: retry (rolled back, then retried by the "
                                   "survivors with their local steps kept) or discard (rolled back, the round "
                                   "dropped: every survivor restarts from the anchor, as torchft's DiLoCo)",
                                   section=S_SURVIVE, choices=SURVIVE_ON_FAILURE)
    rejoin_step: int = knob(-1, "a replacement for a dead replica joins at the first sync at or after this step, "
                            "from a live peer's state (-1: no replacement)", section=S_SURVIVE, ge=-1)
    fault_replica: int = knob(-1, "replica whose every rank fails at fault_replica_step on purpose (-1: none)",
                              section=S_SURVIVE, ge=-1)
    fault_replica_step: int = knob(0, "step at whose start that replica fails", section=S_SURVIVE, ge=0)
    fault_replica_kind: str = knob("kill", "kill (SIGKILL: its peers fail within ms) or hang (its peers wait "
                                   "timeout_s)", section=S_SURVIVE, choices=REPLICA_FAULT_KINDS)
    fault_replica_unit: int = knob(-1, "-1: the replica fails at the step's start; u: inside that step's forward, "
                                   "right before unit u (edit: in the middle of its layer-wise sync)",
                                   section=S_SURVIVE, ge=-1)

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
            from edit_lab.rules import straggler_problem  # no torch: the rule is called on a few inputs here

            if (why := straggler_problem(self.straggler_rule)) is not None:
                first = next((ln.strip() for ln in self.straggler_rule.splitlines() if ln.strip()), "")
                raise ConfigError(f"straggler_rule={first[:80]!r} is not allowed: {why}")
        if self.outer_step_rule is not None:
            self._check_outer_step_rule()
        if self.sync_group_rule is not None:
            from edit_lab.rules import (
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
        self._check_survival(bad)
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

    @property
    def quorum_m(self) -> int:
        """How many replicas' gradients a step of backup workers averages: `backup_m`, or R - 1 when it is 0."""
        return self.backup_m or self.replicas - 1


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
