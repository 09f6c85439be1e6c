"""What does each attention head do? Three measurements of attention weights, head by head.

All three take the weights of a multi-head layer, ``weights (B, H, N_q, N_k)`` (each row a
probability distribution over the keys), as ``MultiHeadAttention(..., need_weights=True)``
returns them and the encoder/decoder layers keep them.

- :func:`attention_entropy`  how spread a row is: ``H(a) = -Σ_j a_j log a_j`` (nats);
  0 when all weight is on one key, ``log N_k`` when it is uniform
- :func:`peak_offsets`       where a row looks, relative to its query: ``argmax_j a_ij - i``
  (``-1``: the previous token, ``0``: itself, ``+1``: the next one)
- :func:`mass_on`            how much of one query's weight falls on one chosen key
  (e.g. from a pronoun onto the noun it refers to)
- :func:`preferred_offset`   the most frequent peak offset of each head and its share
- :func:`weight_by_offset`   each head's mean weight on the keys ``t, t-1, …, t-n`` of a causal
  query ``t``: tells a previous-token head (most of its weight on ``t-1``, Olsson et al.,
  2022) from a recency head (its weight spread over the last few keys)
"""

from __future__ import annotations

import torch

from ._validate import require_float, require_int, require_rank, require_tensor


def _check_weights(weights: torch.Tensor, ranks=(4,)) -> None:
    require_float("weights", weights)
    require_rank("weights", weights, ranks, "batch, heads, queries, keys" if ranks == (4,) else "..., keys")
    if weights.shape[-1] == 0:
        raise ValueError(f"weights must have at least one key, got shape {tuple(weights.shape)}")


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """``-Σ_j a_j log a_j`` over the last axis (nats, with ``0 log 0 = 0``): ``(..., N_k) -> (...)``."""
    require_float("weights", weights)
    if weights.dim() == 0 or weights.shape[-1] == 0:
        raise ValueError(f"weights must have a last axis of keys, got shape {tuple(weights.shape)}")
    if (weights < 0).any():
        raise ValueError("weights must be >= 0 (attention weights are probabilities)")
    return -(weights * weights.clamp_min(torch.finfo(weights.dtype).tiny).log()).sum(-1)  # (...)


def peak_offsets(weights: torch.Tensor) -> torch.Tensor:
    """Offset of each row's largest weight from its own query position:
    ``argmax_j a_ij - i``, ``(B, H, N_q, N_k) -> (B, H, N_q)`` integers.

    For self-attention (``N_q = N_k``) offset ``-1`` is the previous token, ``0`` the token
    itself. For cross-attention the offset is taken against the same index ``i`` of the
    keys; subtract a different reference (e.g. the aligned source position) from
    ``weights.argmax(-1)`` when the alignment is not the diagonal."""
    _check_weights(weights)
    query_pos = torch.arange(weights.shape[2], device=weights.device)  # (N_q,)
    return weights.argmax(-1) - query_pos  # (B, H, N_q)


def preferred_offset(offsets: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[list[int], list[float]]:
    """The most frequent offset of each head and the share of rows that have it.

    ``offsets (B, H, N_q)`` integers (from :func:`peak_offsets`), ``valid`` boolean,
    broadcastable to ``(B, 1, N_q)`` or ``(B, H, N_q)``: the rows to count (e.g. real
    tokens, not padding). Returns ``(offset per head, share per head)``."""
    require_tensor("offsets", offsets)
    if offsets.is_floating_point() or offsets.dim() != 3:
        raise ValueError(f"offsets must be integers of shape (B, H, N_q), got {offsets.dtype} "
                         f"{tuple(offsets.shape)}")
    if valid is None:
        valid = torch.ones_like(offsets, dtype=torch.bool)
    require_tensor("valid", valid)
    if valid.dtype != torch.bool:
        raise TypeError(f"valid must be a boolean tensor (True = count this row), got {valid.dtype}")
    try:
        valid = valid.expand_as(offsets)  # (B, H, N_q)
    except RuntimeError:
        raise ValueError(f"valid of shape {tuple(valid.shape)} does not broadcast to the offsets' "
                         f"shape {tuple(offsets.shape)}") from None
    best, share = [], []
    for h in range(offsets.shape[1]):
        rows = offsets[:, h][valid[:, h]]  # (rows,)
        if rows.numel() == 0:
            raise ValueError(f"valid selects no row of head {h}")
        values, counts = rows.unique(return_counts=True)
        k = int(counts.argmax())
        best.append(int(values[k]))
        share.append(counts[k].item() / rows.numel())
    return best, share


def mass_on(weights: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """The weight that query position ``query[b]`` puts on key position ``key[b]``, in every
    head: ``weights (B, H, N_q, N_k)``, ``query (B,)``, ``key (B,)`` -> ``(B, H)``.
    ``mass_on(w, pronoun, referent)[b, h] = w[b, h, pronoun[b], referent[b]]``."""
    _check_weights(weights)
    B, _, N_q, N_k = weights.shape
    for name, pos, n in (("query", query, N_q), ("key", key, N_k)):
        require_tensor(name, pos)
        if pos.is_floating_point() or pos.shape != (B,):
            raise ValueError(f"{name} must hold one integer position per sequence, shape ({B},), "
                             f"got {pos.dtype} {tuple(pos.shape)}")
        if ((pos < 0) | (pos >= n)).any():
            raise ValueError(f"{name} positions must lie in [0, {n}), got {pos.tolist()[:8]}")
    batch = torch.arange(B, device=weights.device)  # (B,)
    rows = weights[batch, :, query.to(weights.device)]  # (B, H, N_k): one query row per sequence
    return rows[batch, :, key.to(weights.device)]  # (B, H)


def weight_by_offset(weights: torch.Tensor, back: int) -> torch.Tensor:
    """Each head's mean weight on the keys ``back`` positions and fewer before its query:
    ``out[h, k] = mean over b and i of a[b, h, i, i - k]`` for ``k = 0 … back``, over the
    queries ``i >= back`` (those that have all ``back + 1`` keys), ``(B, H, N, N) -> (H, back + 1)``.

    Column 0 is the token itself, column 1 the previous token. A **previous-token head**
    (Olsson et al., 2022) puts most of its weight on column 1; a head whose weight falls off
    with the distance spreads it over the first few columns, their sum near 1."""
    _check_weights(weights)
    require_int("back", back, minimum=0)
    B, H, N_q, N_k = weights.shape
    if N_q != N_k or back >= N_q:
        raise ValueError(f"weights must be square self-attention (B, H, N, N) with N > back={back}, "
                         f"got shape {tuple(weights.shape)}")
    i = torch.arange(back, N_q, device=weights.device)  # (N - back,) the queries
    columns = [weights[:, :, i, i - k].mean((0, 2)) for k in range(back + 1)]  # each (H,)
    return torch.stack(columns, dim=-1)  # (H, back + 1)
