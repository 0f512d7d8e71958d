"""Layer 4, time without this machine's clock: the virtual clock (`virtual`: the real trainer on a cost
model's time), the costs and their calibration from a real run, and the preview's time-only simulator (`sim/`)."""
