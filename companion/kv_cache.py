"""The size of a key/value cache, by formula and measured.

A decoder that generates token by token keeps, for every layer, the keys and the values of
every earlier token (chapter 7's cache). Its size in bytes is

    2 × layers × kv_heads × head_dim × tokens × bytes_per_value   (× batch)

(2: one key and one value). Grouped-query attention shrinks ``kv_heads``; a sliding
window caps ``tokens`` at the window. :func:`formula_cache_bytes` computes it;
:func:`measured_cache_bytes` counts the bytes that filled caches actually hold, and
:func:`companion.models.gpt.formula_cache_bytes_for` reads the sizes from a GPT's config.
:func:`append_to_cache` is the bookkeeping of the cache itself (appending, in place or rolling).
Every formula here counts 2 bytes per value (bfloat16) unless told otherwise.
"""

from __future__ import annotations

import torch

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


def cache_position(cache: dict | None) -> int:
    """How many tokens a self-attention ``cache`` has seen: ``cache["position"]``, else the
    number of cached keys (0 for no cache or an empty one)."""
    if cache is None:
        return 0
    return cache.get("position", cache["k"].shape[2] if "k" in cache else 0)


def append_to_cache(cache: dict, k, v, self_attention: bool = True, window: int | None = None):
    """Chapter 7's cache, as :class:`companion.multihead.MultiHeadAttention` keeps it: the new
    tokens' ``k, v (B, H_kv, n, D_H)`` appended to the cached ones, the keys and values to attend
    to returned, ``(B, H_kv, t, D_H)`` each.

    With preallocated ``cache["k_buffer"]``/``cache["v_buffer"]`` ``(B, H_kv, capacity, D_H)`` the
    new ones are written in place, no copy. A ``window`` keeps only the last ``window`` keys and
    values (the rolling cache). In self-attention ``cache["position"]`` counts the tokens seen;
    in cross-attention (``self_attention=False``) the memory's ``k, v`` are stored for reuse."""
    n, start = k.shape[2], cache_position(cache)
    if "k_buffer" in cache:  # preallocated (GPT.generate): the new K, V written in place, no copy
        held = cache["k"].shape[2] if "k" in cache else 0
        cache["k_buffer"].narrow(2, held, n).copy_(k), cache["v_buffer"].narrow(2, held, n).copy_(v)
        k, v = cache["k_buffer"].narrow(2, 0, held + n), cache["v_buffer"].narrow(2, 0, held + n)  # (B, H_kv, t, D_H)
    elif self_attention and "k" in cache:
        k = torch.cat([cache["k"], k], dim=2)  # (B, H_kv, t, D_H): earlier tokens, then the new ones
        v = torch.cat([cache["v"], v], dim=2)
    keep = k.shape[2] if window is None else min(window, k.shape[2])
    cache["k"], cache["v"] = k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]  # the rolling cache
    if self_attention:
        cache["position"] = start + n
    return k, v
