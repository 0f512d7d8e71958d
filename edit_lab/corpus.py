"""How a byte corpus is cut into train and validation splits, and whether a file can be the corpus: torch-free.

`RunConfig.validate` refuses a missing, unreadable, empty or too small corpus file with :func:`check_corpus_file`
before any worker starts, without importing torch or the training loop; `edit_lab.train.data` cuts the corpus
with the same :func:`held_out_every` and :data:`CHUNK` and draws the batches.
"""

from __future__ import annotations

import os

VAL_FRACTION = 0.05
"""Share of the corpus held out for validation (every 20th chunk)."""

CHUNK = 1024
"""Bytes per chunk of the interleaved train/validation split."""


def held_out_every(val_fraction: float = VAL_FRACTION) -> int:
    """k: every k-th chunk is held out for validation (k = round(1/val_fraction), at least 2)."""
    if not 0.0 < val_fraction <= 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    return max(2, round(1.0 / val_fraction))


def split_sizes(n_bytes: int, val_fraction: float = VAL_FRACTION, chunk: int = CHUNK) -> tuple[int, int] | None:
    """Bytes in the train and validation splits of an ``n_bytes`` corpus, as :meth:`Corpus.from_bytes`
    cuts it, without reading it; None when it is too small for the split (fewer than k chunks)."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    k = held_out_every(val_fraction)
    n_chunks = -(-n_bytes // chunk)
    if n_chunks < k:
        return None
    val = (n_chunks // k) * chunk
    if n_chunks % k == 0:  # the last chunk is held out, and may be short
        val -= n_chunks * chunk - n_bytes
    return n_bytes - val, val


def _fits(n_bytes: int, seq_len: int, val_fraction: float, chunk: int) -> bool:
    sizes = split_sizes(n_bytes, val_fraction, chunk)
    return sizes is not None and min(sizes) > seq_len


def corpus_problem(n_bytes: int, seq_len: int, val_fraction: float = VAL_FRACTION, chunk: int = CHUNK) -> str | None:
    """Why a corpus of ``n_bytes`` cannot feed windows of ``seq_len`` + 1 bytes, or None if it can.

    Both splits must hold a window: training batches are drawn from the train split, validation
    batches from the held-out one. Windows start at random offsets drawn *with* replacement, so the
    batch size and the number of batches need no more bytes than one window.
    """
    if _fits(n_bytes, seq_len, val_fraction, chunk):
        return None
    lo, hi = 1, 1
    while not _fits(hi, seq_len, val_fraction, chunk):
        hi *= 2
    while lo < hi:  # both splits only grow with the corpus: the smallest size that fits
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not _fits(mid, seq_len, val_fraction, chunk) else (lo, mid)
    k = held_out_every(val_fraction)
    sizes = split_sizes(n_bytes, val_fraction, chunk)
    split = (f"train {sizes[0]} and validation {sizes[1]} bytes" if sizes is not None
             else f"fewer than {k} chunks of {chunk} bytes")
    return (f"a corpus of at least {lo} bytes for seq_len={seq_len} (this one has {n_bytes}: {split}; one "
            f"{chunk}-byte chunk in {k} is held out, and each split must hold a window of seq_len + 1 bytes)")


def check_corpus_file(path: str | os.PathLike[str], seq_len: int) -> str | None:
    """Why the file at ``path`` cannot be the training corpus at ``seq_len``, or None if it can.

    Cheap (a stat and a one-byte read, never the whole file), so `RunConfig.validate` refuses a
    missing, unreadable, empty or too small file before any worker starts and fails on it.
    """
    what = "a readable text file (or None for the default corpus)"
    if not os.path.exists(path):
        return f"{what}: there is no such file"
    if not os.path.isfile(path):
        return f"{what}: this is not a regular file"
    try:
        with open(path, "rb") as f:
            f.read(1)
        n = os.path.getsize(path)
    except OSError as e:
        return f"{what}: it cannot be read ({e.strerror or e})"
    if n == 0:
        return f"{what}: this one is empty"
    return corpus_problem(n, seq_len)
