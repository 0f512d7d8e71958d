"""Ready-made configurations and this machine's core count, next to the config they fill in.

The CLI, the example generator and the benchmarks build the very configuration the lab panel starts from
without importing ipywidgets or plotly.
"""

from __future__ import annotations

import os

from edit_lab.config.run_config import RunConfig
from edit_lab.registry import capabilities

#: seconds an A-EDiT run from the lab panel trains when no budget was chosen (edit-method.md §12)
AEDIT_PANEL_BUDGET_S = 6.0


def cores() -> int:
    """The cores this process may run on (the affinity mask where the OS has one: a container's share).

    The lab's one core count: the virtual clock's lanes (`virtual_lanes = 0`: one per core) and the lessons'
    reasons for a timing (ranks per core) both read it."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


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
    if capabilities(method).time_triggered and time_budget <= 0:
        return AEDIT_PANEL_BUDGET_S
    return time_budget
