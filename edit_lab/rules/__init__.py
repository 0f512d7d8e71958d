"""A reader's own rule, run by every rank of a real run: a function written in a notebook, shipped as source.

Why source and not the function itself: the ranks are fresh processes, and a function defined in a notebook
cell lives in the kernel's `__main__`, which no other process can import or unpickle. Its source text is
plain data: it travels in the `RunConfig` (so `config.json` records what ran), every rank compiles it once,
and a rule that cannot work is refused before any process starts, like every other knob.

These rules are pluggable:
- the penalty's **weighting** (`RunConfig.rules.weighting`, notebook 05's exercise), which replaces
  `penalty.softmax_weights` at every sync of EDiT and A-EDiT, on every rank. The rule is called with the
  library's own inputs (the norms, per step when `penalty_weight_per_step`, the temperature T and the anomaly
  decisions), so a rule equal to the softmax gives the library's run;
- a **straggler** kind (`RunConfig.rules.straggler`, notebook 06's exercise): `fn(step, replica, compute_s)`,
  the seconds that replica pauses after that step, whose own compute took `compute_s` (0: no pause). Every
  rank calls it after every step (`stragglers.StragglerModel.delay`, reason "rule"), on top of the consistent
  and random stragglers; on the virtual clock `compute_s` is the calibrated compute of a step.
- the **sync group** (`RunConfig.rules.sync_group`, notebook 03's exercise): `fn(rank, shards, replicas) -> list
  of ranks`, the sync group of that rank. Every rank calls it for every rank of the mesh (`sync_groups`) and
  creates every group it gives, in the same order, instead of `mesh.Mesh`'s columns. Refused before launch
  (`sync_groups_problem`) when it raises, answers anything but whole ranks of the mesh, or its groups are not a
  partition into groups of `replicas` ranks on which every member agrees (the collectives would hang). A valid
  partition that is the wrong one runs: it averages shards that hold different parameters. Only with A-EDiT or
  a time budget, where the replicas agree over the sync group on when to sync or stop, a partition whose groups
  do not hold one rank of every replica is refused too (its groups could take different decisions and hang).
- the **outer step** (`RunConfig.rules.outer_step`, notebook 02's exercise): `fn(anchor, delta_bar, buf, lr,
  momentum) -> (new_anchor, new_buf)`, called by every rank for its shard of each unit at every sync instead of
  torch's SGD (`outer.OuterState.step`; diloco, edit and aedit only), with copies of the anchor shard, the
  averaged pseudo-gradient Δ̄ and the momentum buffer (zeros before the first step), and the configured
  `outer_lr` and `outer_momentum`. What it returns becomes the anchor and the momentum buffer (checkpointed as
  the optimizer's), so a rule equal to torch's Nesterov SGD gives the library's run. `torch` is provided to it
  as `math` is; it is probed on small tensors before any process starts.
- the **gradient all-reduce** (`RunConfig.rules.grad_all_reduce`, notebook 01's exercise): `fn(grad, reduce_scatter,
  all_gather) -> tensor`, called by every rank for each unit's gradient shard, at every step in which the method
  all-reduces gradients over the sync group (sync, and the warm-up of the local-SGD methods), instead of the
  built-in all-reduce (`methods.base.Method.all_reduce_grads_over_sync_group`). `grad` is the rank's flat shard,
  zero-padded to a multiple of the replicas R; `reduce_scatter(t)` returns this rank's slice of the **mean** over
  the sync group (as `Comm.reduce_scatter`), `all_gather(t)` every member's `t` concatenated; both are the run's
  real collectives, recorded as `grad_all_reduce` events of the unit. What it returns (grad's shape) becomes
  the rank's gradient, so `all_gather(reduce_scatter(grad))` gives the built-in run up to float rounding. Probed
  before any process starts on R stand-in replicas (threads with in-process collectives, `StandInGroup`): one
  that fails or answers the wrong shape is refused; one that answers wrong numbers runs.
- the **layer-wise sync order** (`RunConfig.rules.sync_schedule`, notebook 04's exercise): `fn(n_units) -> list of
  (kind, unit)`, kind "issue" (start the unit's `sync_reduce`), "wait" (`finish`: wait for it, step the anchor,
  θ ← a), "all_gather" or "compute", one EDiT/A-EDiT sync step's forward on every rank. Every rank runs the
  issues and waits listed between ("all_gather", l−1) and ("all_gather", l) in unit l's pre-forward, in the
  listed order, instead of `prefetch`'s (`sync_schedule_plan`); "compute" is ignored (a unit computes right
  after its all-gather). Refused before launch when it cannot run without a hang or a crash (a unit not issued
  and waited for exactly once, a wait before its issue, all-gathers not 0..n−1 in order, an issue or wait after
  the last all-gather, an unknown kind, fn raising or answering a non-list). A unit gathered before its wait
  runs (its wait moves to a later unit's pre-forward; the shard is reset in place): the run shows the damage.
- the **fragment schedule** (`RunConfig.rules.fragment_schedule`, notebook 09's exercise): `fn(step, warmup,
  interval, fragments) -> fragment or None`, the fragment whose outer step lands at the start of `step`;
  streaming_diloco only. Every rank calls it with the run's W, H and P instead of `protocol.fragment_landing`
  (at step + τ, to send that fragment's pseudo-gradient τ = `fragment_sync_delay` steps before it lands), and so
  does the simulator's twin; a pure function of the step and the config, so every rank takes the same decision.
  Refused before launch (`fragment_schedule_problem`, probed on the run's steps) when it raises, answers anything
  but None or a fragment 0..P−1, answers differently when asked twice, lands a fragment at or before step W + τ
  (it would leave before the anchors exist), lands two fragments fewer than τ steps apart (the second would
  leave while the first travels: Streaming DiLoCo has one fragment in flight), or leaves a fragment that never
  lands. A valid schedule that is not the library's runs: the run shows which fragments landed when.
- the **donor** of a replacement (`RunConfig.rules.donor`, notebook 10's exercise): `fn(members, joined) -> replica
  id`, the live member that hands a replacement its state, with survive=True only. Every live rank calls it with
  the view that admits the replacement (`core.survival.Survival.change_to`) instead of the lowest member that did
  not join (`Rules.donor`'s default); the one it names writes its state onto the store, the replacement reads
  it. Refused before launch (`donor_problem`, probed on every view of the run's replicas with one joiner) when it
  raises, names anything but a member that did not join, or answers differently when asked twice (the live ranks
  would disagree, and nobody, or two, would hand the state over).

`rules.py` gathers them: `Rules.from_config(cfg)`, one rank's object holding every rule, each the library's own
function unless the config gives a source; the core calls it without asking which (the simulator builds it too).
One module per rule, named after its `RunConfig` field (`weighting_rule.py` for `penalty_weighting_rule`, ...), and
`source.py`, which reads a rule's source from a function and compiles it on a rank; every name is re-exported here,
so `from edit_lab.rules import ...` and `rules.<name>` reach all of them. Named for what it holds; "hooks" is the
`Method` interface (`core/methods/base.py`: the moments of a step where methods differ).
"""

from __future__ import annotations

from edit_lab.rules.source import RuleError, load_rule, rule_source
from edit_lab.rules.weighting_rule import WEIGHTING_SIGNATURE, Weighting, weighting, weighting_problem
from edit_lab.rules.straggler_rule import STRAGGLER_SIGNATURE, Straggler, straggler, straggler_problem
from edit_lab.rules.grad_all_reduce_rule import (
    GRAD_ALL_REDUCE_SIGNATURE,
    StandInGroup,
    grad_all_reduce,
    grad_all_reduce_problem,
    on_stand_ins,
)
from edit_lab.rules.sync_group_rule import (
    SYNC_GROUP_SIGNATURE,
    one_rank_per_replica,
    sync_group,
    sync_groups,
    sync_groups_problem,
)
from edit_lab.rules.outer_step_rule import OUTER_STEP_SIGNATURE, outer_step, outer_step_problem
from edit_lab.rules.sync_schedule_rule import (
    SCHEDULE_KINDS,
    SYNC_SCHEDULE_SIGNATURE,
    sync_schedule_plan,
    sync_schedule_problem,
)
from edit_lab.rules.fragment_schedule_rule import (
    FRAGMENT_SCHEDULE_SIGNATURE,
    FragmentSchedule,
    fragment_schedule,
    fragment_schedule_horizon,
    fragment_schedule_of,
    fragment_schedule_problem,
)
from edit_lab.rules.donor_rule import DONOR_SIGNATURE, Donor, donor, donor_of, donor_problem
from edit_lab.rules.rules import Rules, is_builtin

__all__ = [
    "DONOR_SIGNATURE", "Donor", "Rules", "is_builtin", "donor", "donor_of", "donor_problem",
    "FRAGMENT_SCHEDULE_SIGNATURE", "FragmentSchedule", "GRAD_ALL_REDUCE_SIGNATURE", "OUTER_STEP_SIGNATURE",
    "RuleError", "SCHEDULE_KINDS", "STRAGGLER_SIGNATURE", "SYNC_GROUP_SIGNATURE", "SYNC_SCHEDULE_SIGNATURE",
    "StandInGroup", "Straggler", "WEIGHTING_SIGNATURE", "Weighting", "fragment_schedule", "fragment_schedule_horizon",
    "fragment_schedule_of", "fragment_schedule_problem", "grad_all_reduce", "grad_all_reduce_problem", "load_rule",
    "on_stand_ins", "one_rank_per_replica", "outer_step", "outer_step_problem", "rule_source", "straggler",
    "straggler_problem", "sync_group", "sync_groups", "sync_groups_problem", "sync_schedule_plan",
    "sync_schedule_problem", "weighting", "weighting_problem",
]
