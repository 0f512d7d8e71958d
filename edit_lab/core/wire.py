"""Compressed pseudo-gradients: the wire formats of a Local-SGD sync (`RunConfig.wire.format`, `error_feedback`).

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

- ``sparseloco``: SparseLoCo's compressor (Sarfi et al., 2025; the format Covenant-72B trained with), every
  unit's pseudo-gradient cut into chunks of `sparseloco_chunk` values (4096, the authors' 64×64 tiles, here
  consecutive values of the unit's flat shard), the k = round(chunk·`sparseloco_topk`) largest magnitudes of each
  chunk kept (64 of 4096, 1.56 %, the authors' default), their values quantised to 2 bits as the authors do: over
  the unit's kept values, shift = their mean, 4 bins of 1.5 σ (6 σ across the 4), each code decoded to its bin's
  mean (`sparsify`). Top-k sets differ between replicas, so no sum of payloads is defined: each rank sends its
  payload in an **all-gather**, and every rank decodes the R payloads and sums them in member order
  (`sparse_sum`), the same float32 sum everywhere. A payload (`encode_sparse`, lossless on what `sparsify`
  made) is, for every chunk, k indices of log2(chunk) bits each (the position inside the chunk, 12 bits at 4096:
  what chunking buys against a 32-bit position in the tensor), k 2-bit codes, and the chunk's 4 decoded levels
  in float32 (the authors send one shift and 4 bin means per tensor; the lab's exchange sees a packed tensor whose
  unit boundaries it does not know, so it sends each chunk's 4 levels: 16 of its 128 bytes at the defaults).
  Error feedback is part of the format (SparseLoCo's, with decay β = `sparseloco_beta`, 0.95: e ← β·e + Δ,
  Δ̂ = sparsify(e), e ← e − Δ̂; `OuterState.pseudo_gradient`), and it takes the place of outer momentum: the outer
  step is plain SGD on the mean, θ ← θ − outer_lr·(1/R)·Σ Δ̂_r (the config requires `error_feedback` and
  `outer_momentum` = 0). That mean is the paper's Algorithm; the authors' torch code instead averages each
  position over the replicas that selected it (a scatter-reduce "mean"); the lab sums as every other format does,
  so EDiT's weights and the penalty compose unchanged.

  Checked how: the authors' repository could not be fetched or installed here, so the lab's `sparsify` is held
  (tests/unit/test_sparseloco.py) to a step-by-step re-implementation of the paper's algorithm and of the
  quantiser as the authors' published `TopKCompressor._quantize` computes it (read, not run).

The counting rule, one for every collective (`ring_bytes`, used by `Comm`'s events and link model, the virtual
clock, the simulator and the tables): an event's `bytes` is what one rank sends on a ring of R members, an
all-reduce of S bytes 2(R − 1)/R·S, a reduce-scatter or all-to-all (R − 1)/R·S, an all-gather (R − 1)·p. The
integer formats' exchange sends (R − 1) encoded chunks in each half, 2(R − 1)/R of the encoded tensor: the
all-reduce of the compressed tensor (`collective_bytes`). So every format keeps its ratio at every R: bf16
0.5 of float32, int8 (1 + 1/64)/4 = 0.254, int4 (1/2 + 1/64)/4 = 0.129 (`compression_ratio`), plus the padding
to R whole-block chunks, which grows when a tensor has few blocks per member (nano's 163 blocks at R = 64: 192,
int8 0.300). Before issue 48 the integer formats travelled as an all-gather of R payloads, and the lab counted
an all-reduce at S and an all-gather at R·p: int8 cost 2.03× float32's bytes at R = 8.

sparseloco's all-gather sends (R − 1)·p per rank, p its payload, against float32's 2(R − 1)/R·S: its ratio is
R·p/(2S) and **grows linearly with R** (an all-gather carries every member's payload to everyone; a reduce-scatter
carries one chunk of a sum). At the defaults p/S = 128/16384 per chunk, ratio R/256: 0.0078 at R = 2, 0.031 at
R = 8, and it ties int4's 0.129 at R = 33 and passes it at R = 34 (`sparse_breakeven`), float32's 1 at R = 256: up to
R = 33 it is the cheaper wire, from 34 on int4's reduce-scatter is.

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
from dataclasses import dataclass
from typing import Any

from edit_lab.registry import WIRE_FORMATS  # the choices, torch-free, beside the methods' names

#: Values per float32 scale of the integer formats: 1.6 % overhead on int8's bytes, 3.1 % on int4's.
BLOCK = 256
#: SparseLoCo's defaults (the authors'): chunks of 4096 values, 64 of them kept (1.56 %), error-feedback decay 0.95.
SPARSE_CHUNK = 4096
SPARSE_TOPK = 64 / 4096
SPARSE_BETA = 0.95
#: The authors' 2-bit quantiser: 4 bins spread over 6 standard deviations of the kept values.
SPARSE_BINS = 4
SPARSE_SIGMAS = 6.0
#: The sync-group collectives that carry pseudo-gradients (or, for post_local_sgd, what stands for them).
PSEUDO_GRADIENT_KINDS: frozenset[str] = frozenset({"sync_reduce", "co2_reduce", "param_average"})
_LEVELS = {"int8": 127, "int4": 7}


@dataclass(frozen=True)
class SparseSpec:
    """sparseloco's parameters, carried in the run's wire string (`spec`): "sparseloco:4096:0.015625:0.95"."""

    chunk: int = SPARSE_CHUNK
    topk: float = SPARSE_TOPK
    beta: float = SPARSE_BETA

    @property
    def k(self) -> int:
        """Values kept per chunk: round(chunk·topk), at least 1 (the authors' rule)."""
        return max(1, min(self.chunk, round(self.chunk * self.topk)))

    @property
    def index_bits(self) -> int:
        """Bits of one index: its position inside its chunk."""
        return max(1, (self.chunk - 1).bit_length())


def spec(wire_format: str, chunk: int = SPARSE_CHUNK, topk: float = SPARSE_TOPK, beta: float = SPARSE_BETA) -> str:
    """The wire string a run's Comm, methods and outer state carry: the format, with sparseloco's knobs."""
    return f"sparseloco:{chunk}:{topk!r}:{beta!r}" if wire_format == "sparseloco" else wire_format


def spec_of(cfg: Any) -> str:
    """`spec` of a RunConfig's wire section."""
    w = cfg.wire
    return spec(w.format, w.sparseloco_chunk, w.sparseloco_topk, w.sparseloco_beta)


def sparse(fmt: str) -> SparseSpec | None:
    """sparseloco's parameters if `fmt` is a sparseloco wire string ("sparseloco" alone: the defaults), else None."""
    if not fmt.startswith("sparseloco"):
        return None
    parts = fmt.split(":")[1:]
    if not parts:
        return SparseSpec()
    return SparseSpec(int(parts[0]), float(parts[1]), float(parts[2]))


def base(fmt: str) -> str:
    """The format's name without its parameters (one of WIRE_FORMATS)."""
    return fmt.split(":", 1)[0]


def blockwise(fmt: str) -> bool:
    """Integer codes with per-block scales: the formats that travel as a quantised reduce-scatter + all-gather."""
    return fmt in _LEVELS


def align(fmt: str) -> int:
    """Values each unit's piece of a packed tensor is padded to: a block (int8 / int4), a chunk (sparseloco), 1."""
    sp = sparse(fmt)
    return sp.chunk if sp is not None else BLOCK if blockwise(fmt) else 1


def padded(numel: int, fmt: str) -> int:
    """Values one tensor of `numel` takes on the wire: whole blocks for the integer formats, whole chunks for
    sparseloco."""
    a = align(fmt)
    return -(-numel // a) * a


def collective_op(fmt: str) -> str:
    """The collective a pseudo-gradient travels as, for the ring rule: an all-gather of payloads in sparseloco
    (its `wire_tensor_bytes` is the all-gather's output, R payloads), an all-reduce in every other format."""
    return "all_gather" if sparse(fmt) is not None else "all_reduce"


def payload_bytes(numel: int, fmt: str) -> int:
    """Bytes one replica puts on the wire for a tensor of `numel` float32 values."""
    sp = sparse(fmt)
    if sp is not None:  # per chunk: k indices, k 2-bit codes, 4 float32 levels; bits packed over the whole tensor
        chunks = -(-numel // sp.chunk)
        return -(-chunks * sp.k * sp.index_bits // 8) + -(-chunks * sp.k * 2 // 8) + 4 * SPARSE_BINS * chunks
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
    if sparse(fmt) is not None:  # the all-gather's output: every member's payload
        return replicas * payload_bytes(numel, fmt)
    if not blockwise(fmt):
        return payload_bytes(numel, fmt)
    return replicas * payload_bytes(chunk_values(numel, replicas), fmt)


def collective_bytes(numel: int, fmt: str, replicas: int) -> int:
    """The bytes the lab records (an event's `bytes`), and the link and both clocks charge, for one sync-group
    pseudo-gradient collective of `numel` values: what one rank sends on a ring (`ring_bytes`) of
    `wire_tensor_bytes`. In int8 / int4: (R − 1) encoded chunks in the reduce-scatter and (R − 1) in the
    all-gather, 2(R − 1)·p_chunk, the compressed tensor's all-reduce. In sparseloco: (R − 1)·p, an all-gather."""
    return ring_bytes(collective_op(fmt), wire_tensor_bytes(numel, fmt, replicas), replicas)


def sparse_breakeven(fmt: str = "sparseloco", against: str = "int4", numel: int = 1 << 20) -> int:
    """The smallest R at which sparseloco's all-gather sends more than `against` (int4: 33 at the defaults)."""
    R = 2
    while R < 1 << 16 and collective_bytes(numel, fmt, R) <= collective_bytes(numel, against, R):
        R += 1
    return R


def check(fmt: str) -> None:
    fmt = base(fmt)
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
    """What the other replicas receive of `x`: decode(encode(x)), or x rounded to bf16, or x itself; in sparseloco
    `sparsify(x)` (its exchange then carries that exactly)."""
    import torch

    if sparse(fmt) is not None:
        return sparsify(x.reshape(-1), fmt).view_as(x).to(x.dtype)
    if fmt == "none":
        return x
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    return decode(encode(x.reshape(-1), fmt), x.numel(), fmt).view_as(x).to(x.dtype)


def pack(pieces: list[Any], fmt: str) -> Any:
    """One flat tensor of several units' pseudo-gradients, each starting on a block boundary in the integer
    formats, on a chunk boundary in sparseloco (so that re-encoding the whole gives each unit's own codes back);
    `unpack` splits it."""
    import torch

    if align(fmt) == 1:
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


# ------------------------------------------------------------------------------------------- sparseloco (torch)
def _chunks(x: Any, chunk: int) -> Any:
    """Flat `x` zero-padded to whole chunks, as a (chunks, chunk) view."""
    import torch

    n = x.numel()
    xp = torch.zeros(-(-n // chunk) * chunk, dtype=torch.float32, device=x.device)
    xp[:n] = x.reshape(-1)
    return xp.view(-1, chunk)


def _top_k(xc: Any, k: int) -> Any:
    """Per chunk (row), the positions of the k largest magnitudes, ascending. Ties go to the lower position (a
    stable sort, where `torch.topk` promises no order): a kept 0 decodes to its bin's level, not to 0, so which
    of several zeros is kept changes the result, and the payload must not depend on a kernel's internal order."""
    return xc.abs().sort(dim=1, descending=True, stable=True).indices[:, :k].sort(dim=1).values


def quantise_2bit(vals: Any) -> tuple[Any, Any]:
    """The authors' 2-bit quantiser of a tensor's kept values: (codes 0..3, the 4 decoded levels).

    shift = mean; centred c = v − shift; σ = ‖c‖/√(m − 1) (0 for one value); scale = 6σ/4 (1 when that is 0 or
    not finite); code = clamp(round(c/scale + 2), 0, 3), round half to even; the level of a code is shift plus the
    mean of the centred values it holds (0 for an empty bin: shift). Deterministic, no stochastic rounding."""
    import torch

    v = vals.reshape(-1).to(torch.float32)
    m = v.numel()
    shift = v.mean()
    c = v - shift
    std = c.norm() / math.sqrt(m - 1) if m > 1 else torch.zeros((), dtype=torch.float32, device=v.device)
    scale = SPARSE_SIGMAS * std / SPARSE_BINS
    if not bool(torch.isfinite(scale)) or float(scale) == 0.0:
        scale = torch.ones((), dtype=torch.float32, device=v.device)
    q = torch.round(c / scale + SPARSE_BINS // 2).clamp_(0, SPARSE_BINS - 1).to(torch.int64)
    sums = torch.zeros(SPARSE_BINS, dtype=torch.float32, device=v.device).scatter_add_(0, q, c)
    counts = torch.zeros(SPARSE_BINS, dtype=torch.float32, device=v.device).scatter_add_(0, q, torch.ones_like(c))
    levels = torch.where(counts > 0, sums / counts.clamp(min=1), torch.zeros_like(sums)) + shift
    return q.view_as(vals), levels


def sparsify(x: Any, fmt: str = "sparseloco") -> Any:
    """SparseLoCo's compressor C(x) of one unit's flat pseudo-gradient (module docstring): per chunk the k largest
    magnitudes, their values quantised to 2 bits over the whole unit (`quantise_2bit`), everything else 0."""
    import torch

    sp = sparse(fmt)
    assert sp is not None, fmt
    n = x.numel()
    xc = _chunks(x, sp.chunk)
    idx = _top_k(xc, sp.k)
    codes, levels = quantise_2bit(xc.gather(1, idx))
    out = torch.zeros_like(xc).scatter_(1, idx, levels[codes])
    return out.reshape(-1)[:n]


def _pack_bits(v: Any, bits: int) -> Any:
    """Non-negative integers below 2**bits, `bits` bits each, little-endian, into uint8 (the last byte padded)."""
    import torch

    shifts = torch.arange(bits, device=v.device)
    b = ((v.reshape(-1, 1).to(torch.int64) >> shifts) & 1).reshape(-1)
    b = torch.cat([b, b.new_zeros(-b.numel() % 8)]).view(-1, 8)
    return (b << torch.arange(8, device=v.device)).sum(1).to(torch.uint8)


def _unpack_bits(p: Any, bits: int, count: int) -> Any:
    import torch

    b = ((p.to(torch.int64).reshape(-1, 1) >> torch.arange(8, device=p.device)) & 1).reshape(-1)[:count * bits]
    return (b.view(count, bits) << torch.arange(bits, device=p.device)).sum(1)


def encode_sparse(y: Any, fmt: str = "sparseloco") -> Any:
    """The payload of a flat tensor `y` that `sparsify` made (or a multiple of it, EDiT's w·Δ̂, or several units'
    `pack`ed): per chunk its k largest magnitudes, whose values take at most 4 distinct levels. Lossless on such a
    tensor: indices (`index_bits` each), then 2-bit codes, then each chunk's 4 levels in float32, as one uint8
    tensor of `payload_bytes` bytes. A chunk holding a non-finite value sends NaN levels (it decodes to NaN where
    it was kept, as an integer format's block does); a chunk with more than 4 distinct kept values is refused:
    it did not come from `sparsify`."""
    import torch

    sp = sparse(fmt)
    assert sp is not None, fmt
    yc = _chunks(y, sp.chunk)
    idx = _top_k(yc, sp.k)
    vals = yc.gather(1, idx)
    # the chunk's distinct kept values, ascending: each level the smallest value above the one before
    inf = torch.full_like(vals, math.inf)
    levels = [vals.min(dim=1).values]
    for _ in range(SPARSE_BINS - 1):
        levels.append(torch.where(vals > levels[-1][:, None], vals, inf).min(dim=1).values)
    table = torch.stack(levels, dim=1)
    codes = (table[:, None, :] < vals[:, :, None]).sum(-1).clamp_(max=SPARSE_BINS - 1)
    table = torch.where(torch.isinf(table), 0.0, table)  # levels no value uses
    finite = torch.isfinite(vals).all(dim=1)
    table[~finite] = math.nan
    exact = (table.gather(1, codes) == vals).all(dim=1) | ~finite
    if not bool(exact.all()):
        raise ValueError(f"sparseloco: chunk {int((~exact).nonzero()[0])} holds more than {SPARSE_BINS} distinct "
                         "kept values: a sparseloco pseudo-gradient is what wire.sparsify made (OuterState)")
    return torch.cat([_pack_bits(idx, sp.index_bits), _pack_bits(codes, 2),
                      table.to(torch.float32).contiguous().view(torch.uint8).reshape(-1)])


def decode_sparse(payload: Any, numel: int, fmt: str = "sparseloco") -> Any:
    """The first `numel` float32 values of one `encode_sparse`d payload (zeros where nothing was kept)."""
    import torch

    sp = sparse(fmt)
    assert sp is not None, fmt
    chunks = -(-numel // sp.chunk)
    m = chunks * sp.k
    ni, nc = -(-m * sp.index_bits // 8), -(-m * 2 // 8)
    idx = _unpack_bits(payload[:ni], sp.index_bits, m).view(chunks, sp.k)
    codes = _unpack_bits(payload[ni:ni + nc], 2, m).view(chunks, sp.k)
    table = payload[ni + nc:].clone().view(torch.float32).view(chunks, SPARSE_BINS)  # a fresh, aligned copy
    out = torch.zeros(chunks, sp.chunk, dtype=torch.float32, device=payload.device)
    out.scatter_(1, idx, table.gather(1, codes))
    return out.reshape(-1)[:numel]


def sparse_sum(payloads: Any, numel: int, fmt: str = "sparseloco") -> Any:
    """What every rank ends with after the all-gather: the R payloads (rows, member order) decoded and summed in
    float32 in member order (the real exchange and the virtual clock both compute it so)."""
    acc = decode_sparse(payloads[0], numel, fmt)
    for p in payloads[1:]:
        acc = acc + decode_sparse(p, numel, fmt)
    return acc
