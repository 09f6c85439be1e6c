"""The size of a key/value cache.

A decoder that generates token by token keeps, for every layer, the keys and the values of
every earlier token (chapter 7's cache). Its size in bytes is

    2 × layers × kv_heads × head_dim × tokens × bytes_per_value   (× batch)

(2: one key and one value). Grouped-query attention shrinks ``kv_heads``; a sliding
window caps ``tokens`` at the window. :func:`companion.models.gpt.kv_cache_bytes` counts the
bytes that a model's caches actually hold.
"""

from __future__ import annotations

from ._validate import require_positive_int


def cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int,
                bytes_per_value: int = 2, batch: int = 1) -> int:
    """``2 × layers × kv_heads × head_dim × tokens × bytes_per_value × batch`` bytes."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("tokens", tokens), ("bytes_per_value", bytes_per_value), ("batch", batch)):
        require_positive_int(name, value)
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_value * batch
