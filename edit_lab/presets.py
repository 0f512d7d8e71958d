"""Ready-made configurations: the lab panel's starting point, next to the config they fill in.

Kept apart from the widgets so that the CLI, the example generator and benchmarks can build the very
configuration the panels start from without importing ipywidgets or plotly.
"""

from __future__ import annotations

from .config import RunConfig

#: seconds an A-EDiT run from the lab panel trains when no budget was chosen (edit-method.md §12)
AEDIT_PANEL_BUDGET_S = 6.0


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
    if method == "aedit" and time_budget <= 0:
        return AEDIT_PANEL_BUDGET_S
    return time_budget
