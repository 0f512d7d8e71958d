"""Byte-level training data that needs no download, and stateless batch sampling.

Why stateless: every batch is a pure function of ``(seed, replica, shard, step)``, so

* each rank draws its own batch without talking to anyone (distinct replicas and distinct shards
  of a replica see distinct data, as in real data-parallel training);
* a run that resumes from a checkpoint only needs the step number to continue the same stream;
* two runs with different methods (sync, EDiT, A-EDiT, ...) see exactly the same data, so their
  loss curves differ only by the method.

The default corpus is the text of Python's own reference documentation shipped with every Python
(``pydoc_data.topics``, about 0.47 MB), so the lab runs offline and on Binder.

torch is imported inside the functions that build tensors, not at the top. How the corpus is cut
(:data:`CHUNK`, :func:`held_out_every`, :func:`split_sizes`) and the check `RunConfig.validate` makes of a
corpus file (`check_corpus_file`) are in `edit_lab.corpus`, torch-free: the command line refuses a bad file
in a fraction of a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edit_lab.corpus import CHUNK, VAL_FRACTION, held_out_every, split_sizes

if TYPE_CHECKING:
    import torch
    from torch import Tensor

_MASK64 = (1 << 64) - 1

CORRUPT_MODES = ("random", "shuffle", "corpus")
"""Ways :func:`corrupt_batch` can spoil a batch, to provoke the EDiT penalty."""

_VAL_STREAM = 0x56414C  # "VAL": keeps validation draws apart from every training stream


def load_corpus(path: str | os.PathLike[str] | None = None) -> bytes:
    """Return the raw bytes of the training corpus.

    ``None`` gives the default corpus: the values of ``pydoc_data.topics.topics`` joined with a
    blank line in sorted-key order (sorted so the bytes do not depend on dict order), UTF-8
    encoded. A path gives that file's bytes.
    """
    if path is None:
        from pydoc_data.topics import topics

        return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus file not found: {os.fspath(path)!r} (pass None for the built-in Python docs corpus)")
    with open(path, "rb") as f:
        return f.read()


def mix_seed(*parts: int) -> int:
    """Mix integers into one 63-bit generator seed (splitmix64 folding; no Python ``hash()``).

    ``h = 0; for p in parts: h = splitmix64(h ^ (p mod 2**64))``, and the top bit is dropped so
    the result is a valid ``torch.Generator.manual_seed`` value. splitmix64 is a bijection with
    strong avalanche, so neighbouring tuples such as ``(s, 0, 1, t)`` and ``(s, 1, 0, t)`` give
    unrelated seeds, and the value is the same on every machine and Python version.
    """
    h = 0
    for p in parts:
        h = (h ^ (int(p) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        z = h
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        h = z ^ (z >> 31)
    return h >> 1


@dataclass
class Corpus:
    """Train and held-out bytes as uint8 1-D tensors."""

    train: Tensor
    val: Tensor

    @classmethod
    def from_bytes(cls, data: bytes, val_fraction: float = VAL_FRACTION, chunk: int = CHUNK) -> "Corpus":
        """Split ``data`` into chunks of ``chunk`` bytes; every k-th chunk (k = round(1/val_fraction))
        goes to val, the rest to train.

        Interleaving rather than a tail split makes both halves cover the whole documentation, so
        the validation loss measures the same distribution the replicas train on. Chunk ``i`` is
        held out when ``i % k == k - 1``; no byte is in both splits.
        """
        import torch

        k = held_out_every(val_fraction)
        if split_sizes(len(data), val_fraction, chunk) is None:
            raise ValueError(f"corpus of {len(data)} bytes is too small for a {chunk}-byte chunk split with "
                             f"val_fraction {val_fraction}: need more than {(k - 1) * chunk} bytes")
        all_bytes = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        chunk_id = torch.arange(len(all_bytes), device="cpu") // chunk
        is_val = (chunk_id % k) == (k - 1)
        return cls(train=all_bytes[~is_val].clone(), val=all_bytes[is_val].clone())


def _windows(data: Tensor, offsets: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
    """Cut windows of ``seq_len + 1`` bytes at ``offsets``; return inputs and next-byte targets."""
    import torch

    idx = offsets.view(-1, 1) + torch.arange(seq_len + 1, device=data.device)
    w = data[idx].long()
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def _random_offsets(data: Tensor, n: int, seq_len: int, gen: torch.Generator, what: str) -> Tensor:
    import torch

    high = len(data) - seq_len  # last valid start + 1, so a window of seq_len + 1 bytes fits
    if high <= 0:
        raise ValueError(f"{what} split has {len(data)} bytes, too few for windows of seq_len {seq_len} + 1")
    return torch.randint(0, high, (n,), generator=gen, device=gen.device)


def _check_shape(batch_size: int, seq_len: int) -> None:
    if batch_size <= 0 or seq_len <= 0:
        raise ValueError(f"batch_size and seq_len must be positive, got {batch_size}, {seq_len}")


def train_batch(
    corpus: Corpus, step: int, replica: int, shard: int, batch_size: int, seq_len: int, seed: int
) -> tuple[Tensor, Tensor]:
    """The batch of rank ``(replica, shard)`` at inner step ``step``: ``x, y`` int64 ``[B, T]``.

    Windows start at random offsets drawn by a generator seeded with
    ``mix_seed(seed, replica, shard, step)``; ``y`` is ``x`` shifted left by one byte.
    """
    import torch

    _check_shape(batch_size, seq_len)
    gen = torch.Generator(device="cpu").manual_seed(mix_seed(seed, replica, shard, step))
    offsets = _random_offsets(corpus.train, batch_size, seq_len, gen, "train")
    return _windows(corpus.train, offsets, seq_len)


def val_batches(
    corpus: Corpus, n_batches: int, batch_size: int, seq_len: int, seed: int
) -> list[tuple[Tensor, Tensor]]:
    """Fixed held-out batches, a function of the arguments only.

    Identical on every rank, so every replica evaluates the anchor on the same bytes and the
    validation curves of different runs are comparable.
    """
    import torch

    _check_shape(batch_size, seq_len)
    if n_batches < 0:
        raise ValueError(f"n_batches must be >= 0, got {n_batches}")
    gen = torch.Generator(device="cpu").manual_seed(mix_seed(seed, _VAL_STREAM))
    offsets = _random_offsets(corpus.val, n_batches * batch_size, seq_len, gen, "val")
    return [_windows(corpus.val, o, seq_len) for o in offsets.split(batch_size)] if n_batches else []


def corrupt_batch(
    x: Tensor, y: Tensor, mode: str, gen: torch.Generator, other: Corpus | None = None
) -> tuple[Tensor, Tensor]:
    """Replace a batch by bad data of the same shape, to show what the EDiT penalty does with a
    replica whose pseudo-gradient goes astray.

    * ``'random'``: uniform random bytes (pure noise);
    * ``'shuffle'``: the batch's own bytes permuted within each row (right byte statistics,
      no order); the ``T + 1`` byte sequence is permuted, so ``y`` stays ``x`` shifted by one;
    * ``'corpus'``: windows from the train split of another corpus (a different distribution).

    ``gen`` is a CPU generator; results land on ``x``'s device as int64.
    """
    import torch

    if mode not in CORRUPT_MODES:
        raise ValueError(f"unknown corrupt mode {mode!r}; allowed: {', '.join(CORRUPT_MODES)}")
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x and y must both be [B, T], got {tuple(x.shape)} and {tuple(y.shape)}")
    B, T = x.shape
    if mode == "random":
        w = torch.randint(0, 256, (B, T + 1), generator=gen, device=gen.device)
    elif mode == "shuffle":
        seq = torch.cat((x[:, :1], y), dim=1).cpu()  # the T + 1 bytes the batch was cut from
        perm = torch.argsort(torch.rand(B, T + 1, generator=gen, device=gen.device), dim=1)
        w = torch.gather(seq, 1, perm)
    else:
        if other is None:
            raise ValueError("corrupt mode 'corpus' needs `other`, the Corpus to draw windows from")
        xo, yo = _windows(other.train, _random_offsets(other.train, B, T, gen, "other corpus train"), T)
        return xo.to(x.device), yo.to(x.device)
    w = w.long().to(x.device)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def decode(tokens: Tensor) -> str:
    """Bytes back to text (invalid UTF-8 replaced), to show samples and batches in notebooks."""
    import torch

    return bytes(tokens.reshape(-1).to(torch.uint8).tolist()).decode("utf-8", errors="replace")
