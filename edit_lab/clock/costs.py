"""What one replica's step and one collective cost: the numbers the preview simulator runs on.

The simulator (`edit_lab.clock.sim`) knows nothing about tensors; it only knows how long things take. These
numbers come from a real run (`calibrate`, measured on this very machine) or are typed in (a GPU
cluster one cannot rent for a lecture: `Costs.uniform`). They describe *one replica*: every replica
runs the same model on the same hardware, and a straggler is the config's business, not the costs'.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Costs:
    """Seconds and bytes of one replica's work and of one sync-group collective.

    Compute (per step, one replica; the shard group's all-gathers and reduce-scatters that compute
    does not hide are folded into it, as a replica's ranks always move together):
    - `fwd_s[u]`, `bwd_s[u]`: the forward and backward segment of unit u (0 is the root unit);
    - `other_s`: the rest of a step: data, gradient clipping, the inner optimizer, bookkeeping;
    - `own_compute_s`: the replica's own kernels in one step (forward, backward, inner optimizer; no
      collective, no wait): what a consistent straggler stretches (`stragglers.OWN_COMPUTE_KINDS`);
      0 for typed-in costs, where it is taken as `step_s` (no shard-group transfer is folded in, and
      `other_s` is what the virtual clock charges to the optimizer span, which a straggler stretches);
    - `clock_s`: one replica-clock exchange (time budgets, A-EDiT's timer; a shard-group all-reduce);
    - `eval_s`: one validation; `outer_step_s[u]`: one unit's outer step; `shard_exchange_s`: a small
      shard-group exchange inside a sync (EDiT's norms, each unit's clip norm).

    Sync group (across replicas): a collective issued by every replica completes
    `sync_latency_s + bytes / sync_Bps` after the last replica issued it, one at a time (the backend
    serves a group's collectives in order). `unit_bytes[u]` is one rank's shard of unit u in float32:
    what one rank sends when the replica syncs that unit. The config's simulated link
    (`link_latency_ms`, `link_bandwidth_mb_s`) comes on top, as in `comm.LinkModel`.

    `source` says where the numbers come from (a run directory, or a sentence for typed-in ones);
    `model`, `shards`, `batch_size`, `seq_len`: what they were measured on (a prediction for another
    batch size scales the compute linearly; another model or mesh needs its own calibration).
    """

    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    other_s: float
    unit_bytes: tuple[int, ...]
    sync_latency_s: float
    sync_Bps: float = 0.0  # 0: bytes cost nothing beyond the latency
    clock_s: float = 0.0
    eval_s: float = 0.0
    outer_step_s: tuple[float, ...] = ()
    shard_exchange_s: float = 0.0
    own_compute_s: float = 0.0
    model: str | None = None
    shards: int | None = None
    batch_size: int | None = None
    seq_len: int | None = None
    source: str = "typed in"
    state_bytes: int = 0  # what a donor hands a replacement (survival, edit-method.md §16); 0: `joiner_state_bytes`

    def __post_init__(self) -> None:
        n = len(self.fwd_s)
        if n == 0 or len(self.bwd_s) != n or len(self.unit_bytes) != n:
            raise ValueError(f"Costs: fwd_s, bwd_s and unit_bytes need one value per unit (got {len(self.fwd_s)}, "
                             f"{len(self.bwd_s)}, {len(self.unit_bytes)})")
        if not self.outer_step_s:
            object.__setattr__(self, "outer_step_s", (0.0,) * n)
        bad = [f.name for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), float)
               and getattr(self, f.name) < 0]
        if bad or min(self.fwd_s + self.bwd_s + self.outer_step_s) < 0:
            raise ValueError(f"Costs: times must be >= 0 ({', '.join(bad) or 'a per-unit time'} is not)")

    @property
    def units(self) -> int:
        return len(self.fwd_s)

    @property
    def compute_s(self) -> float:
        """Forward plus backward of one step (with the shard group's exposed transfers folded in)."""
        return sum(self.fwd_s) + sum(self.bwd_s)

    @property
    def stretched_s(self) -> float:
        """What a consistent straggler's pause is a multiple of: the step's own compute (see `own_compute_s`).

        The simulator and the virtual clock both pause (k − 1) × this, so they agree on every cost."""
        return self.own_compute_s or self.step_s

    @property
    def step_s(self) -> float:
        """One plain local step: no sync, no waiting, no pause."""
        return self.compute_s + self.other_s

    @property
    def model_bytes(self) -> int:
        """One rank's shard of the whole model (what a whole-model sync sends per rank)."""
        return sum(self.unit_bytes)

    def collective_s(self, nbytes: int) -> float:
        """Backend time of one sync-group collective, from the moment the last replica issued it."""
        return self.sync_latency_s + (nbytes / self.sync_Bps if self.sync_Bps > 0 else 0.0)

    def joiner_state_bytes(self, local_sgd: bool) -> int:
        """The bytes of a donor's state for a replacement: `state_bytes` as measured (a survival run's `transfer`
        record), else an estimate, the model's bytes once per copy it holds (θ or the anchor, the inner optimizer's
        two moments, a local-SGD method's outer momentum) without the few kilobytes of framing."""
        return self.state_bytes or (4 if local_sgd else 3) * self.model_bytes

    def scaled(self, compute: float) -> "Costs":
        """The same costs with every compute time (not the collectives) multiplied by `compute`."""
        k = float(compute)
        return dataclasses.replace(self, fwd_s=tuple(k * x for x in self.fwd_s), bwd_s=tuple(k * x for x in self.bwd_s),
                                   other_s=k * self.other_s, outer_step_s=tuple(k * x for x in self.outer_step_s),
                                   own_compute_s=k * self.own_compute_s)

    @classmethod
    def uniform(cls, units: int, fwd_ms: float, bwd_ms: float, other_ms: float, unit_mb: float,
                latency_ms: float, bandwidth_gbps: float, outer_step_ms: float = 0.0, clock_ms: float = 0.0,
                source: str = "typed in") -> "Costs":
        """Typed-in costs: `units` equal units (ms per unit forward/backward), `unit_mb` megabytes per unit
        and rank, a sync group with `latency_ms` per collective and `bandwidth_gbps` gigabytes per second."""
        return cls(fwd_s=(fwd_ms / 1e3,) * units, bwd_s=(bwd_ms / 1e3,) * units, other_s=other_ms / 1e3,
                   unit_bytes=(int(unit_mb * 1e6),) * units, sync_latency_s=latency_ms / 1e3,
                   sync_Bps=bandwidth_gbps * 1e9, outer_step_s=(outer_step_ms / 1e3,) * units,
                   clock_s=clock_ms / 1e3, source=source)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Costs":
        d = dict(d)
        for name in ("fwd_s", "bwd_s", "unit_bytes", "outer_step_s"):
            if name in d:
                d[name] = tuple(d[name])
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)
