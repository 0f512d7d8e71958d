"""Byte data: the offline corpus, the held-out split, stateless batches, corrupted batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edit_lab.train.data import (
    CORRUPT_MODES,
    Corpus,
    corrupt_batch,
    decode,
    load_corpus,
    mix_seed,
    train_batch,
    val_batches,
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_bytes(load_corpus())


def test_default_corpus_is_python_docs() -> None:
    data = load_corpus()
    assert len(data) > 100_000
    assert data == load_corpus()  # sorted-key order: the same bytes every time
    text = data.decode("utf-8")
    assert "lambda" in text and "The" in text
    assert len(set(data)) > 60  # real text, not a repeated pattern


def test_load_corpus_from_path(tmp_path: Path) -> None:
    p = tmp_path / "c.txt"
    p.write_bytes(b"hello \xff bytes")
    assert load_corpus(p) == b"hello \xff bytes"
    assert load_corpus(str(p)) == b"hello \xff bytes"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus(tmp_path / "nope.txt")


def test_split_interleaves_chunks_and_is_disjoint() -> None:
    data = bytes(range(256)) * 5 + b"tail"  # 1284 bytes
    c = Corpus.from_bytes(data, val_fraction=0.25, chunk=10)  # k = 4: chunks 3, 7, 11, ... are val
    chunks = [data[i : i + 10] for i in range(0, len(data), 10)]
    assert bytes(c.val.tolist()) == b"".join(ch for i, ch in enumerate(chunks) if i % 4 == 3)
    assert bytes(c.train.tolist()) == b"".join(ch for i, ch in enumerate(chunks) if i % 4 != 3)
    assert len(c.train) + len(c.val) == len(data)
    assert c.train.dtype == c.val.dtype == torch.uint8


def test_default_split_sizes_and_coverage(corpus: Corpus) -> None:
    n = len(corpus.train) + len(corpus.val)
    assert len(corpus.val) / n == pytest.approx(0.05, abs=0.005)
    # val covers the whole docs: it has chunks from the start and from the end of the corpus
    data = load_corpus()
    assert bytes(corpus.val[:1024].tolist()) == data[19 * 1024 : 20 * 1024]
    last_val_chunk = ((len(data) // 1024) // 20) * 20 - 1
    assert last_val_chunk * 1024 > 0.9 * len(data)


def test_split_errors() -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        Corpus.from_bytes(b"x" * 10_000, val_fraction=0.0)
    with pytest.raises(ValueError, match="too small"):
        Corpus.from_bytes(b"x" * 100, val_fraction=0.05, chunk=10)


def test_train_batch_shapes_and_shift(corpus: Corpus) -> None:
    x, y = train_batch(corpus, step=0, replica=0, shard=0, batch_size=4, seq_len=32, seed=0)
    assert x.shape == y.shape == (4, 32)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    # each row really is a window of the train split
    train = bytes(corpus.train.tolist())
    for row_x, row_y in zip(x, y):
        window = bytes(row_x.tolist()) + bytes(row_y[-1:].tolist())
        assert window in train


def test_train_batch_deterministic(corpus: Corpus) -> None:
    a = train_batch(corpus, 5, 1, 2, 3, 16, seed=42)
    torch.manual_seed(0)  # global RNG state plays no part
    b = train_batch(corpus, 5, 1, 2, 3, 16, seed=42)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_train_batch_distinct_across_replicas_shards_steps_seeds(corpus: Corpus) -> None:
    args = [(0, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (1, 0, 0, 0), (0, 0, 0, 1), (0, 1, 1, 0), (1, 1, 0, 0)]
    batches = [train_batch(corpus, st, r, s, 4, 16, seed=sd)[0] for st, r, s, sd in args]
    for i in range(len(batches)):
        for j in range(i + 1, len(batches)):
            assert not torch.equal(batches[i], batches[j]), (args[i], args[j])


def test_mix_seed_documented_values() -> None:
    # splitmix64 folding; pinned so a refactor cannot silently change every data stream
    assert mix_seed() == 0
    assert mix_seed(0) == 0xE220A8397B1DCDAF >> 1
    assert mix_seed(0, 1) != mix_seed(1, 0)
    assert 0 <= mix_seed(-1, 2**70, 3) < 2**63


def test_val_batches_fixed_and_from_val(corpus: Corpus) -> None:
    a = val_batches(corpus, n_batches=3, batch_size=2, seq_len=24, seed=0)
    b = val_batches(corpus, n_batches=3, batch_size=2, seq_len=24, seed=0)
    assert len(a) == 3
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.shape == (2, 24) and torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(xa[:, 1:], ya[:, :-1])
    val = bytes(corpus.val.tolist())
    assert all(bytes(x[0].tolist()) in val for x, _ in a)
    assert not torch.equal(a[0][0], a[1][0])
    assert val_batches(corpus, 0, 2, 24, 0) == []


def test_too_long_window_raises() -> None:
    c = Corpus.from_bytes(b"ab" * 100, val_fraction=0.5, chunk=10)
    with pytest.raises(ValueError, match="val split"):
        val_batches(c, 1, 1, 200, 0)
    with pytest.raises(ValueError, match="train split"):
        train_batch(c, 0, 0, 0, 1, 200, 0)


def test_corrupt_random(corpus: Corpus) -> None:
    x, y = train_batch(corpus, 0, 0, 0, 4, 64, 0)
    g = torch.Generator().manual_seed(0)
    cx, cy = corrupt_batch(x, y, "random", g)
    assert cx.shape == x.shape and cx.dtype == torch.int64
    assert torch.equal(cx[:, 1:], cy[:, :-1])
    assert not torch.equal(cx, x)
    assert cx.min() >= 0 and cx.max() <= 255
    assert len(cx.unique()) > 150  # uniform bytes, not text
    # the same generator state gives the same corruption
    cx2, _ = corrupt_batch(x, y, "random", torch.Generator().manual_seed(0))
    assert torch.equal(cx, cx2)


def test_corrupt_shuffle_keeps_bytes_and_shift(corpus: Corpus) -> None:
    x, y = train_batch(corpus, 0, 0, 0, 3, 64, 0)
    cx, cy = corrupt_batch(x, y, "shuffle", torch.Generator().manual_seed(1))
    assert torch.equal(cx[:, 1:], cy[:, :-1])
    full = torch.cat((x[:, :1], y), 1)
    cfull = torch.cat((cx[:, :1], cy), 1)
    assert torch.equal(full.sort(1).values, cfull.sort(1).values)  # same bytes in each row
    assert not torch.equal(full, cfull)


def test_corrupt_corpus(corpus: Corpus) -> None:
    other = Corpus.from_bytes(bytes(range(256)) * 100)
    x, y = train_batch(corpus, 0, 0, 0, 2, 32, 0)
    cx, cy = corrupt_batch(x, y, "corpus", torch.Generator().manual_seed(0), other=other)
    assert cx.shape == x.shape and torch.equal(cx[:, 1:], cy[:, :-1])
    # windows of the other corpus: consecutive byte values here
    assert torch.equal((cy - cx) % 256, torch.ones_like(cx))
    with pytest.raises(ValueError, match="other"):
        corrupt_batch(x, y, "corpus", torch.Generator())


def test_corrupt_unknown_mode() -> None:
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=", ".join(CORRUPT_MODES)):
        corrupt_batch(x, x, "flip", torch.Generator())


def test_decode() -> None:
    assert decode(torch.tensor([[72, 105], [33, 10]])) == "Hi!\n"
