"""Compressed pseudo-gradients: the wire formats of a Local-SGD sync (`RunConfig.wire_format`, `error_feedback`).

A sync moves every replica's pseudo-gradient Δ = a − θ across the sync group, the biggest transfer of a
Local-SGD run. Streaming DiLoCo (Douillard et al., 2025) sends it in a 4-bit *floating-point* format and
loses almost nothing; the lab's 4 bits are not that format but integer codes with a scale per block (below).
The lab lets every Local-SGD method send it as

- ``none``: float32, an all-reduce (the lab's default, and every run before this module);
- ``bf16``: bfloat16, an all-reduce of the bf16 tensor: a sum of bf16 values is defined, gloo and NCCL
  reduce it, and every addition rounds to bf16 (8 significant bits, 7 stored);
- ``int8`` / ``int4``: symmetric integer codes with one float32 scale per block of `BLOCK` values
  (absmax / 127, absmax / 7). A code is round(x / scale), deterministic round-half-to-even (`torch.round`),
  not stochastic, so the rounding is biased: in one block, values of 0.45 beside an absmax of 7 (scale 1)
  are sent as 0 at every sync; only error feedback carries them over to a later sync. A *sum of codes* is
  not defined (each replica's block has its own scale), so these travel as a **quantised reduce-scatter then
  all-gather** (`Comm.compressed_all_reduce`): every rank pads its (weighted) tensor to R chunks of whole blocks
  (`chunk_values`), encodes each chunk (`encode_chunks`) and sends chunk i to its owner, member i (an
  all-to-all); each owner decodes the R contributions of its chunk, sums them in float32 in member order and
  encodes the sum again (`reduce_chunk`); an all-gather of the reduced chunks gives everyone every chunk, which
  everyone decodes (`decode_chunks`): every rank holds the same sum. The owner's re-encoding is a second
  rounding, of the sum (at most half its block's scale per value); error feedback corrects only the first,
  each replica's Δ + e to Δ̂ (`OuterState.pseudo_gradient`), not this one.

The counting rule, one for every collective (`ring_bytes`, used by `Comm`'s events and link model, the virtual
clock, the simulator and the tables): an event's `bytes` is what one rank sends on a ring of R members, an
all-reduce of S bytes 2(R − 1)/R·S, a reduce-scatter or all-to-all (R − 1)/R·S, an all-gather (R − 1)·p. The
integer formats' exchange sends (R − 1) encoded chunks in each half, 2(R − 1)/R of the encoded tensor: the
all-reduce of the compressed tensor (`collective_bytes`). So every format keeps its ratio at every R: bf16
0.5 of float32, int8 (1 + 1/64)/4 = 0.254, int4 (1/2 + 1/64)/4 = 0.129 (`compression_ratio`), plus the padding
to R whole-block chunks, which grows when a tensor has few blocks per member (nano's 163 blocks at R = 64: 192,
int8 0.300). Before issue 48 the integer formats travelled as an all-gather of R payloads, and the lab counted
an all-reduce at S and an all-gather at R·p: int8 cost 2.03× float32's bytes at R = 8.

Where it happens: `OuterState.pseudo_gradient` (outer.py) hands every method the *decompressed* Δ̂ =
decode(encode(Δ + e)), so what the penalty judges, weighs and clips is what travels; with error feedback
(Seide et al. 2014; Karimireddy et al. 2019) it keeps e ← (Δ + e) − Δ̂ for the next sync, per unit, on
this rank's shard, but only where this replica's Δ̂ was sent and used (weight ≠ 0, the outer step taken, a
finite G: `OuterState.keep_residual`); otherwise e stays what it was before the sync, and a non-finite e is
never kept. `Comm.all_reduce` then carries the pseudo-gradient kinds of the sync group
(`PSEUDO_GRADIENT_KINDS`) in the wire format. In int8 and int4, re-encoding Δ̂ (or w·Δ̂, EDiT's weighted
one) gives back the same codes up to float rounding when its chunks' blocks are its own blocks (R chunks of
whole blocks of a `pack`ed tensor: they are), so the first rounding happens once; the link model (comm.py),
the virtual clock and the simulator charge the bytes the event records.
In bf16 re-encoding is not exact: EDiT's w·Δ̂ is rounded to bf16 again (w = 0.731: mean relative error
1.4e-3), and so is every partial sum of the all-reduce; error feedback corrects only the first of these
roundings of similar size (Δ + e to Δ̂).

The byte counts (`payload_bytes`, `collective_bytes`) import no torch: the preview simulator charges them.
"""

from __future__ import annotations

import math
from typing import Any

from edit_lab.registry import WIRE_FORMATS  # the choices, torch-free, beside the methods' names

#: Values per float32 scale of the integer formats: 1.6 % overhead on int8's bytes, 3.1 % on int4's.
BLOCK = 256
#: The sync-group collectives that carry pseudo-gradients (or, for post_local_sgd, what stands for them).
PSEUDO_GRADIENT_KINDS: frozenset[str] = frozenset({"sync_reduce", "co2_reduce", "param_average"})
_LEVELS = {"int8": 127, "int4": 7}


def blockwise(fmt: str) -> bool:
    """Integer codes with per-block scales: the formats that travel as a quantised reduce-scatter + all-gather."""
    return fmt in _LEVELS


def padded(numel: int, fmt: str) -> int:
    """Values one tensor of `numel` takes on the wire: a whole number of blocks for the integer formats."""
    return -(-numel // BLOCK) * BLOCK if blockwise(fmt) else numel


def payload_bytes(numel: int, fmt: str) -> int:
    """Bytes one replica puts on the wire for a tensor of `numel` float32 values."""
    if fmt == "none":
        return 4 * numel
    if fmt == "bf16":
        return 2 * numel
    blocks = -(-numel // BLOCK)
    codes = blocks * BLOCK if fmt == "int8" else blocks * BLOCK // 2
    return codes + 4 * blocks


def ring_bytes(op: str, tensor_bytes: int, replicas: int) -> int:
    """The lab's one counting rule, for every collective: the bytes one rank sends on a ring of `replicas`
    members. `tensor_bytes` is the collective's whole tensor: the all-reduced tensor S, the reduce-scatter's or
    all-to-all's input S, the all-gather's output R·p. An all-reduce sends 2(R − 1)/R·S (a reduce-scatter then
    an all-gather), a reduce-scatter or an all-to-all (R − 1)/R·S, an all-gather (R − 1)/R·R·p = (R − 1)·p.
    Rounded down to whole bytes; 0 with one member (nothing leaves the rank)."""
    if replicas <= 1:
        return 0
    factor = 2 if op == "all_reduce" else 1
    if op not in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
        raise ValueError(f"ring_bytes: no counting rule for {op!r}")
    return factor * (replicas - 1) * tensor_bytes // replicas


def chunk_values(numel: int, replicas: int) -> int:
    """Values of one owner's chunk in the integer formats' quantised reduce-scatter: whole blocks, the same
    number for every owner (the tensor is padded with zeros to `replicas` chunks)."""
    blocks = -(-numel // BLOCK)
    return -(-blocks // max(replicas, 1)) * BLOCK


def wire_tensor_bytes(numel: int, fmt: str, replicas: int) -> int:
    """The whole tensor a sync-group pseudo-gradient collective of `numel` float32 values moves, as an all-reduce:
    4n, 2n in bf16; in int8 / int4 the R encoded chunks (codes + scales) of the quantised reduce-scatter, which
    the all-gather of the reduced chunks moves once more: a ring all-reduce of that encoded tensor."""
    if not blockwise(fmt):
        return payload_bytes(numel, fmt)
    return replicas * payload_bytes(chunk_values(numel, replicas), fmt)


def collective_bytes(numel: int, fmt: str, replicas: int) -> int:
    """The bytes the lab records (an event's `bytes`), and the link and both clocks charge, for one sync-group
    pseudo-gradient collective of `numel` values: what one rank sends on a ring (`ring_bytes`) of
    `wire_tensor_bytes`. In int8 / int4: (R − 1) encoded chunks in the reduce-scatter and (R − 1) in the
    all-gather, 2(R − 1)·p_chunk, the compressed tensor's all-reduce."""
    return ring_bytes("all_reduce", wire_tensor_bytes(numel, fmt, replicas), replicas)


def check(fmt: str) -> None:
    if fmt not in WIRE_FORMATS:
        raise ValueError(f"wire format {fmt!r}: one of {', '.join(WIRE_FORMATS)}")


# ------------------------------------------------------------------------------------------- torch
def encode(x: Any, fmt: str) -> Any:
    """The bytes of `x` (flat float32) in an integer format: codes (padded to whole blocks), then the
    float32 scales, as one uint8 tensor; `decode` reverses it."""
    import torch

    levels = _LEVELS[fmt]
    n = x.numel()
    blocks = -(-n // BLOCK)
    xp = torch.zeros(blocks * BLOCK, dtype=torch.float32, device=x.device)
    xp[:n] = x.reshape(-1)
    xb = xp.view(blocks, BLOCK)
    scale = xb.abs().amax(dim=1) / levels  # 0 for an all-zero block: its codes are 0, decoded to 0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    # round half to even, deterministic (biased, not stochastic): error feedback carries what it drops
    q = torch.round(xb / safe[:, None]).clamp_(-levels, levels).to(torch.int8)
    if fmt == "int8":
        codes = q.view(torch.uint8).reshape(-1)
    else:  # two 4-bit codes per byte, q + 8 in 1..15
        nib = (q + 8).to(torch.uint8).reshape(-1, 2)
        codes = nib[:, 0] | (nib[:, 1] << 4)
    return torch.cat([codes, scale.contiguous().view(torch.uint8)])


def decode(payload: Any, numel: int, fmt: str) -> Any:
    """Float32 values of one `encode`d payload (the first `numel`)."""
    import torch

    blocks = -(-numel // BLOCK)
    ncodes = payload.numel() - 4 * blocks
    codes, scale = payload[:ncodes], payload[ncodes:].contiguous().view(torch.float32)
    if fmt == "int8":
        q = codes.contiguous().view(torch.int8).to(torch.float32)
    else:
        lo = (codes & 0x0F).to(torch.int16) - 8
        hi = (codes >> 4).to(torch.int16) - 8
        q = torch.stack([lo, hi], dim=1).reshape(-1).to(torch.float32)
    return (q.view(blocks, BLOCK) * scale[:, None]).reshape(-1)[:numel]


def encode_chunks(x: Any, fmt: str, replicas: int) -> Any:
    """The quantised reduce-scatter's input: flat float32 `x` zero-padded to `replicas` chunks of
    `chunk_values` values, each chunk `encode`d on its own; a (replicas, chunk payload) uint8 tensor, row i
    for owner i."""
    import torch

    k = chunk_values(x.numel(), replicas)
    xp = torch.zeros(replicas * k, dtype=torch.float32, device=x.device)
    xp[:x.numel()] = x.reshape(-1)
    return torch.stack([encode(xp[i * k:(i + 1) * k], fmt) for i in range(replicas)])


def reduce_chunk(rows: Any, fmt: str) -> Any:
    """An owner's step: the R contributions of its chunk (rows of codes + scales, in member order) decoded,
    summed in float32 in member order, and the sum encoded again (the second rounding: `decode_chunks`
    of the all-gathered results gives back this re-encoded sum, not the float32 one)."""
    k = (rows.shape[1] * BLOCK) // (BLOCK + 4) if fmt == "int8" else (rows.shape[1] * BLOCK) // (BLOCK // 2 + 4)
    acc = decode(rows[0], k, fmt)
    for r in rows[1:]:
        acc = acc + decode(r, k, fmt)
    return encode(acc, fmt)


def decode_chunks(rows: Any, numel: int, fmt: str) -> Any:
    """The all-gathered reduced chunks (rows in owner order), decoded into the first `numel` values."""
    import torch

    k = (rows.shape[1] * BLOCK) // (BLOCK + 4) if fmt == "int8" else (rows.shape[1] * BLOCK) // (BLOCK // 2 + 4)
    return torch.cat([decode(r, k, fmt) for r in rows])[:numel]


def quantised_sum(payloads: list[Any], numel: int, fmt: str) -> Any:
    """What every rank ends with, from every member's `encode_chunks` (member order): owner i's
    `reduce_chunk` of row i of each, decoded (the virtual clock computes it so; tests compare)."""
    import torch

    R = len(payloads)
    reduced = torch.stack([reduce_chunk(torch.stack([p[i] for p in payloads]), fmt) for i in range(R)])
    return decode_chunks(reduced, numel, fmt)


def roundtrip(x: Any, fmt: str) -> Any:
    """What the other replicas receive of `x`: decode(encode(x)), or x rounded to bf16, or x itself."""
    import torch

    if fmt == "none":
        return x
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    return decode(encode(x.reshape(-1), fmt), x.numel(), fmt).view_as(x).to(x.dtype)


def pack(pieces: list[Any], fmt: str) -> Any:
    """One flat tensor of several units' pseudo-gradients, each starting on a block boundary in the integer
    formats (so that re-encoding the whole gives each unit's own codes back); `unpack` splits it."""
    import torch

    if not blockwise(fmt):
        return torch.cat(pieces)
    out = torch.zeros(sum(padded(p.numel(), fmt) for p in pieces), dtype=pieces[0].dtype, device=pieces[0].device)
    off = 0
    for p in pieces:
        out[off:off + p.numel()] = p
        off += padded(p.numel(), fmt)
    return out


def unpack(flat: Any, sizes: list[int], fmt: str) -> list[Any]:
    """The pieces of a `pack`ed tensor (views)."""
    out, off = [], 0
    for n in sizes:
        out.append(flat[off:off + n])
        off += padded(n, fmt)
    return out


def compression_ratio(fmt: str, replicas: int, numel: int = 1 << 20) -> float:
    """Recorded bytes against float32's all-reduce, for a tensor of `numel` values (docs, lesson)."""
    ref = collective_bytes(numel, "none", replicas)
    return collective_bytes(numel, fmt, replicas) / ref if numel and ref else math.nan
