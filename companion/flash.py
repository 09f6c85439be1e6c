"""FlashAttention from first principles: the online softmax and tiled attention.

The explicit path (:func:`companion.attention.attention_with_weights`) stores the
``N_q × N_k`` scores. FlashAttention (Dao et al., 2022) never does. It walks over the keys
in tiles and keeps, for every query row, three running numbers (float32 for float16 and
bfloat16 inputs):

    m  = max of the scores seen so far                     # (..., N_q)
    l  = Σ exp(s - m) over the scores seen so far          # (..., N_q)
    acc = Σ exp(s - m) v over the keys seen so far         # (..., N_q, D_v)

A new tile of scores ``S`` with row maxima ``m̃`` updates them by the **rescaling identity**

    m'   = max(m, m̃)
    l'   = exp(m - m') l   + Σ exp(S - m')
    acc' = exp(m - m') acc + exp(S - m') V

and at the end ``Y = acc / l``. This is FlashAttention-2's order (Dao, 2023): query tiles
outside, key tiles inside, one division by ``l`` at the end, and only the log-sum-exp saved.
FlashAttention-1's Algorithm 1 loops over key tiles outside and rescales the output in main
memory at every step. The result is exactly ``softmax(S) V``, because every term carries the same
factor ``exp(-m)``. A blocked score is ``-inf`` and adds ``exp(-inf) = 0``; a row whose every
key is blocked keeps ``m = -inf, l = 0`` and gets an output of 0, as the explicit path gives.

The backward pass recomputes each tile's weights from ``Q, K`` and the row's log-sum-exp
``L = m + log l`` instead of storing them (the paper's recomputation):

    P = exp(S - L)           dV = Pᵀ dY          dP = dY Vᵀ
    dS = P ∘ (dP - δ),  δ = rowsum(dY ∘ Y)       dQ = dS K / √d     dK = dSᵀ Q / √d
"""

from __future__ import annotations

import math

import torch

from ._validate import require_float, require_positive_int
from .attention import _check_attention_args, check_attention_shapes

NEG_INF = float("-inf")


# --- 1. the online softmax --------------------------------------------------------------------

def softmax_stats(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two numbers a softmax needs from one block of scores ``(..., n)``:
    its maximum ``m`` and ``l = Σ exp(s - m)``, each ``(...)``. An all ``-inf`` block
    gives ``m = -inf, l = 0``."""
    m = scores.amax(dim=-1)  # (...)
    l = torch.exp(scores - _finite(m)[..., None]).sum(dim=-1)  # (...)
    return m, l


def merge_stats(m1: torch.Tensor, l1: torch.Tensor, m2: torch.Tensor, l2: torch.Tensor):
    """Merge the statistics of two blocks: ``m = max(m1, m2)``,
    ``l = exp(m1 - m) l1 + exp(m2 - m) l2``. Returns ``(m, l)``."""
    m = torch.maximum(m1, m2)
    return m, torch.exp(m1 - _finite(m)) * l1 + torch.exp(m2 - _finite(m)) * l2


def online_softmax(scores: torch.Tensor, block_size: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(scores)`` over the last dimension, its statistics gathered block by block.

    One pass over blocks of ``block_size`` columns keeps the running ``(m, l)``
    (:func:`merge_stats`); then ``softmax = exp(s - m) / l``. ``mask`` (boolean, True = may
    attend) blocks entries with ``-inf``; a fully blocked row gets weights of 0, as
    :func:`companion.attention.masked_softmax` gives."""
    require_float("scores", scores)
    require_positive_int("block_size", block_size)
    if mask is not None:
        check_attention_shapes((*scores.shape[:-1], 1), (scores.shape[-1], 1), (scores.shape[-1], 1), mask)
        scores = scores.masked_fill(~mask, NEG_INF)  # (..., n)
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)  # (...)
    l = torch.zeros_like(m)  # (...)
    for start in range(0, scores.shape[-1], block_size):
        m, l = merge_stats(m, l, *softmax_stats(scores[..., start:start + block_size]))
    weights = torch.exp(scores - _finite(m)[..., None]) / l[..., None]  # (..., n)
    return torch.where(l[..., None] > 0, weights, 0.0)  # fully blocked rows: 0/0 -> 0


def _finite(m: torch.Tensor) -> torch.Tensor:
    """``m`` with ``-inf`` replaced by 0, so that ``s - m`` of a fully blocked row is
    ``-inf - 0 = -inf`` (``exp`` gives 0) instead of ``-inf - (-inf) = NaN``."""
    return torch.where(torch.isinf(m), 0.0, m)


# --- 2. tiled attention ----------------------------------------------------------------------

def tile_update(m, l, acc, scores, v):
    """One tile's update of the running statistics (the rescaling identity).

    ``m, l (..., b_q)``, ``acc (..., b_q, D_v)``, the tile's scores ``(..., b_q, b_k)`` (blocked
    ones ``-inf``) and values ``v (..., b_k, D_v)``. Returns the new ``(m, l, acc)``."""
    m_new = torch.maximum(m, scores.amax(dim=-1))  # (..., b_q)
    shift = _finite(m_new)
    rescale = torch.exp(m - shift)  # (..., b_q): 0 where m was -inf
    p = torch.exp(scores - shift[..., None])  # (..., b_q, b_k) unnormalised weights
    l_new = rescale * l + p.sum(dim=-1)  # (..., b_q)
    acc_new = rescale[..., None] * acc + p @ v  # (..., b_q, D_v)
    return m_new, l_new, acc_new


def causal_tiles(n_q: int, n_k: int, block_q: int, block_k: int) -> tuple[int, int]:
    """``(computed, skipped)``: how many of the ``⌈n_q/block_q⌉ × ⌈n_k/block_k⌉`` tiles a
    causal mask (query ``i`` sees keys ``j <= i + n_k - n_q``, aligned bottom-right as in
    :func:`tiled_attention`) leaves to compute, and how many lie wholly above the diagonal
    and are skipped."""
    for name, value in (("n_q", n_q), ("n_k", n_k), ("block_q", block_q), ("block_k", block_k)):
        require_positive_int(name, value)
    computed = skipped = 0
    for q0 in range(0, n_q, block_q):
        for k0 in range(0, n_k, block_k):
            if _above_diagonal(q0, k0, min(block_q, n_q - q0), n_k - n_q):
                skipped += 1
            else:
                computed += 1
    return computed, skipped


def _above_diagonal(q0: int, k0: int, block_q: int, offset: int = 0) -> bool:
    """A tile whose first key ``k0`` comes after the last key its last query
    ``q0 + block_q - 1`` may see, ``q0 + block_q - 1 + offset`` (``offset = N_k - N_q``)."""
    return k0 > q0 + block_q - 1 + offset


def _tile_scores(q_tile, k_tile, scale, mask, causal, q0, k0, offset=0):
    """``S = Q Kᵀ / √d`` of one tile ``(..., b_q, b_k)`` with blocked scores set to -inf.
    Causal: query ``i`` sees keys ``j <= i + offset``, ``offset = N_k - N_q``."""
    s = (q_tile @ k_tile.transpose(-2, -1)) * scale  # (..., b_q, b_k)
    if causal:
        i = torch.arange(q0, q0 + q_tile.shape[-2], device=s.device)[:, None] + offset  # (b_q, 1)
        j = torch.arange(k0, k0 + k_tile.shape[-2], device=s.device)[None, :]  # (1, b_k)
        s = s.masked_fill(j > i, NEG_INF)
    if mask is not None:
        s = s.masked_fill(~mask[..., q0:q0 + q_tile.shape[-2], k0:k0 + k_tile.shape[-2]], NEG_INF)
    return s


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the running statistics and accumulators: float32 for float16 and
    bfloat16 inputs (as FlashAttention's kernels keep ``m``, ``l`` and the output
    accumulator), the input's own dtype otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _tiled_forward(q, k, v, mask, causal, block_q, block_k):
    """Returns ``out (..., N_q, D_v)`` and the log-sum-exp ``L (..., N_q)`` (``-inf`` on fully
    blocked rows), one query tile at a time; only tile-sized scores ever exist. The query
    tiles form the outer loop (FlashAttention-2's order). Low-precision inputs are computed
    tile by tile in float32: ``m``, ``l``, ``acc`` and ``L`` are float32, and only the
    finished output is rounded to the input's dtype."""
    offset = k.shape[-2] - q.shape[-2]  # causal: aligned bottom-right
    scale = 1 / math.sqrt(q.shape[-1])
    work = _stats_dtype(q.dtype)
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., N_q, D_v)
    lse = torch.empty(q.shape[:-1], dtype=work, device=q.device)  # (..., N_q)
    for q0 in range(0, q.shape[-2], block_q):
        q_tile = q[..., q0:q0 + block_q, :].to(work)  # (..., b_q, D)
        m = torch.full(q_tile.shape[:-1], NEG_INF, dtype=work, device=q.device)  # (..., b_q)
        l = torch.zeros_like(m)  # (..., b_q)
        acc = torch.zeros((*q_tile.shape[:-1], v.shape[-1]), dtype=work, device=q.device)  # (..., b_q, D_v)
        for k0 in range(0, k.shape[-2], block_k):
            if causal and _above_diagonal(q0, k0, q_tile.shape[-2], offset):
                break  # every later key tile lies above the diagonal too
            k_tile = k[..., k0:k0 + block_k, :].to(work)  # (..., b_k, D)
            s = _tile_scores(q_tile, k_tile, scale, mask, causal, q0, k0, offset)
            m, l, acc = tile_update(m, l, acc, s, v[..., k0:k0 + block_k, :].to(work))
        # FlashAttention-2: divide by l once, after the last key tile
        out[..., q0:q0 + block_q, :] = torch.where(l[..., None] > 0, acc / l[..., None], 0.0).to(q.dtype)
        lse[..., q0:q0 + block_q] = torch.where(l > 0, m + torch.log(l), NEG_INF)
    return out, lse


def _tiled_backward(q, k, v, mask, causal, block_q, block_k, out, lse, d_out):
    """The recomputation backward: each tile's weights ``P = exp(S - L)`` are rebuilt from
    ``Q, K`` and ``L``; returns ``dQ, dK, dV``. The query tiles form the outer loop here (the
    papers' kernels loop over key tiles outside, to keep ``dK, dV`` of a tile on chip).
    Low-precision inputs accumulate their gradients in float32."""
    offset = k.shape[-2] - q.shape[-2]  # causal: aligned bottom-right
    scale = 1 / math.sqrt(q.shape[-1])
    work = _stats_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=work, device=q.device)
    dk = torch.zeros(k.shape, dtype=work, device=k.device)
    dv = torch.zeros(v.shape, dtype=work, device=v.device)
    delta = (d_out.to(work) * out.to(work)).sum(dim=-1)  # (..., N_q) δ = rowsum(dY ∘ Y)
    lse = _finite(lse)  # fully blocked rows: S = -inf everywhere, so P = exp(-inf - 0) = 0
    for q0 in range(0, q.shape[-2], block_q):
        rows = slice(q0, q0 + block_q)
        q_tile, do_tile = q[..., rows, :].to(work), d_out[..., rows, :].to(work)  # (..., b_q, D), (..., b_q, D_v)
        for k0 in range(0, k.shape[-2], block_k):
            if causal and _above_diagonal(q0, k0, q_tile.shape[-2], offset):
                break
            cols = slice(k0, k0 + block_k)
            k_tile, v_tile = k[..., cols, :].to(work), v[..., cols, :].to(work)  # (..., b_k, D), (..., b_k, D_v)
            s = _tile_scores(q_tile, k_tile, scale, mask, causal, q0, k0, offset)  # (..., b_q, b_k)
            p = torch.exp(s - lse[..., rows, None])  # (..., b_q, b_k) the weights, recomputed
            dv[..., cols, :] += p.transpose(-2, -1) @ do_tile  # (..., b_k, D_v)
            dp = do_tile @ v_tile.transpose(-2, -1)  # (..., b_q, b_k)
            ds = p * (dp - delta[..., rows, None]) * scale  # (..., b_q, b_k)
            dq[..., rows, :] += ds @ k_tile  # (..., b_q, D)
            dk[..., cols, :] += ds.transpose(-2, -1) @ q_tile  # (..., b_k, D)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _TiledAttention(torch.autograd.Function):
    """Forward by tiles; backward by recomputation (nothing of size ``N_q × N_k`` is saved)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, block_q, block_k):
        out, lse = _tiled_forward(q, k, v, mask, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.causal, ctx.blocks = mask, causal, (block_q, block_k)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _tiled_backward(q, k, v, ctx.mask, ctx.causal, *ctx.blocks, out, lse, d_out.contiguous())
        return dq, dk, dv, None, None, None, None


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                    causal: bool = False, block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """``softmax(Q Kᵀ / √d) V`` by tiles of ``block_q`` queries and ``block_k`` keys.

    Same shapes and mask convention as :func:`companion.attention.attention_with_weights`:
    ``q (..., N_q, d)``, ``k (..., N_k, d)``, ``v (..., N_k, d_v)``, ``mask`` boolean
    broadcastable to ``(..., N_q, N_k)`` (True = may attend). ``causal=True``: query ``i`` sees
    keys ``j <= i + N_k - N_q``, the causal mask aligned bottom-right (the last query sees every
    key), as :class:`companion.multihead.MultiHeadAttention` with a cache, torch's
    ``torch.nn.attention.bias.causal_lower_right`` and FlashAttention 2.1 and later align it;
    for ``N_q = N_k`` it is :func:`companion.masks.causal_mask`. Queries that may see no key
    (``i + N_k - N_q < 0``) get an output of 0. The tiles wholly above the diagonal are
    skipped (:func:`causal_tiles` counts them). Returns
    ``(..., N_q, d_v)``; gradients come from the recomputation backward.
    """
    _check_attention_args(q, k, v, mask)  # the attention module's one check
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {type(causal).__name__}")
    require_positive_int("block_q", block_q)
    require_positive_int("block_k", block_k)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])  # checked: they broadcast
    scores_shape = (*batch, q.shape[-2], k.shape[-2])
    q = q.expand(*batch, *q.shape[-2:])  # (..., N_q, d): views, no copy
    k = k.expand(*batch, *k.shape[-2:])  # (..., N_k, d)
    v = v.expand(*batch, *v.shape[-2:])  # (..., N_k, d_v)
    if mask is not None:
        mask = mask.expand(scores_shape)  # (..., N_q, N_k): a view of the caller's mask
    return _TiledAttention.apply(q, k, v, mask, causal, block_q, block_k)


# --- 3. traffic to main memory, counted --------------------------------------------------------

def hbm_bytes(n: int, d: int, block_q: int, block_k: int, *, bytes_per_element: int = 2) -> dict[str, int]:
    """Bytes one head's forward pass moves between main memory (a GPU's HBM) and on-chip
    memory, for ``n`` queries and keys of size ``d``, no mask: ``{"explicit": ..., "tiled": ...}``.

    The explicit path is standard attention as FlashAttention's paper writes it (Dao et al.,
    2022, Algorithm 0): read Q, K and write S; read S and write P; read P, V and write Y:
    ``(4nd + 4n²)`` elements. The tiled path is counted by walking :func:`tiled_attention`'s
    loop: each query tile reads its Q tile once, then *every* key and value tile, and writes its
    Y tile and its rows' log-sum-exp (float32, 4 bytes each). K and V are read once per query
    tile, so the count is ``(2nd + 2⌈n/b_q⌉nd)`` elements plus ``4n`` bytes."""
    for name, value in (("n", n), ("d", d), ("block_q", block_q), ("block_k", block_k),
                        ("bytes_per_element", bytes_per_element)):
        require_positive_int(name, value)
    explicit = (2 * n * d + n * n) + (n * n + n * n) + (n * n + n * d + n * d)  # elements
    tiled = lse_bytes = 0
    for q0 in range(0, n, block_q):
        b_q = min(block_q, n - q0)
        tiled += b_q * d  # the query tile, read once
        for k0 in range(0, n, block_k):
            tiled += 2 * min(block_k, n - k0) * d  # a key tile and a value tile
        tiled += b_q * d  # the output tile, written once
        lse_bytes += 4 * b_q  # L, float32
    return {"explicit": explicit * bytes_per_element, "tiled": tiled * bytes_per_element + lse_bytes}
