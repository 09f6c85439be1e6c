"""The size of a key/value cache.

A decoder that generates token by token keeps, for every layer, the keys and the values of
every earlier token (chapter 7's cache). Its size in bytes is

    2 × layers × kv_heads × head_dim × tokens × bytes_per_value   (× batch)

(2: one key and one value). Grouped-query attention shrinks ``kv_heads``; a sliding
window caps ``tokens`` at the window.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._validate import require_positive_int

BYTES_PER_VALUE = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8}


def cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int,
                   bytes_per_value: int = 2, batch: int = 1) -> int:
    """``2 × layers × kv_heads × head_dim × tokens × bytes_per_value × batch`` bytes."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("tokens", tokens), ("bytes_per_value", bytes_per_value), ("batch", batch)):
        require_positive_int(name, value)
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_value * batch


def cached_tensor_bytes(caches: Iterable[dict]) -> int:
    """The bytes actually held by the keys and values of some caches (one dict per layer,
    as :class:`companion.multihead.MultiHeadAttention` fills them): ``Σ numel × element size``."""
    total = 0
    for i, cache in enumerate(caches):
        if not isinstance(cache, dict):
            raise TypeError(f"caches[{i}] must be a dict (a layer's cache), got {type(cache).__name__}")
        for name in ("k", "v"):
            if name in cache:
                total += cache[name].numel() * cache[name].element_size()
    return total
