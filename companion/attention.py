"""Attention: scores, softmax, weighted sum.

The explicit path written out the way the book writes it:

    E = Q Kᵀ / sqrt(d)        # (..., N_q, N_k) similarity scores
    E[~mask] = -inf           # blocked pairs
    A = softmax(E, dim=-1)    # (..., N_q, N_k) each row sums to 1
    Y = A V                   # (..., N_q, D_v)

(:func:`attention_with_weights`, which returns ``(Y, A)``) and the fused path,
``torch.nn.functional.scaled_dot_product_attention``, which computes the same ``Y`` in one
kernel without storing ``A`` and returns ``Y`` alone (:func:`fused_attention` calls it with the
course's checks). The companion has no function of torch's name: a name means what torch means.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    require_bool_mask,
    require_float,
    require_matches_parameters,
    require_positive_int,
    require_probability,
    require_rank,
)


def check_attention_shapes(q_shape, k_shape, v_shape, mask=None, names=("q", "k", "v")) -> tuple[int, ...]:
    """Check that q, k, v (and a mask) of these shapes fit together.

    Returns the shape of the score matrix ``(..., N_q, N_k)``; raises a
    ``ValueError`` naming the shapes when they do not fit.
    """
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    qn, kn, vn = names
    for name, shape in zip(names, (q_shape, k_shape, v_shape), strict=True):
        if len(shape) < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, dim), got shape {shape}")
    if q_shape[-1] == 0:
        raise ValueError(f"{qn} and {kn} must have a last dimension (head size) >= 1, got {qn} {q_shape}: "
                         "a score over 0 numbers divided by sqrt(0) is not a number")
    if k_shape[-2] == 0 and q_shape[-2] > 0:
        raise ValueError(f"{kn} and {vn} must hold at least one key (length >= 1), got {kn} {k_shape}: "
                         "a softmax over no keys is not defined")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"{qn} and {kn} must have the same last dimension to be compared, got {qn} {q_shape} and {kn} {k_shape}")
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(f"{kn} and {vn} must have the same length (one value per key), got {kn} {k_shape} and {vn} {v_shape}")
    try:
        batch = torch.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch/head) dimensions of {qn} {q_shape}, {kn} {k_shape} and {vn} {v_shape} do not broadcast"
        ) from None
    scores_shape = (*batch, q_shape[-2], k_shape[-2])
    if mask is not None:
        require_bool_mask("mask", mask, scores_shape)
    return scores_shape


def _check_attention_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, dropout_p: float = 0.0) -> None:
    """The checks of every path (:func:`attention_with_weights`, :func:`fused_attention`,
    :func:`companion.flash.tiled_attention`)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_float(name, x)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    check_attention_shapes(q.shape, k.shape, v.shape, mask)
    require_probability("dropout_p", dropout_p)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(E)`` over the last dimension with blocked entries (``mask`` False) set to
    exactly 0: ``E[~mask] = -inf``, then ``softmax``. A row whose every key is blocked
    gets weights of 0 (``softmax`` of an all ``-inf`` row would give NaN), as in
    PyTorch's fused kernel. The one masked softmax of the companion."""
    require_float("scores", scores)
    if scores.dim() == 0:
        raise ValueError("scores must have a last dimension of keys, got a 0-D tensor")
    if mask is not None:
        require_bool_mask("mask", mask, scores.shape)
    return _masked_softmax(scores, mask)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, in_place: bool = False) -> torch.Tensor:
    """``masked_softmax`` without its checks, for callers that checked their inputs.
    ``in_place=True``: the caller's fresh ``scores`` are overwritten with the ``-inf`` (one
    N_q × N_k tensor fewer); only where the mask does not make the scores larger."""
    if mask is None:
        return torch.softmax(scores, dim=-1)  # (..., N_q, N_k)
    blocked = ~mask
    if in_place and torch.broadcast_shapes(blocked.shape, scores.shape) == scores.shape:
        scores = scores.masked_fill_(blocked, float("-inf"))  # (..., N_q, N_k)
    else:
        scores = scores.masked_fill(blocked, float("-inf"))  # (..., N_q, N_k)
    weights = torch.softmax(scores, dim=-1)  # (..., N_q, N_k)
    if blocked.all(dim=-1).any():  # a row with no allowed key: softmax gave NaN there
        weights = weights.masked_fill(blocked, 0.0)  # NaN -> 0 (elsewhere exp(-inf) is 0 already)
    return weights


def attention_with_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, explicit path, that also returns the weights.

    ``softmax(Q Kᵀ / sqrt(d)) V`` with shapes
    ``q (..., N_q, d)``, ``k (..., N_k, d)``, ``v (..., N_k, d_v)`` and a boolean
    ``mask`` broadcastable to ``(..., N_q, N_k)`` (True = may attend).

    Returns ``(output, weights)``: ``output (..., N_q, d_v)`` and the attention
    weights ``(..., N_q, N_k)``, whose rows sum to 1. With ``dropout_p > 0`` the output is
    ``dropout(A) V`` (what training uses) while the returned weights are ``A`` itself.

    A query whose every key is blocked gets weights of 0 and an output of 0
    (instead of the NaN that ``softmax`` of an all ``-inf`` row gives), the same
    as PyTorch's fused kernel.
    """
    _check_attention_args(q, k, v, mask, dropout_p)
    return _attention_with_weights(q, k, v, mask, dropout_p)


def _attention_with_weights(q, k, v, mask, dropout_p, bias=None):
    """:func:`attention_with_weights` without its checks, for a caller that made them at its
    own public edge (:class:`companion.multihead.MultiHeadAttention`). A float ``bias``
    broadcastable to the scores (ALiBi's) is added to them before the softmax."""
    d = q.shape[-1]
    # (Q / sqrt(d)) Kᵀ is Q Kᵀ / sqrt(d): dividing the N_q × d queries, not the N_q × N_k scores
    scores = (q / math.sqrt(d)) @ k.transpose(-2, -1)  # (..., N_q, N_k)
    if bias is not None:
        scores = scores + bias  # (..., N_q, N_k)
    weights = _masked_softmax(scores, mask, in_place=True)  # (..., N_q, N_k); scores are ours
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights  # (..., N_q, N_k)
    output = dropped @ v  # (..., N_q, d_v)
    return output, weights


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The same computation by PyTorch's fused kernel.

    Same arguments and mask convention as :func:`attention_with_weights`,
    but returns only the output ``(..., N_q, d_v)``: the fused kernel never
    stores the ``N_q × N_k`` weights, which is why it is faster and lighter.
    """
    _check_attention_args(q, k, v, mask, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention.

    Score of query ``s`` against key ``h_i``:

        e_i = wᵀ tanh(W_q s + W_k h_i)

    then ``a = softmax(e)`` and the context ``c = Σ_i a_i v_i`` (``v = h`` when
    no separate values are given).

    Args:
        query_dim: size of a query vector ``s``.
        key_dim: size of a key vector ``h_i``.
        hidden_dim: size of the hidden layer inside the score.

    Call with ``query (B, query_dim)`` or ``(B, N_q, query_dim)``,
    ``keys (B, N_k, key_dim)``, optional ``values (B, N_k, d_v)`` and a boolean
    ``mask`` broadcastable to ``(B, N_q, N_k)`` (or ``(B, N_k)`` for a single query).
    Returns ``(context, weights)`` with the query's leading shape.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("hidden_dim", hidden_dim)):
            require_positive_int(name, value)
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=True)
        self.w = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query, keys, values=None, mask=None):
        values = keys if values is None else values
        require_float("query", query)
        require_float("keys", keys)
        require_float("values", values)
        require_matches_parameters("query", query, self.W_q.weight)
        require_matches_parameters("keys", keys, self.W_k.weight)
        single = query.dim() == 2
        if single:
            query = query[:, None, :]  # (B, 1, query_dim)
            if mask is not None and mask.dim() == 2:
                mask = mask[:, None, :]  # (B, 1, N_k)
        if query.dim() != 3 or keys.dim() != 3 or values.dim() != 3:
            raise ValueError(
                "AdditiveAttention expects query (B, query_dim) or (B, N_q, query_dim), keys (B, N_k, key_dim) "
                f"and values (B, N_k, d_v); got query {tuple(query.shape)}, keys {tuple(keys.shape)}, "
                f"values {tuple(values.shape)}"
            )
        if query.shape[-1] != self.query_dim or keys.shape[-1] != self.key_dim:
            raise ValueError(
                f"expected query last dim {self.query_dim} and keys last dim {self.key_dim}, "
                f"got query {tuple(query.shape)} and keys {tuple(keys.shape)}"
            )
        if keys.shape[:2] != values.shape[:2] or query.shape[0] != keys.shape[0]:
            raise ValueError(
                f"batch sizes and key/value lengths must agree, got query {tuple(query.shape)}, "
                f"keys {tuple(keys.shape)}, values {tuple(values.shape)}"
            )
        if keys.shape[1] == 0:
            raise ValueError(f"keys must hold at least one key (N_k >= 1), got keys {tuple(keys.shape)}")
        scores_shape = (query.shape[0], query.shape[1], keys.shape[1])
        if mask is not None:
            require_bool_mask("mask", mask, scores_shape)
        hidden = torch.tanh(self.W_q(query)[:, :, None, :] + self.W_k(keys)[:, None, :, :])  # (B, N_q, N_k, hidden)
        scores = self.w(hidden).squeeze(-1)  # (B, N_q, N_k)
        weights = _masked_softmax(scores, mask)  # (B, N_q, N_k)
        context = weights @ values  # (B, N_q, d_v)
        if single:
            return context[:, 0], weights[:, 0]  # (B, d_v), (B, N_k)
        return context, weights


class DotProductAttention(nn.Module):
    """Scaled dot-product scoring for one query per sequence.

    ``q = W_Q s``, keys ``k_i = W_K h_i``, values ``v_i = W_V h_i``, then
    ``e_i = q·k_i / sqrt(d)``, ``a = softmax(e)``, ``c = Σ_i a_i v_i``, computed by
    :func:`attention_with_weights`.

    Call with ``query (B, query_dim)``, ``keys (B, N, key_dim)`` and a boolean
    ``mask (B, N)`` (True = real key); returns ``(context (B, dim), weights (B, N))``.
    """

    def __init__(self, query_dim: int, key_dim: int, dim: int):
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("dim", dim)):
            require_positive_int(name, value)
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W_Q = nn.Linear(query_dim, dim, bias=False)
        self.W_K = nn.Linear(key_dim, dim, bias=False)
        self.W_V = nn.Linear(key_dim, dim, bias=False)

    def project(self, keys):
        """Keys and values ``(B, N, d)`` of the data vectors ``keys (B, N, key_dim)``;
        a decoder computes them once per sequence, not at every step."""
        require_float("keys", keys)
        require_rank("keys", keys, 3, "B, N, key_dim")
        if keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must have last dimension key_dim={self.key_dim}, got shape {tuple(keys.shape)}")
        require_matches_parameters("keys", keys, self.W_K.weight)
        return self.W_K(keys), self.W_V(keys)  # (B, N, d) each

    def forward(self, query, keys, mask=None, projected=None):
        self._check_query(query)
        k, v = self.project(keys) if projected is None else projected  # (B, N, d) each
        q = self.W_Q(query)[:, None, :]  # (B, 1, d)
        m = None if mask is None else mask[:, None, :]  # (B, 1, N)
        out, weights = attention_with_weights(q, k, v, m)  # (B, 1, d), (B, 1, N)
        return out[:, 0], weights[:, 0]  # (B, d), (B, N)

    def _check_query(self, query) -> None:
        require_float("query", query)
        require_rank("query", query, 2, "B, query_dim")
        if query.shape[-1] != self.query_dim:
            raise ValueError(f"query must have last dimension query_dim={self.query_dim}, got shape {tuple(query.shape)}")
        require_matches_parameters("query", query, self.W_Q.weight)
