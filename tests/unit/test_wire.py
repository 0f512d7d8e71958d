"""Compressed pseudo-gradients (edit_lab/core/wire.py) and Streaming DiLoCo's schedule and refusals (issue 38).

The codec: what a payload weighs (the bytes the link charges and the simulator predicts) is the encoded
tensor's own size; each value comes back within half a code step of its block; re-encoding a decoded tensor
(or EDiT's weighted w·Δ̂) gives the same values back, so the collective carries what the outer state judged;
error feedback loses nothing over a run (Σ sent + residual = Σ Δ). The schedule: fragment p lands every H
steps offset by p·H/P, and P = 1 is DiLoCo's schedule.
"""

from __future__ import annotations

import pytest
import torch

from edit_lab.config import ConfigError, RunConfig
from edit_lab.core import wire
from edit_lab.core.outer import OuterState
from edit_lab.protocol import fragment_landing, fragment_units, is_sync_step


@pytest.mark.parametrize("fmt", wire.WIRE_FORMATS)
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000, 4096])
def test_payload_bytes_are_the_encoded_tensors(fmt, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    if wire.blockwise(fmt):
        assert wire.encode(x, fmt).numel() == wire.payload_bytes(n, fmt)
    elif fmt == "bf16":
        assert x.to(torch.bfloat16).numel() * 2 == wire.payload_bytes(n, fmt)
    elif fmt == "sparseloco":
        assert wire.encode_sparse(wire.sparsify(x)).numel() == wire.payload_bytes(n, fmt)
    else:
        assert 4 * n == wire.payload_bytes(n, fmt)


def test_collective_bytes_keep_their_ratio_at_every_width():
    # issue 48: the counting rule is now what a rank sends on a ring (wire.ring_bytes), no longer the tensor's
    # size for an all-reduce and R payloads for an all-gather; and int8 / int4 travel as a quantised
    # reduce-scatter + all-gather, so they keep their ratio at every R instead of growing with it
    n = 1 << 20
    assert wire.collective_bytes(n, "none", 8) == 2 * 7 * 4 * n // 8  # 2(R - 1)/R·S
    assert wire.collective_bytes(n, "bf16", 8) == 2 * 7 * 2 * n // 8
    assert wire.collective_bytes(n, "none", 2) == 4 * n  # at R = 2 the ring rule is the tensor's size
    for R in (2, 3, 4, 8, 16, 64):
        # (R = 3: 4096 blocks pad to 4098, three chunks of 1366)
        assert wire.compression_ratio("int8", R) == pytest.approx((1 + 4 / 256) / 4, rel=1e-3)
        assert wire.compression_ratio("int4", R) == pytest.approx((0.5 + 4 / 256) / 4, rel=1e-3)
    # a small tensor pads to R whole-block chunks: 3 blocks at R = 4 take 4
    assert wire.wire_tensor_bytes(3 * 256, "int8", 4) == 4 * (256 + 4)


@pytest.mark.parametrize("fmt,levels", [("int8", 127), ("int4", 7)])
def test_integer_codes_round_within_half_a_step_and_reencode_to_themselves(fmt, levels):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g) * torch.linspace(1e-4, 1.0, 1000)
    x[300:556] = 0.0  # a block of zeros decodes to zeros
    y = wire.roundtrip(x, fmt)
    for b in range(0, 1000, wire.BLOCK):
        blk = x[b:b + wire.BLOCK]
        step = float(blk.abs().max()) / levels
        assert float((y[b:b + wire.BLOCK] - blk).abs().max()) <= step / 2 * (1 + 1e-6) + 1e-12
    assert torch.equal(y[512:556], torch.zeros(44))
    assert torch.allclose(wire.roundtrip(y, fmt), y, rtol=1e-6, atol=0)
    assert torch.allclose(wire.roundtrip(0.37 * y, fmt), 0.37 * y, rtol=1e-6, atol=0)  # EDiT's w·Δ̂


def test_bf16_keeps_eight_bits():
    x = torch.tensor([1.0, 1.0 + 2 ** -9, 3.14159])
    assert wire.roundtrip(x, "bf16").tolist() == [1.0, 1.0, 3.140625]


def test_pack_puts_every_unit_on_a_block_boundary():
    pieces = [torch.arange(1, 301, dtype=torch.float32), torch.arange(5, dtype=torch.float32)]
    flat = wire.pack(pieces, "int8")
    assert flat.numel() == 512 + 256
    back = wire.unpack(flat, [300, 5], "int8")
    assert all(torch.equal(a, b) for a, b in zip(back, pieces))
    assert wire.pack(pieces, "bf16").numel() == 305  # an all-reduce format: no padding


def test_error_feedback_loses_nothing_over_a_run():
    """Σ_k sent_k + e_K = Σ_k Δ_k: what the wire rounded away is sent later, never dropped."""
    g = torch.Generator().manual_seed(1)
    theta = [torch.randn(700, generator=g)]
    outer = OuterState(theta, lr=1.0, momentum=0.0, nesterov=False)
    outer.set_wire("int4", error_feedback=True)
    sent_total, true_total = torch.zeros(700), torch.zeros(700)
    for _ in range(5):
        moved = theta[0] + 0.01 * torch.randn(700, generator=g)
        true_total += outer.anchors[0].detach() - moved
        sent_total += outer.pseudo_gradient(0, moved)
    assert torch.allclose(sent_total + outer.residuals[0], true_total, atol=1e-5)
    assert float((sent_total - true_total).abs().max()) > 1e-4  # the residual is not nothing
    assert outer.numel() == 2 * 700  # anchor + residual (no outer step taken: no momentum buffer)
    without = OuterState(theta, lr=1.0, momentum=0.0, nesterov=False)
    without.set_wire("int4", error_feedback=False)
    assert without.residuals is None
    d = without.pseudo_gradient(0, theta[0] + 0.5)
    assert torch.allclose(d, -0.5 * torch.ones(700), rtol=1e-6)  # a constant block is exact in any format


def test_fragments_are_runs_of_whole_units():
    assert fragment_units(3, 2) == [[0, 1], [2]]
    assert fragment_units(5, 3) == [[0, 1], [2, 3], [4]]
    assert fragment_units(3, 3) == [[0], [1], [2]]


def test_fragment_p_lands_every_H_steps_offset_by_p_H_over_P():
    W, H, P = 2, 6, 3
    landings = {s: fragment_landing(s, W, H, P) for s in range(0, 20)}
    assert {s: f for s, f in landings.items() if f is not None} == {4: 0, 6: 1, 8: 2, 10: 0, 12: 1, 14: 2, 16: 0,
                                                                     18: 1}
    for s in range(40):  # one fragment: DiLoCo's sync steps
        assert (fragment_landing(s, W, 5, 1) is not None) == is_sync_step(s, W, 5)


def refusal(**kw) -> str:
    with pytest.raises(ConfigError) as e:
        RunConfig(**kw).validate()
    return str(e.value)


def test_streaming_diloco_and_wire_refusals_name_the_field():
    base = dict(method="streaming_diloco", model="nano", seq_len=32)
    assert refusal(**base, fragments=4, sync_interval=8).startswith(
        "fragments=4 is not allowed: at most 3, the sync units of model 'nano'")
    assert refusal(**base, fragments=3, sync_interval=10).startswith("sync_interval=10 is not allowed: a multiple of "
                                                                     "fragments=3")
    assert refusal(**base, fragments=2, sync_interval=4, fragment_sync_delay=2).startswith(
        "fragment_sync_delay=2 is not allowed: an integer in 0..1")
    assert refusal(**base, exclude_trouble=True).startswith("exclude_trouble=True is not allowed: false with "
                                                            "method='streaming_diloco'")
    assert refusal(method="sync", wire_format="int8").startswith("wire_format='int8' is not allowed: none with "
                                                                 "method='sync'")
    assert refusal(method="diloco", error_feedback=True).startswith("error_feedback=True is not allowed")
    assert refusal(method="diloco", wire_format="int2").startswith("wire_format='int2' is not allowed: one of none, "
                                                                   "bf16, int8, int4")
    assert refusal(**base, fragment_update_alpha=1.5).startswith("fragment_update_alpha=1.5 is not allowed")
    RunConfig(**base).validate()  # P = 2, H = 10, τ = 1, α = 0.5
    RunConfig(**base, wire_format="int4", error_feedback=True, checkpoint_every=2).validate()
    RunConfig(method="edit", wire_format="bf16").validate()
