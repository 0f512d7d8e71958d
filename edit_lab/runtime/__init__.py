"""Layer 5, processes: `launch` (start a run's ranks, watch them, end them with the first failure), the warm
fork server, the run directory's output, and `worker` (one rank's process: `torchrun -m edit_lab.runtime.worker`).

`launch` is not re-exported here: `edit_lab.launch` (the function) is the entry point."""
