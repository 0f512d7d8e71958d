"""Ready-made configurations: the lab panel's starting point, next to the config they fill in.

Kept apart from the widgets so that the CLI, the example generator and benchmarks can build the very
configuration the panels start from without importing ipywidgets or plotly.
"""

from __future__ import annotations

from .config import RunConfig


def default_lab_config() -> RunConfig:
    """A 2×2 run of the nano model that takes seconds on a laptop: enough steps for a few syncs.

    The penalty keeps RunConfig's defaults, measured on this very configuration (edit-method.md D10).
    """
    return RunConfig(method="sync", shards=2, replicas=2, steps=24, model="nano", seq_len=32, batch_size=4,
                     eval_every=0, eval_batches=2, warmup_steps=4, sync_interval=4, progress=False)
