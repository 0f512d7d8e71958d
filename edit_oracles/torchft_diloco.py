"""An independent DiLoCo and Streaming DiLoCo: torchft's own `DiLoCo` on plain, unsharded replicas.

What the lab's `diloco` and `streaming_diloco` must equal, to float rounding, on 1 shard × R replicas. Each
replica is a thread of this process holding the *full* model (no sharding, no engine, no `Comm`): a torchft
`Manager` (its own `ProcessGroupGloo` and TCP store, one `LighthouseServer` for the job), the same AdamW
and gradient clipping as the engine, the replica's batches, and `torchft.local_sgd.DiLoCo` wrapping the
inner optimizer with one Nesterov `SGD` per fragment. A fragment is an `nn.ModuleList` of the lab's sync
units (`Llama.units()`: the root unit, then the blocks), split as `protocol.fragment_units` splits them.

Where the two definitions meet (and where they do not):
- torchft has no warm-up: the lab runs with W = 0, its anchors at step 0 as torchft saves them at start;
- torchft's `sync_every` is the lab's H (`sync_interval`), split into P fragments of H/P steps; fragment p
  is prepared (Δ measured, all-reduce started) `fragment_sync_delay` steps before it is performed, and
  performed after H/P·(p + 1) + k·H inner steps: the lab's `fragment_landing`;
- the perform is: outer step on the restored anchor, the anchor saved, then θ ← lerp(anchor, θ_local, α)
  (`fragment_update_alpha`): the lab's `land`, in the same order;
- the lab ends with a closing sync (`finalize`); torchft has none: `DiLoCo.__exit__` only removes its hooks,
  a fragment prepared at the loop's last steps is never performed, and θ stays where the last inner step
  left it. So torchft defines no end state to compare with. With `closing=True` the oracle builds one from
  torchft's own per-fragment primitives, after the loop, in the order the lab's `finalize` documents: the
  fragment still in flight is performed (`perform_sync`, its pseudo-gradient the one prepared in the loop),
  then every other fragment that trained since its last outer step gets one more `start_quorum`,
  `prepare_sync`, `perform_sync` (one outer step each; none for the fragment just performed). What this
  checks is the arithmetic of those outer steps (the anchors and momenta after them), and which fragments
  the lab steps; the rule choosing them is the lab's, written out here. The end θ is not compared: torchft's
  perform leaves θ ← lerp(anchor, θ_local, α), where the lab ends every replica on its anchor (θ ← a).

Threads, not processes: a replica group of torchft is a `Manager`, and a few of them in one process start in
a fraction of a second, where fresh processes would each import torch first. Each thread records, after
every outer step, its parameters θ and every fragment's anchor (`original_parameters`).

A replica that leaves (`leave=(replica, step)`, DiLoCo's one fragment: the lab's `survive=True`, edit-method.md
§16). A thread cannot be SIGKILLed, so the leaver stops participating, with torchft's own calls, at the start of
its inner step `step` (steps 0 … step−1 trained): it aborts its process group (`ProcessGroupGloo.abort`, which drops
gloo's context: its sockets close, and a peer's collective with it fails with "Connection closed by peer", as after
a kill) and shuts its manager down (its heartbeats stop). Two episodes, by when that happens:

- `leave_in_quorum=True` (the lab's `discard`; step + 1 a sync step): first it joins the quorum of the coming sync
  (`Manager.start_quorum`, what DiLoCo's post-hook would do after the inner step `step`), then leaves before its
  all-reduce. The survivors, in that quorum with it, find their all-reduce failed, torchft's `Manager` turns that
  into `should_commit() == False` and `DiLoCo`'s perform restores every parameter to its anchor and skips the
  outer step: the round is discarded. Only the survivor whose ring neighbour was the leaver fails at once; the
  other may be waiting on that survivor, which moved on: torchft leaves a failed group open until the next quorum
  reconfigures it, so that one fails after gloo's timeout (5 s here; the lab closes the group at once, §16).
- `leave_in_quorum=False` (the lab's `retry`): it leaves inside the round, in no quorum. The survivors' next quorum
  (once its heartbeat has expired) is the two of them, the group is rebuilt for two, and the sync commits the mean
  of their two pseudo-gradients: nothing is discarded.

At the sync after the leave the survivors' quorum is the two of them once the leaver's heartbeat has expired (the
Lighthouse's `heartbeat_timeout_ms`, 1.5 s here; its `join_timeout_ms` is long, so a slow thread is waited for,
never left out of a quorum). Every sync attempt is recorded in `rounds` (its step, committed or not, the manager's
step, the quorum's size, θ, the anchors and the outer momenta after it).
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import torch
import torch.nn as nn

from edit_lab.config import RunConfig
from edit_lab.core.model import build_model
from edit_lab.protocol import fragment_units
from edit_lab.train.data import Corpus, load_corpus, train_batch
from edit_lab.train.trainer import make_optimizer

#: How long the oracle waits for all its replicas together before it says which did not finish.
JOIN_S = 120.0


def _state(model: nn.Module, diloco: Any) -> dict[str, Any]:
    """θ (the model's parameters), every fragment's anchor (`original_parameters`) and its outer optimizer's
    momentum buffers (by the fragment's parameter names; absent before its first outer step), copied."""
    momenta = []
    for f in diloco._fragments:
        state = f._outer_optimizer.state
        momenta.append({n: state[p]["momentum_buffer"].detach().clone()
                        for n, p in f._model_fragment.named_parameters() if "momentum_buffer" in state.get(p, {})})
    return {"theta": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "anchors": [{n: f.original_parameters[n].detach().clone() for n in f.original_parameters}
                        for f in diloco._fragments], "momenta": momenta}


def _closing_sync(manager: Any, diloco: Any, last: list[int], steps: int) -> dict[str, Any]:
    """The lab's closing sync from torchft's per-fragment primitives (module docstring): land what travels,
    then one outer step for each fragment that trained since its last one. Returns what it did."""
    frags = diloco._fragments
    landed = [i for i, f in enumerate(frags) if f._allreduce_work]  # prepared in the loop, not yet performed
    for i in landed:
        assert frags[i].perform_sync(), "the quorum committed"
        last[i] = steps
    synced = [i for i in range(len(frags)) if last[i] < steps]
    for i in synced:
        manager.start_quorum()
        frags[i].prepare_sync()
        assert frags[i].perform_sync(), "the quorum committed"
        last[i] = steps
    return {"landed": landed, "synced": synced}


def _leave(manager: Any, in_quorum: bool) -> None:
    """The leaver's part (module docstring): in the coming sync's quorum or not, then gone."""
    if in_quorum:
        manager.start_quorum()
    manager._pg.abort()  # torchft's ProcessGroupGloo: the gloo context dropped, its connections closed
    # (the caller's `finally` then shuts the manager down: its heartbeats stop)


def _replica(cfg: RunConfig, replica: int, lighthouse: str, fragments: int, closing: bool, out: dict[int, Any],
             errors: list[tuple[int, BaseException]], start: threading.Barrier, leave_at: int | None, leave_in_quorum: bool,
             min_size: int, pg_timeout: datetime.timedelta) -> None:
    try:
        import torch.distributed as dist
        from torchft import Manager
        from torchft.local_sgd import DiLoCo
        from torchft.process_group import ProcessGroupGloo

        torch.manual_seed(cfg.seed)
        corpus = Corpus.from_bytes(load_corpus(cfg.data.corpus))
        model = build_model(cfg.data.model, cfg.seed)
        units = model.units()
        frags = [nn.ModuleList([units[u] for u in us]) for us in fragment_units(len(units), fragments)]
        inner = make_optimizer(cfg, list(model.parameters()))
        outers = [torch.optim.SGD(f.parameters(), lr=cfg.outer.lr, momentum=cfg.outer.momentum,
                                  nesterov=cfg.outer.nesterov, fused=True) for f in frags]
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        timeout = datetime.timedelta(seconds=30)
        manager = Manager(pg=ProcessGroupGloo(timeout=pg_timeout), min_replica_size=min_size, use_async_quorum=False,
                          load_state_dict=lambda sd: (model.load_state_dict(sd["model"]),
                                                      inner.load_state_dict(sd["inner"])),
                          state_dict=lambda: {"model": model.state_dict(), "inner": inner.state_dict()},
                          replica_id=f"lab_{replica}", store_addr="127.0.0.1", store_port=store.port, rank=0,
                          world_size=1, lighthouse_addr=lighthouse, connect_timeout=timeout, quorum_timeout=timeout,
                          timeout=timeout, init_sync=False)
        snapshots: list[dict[str, Any]] = []
        rounds: list[dict[str, Any]] = []  # every sync attempt, committed or not
        losses: list[float] = []
        last = [0] * len(frags)  # each fragment's last outer step (after that many inner steps; W = 0)
        end: dict[str, Any] | None = None
        try:
            streaming = cfg.method == "streaming_diloco"  # diloco: one fragment, no overlap, no mixing
            with DiLoCo(manager, frags, inner, outers, sync_every=cfg.schedule.sync_interval,
                        fragment_sync_delay=cfg.streaming.fragment_sync_delay if streaming else 0,
                        fragment_update_alpha=cfg.streaming.fragment_update_alpha if streaming else 0.0,
                        backup_device=torch.device("cpu"), pin_memory=False) as diloco:
                start.wait(timeout=60)  # every manager heartbeats before the first quorum (a late one is no straggler)
                for step in range(cfg.steps):
                    if step == leave_at:
                        _leave(manager, leave_in_quorum)
                        break
                    before = manager.current_step()
                    inner.zero_grad(set_to_none=True)
                    x, y = train_batch(corpus, step, replica, 0, cfg.data.batch_size, cfg.data.seq_len, cfg.seed)
                    loss = model(x, y)
                    loss.backward()
                    losses.append(float(loss.detach()))
                    if cfg.inner.grad_clip > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.inner.grad_clip)
                    inner.step()  # DiLoCo's post-hook: prepare and perform fragments
                    committed = manager.current_step() != before  # an outer step committed after this step
                    if committed:
                        performed = before % len(frags)  # torchft's `_current_fragment` at the perform
                        last[performed] = step + 1
                        snapshots.append({"step": step + 1, "fragment": performed, **_state(model, diloco)})
                    if diloco._local_step == 0:  # a sync was attempted after this step (DiLoCo: every H steps)
                        rounds.append({"step": step + 1, "committed": committed, "manager_step": manager.current_step(),
                                       "participants": manager.num_participants(), **_state(model, diloco)})
            if closing:
                end = {**_closing_sync(manager, diloco, last, cfg.steps), **_state(model, diloco)}
        finally:
            manager.shutdown(wait=False)
        out[replica] = {"snapshots": snapshots, "rounds": rounds, "losses": losses,
                        "fragments": fragment_units(len(units), fragments), "closing": end}
    except BaseException as e:  # surfaced by the caller, naming the replica, with its traceback
        errors.append((replica, e))
        start.abort()  # the others waiting to start fail at once instead of after the barrier's 60 s


def torchft_diloco(cfg: RunConfig, fragments: int = 1, closing: bool = False,
                   leave: tuple[int, int] | None = None, leave_in_quorum: bool = True) -> list[dict[str, Any]]:
    """Run torchft's DiLoCo on cfg.replicas threads; per replica: {"snapshots": [{step, fragment, theta,
    anchors, momenta}], "rounds": [{step, committed, manager_step, participants, theta, anchors, momenta}],
    "fragments": [[unit, …] per fragment], "closing": None or {landed, synced, theta, anchors, momenta}},
    one snapshot after every committed outer step of the loop, one round after every sync attempt; with
    `closing`, the state after the closing sync built from torchft's primitives (module docstring), and which
    fragments it landed and synced.

    `leave=(replica, step)`: that replica leaves at the start of its inner step `step`; with `leave_in_quorum`
    (step + 1 a sync step) after joining the coming sync's quorum, so that the survivors' commit fails (module
    docstring). The survivors go on as a quorum of R − 1 (no closing sync: `closing` must be False); the
    leaver's entry holds what it recorded before it left.

    A replica that raises ends the oracle at once with a RuntimeError naming it (its error the cause, with its
    traceback), without waiting for the others, which may be stuck in a collective with it; replicas still running
    after JOIN_S raise a TimeoutError naming them."""
    from torchft.coordination import LighthouseServer

    leave_at, min_size, lh, pg_timeout = None, cfg.replicas, {}, datetime.timedelta(seconds=30)
    if leave is not None:
        # torchft does not close a failed collective's group: the survivor whose peer in the ring was the other
        # survivor (which failed first and moved on) waits out gloo's timeout, then both meet in the next quorum
        pg_timeout = datetime.timedelta(seconds=5)
        assert not closing, "no closing sync is built after a leave"
        assert fragments == 1 and (not leave_in_quorum or (leave[1] + 1) % cfg.schedule.sync_interval == 0), \
            "DiLoCo, and a sync step to leave from its quorum"
        leave_at, min_size = leave[1], cfg.replicas - 1
        lh = dict(join_timeout_ms=20_000, heartbeat_timeout_ms=1_500)  # wait for the slow, drop the silent
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=min_size, **lh)
    out: dict[int, Any] = {}
    errors: list[tuple[int, BaseException]] = []  # (replica, error), in the order they happened
    start = threading.Barrier(cfg.replicas, action=lambda: time.sleep(0.5))  # a few heartbeats from every manager
    threads = [threading.Thread(target=_replica, args=(cfg, r, lighthouse.address(), fragments, closing, out, errors,
                                                       start, leave_at if leave and r == leave[0] else None,
                                                       leave_in_quorum, min_size, pg_timeout), daemon=True)
               for r in range(cfg.replicas)]  # daemons: a replica left hung does not keep the process alive
    deadline = time.monotonic() + JOIN_S  # one deadline for all: a hung run ends in JOIN_S, not R × JOIN_S
    try:
        for t in threads:
            t.start()
        # until all are done, the first error (the others may be stuck in a collective with the failed one) or
        # the deadline
        while not errors and time.monotonic() < deadline and (alive := [t for t in threads if t.is_alive()]):
            alive[0].join(timeout=0.1)
    finally:
        lighthouse.shutdown()
    if errors:  # the first is the cause; the others' errors (a broken barrier, a failed collective) follow from it
        replica, error = errors[0]
        raise RuntimeError(f"torchft replica {replica} failed: {type(error).__name__}: {error}") from error
    hung = [r for r, t in enumerate(threads) if t.is_alive()]
    if hung:
        raise TimeoutError(f"torchft replicas {hung} did not finish within {JOIN_S:.0f} s (a collective or a quorum "
                           "that never formed); the threads are left behind")
    return [out[r] for r in range(cfg.replicas)]
