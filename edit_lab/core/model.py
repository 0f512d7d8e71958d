"""A small Llama-style decoder over bytes, cut into EDiT synchronisation units.

Why this shape: EDiT synchronises parameters *unit by unit* inside the forward pass (one unit per
transformer block, plus one "root" unit holding everything that is not a block). The sharded
engine flattens the ``nn.Parameter``s of each unit, in ``named_parameters()`` order, into one
buffer, so the model is written so that

* every parameter belongs to exactly one unit (the head is *untied* from the embedding: a tied
  weight would belong to two units at once);
* no unit reads another unit's parameters;
* the forward can be replayed unit by unit by the engine::

      cos, sin = model.rope(T, device)
      h = root(tokens, 'embed')
      for block in blocks:
          h = block(h, cos, sin)
      logits = root(h, 'head')

RoPE tables are recomputed from the sequence length, never stored (neither parameters nor
state-dict buffers), so they are not synchronised, sharded or checkpointed.

The vocabulary is the 256 byte values, so no tokenizer has to be downloaded.

Sizes (parameters computed by :meth:`ModelSize.num_params`, checked against the built model by
the unit tests)::

    name       dim  layers  heads  ffn   max_seq_len  parameters   per block   root unit
    nano        32     2      2     88        64          41,632       12,608      16,416
    tiny        64     4      4    172       128         230,976       49,536      32,832
    small      256     6      8    688       256        4,877,568     791,040     131,328
    base100m   768    12     12   2560      1024       99,502,848   8,259,072     393,984

``nano`` is for tests, ``tiny`` trains visibly in a minute on two CPU cores shared by four
processes, ``small`` suits a workstation, ``base100m`` (about 100M parameters) is for GPUs.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from edit_lab.sizes import SIZES, VOCAB_SIZE, ModelSize, get_size  # noqa: F401 (re-exported: the table is torch-free)


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain (no bias, no mean subtraction), as in Llama."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # Normalise in float32 so bf16/fp16 runs do not lose the small mean square.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """Rotary position tables ``cos, sin`` of shape ``[seq_len, head_dim // 2]`` (float32, CPU).

    Computed, not stored: they are a pure function of the shape, so they never need syncing.
    """
    if head_dim % 2 != 0:
        raise ValueError(f"head_dim must be even for RoPE, got {head_dim}")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64, device="cpu"), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` of shape ``[..., T, head_dim]`` by position (half-split pairing, as GPT-NeoX).

    Pairs dimension ``i`` with ``i + head_dim/2``; computed in float32 and cast back.
    """
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    cos = cos.to(device=x.device, dtype=torch.float32)
    sin = sin.to(device=x.device, dtype=torch.float32)
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.to(x.dtype)


class Block(nn.Module):
    """One transformer block = one EDiT sync unit.

    Pre-norm causal self-attention with RoPE, then a pre-norm SwiGLU MLP, each added residually.
    """

    def __init__(self, dim: int, n_heads: int, ffn_hidden: int) -> None:
        super().__init__()
        if dim % n_heads != 0:
            raise ValueError(f"dim {dim} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.attn_norm = RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)  # output projection (scaled init)
        self.mlp_norm = RMSNorm(dim)
        self.w_gate = nn.Linear(dim, ffn_hidden, bias=False)
        self.w_up = nn.Linear(dim, ffn_hidden, bias=False)
        self.w_down = nn.Linear(ffn_hidden, dim, bias=False)  # output projection (scaled init)

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        B, T, D = h.shape
        a = self.attn_norm(h)

        def heads(t: Tensor) -> Tensor:  # [B, T, D] -> [B, H, T, hd]
            return t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

        q = apply_rope(heads(self.wq(a)), cos, sin)
        k = apply_rope(heads(self.wk(a)), cos, sin)
        v = heads(self.wv(a))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.wo(att.transpose(1, 2).reshape(B, T, D))
        m = self.mlp_norm(h)
        return h + self.w_down(F.silu(self.w_gate(m)) * self.w_up(m))


class RootUnit(nn.Module):
    """The "root" sync unit: everything that is not a block (embedding, final norm, untied head).

    One module with a ``part`` switch rather than two modules, so the root is *one* unit for
    sharding and syncing, and ``torch.func.functional_call(root, params, (x, part))`` can drive
    either half with the same flat parameter set.
    """

    PARTS = ("embed", "head")

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB_SIZE, dim)
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB_SIZE, bias=False)

    def forward(self, x: Tensor, part: str) -> Tensor:
        if part == "embed":
            return self.tok_emb(x)
        if part == "head":
            return self.head(self.norm(x))
        raise ValueError(f"unknown RootUnit part {part!r}; allowed: {', '.join(self.PARTS)}")


class Llama(nn.Module):
    """Byte-level Llama-style decoder whose sync units are ``[root, *blocks]``."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.size = size
        self.root = RootUnit(size.dim)
        self.blocks = nn.ModuleList(
            Block(size.dim, size.n_heads, size.ffn_hidden) for _ in range(size.n_layers)
        )

    def units(self) -> list[nn.Module]:
        """The EDiT sync units in the order the forward first touches them."""
        return [self.root, *self.blocks]

    def rope(self, seq_len: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
        """RoPE tables for ``seq_len`` positions, on ``device``; checks the model's context length."""
        if seq_len > self.size.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len {self.size.max_seq_len} of size {self.size.name!r}")
        cos, sin = rope_tables(self.size.head_dim, seq_len)
        return cos.to(device), sin.to(device)

    def forward(self, tokens: Tensor, targets: Tensor | None = None) -> Tensor:
        """Logits ``[B, T, 256]``, or the mean cross-entropy loss when ``targets`` is given."""
        cos, sin = self.rope(tokens.shape[1], tokens.device)
        h = self.root(tokens, "embed")
        for block in self.blocks:
            h = block(h, cos, sin)
        logits = self.root(h, "head")
        if targets is None:
            return logits
        return loss_fn(logits, targets)


def loss_fn(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-byte cross-entropy over all tokens, in float32 whatever the logits' dtype."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def init_weights(model: Llama, seed: int) -> None:
    """Initialise every parameter from ``seed`` alone, GPT-2 style.

    Linear and embedding weights ~ N(0, 0.02); the two output projections of each block
    (attention ``wo`` and MLP ``w_down``) ~ N(0, 0.02 / sqrt(2 * n_layers)) so the residual stream
    does not grow with depth; RMSNorm gains 1. A private generator, visited in
    ``named_modules()`` order, makes the result independent of (and harmless to) the global RNG.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    std = 0.02
    out_std = std / math.sqrt(2 * model.size.n_layers)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                is_out = name.endswith(".wo") or name.endswith(".w_down")
                nn.init.normal_(module.weight, 0.0, out_std if is_out else std, generator=gen)


def build_model(size: str | ModelSize, seed: int, device: torch.device | str = "cpu") -> Llama:
    """Build a deterministically initialised :class:`Llama`.

    Same ``seed`` -> bitwise-same parameters on every process, whatever the global RNG state,
    so all replicas start from the same point without a broadcast. Modules are first created on
    the meta device (no default init, no global RNG use), then materialised and initialised on
    the CPU, then moved to ``device``: values do not depend on the device.
    """
    if isinstance(size, str):
        size = get_size(size)
    with torch.device("meta"):
        model = Llama(size)
    model = model.to_empty(device="cpu")
    init_weights(model, seed)
    return model.to(device)
