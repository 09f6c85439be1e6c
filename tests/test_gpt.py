"""The GPT of chapter 10: GPT-2's parameter count, causality, tying, the KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from companion.language_model import (
    bits_per_character,
    held_out_loss,
    loss_by_position,
    next_token_targets,
    perplexity,
    window_loss,
    window_starts,
    windows,
)
from companion.kv_cache import measured_cache_bytes
from companion.models.gpt import GPT, GPTConfig, formula_cache_bytes_for, gpt2_small_config
from companion.train import train


def small(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=40, context=24, d_model=32, num_heads=4, num_layers=2)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


def test_gpt2_small_has_gpt2s_parameter_count():
    with torch.device("meta"):  # no 500 MB of weights
        model = GPT(gpt2_small_config())
    assert model.num_parameters() == 124_439_808
    assert model.num_parameters(count_tied_twice=True) == 124_439_808 + 50257 * 768
    assert model.head.weight is model.token_embed.weight


def test_parameter_count_by_formula_untied():
    c = GPTConfig(vocab_size=40, context=24, d_model=32, num_heads=4, num_layers=2, tie_weights=False)
    d, V, L, f = 32, 40, 2, 128
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    assert GPT(c).num_parameters() == V * d + 24 * d + L * block + 2 * d + V * d


def test_causal_the_future_does_not_change_the_past():
    model = small().eval()
    ids = torch.randint(0, 40, (2, 20))
    changed = ids.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 40
    assert torch.allclose(model(ids)[:, :12], model(changed)[:, :12], atol=1e-6)
    assert not torch.allclose(model(ids)[:, 12:], model(changed)[:, 12:])


def test_layers_are_chapter_7s_blocks_and_match_a_hand_forward():
    model = small(positions="sinusoidal").eval()
    ids = torch.randint(0, 40, (2, 10))
    from companion.masks import causal_mask
    x = model.token_embed(ids) + model.pos.positions(10)
    for layer in model.layers:
        h = layer.norm1(x)
        a, _ = layer.self_attn(h, mask=causal_mask(10))
        x = x + a
        x = x + layer.ffn.linear2(F.gelu(layer.ffn.linear1(layer.norm2(x))))
    logits = model.norm(x) @ model.token_embed.weight.T
    assert torch.allclose(model(ids), logits, atol=1e-5)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_cached_forward_equals_the_full_one(positions):
    model = small(positions=positions).double().eval()
    ids = torch.randint(0, 40, (3, 15))
    caches = [{} for _ in model.layers]
    parts = [model(ids[:, :6], caches=caches), model(ids[:, 6:7], caches=caches, offset=6),
             model(ids[:, 7:], caches=caches, offset=7)]
    assert torch.allclose(torch.cat(parts, 1), model(ids), atol=1e-10)
    assert measured_cache_bytes(caches) == formula_cache_bytes_for(model.config, 15, 8, batch=3)
    assert caches[0]["k"].shape == (3, 4, 15, 8)


def test_generation_with_and_without_the_cache_gives_the_same_tokens():
    model = small().double()
    prompt = torch.randint(0, 40, (2, 4))
    greedy = [model.generate(prompt, 20, temperature=0, use_cache=c) for c in (True, False)]
    assert torch.equal(*greedy)
    sampled = [model.generate(prompt, 20, top_k=10, generator=torch.Generator().manual_seed(7), use_cache=c)
               for c in (True, False)]
    assert torch.equal(*sampled)
    assert sampled[0].shape == (2, 24) and torch.equal(sampled[0][:, :4], prompt)
    assert model.use_cache  # restored


def test_generation_is_reproducible_with_a_seeded_generator():
    model = small()
    p = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(p, 15, generator=torch.Generator().manual_seed(1))
    b = model.generate(p, 15, generator=torch.Generator().manual_seed(1))
    c = model.generate(p, 15, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_without_cache_generation_crops_past_the_context():
    model = small()
    out = model.generate(torch.zeros(1, 1, dtype=torch.long), 40, temperature=0, use_cache=False)
    assert out.shape == (1, 41)
    assert torch.equal(model.generate(torch.zeros(1, 1, dtype=torch.long), 40, temperature=0), out)  # falls back
    with pytest.raises(ValueError, match="past the context"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), 40, temperature=0, use_cache=True)


def test_attention_maps_are_causal_rows_of_probabilities():
    model = small()
    maps = model.attention_maps(torch.randint(0, 40, (2, 9)))
    assert maps.shape == (2, 2, 4, 9, 9)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 4, 9))
    assert float(maps.triu(1).abs().max()) == 0.0


def test_config_errors():
    with pytest.raises(ValueError, match="not divisible"):
        GPT(GPTConfig(vocab_size=10, d_model=30, num_heads=4))
    with pytest.raises(ValueError, match="positions must be one of"):
        GPT(GPTConfig(vocab_size=10, positions="rotary"))
    with pytest.raises(ValueError, match="past the context of 24"):
        small()(torch.zeros(1, 25, dtype=torch.long))
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT({"vocab_size": 10})


# --- language_model: windows, loss, units -----------------------------------------
def test_windows_are_shifted_by_one():
    ids = torch.arange(100)
    x, y = windows(ids, torch.tensor([0, 10]), 5)
    assert x.tolist() == [[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]]
    assert torch.equal(y, x + 1)
    assert window_starts(ids, 5)[-1] == 94  # the last window ends on the last id


def test_next_token_targets_with_padding():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    x, y = next_token_targets(ids, pad_id=0)
    assert x.tolist() == [[5, 6, 7], [8, 9, 0]]
    assert y.tolist() == [[6, 7, -100], [9, -100, -100]]


def test_units():
    assert bits_per_character(math.log(2), 10, 10) == pytest.approx(1.0)
    assert bits_per_character(2.0, 50, 100) == pytest.approx(1.0 / math.log(2))
    assert perplexity(math.log(65)) == pytest.approx(65)


def test_training_through_the_course_loop_learns_a_periodic_text():
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 7] * 60)
    model = small(vocab_size=8, context=16)
    before = held_out_loss(model, ids, 16)
    train(model, window_loss(ids, 16), [window_starts(ids, 16)], steps=60, batch_size=16, lr=3e-3,
          device="cpu", progress=False)
    after = held_out_loss(model, ids, 16)
    assert before > 1.5 and after < 0.3
    by_pos = loss_by_position(model, ids, 16)
    assert by_pos.shape == (16,) and float(by_pos[0]) > float(by_pos[1:].mean())  # position 0 cannot know the phase


def test_unigram_loss_by_hand():
    from companion.language_model import unigram_loss

    train_ids = torch.tensor([0, 0, 1])  # counts + 1: 3, 2, 1 of 6
    assert unigram_loss(train_ids, torch.tensor([0, 2]), 3) == pytest.approx(-(math.log(3 / 6) + math.log(1 / 6)) / 2)


# --- the architecture is GPT-2's: Hugging Face's GPT2LMHeadModel gives the same logits -------
def _moved_gpt(config, seed):
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # every weight and bias away from its initial value
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_huggingface_gpt2_gives_the_same_logits(seed):
    pytest.importorskip("transformers")
    from companion.models.gpt import from_huggingface, to_huggingface

    config = GPTConfig(vocab_size=37, context=24, d_model=32, num_heads=4, num_layers=3)
    model = _moved_gpt(config, seed)
    hf = to_huggingface(model).eval()
    ids = torch.randint(0, 37, (3, 24))
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    back = from_huggingface(hf).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(ids), ours, atol=0, rtol=0)
    assert sum(p.numel() for p in hf.parameters()) == model.num_parameters()


def test_huggingface_gpt2_small_has_the_companion_count():
    pytest.importorskip("transformers")
    from transformers import GPT2LMHeadModel

    from companion.models.gpt import huggingface_config

    with torch.device("meta"):
        hf = GPT2LMHeadModel(huggingface_config(gpt2_small_config()))
    assert sum(p.numel() for p in hf.parameters()) == 124_439_808


def test_gpt_without_a_gpt2_counterpart_is_refused():
    pytest.importorskip("transformers")
    from companion.models.gpt import to_huggingface

    for change in ({"positions": "rope"}, {"tie_weights": False}, {"window": 4}):
        with pytest.raises(ValueError, match="no GPT-2 counterpart"):
            to_huggingface(GPT(GPTConfig(vocab_size=5, context=8, d_model=8, num_heads=2, **change)))


@pytest.mark.parametrize("options", [{}, {"positions": "rope", "num_kv_heads": 1},
                                     {"positions": "alibi"}, {"window": 4}])
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generate_equals_a_plain_loop_of_full_forward_passes(use_cache, options):
    """Temperature 0: each new token is the argmax of a full forward pass over the text so
    far (a prompt token fed twice, or a position off by one, changes the text); with the
    cache preallocated (grouped keys and values too) or rolling (a window)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=13, context=24, d_model=16, num_heads=2, num_layers=2, **options)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
        prompt = torch.randint(0, 13, (8, 5))
        text = prompt
        for _ in range(12):
            text = torch.cat([text, model(text)[:, -1].argmax(-1, keepdim=True)], dim=1)
    out = model.generate(prompt, 12, temperature=0, use_cache=use_cache)
    assert torch.equal(out, text)
    assert max(len(set(row[5:].tolist())) for row in out) > 2  # not only constant texts, where bugs agree


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_runs_the_head_on_one_position_per_call(use_cache):
    """Reading the prompt (nanoGPT's ``x[:, [-1]]``) and each step: the head sees the last
    position only, and it runs once per new token."""
    model = small()
    seen = []
    hook = model.head.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        model.generate(torch.randint(0, 40, (3, 6)), 5, temperature=0, use_cache=use_cache)
    finally:
        hook.remove()
    assert seen == [(3, model.config.d_model)] * 5


def test_generate_fills_a_preallocated_cache_in_place():
    """The cached keys of every step are views of one buffer made for the whole text: no
    step copies the earlier keys into a longer tensor."""
    model = small()
    pointers, shapes = set(), []
    attn = model.layers[0].self_attn
    original = attn._project

    def spy(*args, **kwargs):
        q, k, v, q_pos, k_pos = original(*args, **kwargs)
        pointers.add(k.data_ptr())
        shapes.append(k.shape[2])
        return q, k, v, q_pos, k_pos

    attn._project = spy
    try:
        model.generate(torch.randint(0, 40, (2, 4)), 6, temperature=0, use_cache=True)
    finally:
        del attn._project
    assert shapes == [4, 5, 6, 7, 8, 9] and len(pointers) == 1


def test_initialisation_has_gpt2s_scales():
    """N(0, 0.02) for the embeddings and the linear layers, 0.02 / sqrt(2 · layers) for the
    two projections that write into the residual stream, zero biases, LayerNorm at (1, 0)."""
    torch.manual_seed(0)
    L = 6
    model = GPT(GPTConfig(vocab_size=500, context=256, d_model=128, num_heads=4, num_layers=L))
    small = 0.02 / math.sqrt(2 * L)

    def close(t, std):
        return abs(t.std().item() - std) < 0.05 * std and abs(t.mean().item()) < 0.1 * std

    assert close(model.token_embed.weight, 0.02) and close(model.pos.weight, 0.02)
    for layer in model.layers:
        assert close(layer.self_attn.in_proj.weight, 0.02) and close(layer.ffn.linear1.weight, 0.02)
        assert close(layer.self_attn.out_proj.weight, small) and close(layer.ffn.linear2.weight, small)
        for lin in (layer.self_attn.in_proj, layer.self_attn.out_proj, layer.ffn.linear1, layer.ffn.linear2):
            assert not lin.bias.any()
        for norm in (layer.norm1, layer.norm2):
            assert bool((norm.weight == 1).all()) and not norm.bias.any()
    assert model.head.weight is model.token_embed.weight
