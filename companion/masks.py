"""Attention masks.

One convention for the whole course, the one of
``torch.nn.functional.scaled_dot_product_attention``:

    a boolean mask where **True means "may attend"** and False means "blocked".

A mask is broadcast against the score matrix ``E`` of shape ``(..., N_q, N_k)``:
entry ``[i, j]`` says whether query ``i`` may look at key ``j``. Blocked scores
are set to ``-inf`` before the softmax, so they get exactly zero weight.

Names say which way round a mask is: :func:`real_token_mask` is True on real tokens (False
on padding) and :func:`real_key_mask` turns it into an attention mask over keys.
``torch.nn.MultiheadAttention`` uses the *opposite* polarity (True = blocked)
for both ``attn_mask`` and ``key_padding_mask`` (True = padding); :func:`to_torch_attn_mask`
and :func:`to_key_padding_mask` convert, and are named for torch's argument they produce.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import require_int, require_positive_int, require_tensor


def causal_mask(n: int, n_k: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """The causal (look-ahead) mask: query ``i`` may attend to keys ``j <= i``.

    ``mask[i, j] = (j <= i)``, a lower-triangular boolean matrix of shape ``(n, n)``.
    With ``n_k`` keys for ``n`` queries (the keys of a cache come first) the triangle is
    aligned bottom-right: ``mask[i, j] = (j <= i + n_k - n)``, so the last query sees every
    key, as torch's ``causal_lower_right`` and FlashAttention 2.1 and later. The one causal
    mask of the companion (:class:`~companion.multihead.MultiHeadAttention`'s ``causal=True``
    and :func:`companion.flash.tiled_attention` follow it).
    """
    require_positive_int("n", n)
    n_k = n if n_k is None else require_positive_int("n_k", n_k)
    return torch.ones(n, n_k, dtype=torch.bool, device=device).tril(n_k - n)


def real_token_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """Which positions of a padded batch hold real tokens: **True = real token**, False = padding.

    ``lengths``: the true length of each of the ``B`` sequences (list or 1-D tensor).
    Returns ``mask`` of shape ``(B, max_len)`` with ``mask[b, t] = (t < lengths[b])``.

    To use it as an attention mask over keys, give it the shape ``(B, 1, 1, N_k)``
    (batch, heads, queries, keys) with :func:`real_key_mask`; torch's ``key_padding_mask``
    is its negation (:func:`to_key_padding_mask`).
    """
    if isinstance(lengths, Sequence) and not isinstance(lengths, str):
        lengths = list(lengths)
        lengths = torch.as_tensor(lengths) if lengths else torch.zeros(0, dtype=torch.long)
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


def real_key_mask(real_tokens: torch.Tensor) -> torch.Tensor:
    """An attention mask that lets every query attend to the real keys only: the ``(B, N_k)``
    real-token mask (True = real token) reshaped to ``(B, 1, 1, N_k)``.

    The result broadcasts over heads and queries: every query of sequence ``b``
    may attend to the real keys of ``b`` and to none of its padding.
    """
    _check_real_tokens(real_tokens)
    return real_tokens[:, None, None, :]  # (B, 1, 1, N_k)


def _check_real_tokens(real_tokens) -> None:
    require_tensor("real_tokens", real_tokens)
    if real_tokens.dtype != torch.bool:
        raise TypeError(f"real_tokens must be a boolean (B, N_k) mask (True = real token), got dtype "
                        f"{real_tokens.dtype}; build it with real_token_mask(lengths)")
    if real_tokens.dim() != 2:
        raise ValueError(f"real_tokens must have shape (B, N_k), got {tuple(real_tokens.shape)}")


def to_torch_attn_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert a course mask (True = may attend) to ``nn.MultiheadAttention``'s
    boolean ``attn_mask`` (True = blocked): the logical negation."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    return ~mask


def to_key_padding_mask(real_tokens: torch.Tensor) -> torch.Tensor:
    """Convert a ``(B, N)`` real-token mask (True = real token, :func:`real_token_mask`) to
    ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = padding, ignored): the negation."""
    _check_real_tokens(real_tokens)
    return ~real_tokens  # (B, N) True = padding


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A float mask to *add* to the scores: 0 where allowed, ``-inf`` where blocked."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype (only floats hold -inf), got {dtype!r}")
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return additive.masked_fill(~mask, float("-inf"))


def from_additive(additive: torch.Tensor) -> torch.Tensor:
    """Back from an additive float mask to a boolean one (True where finite, False at ``-inf``).

    NaN and ``+inf`` are refused: added to the scores they would not block a key but
    poison its whole row."""
    require_tensor("additive", additive)
    if not additive.is_floating_point():
        raise TypeError(f"additive must be a float mask, got dtype {additive.dtype}")
    bad = torch.isnan(additive) | torch.isposinf(additive)
    if bad.any():
        raise ValueError(f"additive must hold finite numbers or -inf, got {int(bad.sum())} NaN or +inf entries "
                         f"(first at index {tuple(torch.nonzero(bad)[0].tolist())})")
    return torch.isfinite(additive)


def local_window_mask(n: int, radius: int, device: torch.device | str | None = None) -> torch.Tensor:
    """A 1-D local window: query ``i`` may attend to keys ``j`` with ``|i - j| <= radius``.

    A banded boolean matrix of shape ``(n, n)``: the receptive field of a 1-D
    convolution of kernel size ``2·radius + 1``, written as an attention mask.
    """
    require_positive_int("n", n)
    require_int("radius", radius, minimum=0)
    i = torch.arange(n, device=device)
    return (i[:, None] - i[None, :]).abs() <= radius  # (n, n)


def pixel_grid(height: int, width: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The row and column of every pixel of a ``height × width`` image, pixels numbered
    row by row (``p = row · width + col``, the order of ``rearrange(img, 'c h w -> (h w) c')``).

    Returns ``rows, cols``, each of shape ``(height·width,)``.
    """
    require_positive_int("height", height)
    require_positive_int("width", width)
    rows = torch.arange(height, device=device).repeat_interleave(width)  # (H·W,)
    cols = torch.arange(width, device=device).repeat(height)  # (H·W,)
    return rows, cols


def local_window_mask_2d(height: int, width: int, radius: int,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """A 2-D local window over the ``height × width`` pixels of an image.

    Pixels are numbered row by row (``p = row · width + col``, the order of
    ``rearrange(img, 'c h w -> (h w) c')``). Pixel ``p`` may attend to pixel
    ``p'`` when both their row and column differ by at most ``radius``: the
    ``(2·radius + 1) × (2·radius + 1)`` receptive field of a convolution.
    Shape ``(height·width, height·width)``.
    """
    require_int("radius", radius, minimum=0)
    rows, cols = pixel_grid(height, width, device)  # (H·W,) each
    near_rows = (rows[:, None] - rows[None, :]).abs() <= radius  # (H·W, H·W)
    near_cols = (cols[:, None] - cols[None, :]).abs() <= radius  # (H·W, H·W)
    return near_rows & near_cols


def graph_mask(adjacency, self_loops: bool = True) -> torch.Tensor:
    """An attention mask from a graph: node ``i`` may attend to node ``j`` when
    there is an edge ``i — j`` (``adjacency[i, j]`` nonzero).

    ``adjacency``: a square ``(n, n)`` tensor or nested list (bool, int or float).
    With ``self_loops=True`` every node also attends to itself (so no row is
    fully masked for a node with no edges). Returns a boolean ``(n, n)`` mask.
    """
    if not isinstance(self_loops, bool):
        raise TypeError(f"self_loops must be True or False, got {self_loops!r}")
    if not isinstance(adjacency, torch.Tensor):
        if not isinstance(adjacency, (list, tuple)):
            raise TypeError(f"adjacency must be a tensor or a nested list, got {type(adjacency).__name__}")
        try:
            adjacency = torch.as_tensor(adjacency)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"adjacency must be a square (n, n) matrix of numbers, got {adjacency!r}: {err}") from None
    if adjacency.dim() != 2 or adjacency.shape[0] != adjacency.shape[1]:
        raise ValueError(f"adjacency must be a square (n, n) matrix, got shape {tuple(adjacency.shape)}")
    if adjacency.is_complex():
        raise TypeError(f"adjacency must be real (bool, int or float), got dtype {adjacency.dtype}")
    if adjacency.is_floating_point() and torch.isnan(adjacency).any():
        raise ValueError(f"adjacency holds NaN at {tuple(torch.nonzero(torch.isnan(adjacency))[0].tolist())}: "
                         "NaN is neither an edge nor no edge")
    mask = adjacency != 0
    if self_loops:
        mask = mask | torch.eye(mask.shape[0], dtype=torch.bool, device=mask.device)
    return mask
