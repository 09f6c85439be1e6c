"""Attention masks.

One convention for the whole course, the one of
``torch.nn.functional.scaled_dot_product_attention``:

    a boolean mask where **True means "may attend"** and False means "blocked".

A mask is broadcast against the score matrix ``E`` of shape ``(..., N_q, N_k)``:
entry ``[i, j]`` says whether query ``i`` may look at key ``j``. Blocked scores
are set to ``-inf`` before the softmax, so they get exactly zero weight.

``torch.nn.MultiheadAttention`` uses the *opposite* polarity (True = blocked)
for both ``attn_mask`` and ``key_padding_mask``; :func:`to_torch_attn_mask`
and :func:`to_key_padding_mask` convert.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import require_positive_int, require_tensor


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The causal (look-ahead) mask: query ``i`` may attend to keys ``j <= i``.

    ``mask[i, j] = (j <= i)``, a lower-triangular boolean matrix of shape ``(n, n)``.
    """
    require_positive_int("n", n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """Which positions of a padded batch hold real tokens.

    ``lengths``: the true length of each of the ``B`` sequences (list or 1-D tensor).
    Returns ``mask`` of shape ``(B, max_len)`` with ``mask[b, t] = (t < lengths[b])``.

    To use it as an attention mask over keys, give it the shape ``(B, 1, 1, N_k)``
    (batch, heads, queries, keys) with :func:`key_mask`.
    """
    if isinstance(lengths, Sequence) and not isinstance(lengths, str):
        lengths = torch.as_tensor(list(lengths))
    require_tensor("lengths", lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (one length per sequence), got shape {tuple(lengths.shape)}")
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if len(lengths) and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if len(lengths) else 0
    if max_len is None:
        max_len = longest
    require_positive_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({longest})")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return positions[None, :] < lengths[:, None]  # (B, max_len)


def key_mask(padding: torch.Tensor) -> torch.Tensor:
    """Reshape a ``(B, N_k)`` padding mask to ``(B, 1, 1, N_k)``.

    The result broadcasts over heads and queries: every query of sequence ``b``
    may attend to the real keys of ``b`` and to none of its padding.
    """
    require_tensor("padding", padding)
    if padding.dim() != 2:
        raise ValueError(f"padding must have shape (B, N_k), got {tuple(padding.shape)}")
    return padding[:, None, None, :]  # (B, 1, 1, N_k)


def to_torch_attn_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert a course mask (True = may attend) to ``nn.MultiheadAttention``'s
    boolean ``attn_mask`` (True = blocked): the logical negation."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    return ~mask


def to_key_padding_mask(padding: torch.Tensor) -> torch.Tensor:
    """Convert a ``(B, N)`` padding mask (True = real token) to
    ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = padding, ignored)."""
    return to_torch_attn_mask(padding)


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A float mask to *add* to the scores: 0 where allowed, ``-inf`` where blocked."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return additive.masked_fill(~mask, float("-inf"))


def from_additive(additive: torch.Tensor) -> torch.Tensor:
    """Back from an additive float mask to a boolean one (True where finite)."""
    require_tensor("additive", additive)
    if not additive.is_floating_point():
        raise TypeError(f"additive must be a float mask, got dtype {additive.dtype}")
    return torch.isfinite(additive)
