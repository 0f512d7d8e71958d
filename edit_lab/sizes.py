"""Model sizes: the shape of each Llama the lab can build, without importing torch.

Torch-free, for `RunConfig.validate` (why: edit_lab/__init__.py). `edit_lab.core.model` re-exports everything
here, so `from edit_lab.core.model import SIZES` works too.
"""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_SIZE = 256
"""Byte-level vocabulary: token id == byte value."""


@dataclass(frozen=True)
class ModelSize:
    """Shape of a :class:`Llama`. Frozen so it can be shared and used as a dict key."""

    name: str
    dim: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    max_seq_len: int

    def __post_init__(self) -> None:
        if self.dim <= 0 or self.n_layers <= 0 or self.n_heads <= 0 or self.ffn_hidden <= 0:
            raise ValueError(f"ModelSize {self.name!r}: all dimensions must be positive, got {self}")
        if self.dim % self.n_heads != 0:
            raise ValueError(f"ModelSize {self.name!r}: dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.head_dim % 2 != 0:
            raise ValueError(f"ModelSize {self.name!r}: head_dim {self.head_dim} must be even for RoPE")
        if self.max_seq_len <= 0:
            raise ValueError(f"ModelSize {self.name!r}: max_seq_len must be positive, got {self.max_seq_len}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def block_params(self) -> int:
        """Parameters of one :class:`Block`: q, k, v, o projections, 3 SwiGLU matrices, 2 norms."""
        d, f = self.dim, self.ffn_hidden
        return 4 * d * d + 3 * d * f + 2 * d

    def root_params(self) -> int:
        """Parameters of the :class:`RootUnit`: embedding, final norm, untied head."""
        return 2 * VOCAB_SIZE * self.dim + self.dim

    def num_params(self) -> int:
        """Total parameters, without building the model (handy for tables of sizes)."""
        return self.root_params() + self.n_layers * self.block_params()


SIZES: dict[str, ModelSize] = {
    s.name: s
    for s in (
        ModelSize("nano", dim=32, n_layers=2, n_heads=2, ffn_hidden=88, max_seq_len=64),
        ModelSize("tiny", dim=64, n_layers=4, n_heads=4, ffn_hidden=172, max_seq_len=128),
        ModelSize("small", dim=256, n_layers=6, n_heads=8, ffn_hidden=688, max_seq_len=256),
        # small's blocks, twice as many: the regime layer-wise sync is built for (only the first two
        # units' syncs have no compute to hide behind, a smaller share of a deeper model)
        ModelSize("deep", dim=256, n_layers=12, n_heads=8, ffn_hidden=688, max_seq_len=256),
        ModelSize("base100m", dim=768, n_layers=12, n_heads=12, ffn_hidden=2560, max_seq_len=1024),
    )
}


def get_size(name: str) -> ModelSize:
    """Look a size up by name; the error lists the allowed names so a typo in a config is obvious."""
    try:
        return SIZES[name]
    except KeyError:
        raise ValueError(f"unknown model size {name!r}; allowed: {', '.join(SIZES)}") from None
