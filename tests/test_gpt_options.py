"""Chapter 11's options of chapter 10's GPT: RoPE and ALiBi positions, grouped-query
attention, the sliding window (with its rolling cache)."""

import pytest
import torch

from companion.masks import causal_mask, local_window_mask
from companion.kv_cache import measured_cache_bytes
from companion.models.gpt import GPT, GPTConfig, formula_cache_bytes_for


def small(**options):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=13, context=32, d_model=16, num_heads=4, num_layers=2, **options)
    return GPT(config).double().eval()


@pytest.mark.parametrize("options", [
    dict(positions="rope"), dict(positions="alibi"), dict(positions="rope", num_kv_heads=2),
    dict(positions="alibi", num_kv_heads=1), dict(positions="learned", num_kv_heads=2),
    dict(positions="rope", window=4), dict(positions="alibi", window=3, num_kv_heads=2),
])
def test_cached_steps_equal_the_full_pass(options):
    model = small(**options)
    ids = torch.randint(0, 13, (2, 20))
    full = model(ids)  # (2, 20, 13)
    state = model.start(ids[:, :5])
    steps = []
    for t in range(5, 20):
        logits, state = model.step(ids[:, t], state)  # feeds token t: the logits at position t
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 5:])
    kv = options.get("num_kv_heads") or 4
    tokens = min(20, options.get("window") or 20)
    assert measured_cache_bytes(state["caches"]) == formula_cache_bytes_for(model.config, tokens, 8, batch=2)
    assert state["caches"][0]["k"].shape == (2, kv, tokens, 4)


def test_rope_and_alibi_models_add_no_position_table():
    for kind in ("rope", "alibi"):
        model = small(positions=kind)
        assert model.pos is None
        assert all(layer.self_attn.position == kind for layer in model.layers)
    assert small(positions="learned").layers[0].self_attn.position is None


def test_window_model_equals_its_layers_under_the_window_mask():
    model = small(positions="rope", window=5)
    ids = torch.randint(0, 13, (1, 12))
    attn = model.layers[0].self_attn
    h = model.layers[0].norm1(model.token_embed(ids).double())
    banded, _ = attn(h)
    attn.window = None
    expected, _ = attn(h, mask=causal_mask(12) & local_window_mask(12, 4))
    torch.testing.assert_close(banded, expected)


def test_gqa_model_has_smaller_key_value_projections():
    full, mqa = small(), small(num_kv_heads=1)
    assert full.layers[0].self_attn.in_proj.weight.shape == (48, 16)
    assert mqa.layers[0].self_attn.in_proj.weight.shape == (24, 16)
    assert full.num_parameters() - mqa.num_parameters() == 2 * (24 * 16 + 24)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="positions must be one of"):
        small(positions="xpos")
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        small(num_kv_heads=3)
    with pytest.raises(ValueError, match="window"):
        small(window=0)


# --- chapter 11, issue 36: Vaswani's sqrt(d), context extension, GQA by mean-pooling ----------
import math  # noqa: E402

from companion.models.gpt import mean_pool_to_gqa  # noqa: E402
from companion.multihead import MultiHeadAttention, mean_pool_kv_heads  # noqa: E402
from companion.positional import apply_rope, sinusoidal_encoding  # noqa: E402


def test_scale_embeddings_multiplies_the_token_rows_by_sqrt_d():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, context=16, d_model=64, num_heads=4, num_layers=1,
                       positions="sinusoidal", scale_embeddings=True)
    model = GPT(config).double().eval()
    E = model.token_embed.weight
    assert abs(E.std().item() - 64 ** -0.5) < 0.01  # N(0, 1/d): entries of sqrt(d)·E have std 1
    ids = torch.tensor([[3, 7, 7, 1]])
    seen = {}
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    model(ids)
    expected = E[ids] * 8.0 + sinusoidal_encoding(4, 64).double()
    torch.testing.assert_close(seen["x"], expected)
    with pytest.raises(TypeError, match="scale_embeddings must be True or False"):
        GPTConfig(vocab_size=5, scale_embeddings=1).check()


def test_rope_scale_divides_the_positions_full_pass_and_cache():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, position="rope").double().eval()
    mha.rope_scale = 4.0
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    q, k, v = (t.reshape(1, 9, 4, 4).transpose(1, 2) for t in mha.in_proj(x).chunk(3, -1))
    pos = torch.arange(9, dtype=torch.float64) / 4.0  # position interpolation: m / s
    q, k = apply_rope(q, pos), apply_rope(k, pos)
    A = torch.softmax((q @ k.transpose(-1, -2) / 2).masked_fill(~causal_mask(9), -math.inf), -1)
    expected = mha.out_proj((A @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(mha(x, mask=causal_mask(9))[0], expected)
    cache = {}
    steps = torch.cat([mha(x[:, t:t + 1], cache=cache)[0] for t in range(9)], dim=1)
    torch.testing.assert_close(steps, expected)


@pytest.mark.parametrize("bias", [True, False])
def test_mean_pooled_heads_average_the_key_value_projections(bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, bias=bias, position="rope").double().eval()
    gqa = mean_pool_kv_heads(mha, 2)
    assert gqa.num_kv_heads == 2 and gqa.position == "rope"
    W = mha.in_proj.weight  # rows: 16 query, 4 heads × 4 key, 4 heads × 4 value
    for part in (1, 2):  # keys, values
        heads = W[16 * part: 16 * (part + 1)].reshape(4, 4, 16)  # (head, D_H, D)
        pooled = gqa.in_proj.weight[16 + 8 * (part - 1): 16 + 8 * part].reshape(2, 4, 16)
        torch.testing.assert_close(pooled[0], (heads[0] + heads[1]) / 2)
        torch.testing.assert_close(pooled[1], (heads[2] + heads[3]) / 2)
    torch.testing.assert_close(gqa.in_proj.weight[:16], W[:16])
    # heads that were already equal in pairs: pooling changes nothing
    with torch.no_grad():
        for part in (1, 2):
            rows = mha.in_proj.weight[16 * part: 16 * (part + 1)].view(4, 4, 16)
            rows[1], rows[3] = rows[0], rows[2]
            if bias:
                b = mha.in_proj.bias[16 * part: 16 * (part + 1)].view(4, 4)
                b[1], b[3] = b[0], b[2]
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(mean_pool_kv_heads(mha, 2)(x, mask=causal_mask(7))[0],
                               mha(x, mask=causal_mask(7))[0])
    with pytest.raises(ValueError, match="must divide"):
        mean_pool_kv_heads(mha, 3)


def test_mean_pool_to_gqa_copies_a_gpt_and_leaves_it_alone():
    model = small(positions="rope")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mqa = mean_pool_to_gqa(model, 1)
    assert mqa.config.num_kv_heads == 1 and model.config.num_kv_heads is None
    assert all(layer.self_attn.num_kv_heads == 1 for layer in mqa.layers)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    torch.testing.assert_close(mqa.token_embed.weight, model.token_embed.weight)
    assert mqa.head.weight is mqa.token_embed.weight  # the tie survives the copy
    ids = torch.randint(0, 13, (2, 10))
    assert mqa(ids).shape == (2, 10, 13)
    assert formula_cache_bytes_for(mqa.config, 10, 8) * 4 == formula_cache_bytes_for(model.config, 10, 8)
