"""edit_lab: an interactive teaching lab for EDiT and A-EDiT (Cheng et al., ICLR 2025).

    from edit_lab import RunConfig, launch
    run = launch(RunConfig(method="edit", shards=2, replicas=2, steps=60))
    run.summary["final_val_loss"]
"""

from .config import ConfigError, RunConfig
from .launch import WorkerError, launch
from .run import Run

__all__ = ["ConfigError", "Run", "RunConfig", "WorkerError", "launch"]
__version__ = "0.1.0"
