"""edit_lab: an interactive teaching lab for EDiT and A-EDiT (Cheng et al., ICLR 2025).

    from edit_lab import RunConfig
    from edit_lab import launch
    run = launch(RunConfig(method="edit", shards=2, replicas=2, steps=60))
    run.summary["final_val_loss"]

None of the modules below imports torch at import time (the launcher loads it once a configuration
is accepted), so a worker process or `import edit_lab.core.penalty` stays light. `launch` is imported
eagerly, not lazily: the package attribute `launch` is also the name of the submodule
`edit_lab.runtime.launch`, and Python binds a submodule to its package's attribute when it is first
imported, so a lazily bound function would be replaced by the module whenever `edit_lab.runtime.launch`
happened to be imported first.
"""

from __future__ import annotations

import os

# MKL (torch's CPU BLAS on x86) picks its kernels by the CPU it finds and, within them, by how each tensor
# happens to be aligned in memory (MKL's documentation), so the same matmul can differ in its last bit from one
# machine to another (seen: a virtual run's validation loss 4.8068645 where 07's reference was made, 4.8068647 on
# a machine with AVX-512). Pinning MKL to its AVX2 code path in strict mode makes a run's numbers the same bits
# in every process on every x86 machine with AVX2, which the virtual clock's "same config, same numbers" and
# the lessons' nbval references rely on. MKL reads this at its first computation, so it is set here, before
# anything of the lab computes; a value the user set wins. See docs/edit-method.md §14, "The same bits on every machine".
os.environ.setdefault("MKL_CBWR", "AVX2,STRICT")

from edit_lab.config import ConfigError, RunConfig
from edit_lab.records.run import Run
from edit_lab.runtime.launch import WorkerError, launch

__all__ = ["ConfigError", "Run", "RunConfig", "WorkerError", "launch"]
__version__ = "0.1.0"
