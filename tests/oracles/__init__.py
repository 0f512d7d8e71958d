"""Independent oracles the engine is checked against (tests) and timed against (benchmarks).

They live with the tests, not in the package: a learner's `edit_lab` holds the lab, and these are
the yardsticks the lab is measured with.

- `fsdp2.single_process`: one process, the full model, every rank's micro-batch concatenated.
- `fsdp2.fsdp2`: PyTorch's own FSDP2 (HSDP on a replica × shard mesh) in as many processes.
- `averaging.periodic_averaging`: PyTorch's `PeriodicModelAverager` on plain unsharded replicas.
"""
