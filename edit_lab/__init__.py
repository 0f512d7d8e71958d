"""edit_lab: an interactive teaching lab for EDiT and A-EDiT (Cheng et al., ICLR 2025).

    from edit_lab import RunConfig, launch
    run = launch(RunConfig(method="edit", shards=2, replicas=2, steps=60))
    run.summary["final_val_loss"]

None of the modules below imports torch at import time (the launcher loads it once a configuration
is accepted), so a worker process or `import edit_lab.penalty` stays light. `launch` is imported
eagerly, not lazily: the package attribute `launch` is also the name of the submodule
`edit_lab.launch`, and Python binds a submodule to its package's attribute when it is first
imported, so a lazily bound function would be replaced by the module whenever `edit_lab.launch`
happened to be imported first.
"""

from __future__ import annotations

from .config import ConfigError, RunConfig
from .launch import WorkerError, launch
from .run import Run

__all__ = ["ConfigError", "Run", "RunConfig", "WorkerError", "launch"]
__version__ = "0.1.0"
