"""The one place every collective goes through.

Why one module: a reader should be able to list every byte the training moves by reading one file,
and the timeline needs each collective's issue time, completion time, size and group. It is also
where the simulated slow link of the sync group lives, so that EDiT's overlap can be shown on a
laptop exactly as it would behave on a real network.

Collectives are issued from the main thread, in the same order on every rank of a group; never from
callbacks (the only callback records a completion time).

The device rule: every tensor handed to a collective lives on `Comm.device`, the model's device (the
one the groups' backend moves: NCCL accepts only CUDA tensors). Code that builds a tensor to exchange
(a clock, a stop flag, a meeting's step counts, norms, decisions) creates it with
`torch.tensor(..., device=comm.device)` and reads the result back with `.item()`, `.tolist()` or
`.cpu()`. Every collective checks the rule (a device comparison, always on) and names the collective
and the tensor's device when it is broken, so a CPU tensor fails on a CPU-only machine too (in the
test that makes the default device differ from the comm device) instead of only under NCCL.

The counting rule, one for every collective (`wire.ring_bytes`): an event's `bytes` is what this rank sends on a
ring of the group's R members: an all-reduce of S bytes 2(R − 1)/R·S, a reduce-scatter (R − 1)/R·S of its whole
input, an all-gather (R − 1)·p for p bytes per member. The link model charges those bytes, the virtual clock and
the simulator charge the same, and the tables sum them. A pseudo-gradient in int8 / int4 is a quantised
reduce-scatter (an all-to-all of encoded chunks) then an all-gather of the reduced chunks, recorded as one event:
2(R − 1) encoded chunks, the all-reduce of the encoded tensor. In sparseloco it is an all-gather of every rank's
sparse payload, (R − 1)·p.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from edit_lab.core.mesh import Mesh
from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS, ring_bytes
from edit_lab.records.events import EventLog


@dataclass
class LinkModel:
    """A simulated sync-group link: latency plus bytes/bandwidth, one transfer at a time.

    A delayed collective completes no earlier than its deadline
        start = max(real completion, end of the previous transfer on the link)
        deadline = start + latency + bytes / bandwidth
    The real completion of a collective is the same moment on every participant (within
    microseconds, as they all leave it together), and every participant sees the same sequence of
    transfers, so every participant computes the same deadline without exchanging a message.
    `bytes` is what the event records: what this rank sends on a ring (`wire.ring_bytes`, the module's rule).
    """

    latency_s: float = 0.0
    bandwidth_Bps: float = 0.0  # 0 -> unlimited
    free_at: float = 0.0

    @classmethod
    def of(cls, latency_ms: float, bandwidth_mb_s: float) -> "LinkModel":
        """The link in RunConfig's units: `link_latency_ms` (ms), `link_bandwidth_mb_s` (MB/s = 10⁶ bytes/s)."""
        return cls(latency_ms / 1e3, bandwidth_mb_s * 1e6)

    @property
    def active(self) -> bool:
        return self.latency_s > 0 or self.bandwidth_Bps > 0

    def transfer_time(self, nbytes: int) -> float:
        return self.latency_s + (nbytes / self.bandwidth_Bps if self.bandwidth_Bps > 0 else 0.0)

    def deadline(self, done: float, nbytes: int) -> float:
        start = max(done, self.free_at)
        self.free_at = start + self.transfer_time(nbytes)
        return self.free_at


@dataclass
class Handle:
    """An issued collective; `wait()` blocks until it (and its simulated link time) is complete."""

    comm: "Comm"
    work: Any
    kind: str
    group: str
    unit: int | None
    nbytes: int
    t0: float
    step: int
    done_at: float | None = None
    deadline: float | None = None  # end of the simulated link transfer, sync group only
    finished: bool = False
    result: Any = None
    after: Any = None  # called once the collective is complete (copies a CPU-staged result back to the GPU)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _mark_done(self, _fut: Any = None) -> None:
        with self._lock:
            if self.done_at is None:
                self.done_at = self.comm.clock.now()

    def wait(self) -> Any:
        if not self.finished:
            self.comm._complete(self, waited=True)
        return self.result


class Comm:
    """Issues collectives on the shard group, the sync group or the world, and records them."""

    def __init__(self, mesh: Mesh, log: EventLog, link: LinkModel | None = None, stage_to_cpu: bool = False, *,
                 device: torch.device | str, wire: str = "none") -> None:
        """`device`: the model's device, where every tensor handed to a collective must live (the module's
        device rule). `stage_to_cpu`: run collectives on CPU copies of GPU tensors — for several ranks
        sharing one GPU, which NCCL refuses, over gloo."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # a tensor's device always names its index
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.stage_to_cpu = stage_to_cpu
        self.mesh = mesh
        self.log = log
        self.clock = log.clock
        self.link = link or LinkModel()
        self._pending_sync: list[Handle] = []  # sync-group handles not yet assigned a link deadline
        self.backend: Any = dist  # torch.distributed; the virtual clock's in-process fabric (virtual.py)
        # the pseudo-gradients' wire format (edit_lab.core.wire, RunConfig.wire.format), which
        # `compressed_all_reduce` carries
        self.wire = wire

    # ------------------------------------------------------------------ groups
    def group(self, name: str) -> dist.ProcessGroup | None:
        if name == "shard":
            return self.mesh.shard_group
        if name == "sync":
            return self.mesh.sync_group
        if name == "world":
            return None
        raise ValueError(f"unknown group {name!r}")

    def size(self, name: str) -> int:
        return {"shard": self.mesh.shards, "sync": self.mesh.sync_size, "world": self.mesh.world_size}[name]

    # ------------------------------------------------------------------ collectives
    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, group: str, kind: str = "all_gather",
                   unit: int | None = None, async_op: bool = False) -> Handle:
        """out (size·n) <- concatenation of every member's inp (n)."""
        self._check_device("all_gather", kind, group, out, inp)
        if self.size(group) == 1:
            out.copy_(inp)
            return self._local(out)
        (o, i), after = self._staged(out, inp)
        work = self.backend.all_gather_into_tensor(o, i, group=self.group(group), async_op=True)
        return self._issue(work, kind, group, unit, out.numel() * out.element_size(), out, async_op, after,
                           op="all_gather")

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, group: str, kind: str = "reduce_scatter",
                       unit: int | None = None, async_op: bool = False, mean: bool = True) -> Handle:
        """out (n) <- this member's slice of the sum (or mean) over members of inp (size·n)."""
        self._check_device("reduce_scatter", kind, group, out, inp)
        n = self.size(group)
        if n == 1:
            out.copy_(inp)
            return self._local(out)
        if mean:
            inp = inp / n  # divide first: the result is then independent of the summation grouping scale
        (o, i), after = self._staged(out, inp)
        work = self.backend.reduce_scatter_tensor(o, i, op=dist.ReduceOp.SUM, group=self.group(group), async_op=True)
        return self._issue(work, kind, group, unit, inp.numel() * inp.element_size(), out, async_op, after,
                           op="reduce_scatter")

    def all_reduce(self, t: torch.Tensor, group: str, kind: str = "all_reduce", unit: int | None = None,
                   async_op: bool = False) -> Handle:
        """t <- sum over members of t (in place), in float32 (or t's dtype) whatever the wire format: a
        pseudo-gradient says `compressed_all_reduce` at its call site (refused here in a compressed run)."""
        self._check_device("all_reduce", kind, group, t)
        if self.wire != "none" and group == "sync" and kind in PSEUDO_GRADIENT_KINDS:
            raise RuntimeError(f"collective {kind!r}: a pseudo-gradient in wire format {self.wire!r} travels by "
                               "comm.compressed_all_reduce")
        return self._all_reduce(t, group, kind, unit, async_op)

    def _all_reduce(self, t: torch.Tensor, group: str, kind: str, unit: int | None, async_op: bool) -> Handle:
        if self.size(group) == 1:
            return self._local(t)
        (tt,), after = self._staged(t)
        work = self.backend.all_reduce(tt, op=dist.ReduceOp.SUM, group=self.group(group), async_op=True)
        return self._issue(work, kind, group, unit, t.numel() * t.element_size(), t, async_op, after,
                           op="all_reduce")

    def compressed_all_reduce(self, t: torch.Tensor, group: str, kind: str, unit: int | None = None,
                              async_op: bool = False) -> Handle:
        """The sum of `t` over the group, carried in the wire format the Comm was built with (`self.wire`,
        edit_lab.core.wire): float32 as `all_reduce`; bf16 as an all-reduce of the bf16 tensor; int8 / int4 as a
        quantised reduce-scatter then all-gather (`_quantised_work`); sparseloco as an all-gather of every rank's
        sparse payload, decoded and summed in member order (`wire.sparse_sum`). The event records the compressed
        bytes by the ring rule, and the link charges them."""
        from edit_lab.core import wire

        self._check_device("compressed_all_reduce", kind, group, t)
        if self.wire == "none" or self.size(group) == 1:
            return self._all_reduce(t, group, kind, unit, async_op)
        n = t.numel()
        if self.wire == "bf16":
            low = t.detach().reshape(-1).to(torch.bfloat16)
            h = self.all_reduce_raw(low, group, kind, unit)
            h.after = self._chain(h.after, lambda: t.copy_(low.view_as(t).to(t.dtype)))
        elif wire.sparse(self.wire) is not None:
            fmt, R = self.wire, self.size(group)
            payload = wire.encode_sparse(t.detach().reshape(-1), fmt)
            if self.stage_to_cpu and payload.is_cuda:
                payload = payload.cpu()
            gathered = torch.empty(R * payload.numel(), dtype=torch.uint8, device=payload.device)
            work = self.backend.all_gather_into_tensor(gathered, payload, group=self.group(group), async_op=True)
            h = self._issue(work, kind, group, unit, gathered.numel(), t, True,
                            lambda: t.copy_(wire.sparse_sum(gathered.view(R, -1), n, fmt).view_as(t).to(t.dtype)),
                            op="all_gather")
        else:
            fmt = self.wire
            payload = wire.encode_chunks(t.detach().reshape(-1), fmt, self.size(group))
            if self.stage_to_cpu and payload.is_cuda:
                payload = payload.cpu()
            work, reduced = self._quantised_work(payload, fmt, group)
            h = self._issue(work, kind, group, unit, payload.numel(), t, True,
                            lambda: t.copy_(wire.decode_chunks(reduced, n, fmt).view_as(t).to(t.dtype)),
                            op="all_reduce")
        h.result = t
        if not async_op:
            self._complete(h, waited=False)
        return h

    def _quantised_work(self, payload: torch.Tensor, fmt: str, group: str) -> tuple[Any, torch.Tensor]:
        """The integer formats' exchange on torch.distributed: (work, the reduced chunks once waited).

        Member i owns chunk i. An all-to-all (`all_to_all_single`, which gloo runs on CPU tensors) hands each
        owner the R encoded contributions of its chunk, (R − 1)/R of the encoded tensor out of every rank,
        what a ring reduce-scatter sends; the owner decodes them, sums in float32 in member order and encodes
        the sum (`wire.reduce_chunk`); an all-gather of the reduced chunks, issued when the work is waited
        (collectives are never issued from callbacks), hands everyone every chunk."""
        work = _QuantisedReduce(self.backend, payload, fmt, self.group(group))
        return work, work.reduced

    def all_reduce_raw(self, t: torch.Tensor, group: str, kind: str, unit: int | None) -> Handle:
        """An asynchronous all-reduce of `t` as it is, never re-routed (the wire format's own transfer)."""
        (tt,), after = self._staged(t)
        work = self.backend.all_reduce(tt, op=dist.ReduceOp.SUM, group=self.group(group), async_op=True)
        return self._issue(work, kind, group, unit, t.numel() * t.element_size(), t, True, after, op="all_reduce")

    @staticmethod
    def _chain(first: Any, then: Any) -> Any:
        if first is None:
            return then

        def both() -> None:
            first()
            then()
        return both

    def quorum(self, step: int, m: int, pause_s: float, timeout_s: float) -> Any:
        """Backup workers: is this replica among the first m ready for `step`'s backward, after spinning through
        `pause_s`? Not a collective: the rendezvous store answers (core/quorum.py), so nobody waits in it."""
        from edit_lab.core.quorum import default_store, store_rendezvous

        return store_rendezvous(default_store(), step, self.mesh.replica, self.mesh.shard == 0, m, pause_s,
                                timeout_s)

    def broadcast(self, t: torch.Tensor, src: int, group: str = "world", kind: str = "broadcast") -> torch.Tensor:
        """t <- t of global rank `src` (in place, blocking). For setting up a run (the common start time):
        it is not recorded, because it runs before the common clock starts."""
        self._check_device("broadcast", kind, group, t)
        if self.size(group) == 1:
            return t
        (tt,), after = self._staged(t)
        self.backend.broadcast(tt, src=src, group=self.group(group))
        if after is not None:
            after()
        return t

    def barrier(self) -> None:
        """Every rank of the world reaches this point before any goes on (a checkpoint's files are all
        written). Not recorded: it moves no data."""
        if self.mesh.world_size > 1:
            self.backend.barrier()

    # ------------------------------------------------------------------ the device rule
    def _check_device(self, op: str, kind: str, group: str, *tensors: torch.Tensor) -> None:
        """Refuse a tensor that is not on `self.device`: NCCL would (only CUDA tensors), gloo on a CPU-only
        machine would not, so the rule is checked here, the same on every machine."""
        for t in tensors:
            if t.device != self.device:
                raise RuntimeError(f"collective {kind!r} ({op} over the {group} group) was handed a tensor on "
                                   f"{t.device}, but collective tensors live on comm.device = {self.device}: "
                                   f"create it with device=comm.device")

    # ------------------------------------------------------------------ internals
    def _staged(self, out: torch.Tensor, *inputs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], Any]:
        """(tensors to hand to the backend, completion callback): CPU copies when staging a GPU tensor.

        The first tensor is the one the collective writes; its CPU copy is copied back on completion.
        """
        if not (self.stage_to_cpu and out.is_cuda):
            return (out, *inputs), None
        cpu_out = out.detach().cpu()
        cpu_in = tuple(t.detach().cpu() for t in inputs)
        return (cpu_out, *cpu_in), lambda: out.copy_(cpu_out)

    def _local(self, result: Any) -> Handle:
        h = Handle(self, None, "local", "local", None, 0, self.clock.now(), self.log.step, finished=True)
        h.result = result
        return h

    def _issue(self, work: Any, kind: str, group: str, unit: int | None, nbytes: int, result: Any,
               async_op: bool, after: Any = None, *, op: str) -> Handle:
        """`nbytes`: the collective's whole tensor (`wire.ring_bytes`), recorded as what this rank sends on a ring."""
        nbytes = ring_bytes(op, nbytes, self.size(group))
        h = Handle(self, work, kind, group, unit, nbytes, self.clock.now(), self.log.step)
        h.result = result
        h.after = after
        try:  # not every backend/collective has a future; then completion is known only at wait()
            work.get_future().add_done_callback(h._mark_done)
        except RuntimeError:
            pass
        if group == "sync" and self.link.active:
            self._pending_sync.append(h)
        if not async_op:
            self._complete(h, waited=False)
        return h

    def _deadline(self, h: Handle) -> float:
        """Assign link deadlines in issue order, so every participant sees the same sequence of transfers."""
        while h.deadline is None:
            first = self._pending_sync.pop(0)
            first.work.wait()
            first._mark_done()
            first.deadline = self.link.deadline(first.done_at, first.nbytes)
        return h.deadline

    def _finish(self, h: Handle) -> float:
        """Block until `h` is complete, its simulated link time included; the moment it completed."""
        h.work.wait()
        h._mark_done()
        if h.after is not None:
            h.after()
        end = h.done_at
        if h.group == "sync" and self.link.active:
            end = self._deadline(h)
            delay = end - self.clock.now()
            if delay > 0:
                time.sleep(delay)
        return end

    def _complete(self, h: Handle, waited: bool) -> None:
        """Wait for `h` (and its simulated link time) and record it.

        `exposed` is the time this rank could not compute because of it: the whole collective when it
        was blocking, only the wait when it was issued early. On a GPU the wait is measured on the
        compute stream with CUDA events (the host does not block on NCCL), on the CPU by the clock.
        """
        log = self.log
        w0 = log.mark()
        end = self._finish(h)
        w1 = log.mark()
        if not log.cuda:
            w1 = max(w1, end)
        h.finished = True
        log.add_span(h.kind, h.t0, end, unit=h.unit, nbytes=h.nbytes, group=h.group, step=h.step,
                     overlapped=waited, exposed_between=(w0 if waited else h.t0, w1))
        if waited:
            log.add_span("wait", w0, w1, unit=h.unit, group=h.group, step=log.step, on=h.kind)


class _QuantisedReduce:
    """The work of an int8 / int4 pseudo-gradient on torch.distributed (`Comm._quantised_work`): the all-to-all
    of encoded chunks in flight; `wait()` reduces this rank's chunk and all-gathers the reduced chunks into
    `reduced` (rows in owner order)."""

    def __init__(self, backend: Any, payload: torch.Tensor, fmt: str, group: Any) -> None:
        self.backend, self.fmt, self.group = backend, fmt, group
        self.mine = torch.empty_like(payload)
        self.first = backend.all_to_all_single(self.mine, payload, group=group, async_op=True)
        self.reduced = torch.empty_like(payload)
        self.done = False

    def wait(self) -> None:
        if self.done:
            return
        from edit_lab.core import wire

        self.first.wait()
        own = wire.reduce_chunk(self.mine, self.fmt)
        self.backend.all_gather_into_tensor(self.reduced.view(-1), own, group=self.group, async_op=False)
        self.done = True

    def get_future(self) -> Any:
        raise RuntimeError("two collectives: completion is known at wait()")
