"""The byte-level Llama: shapes, causality, deterministic init, units, sizes, learning."""

from __future__ import annotations

import math

import pytest
import torch

from edit_lab.core.model import (
    SIZES,
    VOCAB_SIZE,
    Block,
    Llama,
    ModelSize,
    RMSNorm,
    RootUnit,
    apply_rope,
    build_model,
    get_size,
    loss_fn,
    rope_tables,
)

# Values written in the model's docstring; a change of sizes must update both.
EXPECTED_PARAMS = {"nano": 41_632, "tiny": 230_976, "small": 4_877_568, "deep": 4_877_568 + 6 * 791_040, "base100m": 99_502_848}


@pytest.fixture(scope="module")
def nano() -> Llama:
    return build_model("nano", seed=0)


def tokens(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB_SIZE, (B, T), generator=torch.Generator().manual_seed(seed))


def test_logits_shape_and_dtype(nano: Llama) -> None:
    logits = nano(tokens(3, 17))
    assert logits.shape == (3, 17, VOCAB_SIZE)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_loss_with_targets_equals_loss_fn(nano: Llama) -> None:
    x, y = tokens(2, 16, 1), tokens(2, 16, 2)
    loss = nano(x, y)
    assert loss.dim() == 0
    torch.testing.assert_close(loss, loss_fn(nano(x), y))
    manual = -torch.log_softmax(nano(x), -1).gather(-1, y.unsqueeze(-1)).mean()
    torch.testing.assert_close(loss, manual)


def test_causal_later_token_does_not_change_earlier_logits(nano: Llama) -> None:
    x = tokens(2, 20)
    x2 = x.clone()
    x2[:, 12] = (x2[:, 12] + 1) % VOCAB_SIZE
    with torch.no_grad():
        a, b = nano(x), nano(x2)
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=0)
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4


def test_unit_by_unit_forward_matches_model(nano: Llama) -> None:
    """The sharded engine replays the forward unit by unit; it must equal Llama.forward."""
    x = tokens(2, 24)
    cos, sin = nano.rope(x.shape[1], x.device)
    root, *blocks = nano.units()
    h = root(x, "embed")
    for b in blocks:
        h = b(h, cos, sin)
    torch.testing.assert_close(root(h, "head"), nano(x), rtol=0, atol=0)


def test_functional_call_drives_root_halves(nano: Llama) -> None:
    x = tokens(1, 8)
    params = {k: v.detach().clone() for k, v in nano.root.named_parameters()}
    h = torch.func.functional_call(nano.root, params, (x, "embed"))
    torch.testing.assert_close(h, nano.root.tok_emb.weight[x])
    logits = torch.func.functional_call(nano.root, params, (h, "head"))
    assert logits.shape == (1, 8, VOCAB_SIZE)
    with pytest.raises(ValueError, match="embed, head"):
        nano.root(x, "middle")


def test_build_model_deterministic_and_independent_of_global_rng() -> None:
    torch.manual_seed(123)
    a = build_model("nano", seed=7)
    state = torch.get_rng_state()
    torch.manual_seed(999)
    torch.rand(10)
    b = build_model("nano", seed=7)
    c = build_model("nano", seed=8)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb
        assert torch.equal(pa, pb), na
    assert not torch.equal(a.root.tok_emb.weight, c.root.tok_emb.weight)
    # building consumes nothing from the global generator
    torch.set_rng_state(state)
    build_model("nano", seed=7)
    assert torch.equal(torch.get_rng_state(), state)


def test_init_statistics() -> None:
    m = build_model("tiny", seed=0)
    n_layers = m.size.n_layers
    assert m.root.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.root.head.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.blocks[0].wq.weight.std().item() == pytest.approx(0.02, rel=0.05)
    out_std = 0.02 / math.sqrt(2 * n_layers)
    for b in m.blocks:
        assert b.wo.weight.std().item() == pytest.approx(out_std, rel=0.05)
        assert b.w_down.weight.std().item() == pytest.approx(out_std, rel=0.05)
        assert torch.equal(b.attn_norm.weight, torch.ones(m.size.dim))
    assert torch.equal(m.root.norm.weight, torch.ones(m.size.dim))
    assert m.root.head.weight.data_ptr() != m.root.tok_emb.weight.data_ptr()  # untied


@pytest.mark.parametrize("name", list(SIZES))
def test_parameter_counts(name: str) -> None:
    size = get_size(name)
    with torch.device("meta"):  # no memory, so base100m is checked too
        model = Llama(size)
    total = sum(p.numel() for p in model.parameters())
    assert total == size.num_params() == EXPECTED_PARAMS[name]
    assert sum(p.numel() for p in model.root.parameters()) == size.root_params()
    assert all(sum(p.numel() for p in b.parameters()) == size.block_params() for b in model.blocks)


def test_size_shapes() -> None:
    assert (SIZES["nano"].dim, SIZES["nano"].n_layers, SIZES["nano"].n_heads) == (32, 2, 2)
    assert (SIZES["tiny"].dim, SIZES["tiny"].n_layers, SIZES["tiny"].n_heads) == (64, 4, 4)
    assert 90e6 < SIZES["base100m"].num_params() < 110e6


def test_units_cover_every_parameter_exactly_once(nano: Llama) -> None:
    units = nano.units()
    assert units[0] is nano.root and list(units[1:]) == list(nano.blocks)
    assert isinstance(units[0], RootUnit) and all(isinstance(u, Block) for u in units[1:])
    seen = [id(p) for u in units for p in u.parameters()]
    assert len(seen) == len(set(seen))
    assert set(seen) == {id(p) for p in nano.parameters()}
    # RoPE tables are computed, not state: the state dict holds exactly the parameters
    assert set(nano.state_dict()) == {n for n, _ in nano.named_parameters()}


def test_untrained_loss_is_about_ln256(nano: Llama) -> None:
    x, y = tokens(4, 32, 3), tokens(4, 32, 4)
    with torch.no_grad():
        loss = nano(x, y).item()
    assert abs(loss - math.log(256)) < 0.3


def test_adamw_steps_lower_the_loss() -> None:
    torch.manual_seed(0)
    model = build_model("nano", seed=1)
    x = tokens(4, 32, 5)
    y = torch.roll(x, -1, dims=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = model(x, y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0] - 0.3


def test_get_size_errors() -> None:
    assert get_size("tiny") is SIZES["tiny"]
    with pytest.raises(ValueError, match="nano, tiny, small, deep, base100m"):
        get_size("huge")


def test_model_size_validation() -> None:
    with pytest.raises(ValueError, match="divisible"):
        ModelSize("bad", dim=30, n_layers=1, n_heads=4, ffn_hidden=8, max_seq_len=8)
    with pytest.raises(ValueError, match="even"):
        ModelSize("bad", dim=12, n_layers=1, n_heads=4, ffn_hidden=8, max_seq_len=8)


def test_sequence_longer_than_max_seq_len_raises(nano: Llama) -> None:
    with pytest.raises(ValueError, match="max_seq_len"):
        nano(tokens(1, nano.size.max_seq_len + 1))


def test_rope_tables_and_rotation() -> None:
    cos, sin = rope_tables(8, 5)
    assert cos.shape == sin.shape == (5, 4)
    torch.testing.assert_close(cos[0], torch.ones(4))
    torch.testing.assert_close(sin[0], torch.zeros(4))
    # first frequency is 1 rad/position, the last theta^(-6/8)
    assert cos[1, 0].item() == pytest.approx(math.cos(1.0))
    assert sin[2, 3].item() == pytest.approx(math.sin(2 * 10000.0 ** (-6 / 8)))
    x = torch.randn(2, 3, 5, 8)
    r = apply_rope(x, cos, sin)
    torch.testing.assert_close(r.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps norms
    torch.testing.assert_close(r[..., 0, :], x[..., 0, :])  # position 0 is untouched
    # relative property: <R_m q, R_n k> depends only on m - n
    q, k = torch.randn(8), torch.randn(8)
    cos, sin = rope_tables(8, 10)
    rq, rk = apply_rope(q.expand(10, 8), cos, sin), apply_rope(k.expand(10, 8), cos, sin)
    torch.testing.assert_close(rq[3] @ rk[1], rq[9] @ rk[7], rtol=1e-4, atol=1e-5)


def test_rmsnorm() -> None:
    norm = RMSNorm(4)
    x = torch.tensor([[3.0, -3.0, 3.0, -3.0]])
    torch.testing.assert_close(norm(x), torch.tensor([[1.0, -1.0, 1.0, -1.0]]), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        norm.weight.fill_(2.0)
    torch.testing.assert_close(norm(x), torch.tensor([[2.0, -2.0, 2.0, -2.0]]), rtol=1e-5, atol=1e-5)
