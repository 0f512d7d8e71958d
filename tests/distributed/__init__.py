"""Real multi-process runs (gloo, ≤ 4 ranks on this machine's cores)."""

#: Every rank starts the run's clock when it leaves the same barrier, so two ranks' clocks are a few
#: milliseconds apart at most: the tolerance of a comparison between two ranks' recorded times.
CLOCK_SKEW_S = 0.02
