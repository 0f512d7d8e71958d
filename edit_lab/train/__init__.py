"""Layer 3, one rank's training: the step loop (`trainer`), its data, the injected stragglers and faults,
checkpoints. It runs the core; a process (`runtime/`) or the virtual clock (`clock/`) runs it."""
