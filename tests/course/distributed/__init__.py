"""Real multi-process runs of the course's checks (gloo, ≤ 4 ranks on this machine's cores)."""
