"""Shared test helpers."""

from __future__ import annotations

from edit_lab import RunConfig


def small(**kw) -> RunConfig:
    """A small, fast configuration: the nano model, short sequences, no progress bar."""
    base = dict(model="nano", seq_len=32, batch_size=4, steps=8, eval_every=0, eval_batches=2, progress=False,
                warmup_steps=2, sync_interval=3, timeout_s=60)
    base.update(kw)
    return RunConfig(**base)
