"""A view: which replicas sync together now, numbered, and the keys of the store it is agreed on.

Why views: with survival on (`RunConfig.runtime.survive`) the sync group is no longer fixed for the run. A replica (its S
shard ranks) is the unit of failure; the launcher confirms a death, fences the replica's processes and publishes
view N+1 without it, and later a view with its replacement. Replica ids are stable (the data stream, the penalty's
detectors and the records are keyed by them); the view number fences: each view's sync groups are new gloo
groups under the store prefix `view{N}/shard{s}`, so a process of an old view can never talk into a new one.

Torch-free: the launcher and every rank read and write the same keys of the launcher's TCPStore (anything with
`set`, `get`, `check`, `add`, `wait`), and the tests read the same JSON.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class Store(Protocol):
    """The part of torch.distributed's `Store` a view needs."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def add(self, key: str, amount: int) -> int: ...


@dataclass(frozen=True)
class View:
    """View `number`: the replicas of the sync group (sorted ids); who `joined` and who `died` to make it."""

    number: int
    members: tuple[int, ...]
    joined: tuple[int, ...] = ()
    died: tuple[int, ...] = ()
    reason: str = ""
    published_unix: float = field(default=0.0, compare=False)

    def index(self, replica: int) -> int:
        """This replica's place in the group (its rank in the view's sync groups)."""
        return self.members.index(replica)

    @property
    def leader(self) -> int:
        """The lowest live replica: it takes replica 0's duties (progress, the run directory's model)."""
        return self.members[0]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> "View":
        d = json.loads(text)
        return cls(d["number"], tuple(d["members"]), tuple(d["joined"]), tuple(d["died"]), d["reason"],
                   d["published_unix"])


# ---------------------------------------------------------------- the store's keys (one place)
LATEST = "view/latest"
START_UNIX = "survive/start_unix"
STARTED = "survive/started"


def view_key(n: int) -> str:
    return f"view/{n}"


def group_prefix(n: int, shard: int) -> str:
    """The store prefix of view `n`'s sync group of shard index `shard` (torchft's `_create_pg` builds the same)."""
    return f"view{n}/shard{shard}"


def alive_key(rank: int) -> str:
    """A rank's heartbeat: the Unix time it last started a step (the launcher tells a hung replica by it)."""
    return f"alive/rank{rank}"


def failed_key(n: int, rank: int) -> str:
    """A survivor reports here that a sync of view `n` failed (the launcher's witness of a hang)."""
    return f"failed/{n}/rank{rank}"


def join_request_key(n: int) -> str:
    """A member at a sync at or after `rejoin_step` asks for the replacements to join view `n`'s successor."""
    return f"join/request/{n}"


def ready_key(replica: int, life: int, shard: int) -> str:
    """A replacement's rank is built and waits for its view."""
    return f"join/ready/{replica}/{life}/{shard}"


def arrived_key(n: int, shard: int, replica: int) -> str:
    """A member of view `n` has reached the creation of its sync group of shard index `shard`
    (`Survival.make_group`: nobody starts gloo's rendezvous before every member is there)."""
    return f"view{n}/arrived/shard{shard}/{replica}"


def abandoned_key(replica: int) -> str:
    """The launcher no longer replaces `replica` (its replacements kept dying before they joined): the survivors
    stop asking for it (`Survival.joiners_due`)."""
    return f"join/abandoned/{replica}"


def state_key(n: int, shard: int) -> str:
    """The donor's state of shard index `shard` for the replacements of view `n`."""
    return f"join/state/{n}/shard{shard}"


def publish(store: Store, view: View) -> View:
    """Write view `view.number` and then point `LATEST` at it (readers follow `LATEST`, then read the view)."""
    view = View(view.number, view.members, view.joined, view.died, view.reason, time.time())
    store.set(view_key(view.number), view.to_json())
    store.set(LATEST, str(view.number))
    return view


def latest_number(store: Store) -> int:
    return int(store.get(LATEST)) if store.check([LATEST]) else -1


def read(store: Store, n: int) -> View:
    return View.from_json(store.get(view_key(n)))


def wait_newer(store: Store, than: int, timeout_s: float, poll_s: float = 0.002) -> View:
    """Block until a view newer than `than` is published; TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = latest_number(store)
        if n > than:
            return read(store, n)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no view after view {than} within {timeout_s:g} s")
        time.sleep(poll_s)


def describe(view: View) -> dict[str, Any]:
    """The record of a view (syncs.jsonl's `view` rows, survival.jsonl)."""
    return {"view": view.number, "members": list(view.members), "joined": list(view.joined),
            "died": list(view.died), "reason": view.reason}
