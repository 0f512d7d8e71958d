"""One colour per event kind, replica and method, shared by every figure.

Why one table: a reader who learnt on the timeline that orange is the shard-group all-gather should
find the same orange in the trace legend, the report and every notebook. Families share a hue so the
eye groups them: blues for compute, oranges for shard-group traffic, greens/cyans for the sync group,
red for time a rank stood blocked.
"""

from __future__ import annotations

import zlib

KIND_COLORS: dict[str, str] = {
    # what the main thread computes
    "compute_fwd": "#6BAED6",
    "compute_bwd": "#2171B5",
    "optimizer": "#9467BD",
    "outer_step": "#2CA02C",
    "eval": "#D9D9D9",
    # simulated trouble and blocking
    "straggle": "#8C564B",
    "wait": "#D62728",
    # shard group (inside a replica, fast links)
    "all_gather": "#FF7F0E",
    "all_gather_bwd": "#D95F02",  # the backward re-gather (reshard_after_forward)
    "reduce_scatter": "#FDAE6B",
    "grad_norm": "#E6A23C",
    "sync_norms": "#FDD0A2",
    "sync_clip": "#BCBD22",
    # sync group (across replicas, the slow network)
    "grad_all_reduce": "#E377C2",
    "sync_reduce": "#17BECF",
    "sync_decisions": "#9EDAE5",
    "param_average": "#31A354",
    "co2_reduce": "#74C476",
    "step_count": "#C49C94",
    "clock": "#DBDB8D",
    "all_reduce": "#A1A1A1",
}

#: The colour of exposed communication: time a rank waited on this very collective (overlap.py).
EXPOSED = "#D62728"
#: In flight while the rank waited on another collective: neither hidden nor this one's wait.
BLOCKED_OTHER = "#555555"
#: Communication that was hidden under compute is drawn in its kind's colour without hatching.

#: The round picture (rounds.py): local steps in two alternating compute blues, so steps can be counted;
#: waiting is the exposed red, the sync strip the sync group's cyan, the pause the straggler's brown.
ROUND_COLORS: dict[str, str] = {
    "step": "#2B6CA8",
    "step_alt": "#7BAFDB",
    "straggle": KIND_COLORS["straggle"],
    "wait": EXPOSED,
    "sync": KIND_COLORS["sync_reduce"],
    "eval": "#BDBDBD",
    "boundary": "#222222",
}

#: Plain-words names for legends; unknown kinds keep their own name.
KIND_LABELS: dict[str, str] = {
    "compute_fwd": "forward compute",
    "compute_bwd": "backward compute",
    "optimizer": "inner optimizer step",
    "outer_step": "outer step (anchor update)",
    "eval": "evaluation",
    "straggle": "straggler pause (simulated)",
    "wait": "waiting for an async collective",
    "all_gather": "all-gather (shard group)",
    "all_gather_bwd": "all-gather in the backward (shard group, resharded)",
    "reduce_scatter": "reduce-scatter (shard group)",
    "grad_norm": "gradient norm (shard group)",
    "sync_norms": "sync: pseudo-gradient norms",
    "sync_clip": "sync: clip norm",
    "grad_all_reduce": "gradient all-reduce (sync group)",
    "sync_reduce": "sync: aggregate Δ (sync group)",
    "sync_decisions": "sync: penalty decisions",
    "param_average": "parameter average (sync group)",
    "co2_reduce": "CO2 outer all-reduce",
    "step_count": "A-EDiT meeting: step counts (sync group)",
    "clock": "A-EDiT replica clock (shard group)",
    "all_reduce": "all-reduce",
}

#: Drawing order on the timeline: earlier kinds are drawn first (underneath later ones).
KIND_ORDER: tuple[str, ...] = tuple(["eval"] + [k for k in KIND_COLORS if k != "eval"])

_FALLBACK = ("#393B79", "#637939", "#8C6D31", "#843C39", "#7B4173", "#5254A3", "#8CA252", "#BD9E39",
             "#AD494A", "#A55194")

REPLICA_COLORS = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F",
                  "#BCBD22", "#17BECF")

METHOD_COLORS: dict[str, str] = {
    "sync": "#7F7F7F",
    "backup": "#BCBD22",
    "post_local_sgd": "#8C564B",
    "diloco": "#9467BD",
    "co2": "#E377C2",
    "edit": "#1F77B4",
    "aedit": "#D62728",
    "streaming_diloco": "#2CA02C",
}


def kind_color(kind: str) -> str:
    """The kind's colour; a kind added later gets a stable colour derived from its name."""
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return _FALLBACK[zlib.crc32(kind.encode()) % len(_FALLBACK)]


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def kind_sort_key(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind), kind) if kind in KIND_ORDER else (len(KIND_ORDER), kind)


def replica_color(replica: int) -> str:
    return REPLICA_COLORS[int(replica) % len(REPLICA_COLORS)]


def method_color(method: str, index: int = 0) -> str:
    """A method's colour; `index` separates several runs of one method (or unknown methods)."""
    if method in METHOD_COLORS and index == 0:
        return METHOD_COLORS[method]
    return REPLICA_COLORS[(index + len(method)) % len(REPLICA_COLORS)]


def rgba(hex_color: str, alpha: float) -> str:
    """'#RRGGBB' → 'rgba(r,g,b,alpha)' (plotly bars take no separate fill alpha)."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def run_colors(methods: list[str]) -> list[str]:
    """One colour per run: the method's colour for its first run, other colours for repeats."""
    seen: dict[str, int] = {}
    out = []
    for m in methods:
        i = seen.get(m, 0)
        seen[m] = i + 1
        out.append(method_color(m, i))
    return out
