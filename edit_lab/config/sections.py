"""The sections of a `RunConfig`: one frozen dataclass per group of knobs, each handed to the component it drives.

A run has about a hundred knobs; a newcomer finds the penalty's in `cfg.penalty`, the outer step's in `cfg.outer`, the
wire format's in `cfg.wire`, as torchtitan's `JobConfig` groups its own. Each field is declared with `knob(...)`:
its default (from edit-method.md), its help, its bounds, and its `flag`, the flat name the command line and the flat
constructor use (`--outer-lr` / `RunConfig(outer_lr=...)` for `cfg.outer.lr`; the field's own name where none is
given). The penalty's section is `PenaltyConfig` (edit_lab/config/penalty.py), beside its detector. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from edit_lab.config.knob import knob
from edit_lab.registry import WIRE_FORMATS
from edit_lab.sizes import SIZES

INNER_OPTIMIZERS = ("adamw", "sgd")
BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
CORRUPT_MODES = ("random", "shuffle", "corpus")
FAULT_KINDS = ("raise", "kill", "hang", "nan")  # edit_lab.train.faults implements them
CLOCKS = ("wall", "virtual")  # edit_lab.clock.virtual: every rank in one process, on a clock a cost model advances
#: The virtual clock's compute: "real" runs the model; "charged" (time-only) only charges its cost (edit_lab/clock/time_only.py)
VIRTUAL_COMPUTE = ("real", "charged")
#: What survival does with the sync a death interrupted (edit_lab/core/survival.py)
SURVIVE_ON_FAILURE = ("retry", "discard")
#: How a whole replica fails on purpose (`fault_replica`)
REPLICA_FAULT_KINDS = ("kill", "hang")


@dataclass(frozen=True)
class DataConfig:
    """The model and the data every rank reads: which model, how many tokens a step, how often to validate."""

    TITLE: ClassVar[str] = 'model and data'
    model: str = knob('tiny',
            'model size (edit_lab.model.SIZES)', choices=tuple(SIZES))
    seq_len: int = knob(64,
            "tokens (bytes) per sequence, at most the model's max_seq_len", ge=1)
    batch_size: int = knob(8,
            "sequences per rank per step (a replica's batch is shards × batch_size)", ge=1)
    corpus: str | None = knob(None,
            "a text file; None: Python's own reference docs (pydoc_data)", flag='data')
    eval_every: int = knob(20,
            'steps between validation losses (0: only at the end; ignored with a time budget)', ge=0)
    eval_every_s: float = knob(0.0,
            'seconds between timed validations of the agreed model (0: none)', ge=0.0, finite=True)
    eval_batches: int = knob(4,
            'held-out batches per validation', ge=1)


@dataclass(frozen=True)
class InnerConfig:
    """The optimizer of every local step (the inner optimizer of DiLoCo and EDiT; `sync`'s only one)."""

    TITLE: ClassVar[str] = 'inner optimizer'
    optimizer: str = knob('adamw',
            'the optimizer of every local step', flag='inner_optimizer', choices=INNER_OPTIMIZERS)
    lr: float = knob(0.003,
            'inner learning rate', gt=0.0, finite=True)
    weight_decay: float = knob(0.0,
            'inner weight decay', ge=0.0, finite=True)
    betas: tuple[float, float] = knob((0.9, 0.95),
            "AdamW's betas, two numbers in [0, 1)")
    grad_clip: float = knob(1.0,
            'largest norm of the inner gradient (0: no clipping)', ge=0.0)


@dataclass(frozen=True)
class ScheduleConfig:
    """When the local-SGD methods talk: W synchronous warm-up steps, then a sync every τ steps (EDiT's
    layer-wise sync with its prefetch, and where the anchors live between syncs)."""

    TITLE: ClassVar[str] = 'local SGD schedule'
    warmup_steps: int = knob(10,
            'W: fully synchronous steps before local steps begin', ge=0)
    sync_interval: int = knob(10,
            'tau: inner steps between syncs', ge=1)
    prefetch: bool = knob(True,
            "overlap unit l+1's sync with unit l's compute")
    cpu_offload: bool = knob(False,
            'keep anchor and outer momentum on the CPU between syncs')


@dataclass(frozen=True)
class OuterConfig:
    """The outer optimizer that steps the anchors with the averaged pseudo-gradient (SGD with momentum,
    edit-method.md §3), and CO2's own outer step."""

    TITLE: ClassVar[str] = 'outer optimizer'
    lr: float = knob(0.7,
            'outer learning rate of diloco, edit and aedit (co2 has its own: co2_outer_lr)',
            flag='outer_lr', gt=0.0, finite=True)
    momentum: float = knob(0.8,
            'its momentum (co2: co2_outer_momentum)', flag='outer_momentum', ge=0.0, lt=1.0)
    nesterov: bool = knob(True,
            'Nesterov (true) or heavy-ball (false) outer momentum; co2 is always heavy-ball', flag='outer_nesterov')
    co2_lr: float = knob(1.0,
            "CO2's outer learning rate (the authors' default 1.0)", flag='co2_outer_lr', gt=0.0, finite=True)
    co2_momentum: float = knob(0.5,
            "CO2's heavy-ball outer momentum μ (the authors' default 0.5)", flag='co2_outer_momentum', ge=0.0, lt=1.0)
    co2_staleness_penalty: float = knob(1.0,
            "λ: the pull of the anchor towards the replicas' one-round-stale mean (a − x̄) enters the outer momentum "
            "divided by λ (1: no penalty, the authors' default)", gt=0.0, finite=True)
    co2_momentum_clip: float = knob(0.0,
            "c: clamp every outer-momentum value to [−c, c] before the anchor moves (0: off, the authors' default)",
            ge=0.0, finite=True)


@dataclass(frozen=True)
class AEditConfig:
    """A-EDiT's timers: a sync every T_sync seconds of wall clock, skipped when a round is too short
    (edit-method.md §6), or a finished run's schedule replayed."""

    TITLE: ClassVar[str] = 'A-EDiT'
    sync_period: float = knob(1.0,
            'T_sync, seconds of wall clock between syncs (aedit: at most timeout_s/2)', gt=0.0, finite=True)
    min_sync_steps: int = knob(1,
            'N_min: fewer steps in a round over the sync group -> no sync, timers restart', ge=1)
    step_weighting: bool = knob(True,
            "mix each replica's share of the round's steps into its weight (on: measured, benchmarks/aedit_loss.py)")
    step_weight_mix: float = knob(0.5,
            'rho: how much of the weight is the step share', ge=0.0, le=1.0)
    schedule: str | None = knob(None,
            'an A-EDiT run directory whose schedule to replay instead of the timers: each replica meets at the steps '
            'it met there and stops where it stopped (None: the timers)', flag='aedit_schedule')


@dataclass(frozen=True)
class StreamingConfig:
    """Streaming DiLoCo (Douillard et al., 2025): the model in P fragments, each synced on its own
    offset, landing after a delay and mixed in with α."""

    TITLE: ClassVar[str] = 'Streaming DiLoCo'
    fragments: int = knob(2,
            'P: fragments of streaming_diloco, each a run of consecutive sync units; fragment p syncs every '
            "sync_interval steps, offset by p*sync_interval/P (at most the model's units; sync_interval a multiple of"
            ' P)', ge=1)
    fragment_sync_delay: int = knob(1,
            "tau (overlap): inner steps a fragment's pseudo-gradient travels before its outer step lands, below "
            "sync_interval/fragments (torchft's fragment_sync_delay)", ge=0)
    fragment_update_alpha: float = knob(0.5,
            "alpha: at a fragment's outer step theta <- anchor + alpha*(theta - anchor) with the new anchor, keeping "
            "alpha of the replica's whole deviation from it, not only of the steps trained while the fragment "
            "travelled (0: theta <- anchor; torchft's fragment_update_alpha and _merge_parameters)",
            ge=0.0, le=1.0)


@dataclass(frozen=True)
class WireConfig:
    """How pseudo-gradients travel over the sync group (edit_lab/core/wire.py): float32, bf16, int8, int4
    or SparseLoCo, with error feedback of what the format rounded away."""

    TITLE: ClassVar[str] = 'compressed pseudo-gradients'
    format: str = knob('none',
            'how pseudo-gradients travel over the sync group, every local-SGD method: none (float32), bf16 (an '
            'all-reduce in bf16), int8 or int4 (codes and a scale per 256 values, a quantised reduce-scatter then '
            'all-gather), sparseloco (SparseLoCo: per chunk the top-k values in 2 bits, an all-gather of every '
            "replica's sparse payload; needs error_feedback and outer_momentum 0; edit_lab/core/wire.py)",
            flag='wire_format', choices=WIRE_FORMATS)
    error_feedback: bool = knob(False,
            "keep what the wire format rounded away and add it to the next sync's pseudo-gradient (with wire_format "
            'other than none)')
    sparseloco_chunk: int = knob(4096,
            'sparseloco: values per chunk, a power of two from 2 to 65536 (an index costs log2 of it in bits; the '
            "authors' 4096)", ge=2, le=65536)
    sparseloco_topk: float = knob(0.015625,
            "sparseloco: the fraction of each chunk kept, k = round(chunk*topk) values, at least 1 (the authors' 64 "
            "of 4096; the paper's range 1-3 %)", gt=0.0, le=1.0)
    sparseloco_beta: float = knob(0.95,
            'sparseloco: decay of the error-feedback accumulator, e <- beta*e + delta before compressing (the '
            "authors' 0.95; it stands in for outer momentum)", ge=0.0, le=1.0)


@dataclass(frozen=True)
class StragglerConfig:
    """Slow replicas on purpose: consistent stragglers, random pauses, and backup workers' m."""

    TITLE: ClassVar[str] = 'stragglers and backup workers'
    replicas: tuple[int, ...] = knob((),
            'consistent stragglers: replica indices', flag='straggler_replicas')
    factor: float = knob(1.0,
            'their steps take k× as long', flag='straggler_factor', ge=1.0, finite=True)
    backup_m: int = knob(0,
            'backup: each step averages the gradients of the first m replicas to be ready and drops the rest (m of n '
            '= replicas; 0: replicas - 1)', ge=0)
    random_pause_prob: float = knob(0.0,
            'each step, each replica pauses with this probability', ge=0.0, le=1.0)
    random_pause_ms: float = knob(0.0,
            'length of such a pause, in milliseconds', ge=0.0, finite=True)


@dataclass(frozen=True)
class LinkConfig:
    """The simulated sync-group link (latency and bandwidth charged to every cross-replica collective)."""

    TITLE: ClassVar[str] = 'the simulated sync link'
    latency_ms: float = knob(0.0,
            'latency of the simulated sync-group link, in milliseconds (0 and bandwidth 0: no simulation)',
            flag='link_latency_ms', ge=0.0, finite=True)
    bandwidth_mb_s: float = knob(0.0,
            'bandwidth of the simulated sync-group link, in megabytes per second (0: unlimited)',
            flag='link_bandwidth_mb_s', ge=0.0)


@dataclass(frozen=True)
class TroubleConfig:
    """Trouble on purpose, to teach the penalty and failure handling: corrupted data, a parameter spike,
    a failing rank."""

    TITLE: ClassVar[str] = 'trouble on purpose (teaching the penalty and failure handling)'
    corrupt_replica: int = knob(-1,
            'replica fed corrupted data, -1 for none')
    corrupt_from_step: int = knob(0,
            'first step of corrupted data', ge=0)
    corrupt_mode: str = knob('random',
            "random bytes; shuffle (each row's own bytes permuted); corpus (the byte ramp 0,1,…,255,0,…)",
            choices=CORRUPT_MODES)
    spike_replica: int = knob(-1,
            'replica whose parameters are scaled once, -1 for none')
    spike_step: int = knob(0,
            'step after whose optimizer step the spike happens', ge=0)
    spike_scale: float = knob(10.0,
            'θ ← scale·θ (inf or nan: a non-finite replica)', nan_ok=True)
    spike_units: tuple[int, ...] = knob((),
            'units scaled by the spike (0 root, 1.. blocks); empty: every unit')
    exclude: bool = knob(False,
            'for measuring detectors: the corrupted replica (from its first sync after corrupt_from_step) and the '
            'spiked one (at its sync after the spike) are left out whatever the detector says, a perfect detector '
            '(edit, aedit)', flag='exclude_trouble')
    fault_rank: int = knob(-1,
            'rank that fails on purpose, -1 for none')
    fault_step: int = knob(0,
            'step at whose start (after whose forward, for nan) it fails', ge=0)
    fault_kind: str = knob('raise',
            'raise, kill (SIGKILL itself), hang (peers hit timeout_s) or nan (its loss)', choices=FAULT_KINDS)
    fault_replica: int = knob(-1,
            "replica whose every rank fails at fault_replica_step on purpose (-1: none)", ge=-1)
    fault_replica_step: int = knob(0,
            "step at whose start that replica fails", ge=0)
    fault_replica_kind: str = knob("kill",
            "kill (SIGKILL: its peers fail within ms) or hang (its peers wait timeout_s)", choices=REPLICA_FAULT_KINDS)
    fault_replica_unit: int = knob(-1,
            "-1: the replica fails at the step's start; u: inside that step's forward, right before unit u (edit: in "
            "the middle of its layer-wise sync)", ge=-1)
    fault_replica_more: str = knob("",
            "more deaths after the first, as replica@step entries, e.g. '2@35,0@50' (a replica's k-th death strikes its "
            "k-th life; each replacement is due rejoin_step − fault_replica_step steps after its death; at a step's "
            "start, of fault_replica_kind; edit_lab/config/deaths.py)")
    fault_join_delay_s: float = knob(0.0,
            "a slow replacement: once admitted (its view published), it waits this long before it joins the view's "
            "group, as a process starved of cores would (real processes; 0: none)", ge=0.0, finite=True)


@dataclass(frozen=True)
class ClockConfig:
    """Which clock times the run: this machine's (wall), or the virtual clock's cost model
    (edit_lab/clock/virtual.py), with its costs and lanes."""

    TITLE: ClassVar[str] = 'the clock'
    kind: str = knob('wall',
            'wall: one process per rank, timed by this machine; virtual: every rank in this process, real numerics, '
            'time advanced by a cost model (same timeline on any machine)', flag='clock', choices=CLOCKS)
    costs: str | None = knob(None,
            "the virtual clock's costs: a run directory to calibrate from, or a costs JSON (None: the shipped example"
            " edit-straggler's calibration)", flag='clock_costs')
    lanes: int = knob(0,
            "the virtual clock's ranks computing at once, each on a core (0: one per core of this machine, at most "
            "4); the run's numbers do not depend on it", flag='virtual_lanes', ge=0)
    compute: str = knob('real',
            "the virtual clock's compute: real (the model's forward and backward) or charged (time only: the same "
            'timeline, no model, no data; losses are NaN)',
            flag='virtual_compute', choices=VIRTUAL_COMPUTE)


@dataclass(frozen=True)
class RuntimeConfig:
    """Processes, devices and checkpoints: where the run writes, how its ranks compute and talk, when it
    gives up on a collective, what it saves, and whether the survivors of a replica's death train on."""

    TITLE: ClassVar[str] = "processes, devices, checkpoints and surviving a replica's death"
    out: str | None = knob(None,
            'run directory (None: runs/<method>-<time>); one that already holds a run is refused unless overwritten '
            '(--overwrite)')
    backend: str = knob('auto',
            "collectives' backend (auto: nccl when every rank has a GPU of its own)", choices=BACKENDS)
    device: str = knob('auto',
            'where the ranks compute (auto: cuda when visible)', choices=DEVICES)
    threads: int = knob(1,
            'torch threads per worker', ge=1)
    bf16: bool = knob(False,
            'autocast compute to bfloat16 (GPUs); parameters and collectives stay float32')
    reshard_after_forward: bool = knob(True,
            "as FSDP: free a block's gathered params after its forward, all-gather again in the backward")
    timeout_s: float = knob(45.0,
            'a collective that waits longer ends the run (so a hung rank is found within a minute)',
            gt=0.0, finite=True)
    progress: bool = knob(True,
            'show a progress bar while the run trains')
    checkpoint_every: int = knob(0,
            'in syncs; 0 disables', ge=0)
    resume: str | None = knob(None,
            'a run or checkpoint directory to resume from (into a new --out)')
    checksums: bool = knob(False,
            'record a CRC of θ and of the anchor per unit after every sync (for tests)')
    survive: bool = knob(False,
            "train through a replica's death: the survivors re-form the sync group as a new view and go on (false: "
            "one death ends the run; edit-method.md §16)")
    survive_min_replicas: int = knob(1,
            "the fewest live replicas to go on with; below it the run ends with the reason", ge=1)
    survive_on_failure: str = knob("retry",
            "the sync a death interrupted: retry (rolled back, then retried by the survivors with their local steps "
            "kept) or discard (rolled back, the round dropped: every survivor restarts from the anchor, as torchft's "
            "DiLoCo)", choices=SURVIVE_ON_FAILURE)
    rejoin_step: int = knob(-1,
            "a replacement for a dead replica joins at the first sync at or after this step, from a live peer's "
            "state (-1: no replacement)", ge=-1)


@dataclass(frozen=True)
class RulesConfig:
    """The reader's rules: Python source, each replacing one function of the library on every rank
    (edit_lab/rules/, the notebooks' exercises). None: the library's own."""

    TITLE: ClassVar[str] = "the reader's rules (Python source, edit_lab/rules/)"
    sync_group: str | None = knob(None,
            'the source of a Python function fn(rank, shards, replicas) -> list of ranks, the sync group of that '
            "rank, from which every rank builds the sync groups instead of the mesh's own (edit_lab.rules; None: the "
            "mesh's, the same shard index in every replica)", flag='sync_group_rule')
    grad_all_reduce: str | None = knob(None,
            "the source of a Python function fn(grad, reduce_scatter, all_gather) -> this rank's gradient after the "
            "all-reduce, run on every rank for each unit's gradient shard instead of the built-in all-reduce over the"
            " sync group, given the run's real collectives (reduce_scatter: this rank's slice of the mean); sync, and"
            ' the warm-up of the local-SGD methods (edit_lab.rules; None: the built-in all-reduce)',
            flag='grad_all_reduce_rule')
    sync_schedule: str | None = knob(None,
            'the source of a Python function fn(n_units) -> list of (kind, unit) operations (issue, wait, all_gather,'
            " compute): the order of one EDiT/A-EDiT sync step's forward, run on every rank instead of prefetch's "
            "(edit_lab.rules; None: prefetch's)", flag='sync_schedule_rule')
    outer_step: str | None = knob(None,
            'the source of a Python function fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf), run '
            "on every rank's anchor shards instead of torch's SGD, with outer_lr and outer_momentum (diloco, edit, "
            "aedit; outer_nesterov is then the rule's to decide; edit_lab.rules; None: the library's SGD)",
            flag='outer_step_rule')
    weighting: str | None = knob(None,
            'the source of a Python function fn(norms, temperature, anomalous) -> one weight per replica, run on '
            "every rank instead of the softmax weights (edit_lab.rules; None: the library's softmax_weights)",
            flag='penalty_weighting_rule', checked_by='penalty')
    fragment_schedule: str | None = knob(None,
            'the source of a Python function fn(step, warmup, interval, fragments) -> the fragment whose outer step '
            'lands at the start of step, or None, run on every rank of streaming_diloco with W, H and P instead of '
            'the staggered schedule (each fragment leaves fragment_sync_delay steps before it lands; edit_lab.rules; '
            "None: the library's fragment_landing)", flag='fragment_schedule_rule')
    straggler: str | None = knob(None,
            'the source of a Python function fn(step, replica, compute_s) -> seconds that replica pauses after that '
            'step (0: none), run on every rank after every step, on top of the stragglers above (edit_lab.rules; '
            'None: no rule)', flag='straggler_rule')
    donor: str | None = knob(None,
            'the source of a Python function fn(members, joined) -> the replica id of the live member that hands a '
            'replacement its state, run on every live rank of a surviving run when a replacement joins (survive '
            "only; edit_lab.rules; None: the lowest member that did not join)", flag='donor_rule')
