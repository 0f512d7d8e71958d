"""What a replica's death and a replacement's join cost in time: the constants and the failure rule both the virtual
clock (`survive_virtual.py`) and the preview simulator (`sim/survive.py`) charge, in one place and without torch.

The constants are the means measured on real processes (docs/benchmarks.md, *Surviving a death*); the rules are what
gloo and the launcher do (docs/edit-method.md §16): a collective with a killed peer fails `DETECT_KILL_S` after the
death (or the member's arrival, if later), with a hung one `timeout_s` after the member's arrival; the launcher
publishes the view without the dead replica `CONFIRM_KILL_S` after a kill, `timeout_s` + `settle_s` after a hang.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A survivor's collective with a killed peer fails this long after the death (gloo: 5–16 ms measured).
DETECT_KILL_S = 0.010
#: The launcher sees a killed replica's exit, fences it and publishes the new view this long after the death (40–90 ms).
CONFIRM_KILL_S = 0.060
#: Building a view's sync group (a new gloo group's rendezvous on the store: 10–40 ms).
VIEW_CHANGE_S = 0.025


def settle_s(timeout_s: float) -> float:
    """The launcher's wait before it calls a silent replica hung (`survive_launch.watch`)."""
    return max(1.0, timeout_s / 4)


def published_after_s(kind: str, timeout_s: float) -> float:
    """How long after a death the launcher publishes the view without the dead replica (and starts its replacement)."""
    return timeout_s + settle_s(timeout_s) if kind == "hang" else CONFIRM_KILL_S


@dataclass
class Death:
    """One dead rank: when, how, and the view published without it (collectives of older views fail)."""

    rank: int
    t: float
    kind: str
    view: int
    timeout_s: float
    replaced: bool = False

    def breaks(self, gkey: tuple) -> bool:
        """Does a collective of group `gkey` fail because of this death? A view's group older than `view`; any
        other group of the dead rank until a replacement took its place."""
        if len(gkey) == 4 and gkey[2] == "view":
            return gkey[3] < self.view
        return not self.replaced

    def failed_at(self, arrival: float) -> float:
        """When a member that arrived at `arrival` learns that the collective failed."""
        if self.kind == "kill":
            return max(arrival, self.t) + DETECT_KILL_S
        return max(arrival + self.timeout_s, self.t)

    def error(self, kind: str, group: str) -> str:
        if self.kind == "kill":
            return (f"[virtual clock] {kind} of group {group}: Connection closed by peer "
                    f"(rank {self.rank} died at {self.t:.6f} s)")
        return f"[virtual clock] {kind} of group {group}: Timed out after {self.timeout_s:g} s"
