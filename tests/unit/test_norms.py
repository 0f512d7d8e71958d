"""`squared_norm`: the float64 partial sums that shard-group all-reduces turn into unit norms."""

from __future__ import annotations

import math

import torch

from edit_lab.core.sharding import squared_norm


def test_squared_norm_equals_the_float64_sum_of_squares():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100_003, generator=g) * 1e-3
    got = squared_norm(x)
    assert got.dtype == torch.float64 and got.dim() == 0
    want = x.double().pow(2).sum()
    assert math.isclose(float(got), float(want), rel_tol=1e-12)


def test_squared_norm_keeps_float32_overflow_out():
    # 1e20² overflows float32 but not float64: the norm of a blown-up replica stays finite and comparable
    x = torch.full((4,), 1e20, dtype=torch.float32)
    assert math.isclose(float(squared_norm(x)), 4e40, rel_tol=1e-6)


def test_squared_norm_of_a_non_finite_shard_is_not_finite():
    assert not math.isfinite(float(squared_norm(torch.tensor([1.0, float("nan")]))))
    assert float(squared_norm(torch.tensor([1.0, float("inf")]))) == math.inf
