"""SparseLoCo's compressor as a wire format (issue 48 item 4, edit_lab/core/wire.py).

What is checked, and against what: the authors' repository could not be fetched or installed where this was
written, so nothing here runs their code. `sparsify` is held to `reference_compress`, written below step by step
from the paper's Algorithm (chunked top-k of the error-feedback accumulator, quantised) and from the quantiser as
the authors' published `TopKCompressor._quantize` computes it (shift = mean, scale = 6σ/4, code = round(c/scale
+ 2) clamped to 0..3, a code decoded to the mean of its bin), in plain Python loops over lists; and the outer step
of `OuterState` with sparseloco's error feedback to the paper's e ← β·e + Δ, Δ̂ = C(e), e ← e − Δ̂,
θ ← θ − α·(1/R)·Σ Δ̂_r over several syncs of two replicas.
"""

from __future__ import annotations

import math

import pytest
import torch

from edit_lab.config import ConfigError, RunConfig
from edit_lab.core import wire
from edit_lab.core.outer import OuterState


def reference_compress(x: list[float], chunk: int, k: int) -> list[float]:
    """C(x) in plain Python: per chunk the k largest |x| (ties: the lower position), the kept values of the whole
    tensor quantised to 2 bits as the authors' quantiser does, everything else 0."""
    n = len(x)
    xp = x + [0.0] * (-n % chunk)
    kept: list[int] = []
    for c0 in range(0, len(xp), chunk):
        order = sorted(range(c0, c0 + chunk), key=lambda i: (-abs(xp[i]), i))
        kept += sorted(order[:k])
    vals = [xp[i] for i in kept]
    m = len(vals)
    shift = sum(vals) / m
    cen = [v - shift for v in vals]
    std = math.sqrt(sum(c * c for c in cen) / (m - 1)) if m > 1 else 0.0
    scale = 6.0 * std / 4 if std > 0 else 1.0
    codes = [min(3, max(0, round(c / scale + 2))) for c in cen]  # Python's round: half to even, as torch.round
    level = []
    for b in range(4):
        held = [c for c, q in zip(cen, codes) if q == b]
        level.append((sum(held) / len(held) if held else 0.0) + shift)
    out = [0.0] * len(xp)
    for i, q in zip(kept, codes):
        out[i] = level[q]
    return out[:n]


def test_top_k_per_chunk_on_a_hand_built_tensor():
    # chunk 8, topk 0.25: k = 2 per chunk; the kept positions are the two largest magnitudes of each chunk
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, 0.0, 0.3, -0.4, 0.5,   # chunk 0: -5 (1), 3 (3)
                      1.0, 0.0, 0.0, 0.0, -2.0, 0.0, 0.0, 0.9,    # chunk 1: 1 (8), -2 (12)
                      0.0, 7.0, 0.0])                            # chunk 2 (padded): 7 (17), 0 (16)
    fmt = wire.spec("sparseloco", chunk=8, topk=0.25)
    y = wire.sparsify(x, fmt)
    # a kept 0 (position 16, the lowest of chunk 2's tied zeros) decodes to its bin's level, not to 0
    assert sorted(int(i) for i in y.nonzero()) == [1, 3, 8, 12, 16, 17]
    assert len(set(y[y != 0].tolist())) <= 4  # 2 bits: at most 4 levels
    assert y.tolist() == pytest.approx(reference_compress(x.tolist(), 8, 2), abs=1e-6)


def test_two_bit_values_are_the_authors_bin_means():
    # kept values 4, 2, -2, -4, 0.5, -0.5 (k = 1 per chunk of 2): mean 0, σ = √(40.5/5), scale 6σ/4
    x = torch.tensor([4.0, 0.1, 0.0, 2.0, -2.0, 0.0, 0.0, -4.0, 0.5, 0.0, 0.0, -0.5])
    fmt = wire.spec("sparseloco", chunk=2, topk=0.5)
    y = wire.sparsify(x, fmt)
    s = 1.5 * math.sqrt(40.5 / 5)  # 4.27: codes round(v/s + 2) = 3, 2, 2, 1, 2, 2
    assert s == pytest.approx(4.2691, abs=1e-4)
    assert y.tolist() == pytest.approx([4.0, 0, 0, 0.0, 0.0, 0, 0, -4.0, 0.0, 0, 0, 0.0], abs=1e-6)
    # bin 2 held 2, -2, 0.5, -0.5: mean 0, so those decode to 0 (and the error feedback keeps them)


@pytest.mark.parametrize("seed,n,chunk,topk", [(0, 10000, 4096, wire.SPARSE_TOPK), (1, 777, 64, 0.03),
                                               (2, 300, 16, 0.25), (3, 5, 8, 0.5)])
def test_sparsify_matches_the_step_by_step_reference(seed, n, chunk, topk):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * torch.linspace(0.1, 3, n)
    fmt = wire.spec("sparseloco", chunk=chunk, topk=topk)
    k = wire.sparse(fmt).k
    assert torch.allclose(wire.sparsify(x, fmt), torch.tensor(reference_compress(x.tolist(), chunk, k)),
                          atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 100, 4096, 4097, 41632])
def test_payload_is_lossless_on_what_sparsify_made_and_weighs_what_is_counted(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    y = wire.sparsify(x)
    p = wire.encode_sparse(y)
    assert p.dtype == torch.uint8 and p.numel() == wire.payload_bytes(n, "sparseloco")
    assert torch.equal(wire.decode_sparse(p, n), y)
    assert torch.equal(wire.decode_sparse(wire.encode_sparse(0.37 * y), n), 0.37 * y)  # EDiT's w·Δ̂


def test_byte_counts_by_hand():
    # per chunk of 4096: 64 indices × 12 bits = 96 bytes, 64 codes × 2 bits = 16, 4 float32 levels = 16
    assert wire.payload_bytes(4096, "sparseloco") == 128
    assert wire.payload_bytes(3 * 4096, "sparseloco") == 3 * 128
    assert wire.payload_bytes(10, wire.spec("sparseloco", chunk=8, topk=0.25)) == 2 + 1 + 32  # 4·3 bits, 4·2, 2·16
    assert wire.wire_tensor_bytes(4096, "sparseloco", 4) == 4 * 128  # the all-gather's output
    for R in (2, 4, 8):  # an all-gather sends (R − 1)·p per rank; float32's all-reduce 2(R − 1)/R·S
        assert wire.collective_bytes(4096, "sparseloco", R) == (R - 1) * 128
        assert wire.compression_ratio("sparseloco", R) == pytest.approx(R / 256)
    assert wire.sparse_breakeven() == 34  # above R = 33 int4's reduce-scatter sends less
    assert wire.collective_op("sparseloco") == "all_gather" and wire.collective_op("int4") == "all_reduce"


def test_packed_units_start_on_chunk_boundaries():
    fmt = wire.spec("sparseloco", chunk=64, topk=0.1)
    a, b = torch.randn(100), torch.randn(30)
    flat = wire.pack([wire.sparsify(a, fmt), wire.sparsify(b, fmt)], fmt)
    assert flat.numel() == 128 + 64
    back = wire.unpack(wire.decode_sparse(wire.encode_sparse(flat, fmt), flat.numel(), fmt), [100, 30], fmt)
    assert torch.equal(back[0], wire.sparsify(a, fmt)) and torch.equal(back[1], wire.sparsify(b, fmt))


def test_a_dense_tensor_is_refused_and_a_non_finite_chunk_decodes_to_nan():
    with pytest.raises(ValueError, match="distinct"):
        wire.encode_sparse(torch.arange(1.0, 4097.0))
    y = wire.sparsify(torch.randn(8192))
    y[int(y.abs().argmax())] = math.inf
    out = wire.decode_sparse(wire.encode_sparse(y), 8192)
    chunk = int(y.isinf().nonzero()[0]) // 4096
    assert out[chunk * 4096:(chunk + 1) * 4096][y[chunk * 4096:(chunk + 1) * 4096] != 0].isnan().all()
    assert torch.isfinite(out[(1 - chunk) * 4096:(2 - chunk) * 4096]).all()


def test_outer_step_is_the_papers_algorithm_over_several_syncs():
    """Two replicas, one unit, 4 syncs: OuterState (error feedback with decay β, outer SGD without momentum) against
    the paper's lines written out, with the reference compressor."""
    n, chunk, topk, beta, alpha = 300, 64, 0.05, 0.9, 0.8
    fmt = wire.spec("sparseloco", chunk=chunk, topk=topk, beta=beta)
    k = wire.sparse(fmt).k
    g = torch.Generator().manual_seed(5)
    theta0 = torch.randn(n, generator=g)
    states = []
    for _ in range(2):
        st = OuterState([theta0.clone()], lr=alpha, momentum=0.0, nesterov=False)
        st.set_wire(fmt, error_feedback=True)
        states.append(st)
    ref_theta, ref_e = theta0.tolist(), [[0.0] * n, [0.0] * n]
    for _ in range(4):
        locals_ = [theta0 - 0.1 * torch.randn(n, generator=g) for _ in range(2)]  # each replica's θ after H steps
        sent = []
        for st, th in zip(states, locals_):
            sent.append(st.pseudo_gradient(0, th))
            st.keep_residual(0, used=True)
        mean = (sent[0] + sent[1]) / 2
        for st in states:
            st.step(0, mean)
        # the paper: e ← β·e + Δ; Δ̂ = C(e); e ← e − Δ̂; θ ← θ − α·mean(Δ̂)
        hats = []
        for r, th in enumerate(locals_):
            delta = [a - b for a, b in zip(ref_theta, th.tolist())]
            e = [beta * ei + di for ei, di in zip(ref_e[r], delta)]
            hat = reference_compress(e, chunk, k)
            ref_e[r] = [ei - hi for ei, hi in zip(e, hat)]
            hats.append(hat)
        ref_theta = [t - alpha * (h0 + h1) / 2 for t, h0, h1 in zip(ref_theta, *hats)]
        for st in states:
            assert torch.allclose(st.anchors[0].detach(), torch.tensor(ref_theta), atol=1e-5)
        for r, st in enumerate(states):
            assert torch.allclose(st.residuals[0], torch.tensor(ref_e[r]), atol=1e-5)
        theta0 = states[0].anchors[0].detach().clone()


def test_a_rejected_sync_restores_the_undecayed_residual():
    st = OuterState([torch.zeros(64)], lr=1.0, momentum=0.0, nesterov=False)
    st.set_wire(wire.spec("sparseloco", chunk=64, topk=0.1, beta=0.5), error_feedback=True)
    st.pseudo_gradient(0, torch.randn(64))
    st.keep_residual(0, used=True)
    before = st.residuals[0].clone()
    st.pseudo_gradient(0, torch.randn(64))
    assert not st.keep_residual(0, used=False)
    assert torch.equal(st.residuals[0], before)  # two-phase commit: not β·e, the residual as it was


@pytest.mark.parametrize("kw,field", [
    (dict(wire_format="sparseloco", outer_momentum=0.0), "error_feedback"),
    (dict(wire_format="sparseloco", error_feedback=True), "outer_momentum"),
    (dict(wire_format="sparseloco", error_feedback=True, outer_momentum=0.0, sparseloco_chunk=1000),
     "sparseloco_chunk"),
    (dict(wire_format="sparseloco", error_feedback=True, outer_momentum=0.0, sparseloco_topk=0.0), "sparseloco_topk"),
    (dict(wire_format="sparseloco", error_feedback=True, outer_momentum=0.0, sparseloco_beta=1.5), "sparseloco_beta"),
    (dict(wire_format="int4", sparseloco_topk=0.03), "sparseloco_topk"),
    (dict(method="co2", wire_format="sparseloco", error_feedback=True, outer_momentum=0.0), "wire_format"),
])
def test_inconsistent_configs_are_refused_naming_the_field(kw, field):
    kw = {"method": "diloco", **kw}
    with pytest.raises(ConfigError, match=f"^{field}="):
        RunConfig(**kw).validate()


def test_the_authors_setting_is_accepted_and_travels_in_the_wire_string():
    cfg = RunConfig(method="diloco", wire_format="sparseloco", error_feedback=True, outer_momentum=0.0,
                    outer_lr=1.0, sparseloco_topk=0.03).validate()
    sp = wire.sparse(wire.spec_of(cfg))
    assert (sp.chunk, sp.k, sp.beta) == (4096, 123, 0.95)
