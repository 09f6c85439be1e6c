import pytest
import torch

from companion.kv_cache import cache_bytes
from companion.models.gpt import kv_cache_bytes
from companion.multihead import MultiHeadAttention


def test_formula_at_a_published_configuration():
    # 32 layers, 32 heads of 128, 32,768 tokens, bf16 (2 bytes): 17.18 GB; 8 KV heads: 4.29 GB
    assert cache_bytes(32, 32, 128, 32_768, 2) == 17_179_869_184
    assert round(cache_bytes(32, 32, 128, 32_768, 2) / 1e9, 2) == 17.18
    assert round(cache_bytes(32, 8, 128, 32_768, 2) / 1e9, 2) == 4.29
    assert cache_bytes(1, 1, 1, 1, 1, batch=3) == 6


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
    expected = cache_bytes(layers, kv_heads, D // H, tokens, torch.empty(0, dtype=dtype).element_size(), batch=2)
    assert kv_cache_bytes(caches) == expected


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="kv_heads"):
        cache_bytes(32, 0, 128, 10)
