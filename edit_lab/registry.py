"""The training methods by name: their order and their capabilities, without loading torch.

This is the one place where a method's name and what the rest of the lab may ask of it are stated. The
config's checks (`RunConfig.validate`), the fault injector, the tables and the figures read a method's
capabilities here instead of testing its name, and the `Method` classes of `edit_lab/core/methods/` take
theirs from here too (`Method.__init_subclass__`), so each fact is written once. It sits beside
`config.py`, not inside `edit_lab/core/methods/`, because importing anything in that package runs its
`__init__`, which imports every method class and with them torch: a refused configuration must be
answered in a fraction of a second, and `methods/` depends on `config.py`, not the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What a method does that the rest of the lab has to know; the defaults are synchronous training's."""

    is_local_sgd: bool = False  # local steps between syncs after W synchronous warm-up steps, anchors from step W
    has_penalty: bool = False  # the pseudo-gradient penalty (anomaly filter, weighting, clip) may exclude a replica
    time_triggered: bool = False  # syncs when a wall-clock timer expires (A-EDiT), not every τ steps
    layerwise_sync: bool = False  # syncs unit by unit inside the forward, with optional prefetch (RunConfig.schedule.prefetch)
    checkpointable: bool = True  # reaches moments where the whole state is in hand, so `checkpoint_every` can work
    # each step averages the gradients of the first `backup_m` replicas ready for their backward; the late ones
    # abandon the step (backup workers), and a straggler's pause is spent before the backward, not after the step
    quorum: bool = False
    outer_sgd: bool = False  # an outer SGD steps the anchors (OuterState): outer_lr, outer_momentum, outer_step_rule
    stale_outer: bool = False  # its own outer step, on the replicas' one-round-stale mean (CO2: the co2_* knobs)
    fragmented: bool = False  # syncs the model in fragments on staggered schedules (fragments, fragment_* knobs)
    survivable: bool = False  # its sync can be rolled back and retried by fewer replicas (survive; core/survival.py)


#: Every method the config accepts, in the course's order (the notebooks, `--help`, the tables).
REGISTRY: dict[str, Capabilities] = {
    "sync": Capabilities(survivable=True),
    # Chen et al. 2016, "Revisiting Distributed Synchronous SGD": synchronous SGD that drops the slowest replicas
    "backup": Capabilities(quorum=True),
    "post_local_sgd": Capabilities(is_local_sgd=True),
    "diloco": Capabilities(is_local_sgd=True, outer_sgd=True, survivable=True),
    # the mean of CO2's last round is always in flight (it lands at the next boundary)
    "co2": Capabilities(is_local_sgd=True, checkpointable=False, stale_outer=True),
    "edit": Capabilities(is_local_sgd=True, has_penalty=True, layerwise_sync=True, outer_sgd=True,
                         survivable=True),
    "aedit": Capabilities(is_local_sgd=True, has_penalty=True, layerwise_sync=True, time_triggered=True,
                          outer_sgd=True),
    # Douillard et al. 2025: fragments synced on staggered schedules, each transfer overlapping inner steps
    "streaming_diloco": Capabilities(is_local_sgd=True, outer_sgd=True, fragmented=True),
}

METHODS: tuple[str, ...] = tuple(REGISTRY)
#: How a pseudo-gradient may travel (`RunConfig.wire`; core/wire.py packs and unpacks each).
WIRE_FORMATS: tuple[str, ...] = ("none", "bf16", "int8", "int4", "sparseloco")


def capabilities(name: str) -> Capabilities:
    """The capabilities of method `name`: `capabilities("co2").checkpointable`. An unknown name: KeyError."""
    return REGISTRY[name]
