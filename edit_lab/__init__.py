"""edit_lab: an interactive teaching lab for EDiT and A-EDiT (Cheng et al., ICLR 2025).

    from edit_lab import RunConfig, launch
    run = launch(RunConfig(method="edit", shards=2, replicas=2, steps=60))
    run.summary["final_val_loss"]

One folder per layer, each importing only the ones below it (tests/unit/test_layers.py):

    config/ registry.py sizes.py protocol.py rules/       L0 torch-free facts (RunConfig in sections), a reader's
    corpus.py detector.py                                    functions, the corpus' split, the penalty's detector
    records/                                              L1 the run directory: events, summary, tables
    core/                                                 L2 ★ EDiT: the model, mesh, collectives, ZeRO-3, methods,
                                                             outer step, penalty
    train/                                                L3 one rank's step loop, data, stragglers, faults, checkpoints
    clock/                                                L4 the virtual clock, costs, the preview's simulator
    runtime/                                              L5 processes: launch, fork server, worker (torchrun)
    viz/  ui/                                             L6, L7 figures of records; the widgets
    __main__.py tools/                                       entry points (the CLI, make_examples)

The course (claims, exercises, per-notebook helpers, the capstone) is the package `edit_course` beside this
one: it imports `edit_lab`, never the other way round.

Why L0 is small torch-free modules: `RunConfig.validate` refuses a bad configuration in a fraction of a second,
before any process starts, only if nothing on its path imports torch. So the facts it needs (the methods'
names and capabilities, the model shapes, when the replicas sync, a reader's rule, the corpus' split, the
penalty's knobs) sit in torch-free modules,
and no module imports torch at import time (the launcher loads it once a configuration is accepted), so a
worker process or `import edit_lab.core.penalty` stays light. `launch` is imported
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
