"""Instant previews: a small event simulator of the lab's methods, calibrated from real runs.

`calibrate(run_dir)` measures what one replica's step and one sync-group collective cost; `simulate(cfg,
costs)` replays the worker's loop and the methods' hooks in time only (no processes, no tensors, no
torch) and returns summary.json's throughput keys, defined as there, with events in a real run's shape.
What it models and what it leaves out: docs/edit-method.md, "Previews: the event simulator".
"""

from edit_lab.clock.calibrate import calibrate
from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.predict import Prediction, simulate

__all__ = ["Costs", "Prediction", "calibrate", "simulate"]
