"""The order in which gloo's all-reduce adds float32 tensors, so that the virtual clock's sums have the same bits.

A sum of three or more floats depends on its order, and gloo does not add in rank order: its ring all-reduce cuts
the buffer into R chunks and accumulates chunk c around the ring, ending at rank c. Measured on this lab's torch
(2.13, CPU, `ProcessGroupGloo`, SUM of float32; groups of 2 to 5 ranks, 1 to 250,001 elements, values spread over
seven orders of magnitude: `tests/distributed/test_ring_order.py` asserts it against gloo, bit for bit):

- chunk length: ceil(n / R) rounded up to a multiple of 2 elements (8 bytes), the last chunks shorter or empty;
- chunk c: ((x[c−1] + x[c−2]) + … + x[c−R+1]) + x[c], ranks modulo R, left to right.

With two ranks either order gives the same bits (a + b = b + a), which is why the virtual clock matched real runs bit
for bit on groups of two before it followed this rule. Other dtypes and other reductions keep the rank order (the
lab sums float32 only); gloo's reduce-scatter is not modelled (the lab's reduce-scatters run in shard groups, of two
ranks in every bit-for-bit test).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: gloo's chunks are whole multiples of this many float32 values (8 bytes).
CHUNK_ALIGN = 2


def chunk_bounds(n: int, members: int) -> list[tuple[int, int]]:
    """[start, end) of each of the `members` chunks of an n-element buffer, as gloo's ring cuts it."""
    per = -(-n // members)
    per = -(-per // CHUNK_ALIGN) * CHUNK_ALIGN
    return [(min(c * per, n), min((c + 1) * per, n)) for c in range(members)]


def ring_sum(ins: Sequence[torch.Tensor]) -> torch.Tensor:
    """The element-wise sum of `ins` (one tensor per member, in the group's rank order) with gloo's bits."""
    R = len(ins)
    if R <= 2 or ins[0].dtype != torch.float32:
        acc = ins[0].clone()
        for x in ins[1:]:
            acc.add_(x)
        return acc
    flat = [x.reshape(-1) for x in ins]
    out = torch.empty_like(flat[0])
    for c, (a, b) in enumerate(chunk_bounds(flat[0].numel(), R)):
        if a < b:
            acc = flat[(c - 1) % R][a:b].clone()
            for k in range(2, R + 1):
                acc.add_(flat[(c - k) % R][a:b])
            out[a:b] = acc
    return out.view_as(ins[0])
