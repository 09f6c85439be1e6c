"""The size of a key/value cache, by formula and measured.

A decoder that generates token by token keeps, for every layer, the keys and the values of
every earlier token (chapter 7's cache). Its size in bytes is

    2 × layers × kv_heads × head_dim × tokens × bytes_per_value   (× batch)

(2: one key and one value). Grouped-query attention shrinks ``kv_heads``; a sliding
window caps ``tokens`` at the window. :func:`formula_cache_bytes` computes it;
:func:`measured_cache_bytes` counts the bytes that filled caches actually hold, and
:func:`companion.models.gpt.formula_cache_bytes_for` reads the sizes from a GPT's config.
Every formula here counts 2 bytes per value (bfloat16) unless told otherwise.
"""

from __future__ import annotations

from ._validate import require_positive_int


def formula_cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int,
                        bytes_per_value: int = 2, batch: int = 1) -> int:
    """By formula: ``2 × layers × kv_heads × head_dim × tokens × bytes_per_value × batch`` bytes."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("tokens", tokens), ("bytes_per_value", bytes_per_value), ("batch", batch)):
        require_positive_int(name, value)
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_value * batch


def measured_cache_bytes(caches: list[dict]) -> int:
    """Measured: the bytes held by the keys and values of filled caches (one dict per layer,
    as :class:`companion.multihead.MultiHeadAttention` fills them)."""
    return sum(c[name].numel() * c[name].element_size() for c in caches for name in ("k", "v") if name in c)
