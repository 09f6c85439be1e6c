"""Chapter 11's options of chapter 10's GPT: RoPE and ALiBi positions, grouped-query
attention, the sliding window (with its rolling cache)."""

import pytest
import torch

from companion.masks import causal_mask, local_window_mask
from companion.models.gpt import GPT, GPTConfig, kv_cache_bytes, kv_cache_size


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
    assert kv_cache_bytes(state["caches"]) == kv_cache_size(model.config, tokens, 8, batch_size=2)
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
