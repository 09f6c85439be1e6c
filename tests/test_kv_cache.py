import pytest
import torch

from companion.kv_cache import formula_cache_bytes, measured_cache_bytes
from companion.multihead import MultiHeadAttention


def test_formula_at_a_published_configuration():
    # 32 layers, 32 heads of 128, 32,768 tokens, bf16 (2 bytes): 17.18 GB; 8 KV heads: 4.29 GB
    assert formula_cache_bytes(32, 32, 128, 32_768, 2) == 17_179_869_184
    assert round(formula_cache_bytes(32, 32, 128, 32_768, 2) / 1e9, 2) == 17.18
    assert round(formula_cache_bytes(32, 8, 128, 32_768, 2) / 1e9, 2) == 4.29
    assert formula_cache_bytes(1, 1, 1, 1, 1, batch=3) == 6


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_formula_equals_the_tensors_of_a_filled_cache(kv_heads, dtype):
    layers, tokens, D, H = 3, 11, 32, 4
    mhas = [MultiHeadAttention(D, H, num_kv_heads=kv_heads).to(dtype) for _ in range(layers)]
    caches = [{} for _ in range(layers)]
    x = torch.randn(2, tokens, D, dtype=dtype)
    for mha, cache in zip(mhas, caches, strict=True):
        for t in range(tokens):
            mha(x[:, t:t + 1], cache=cache)
    expected = formula_cache_bytes(layers, kv_heads, D // H, tokens, torch.empty(0, dtype=dtype).element_size(), batch=2)
    assert measured_cache_bytes(caches) == expected


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="kv_heads"):
        formula_cache_bytes(32, 0, 128, 10)


def test_one_byte_width_by_default_and_the_config_formula_agrees():
    from companion.models.gpt import GPTConfig, formula_cache_bytes_for

    assert formula_cache_bytes(2, 3, 4, 5) == 2 * 2 * 3 * 4 * 5 * 2  # bfloat16: 2 bytes per value
    config = GPTConfig(vocab_size=10, d_model=32, num_heads=4, num_layers=3, num_kv_heads=2)
    assert formula_cache_bytes_for(config, 7) == formula_cache_bytes(3, 2, 8, 7)
    assert formula_cache_bytes_for(config, 7, 4, batch=2) == formula_cache_bytes(3, 2, 8, 7, 4, batch=2)
