"""Multi-head attention in the four steps of the lecture.

With ``N`` tokens of size ``D``, ``H`` heads of size ``D_H = D / H``:

1. QKV projection      ``[N × D] [D × 3HD_H] -> [N × 3HD_H]``, split into
                       Q, K, V of shape ``[H × N × D_H]`` each
2. QK similarity       ``[H × N × D_H] [H × D_H × N] -> [H × N × N]``
3. V weighting         ``[H × N × N] [H × N × D_H] -> [H × N × D_H]``,
                       heads concatenated back to ``[N × HD_H]``
4. Output projection   ``[N × HD_H] [HD_H × D] -> [N × D]``

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O,
    head_h = Attention(Q W_h^Q, K W_h^K, V W_h^V)

The parameters are laid out like ``torch.nn.MultiheadAttention``'s
(``in_proj`` holds ``W^Q, W^K, W^V`` stacked, ``out_proj`` is ``W^O``), so
weights copy across and the two modules can be compared number for number.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ._validate import (
    inside_checked_edge,
    require_float,
    require_matches_parameters,
    require_positive_int,
    require_probability,
    require_rank,
)
from .attention import _attention_with_weights, check_attention_shapes
from .kv_cache import append_to_cache, cache_position
from .masks import causal_mask, to_additive
from .positional import _RopeTable, alibi_slopes, frequencies, relative_alibi_bias


def repeat_kv_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped-query attention's sharing: ``(B, H_kv, N, D_H) -> (B, H_kv · groups, N, D_H)``,
    each key/value head repeated for the ``groups`` consecutive query heads it serves
    (query head ``h`` uses key/value head ``h // groups``, as torch's ``enable_gqa``).
    :class:`MultiHeadAttention` does not copy: it reads each key/value head in place for its
    query heads (``_attend``); this is the reference it is tested against."""
    if groups == 1:
        return x
    return x.repeat_interleave(groups, dim=1)  # (B, H, N, D_H)


def mean_pool_kv_heads(mha: MultiHeadAttention, num_kv_heads: int) -> MultiHeadAttention:
    """Ainslie et al. (2023)'s conversion of a trained module to grouped-query attention: a
    new module with ``num_kv_heads`` key/value heads, key/value head ``g`` the mean of the
    ``H_kv / num_kv_heads`` heads ``g · groups … (g + 1) · groups - 1`` it replaces (their
    projection weights and biases averaged); queries and the output projection are copied."""
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    require_positive_int("num_kv_heads", num_kv_heads)
    if mha.num_kv_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} must divide the module's {mha.num_kv_heads} key/value heads")
    groups, D, d_h = mha.num_kv_heads // num_kv_heads, mha.d_model, mha.head_dim
    new = MultiHeadAttention(D, mha.num_heads, bias=mha.in_proj.bias is not None, dropout=mha.dropout,
                             fused=mha.fused, num_kv_heads=num_kv_heads, position=mha.position,
                             rope_base=mha.rope_base, window=mha.window)
    new.rope_scale = mha.rope_scale
    new = new.to(device=mha.in_proj.weight.device, dtype=mha.in_proj.weight.dtype)

    def pool(t: torch.Tensor) -> torch.Tensor:  # (H_kv·D_H, ...) -> (num_kv_heads·D_H, ...)
        q, k, v = t.split([D, mha.num_kv_heads * d_h, mha.num_kv_heads * d_h])
        heads = [x.reshape(num_kv_heads, groups, d_h, *t.shape[1:]).mean(1).flatten(0, 1) for x in (k, v)]
        return torch.cat([q, *heads])

    with torch.no_grad():
        new.in_proj.weight.copy_(pool(mha.in_proj.weight))
        if mha.in_proj.bias is not None:
            new.in_proj.bias.copy_(pool(mha.in_proj.bias))
        new.out_proj.load_state_dict(mha.out_proj.state_dict())
    return new


def _by_group(t: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """``(..., H, N_q, X) -> (..., H_kv, G·N_q, X)``, with ``G = H / H_kv``: the rows of the
    ``G`` query heads that share a key/value head, one after the other (query head ``h`` uses
    key/value head ``h // G``, as :func:`repeat_kv_heads`); a view when ``t`` is contiguous."""
    H, n_q, x = t.shape[-3:]
    return t.reshape(*t.shape[:-3], num_kv_heads, H // num_kv_heads * n_q, x)


def _attend(q, k, v, mask, bias, dropout_p: float, is_causal: bool, fused: bool):
    """Steps 2 and 3 for ``q (B, H, N_q, D_H)`` and ``k, v (B, H_kv, N_k, D_H)``, ``H_kv``
    dividing ``H``. Each key/value head is read where it lies, once for the ``G = H / H_kv``
    query heads it serves, never copied ``G`` times: decoding with GQA reads ``G`` times fewer
    cached numbers than MHA. Returns ``heads (B, H, N_q, D_H)`` and the weights
    ``(B, H, N_q, N_k)`` of the explicit path (``None`` from the fused kernel)."""
    (B, H, n_q, d_h), h_kv, n_k = q.shape, k.shape[1], k.shape[2]
    if fused:  # steps 2 + 3 in one kernel; the (N_q × N_k) weights are never stored
        if bias is not None:  # ALiBi: a float mask, the bias with -inf where blocked
            mask = bias if mask is None else bias + to_additive(mask, bias.dtype)  # (..., H, N_q, N_k)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                              enable_gqa=h_kv < H), None  # (B, H, N_q, D_H)
    if h_kv == H:  # step 2: QK similarity (+ ALiBi's bias), softmax; step 3: V weighting
        return _attention_with_weights(q, k, v, mask, dropout_p, bias)  # (B, H, N_q, D_H), (B, H, N_q, N_k)
    # GQA: the G query heads of a group side by side, (B, H_kv, G·N_q, D_H), against their
    # one key/value head (B, H_kv, N_k, D_H): the same matmuls, with H_kv heads of G·N_q rows
    shape = (*mask.shape[:-3], H, n_q, n_k) if mask is not None and mask.dim() > 3 else (H, n_q, n_k)
    mask = None if mask is None else _by_group(mask.expand(shape), h_kv)  # (..., H_kv, G·N_q, N_k)
    bias = None if bias is None else _by_group(bias.expand(H, n_q, n_k), h_kv)  # (H_kv, G·N_q, N_k)
    heads, weights = _attention_with_weights(_by_group(q, h_kv), k, v, mask, dropout_p, bias)
    return heads.view(B, H, n_q, d_h), weights.view(B, H, n_q, n_k)  # (B, H, N_q, D_H), (B, H, N_q, N_k)


def _check_call(mha: MultiHeadAttention, query, key, value, mask, cache, self_attention: bool, causal: bool) -> None:
    """The checks of a :class:`MultiHeadAttention` call at the edge (a model checks its own
    input once and calls its layers unchecked)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {type(causal).__name__}; "
                        "a mask tensor goes to mask=")
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_float(name, x)
        require_rank(name, x, 3, "batch, length, d_model")
        if x.shape[-1] != mha.d_model:
            raise ValueError(f"{name} must have last dimension d_model={mha.d_model}, got shape {tuple(x.shape)}")
        require_matches_parameters(name, x, mha.in_proj.weight)
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(f"key and value must have the same batch and length, got {tuple(key.shape)} and {tuple(value.shape)}")
    if query.shape[0] != key.shape[0]:
        raise ValueError(f"query and key must have the same batch size, got {tuple(query.shape)} and {tuple(key.shape)}")
    if mask is not None and isinstance(mask, torch.Tensor) and mask.dim() == 3:
        # (B, N_q, N_k) would broadcast against (B, H, N_q, N_k) with B read as the heads
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} is ambiguous: a 3-D mask lines up with (heads, N_q, N_k), "
            f"not (batch, N_q, N_k). Give a per-sequence mask the shape (B, 1, N_q, N_k) with mask[:, None], "
            f"or one mask for all sequences the shape (N_q, N_k)"
        )
    if cache is not None and not isinstance(cache, dict):
        raise TypeError(f"cache must be a dict (this module keeps its keys and values in it), "
                        f"got {type(cache).__name__}")
    if not self_attention and (mha.position is not None or mha.window is not None):
        raise ValueError(f"position={mha.position!r} and window={mha.window!r} are for self-attention "
                         "(key=None): the keys' positions are those of the queries")
    cached = cache["k"].shape[2] if cache is not None and self_attention and "k" in cache else 0
    B, Nq, Nk = query.shape[0], query.shape[1], key.shape[1] + cached
    k_shape = (B, mha.num_heads, Nk, mha.head_dim)  # the heads' shapes
    check_attention_shapes((B, mha.num_heads, Nq, mha.head_dim), k_shape, k_shape, mask)


def _load_torch_weights(mha: MultiHeadAttention, torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """:meth:`MultiHeadAttention.load_from_torch`: ``torch_mha``'s weights copied into ``mha``."""
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise TypeError(f"torch_mha must be a torch.nn.MultiheadAttention, got {type(torch_mha).__name__}")
    if torch_mha.embed_dim != mha.d_model or torch_mha.num_heads != mha.num_heads:
        raise ValueError(
            f"size mismatch: this module has d_model={mha.d_model}, num_heads={mha.num_heads}; "
            f"torch's has embed_dim={torch_mha.embed_dim}, num_heads={torch_mha.num_heads}"
        )
    if mha.num_kv_heads != mha.num_heads:
        raise ValueError(f"this module has num_kv_heads={mha.num_kv_heads} < num_heads={mha.num_heads}: "
                         "torch's MultiheadAttention has one key/value head per query head")
    if torch_mha.in_proj_weight is None:
        raise ValueError("torch_mha uses separate q/k/v sizes (kdim/vdim); only the shared layout is supported")
    with torch.no_grad():
        mha.in_proj.weight.copy_(torch_mha.in_proj_weight)
        mha.out_proj.weight.copy_(torch_mha.out_proj.weight)
        if mha.in_proj.bias is not None:
            mha.in_proj.bias.copy_(torch_mha.in_proj_bias)
            mha.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return mha


class MultiHeadAttention(nn.Module):
    """Multi-head attention on ``(batch, length, d_model)`` tensors (call: :meth:`forward`).

    Args:
        d_model: size ``D`` of each token vector.
        num_heads: number of heads ``H``; must divide ``d_model``.
        bias: whether the projections have biases.
        dropout: dropout on the attention weights (training only).
        fused: steps 2–3 by ``torch.nn.functional.scaled_dot_product_attention`` (fast, keeps
            no weights). The explicit path (matmul, softmax, matmul) runs when ``fused=False``
            or when the caller asks for the weights.
        num_kv_heads, position, rope_base, window: chapter 11's options, each off by default:

    - ``num_kv_heads``: grouped-query attention (GQA). Only ``H_kv`` key/value heads, each
      shared by ``H / H_kv`` query heads (read in place, not copied per query head);
      ``num_kv_heads=1`` is multi-query attention (MQA).
    - ``position="rope"``: rotate each head's queries and keys by their positions
      (:func:`companion.positional.apply_rope`, base ``rope_base``) before the scores.
    - ``position="alibi"``: add the ALiBi bias ``-m_h |i - j|`` to head ``h``'s scores.
    - ``window``: sliding-window attention: query ``t`` sees keys ``t - window + 1 … t``, and
      the cache rolls, keeping the last ``window`` keys and values only.

    The three are for self-attention. **Key/value cache** (step-by-step decoding): a dict
    ``cache`` that the module reads and fills. In self-attention (``key=None``) the new tokens'
    keys and values are appended to the cached ones (``H_kv`` heads), so step ``t`` projects
    one token instead of ``t``; written in place when ``cache`` holds preallocated
    ``"k_buffer"``/``"v_buffer"`` ``(B, H_kv, capacity, D_H)`` (no window). ``cache["position"]``
    counts the tokens seen. In cross-attention the memory's keys and values are projected at
    the first call and reused. ``mask`` then covers all keys, cached ones included.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0, fused: bool = True,
                 num_kv_heads: int | None = None, position: str | None = None, rope_base: float = 10000.0,
                 window: int | None = None):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                             f"each head needs d_model / num_heads dimensions")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.dropout, self.fused = require_probability("dropout", dropout), fused
        self.num_kv_heads = num_heads if num_kv_heads is None else require_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}: "
                             "each key/value head serves the same number of query heads")
        if position not in (None, "rope", "alibi"):
            raise ValueError(f"position must be None, 'rope' or 'alibi', got {position!r}")
        self.position, self.rope_base = position, rope_base
        # chapter 11's context extension: positions divided by rope_scale (Chen et al., 2023)
        self.rope_scale = 1.0
        if position == "rope":
            frequencies(self.head_dim, rope_base)  # checks head_dim (even) and base, once
        self._rope = _RopeTable()  # RoPE's cos and sin, computed once
        self.window = None if window is None else require_positive_int("window", window)
        if position == "alibi":
            self.register_buffer("alibi_slopes", alibi_slopes(num_heads).float(), persistent=False)
        # W^Q, W^K, W^V stacked: [D × (H + 2 H_kv) D_H] (stored transposed, as nn.Linear does); W^O: [D × D]
        self.in_proj = nn.Linear(d_model, d_model + 2 * self.num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def project_qkv(self, query, key, value):
        """Step 1: ``Q = query W^Q``, ``K = key W^K``, ``V = value W^V``, each ``(B, N, ·)``: the
        one place where ``W^Q, W^K, W^V`` are split. ``key``/``value`` may be ``None`` (then
        ``None`` comes back for them: only ``Q`` is computed)."""
        sizes = [self.d_model, self.num_kv_heads * self.head_dim, self.num_kv_heads * self.head_dim]
        if query is key and key is value:  # self-attention: one matmul, then split in three
            return self.in_proj(query).split(sizes, dim=-1)  # (B, N, D), 2 × (B, N, H_kv D_H)
        w_q, w_k, w_v = self.in_proj.weight.split(sizes, dim=0)  # (D, D), 2 × (H_kv D_H, D)
        b_q, b_k, b_v = (None,) * 3 if self.in_proj.bias is None else self.in_proj.bias.split(sizes)
        k = None if key is None else F.linear(key, w_k, b_k)
        v = None if value is None else F.linear(value, w_v, b_v)
        return F.linear(query, w_q, b_q), k, v

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, H·D_H) -> (B, H, N, D_H)`` (``H_kv`` heads for keys and values)."""
        return rearrange(x, "b n (h d) -> b h n d", d=self.head_dim)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, H, N, D_H) -> (B, N, H·D_H)``: concatenate the heads."""
        return rearrange(x, "b h n d -> b n (h d)")

    def forward(self, query, key=None, value=None, mask=None, need_weights: bool = False, cache: dict | None = None,
                causal: bool = False):
        """``query (B, N_q, D)``; ``key``/``value (B, N_k, D)`` (default: ``query``, i.e.
        self-attention); ``mask`` boolean (True = may attend) broadcastable to ``(B, H, N_q, N_k)``,
        e.g. ``causal_mask(N)`` ``(N_q, N_k)`` or ``real_key_mask(real_tokens)`` ``(B, 1, 1, N_k)``.
        ``causal=True`` adds the causal mask (query ``i`` sees key ``j <= i``, counted from the end
        when a cache makes the keys outnumber the queries) without a tensor: the fused kernel, told
        ``is_causal``, then skips the blocked upper triangle.

        Returns two values: ``output (B, N_q, D)`` and ``weights (B, H, N_q, N_k)``, the attention
        weights where the explicit path ran (``need_weights=True`` or ``fused=False``), else ``None``.
        """
        self_attention = key is None
        key = query if key is None else key
        value = key if value is None else value
        if not inside_checked_edge():  # the only check of the call; none inside a model (GPT)
            _check_call(self, query, key, value, mask, cache, self_attention, causal)
        # Step 1: QKV projection, then split into heads (with a cache: only the new tokens).
        q, k, v, q_pos, k_pos = self._project(query, key, value, cache, self_attention)
        n_q, n_k = q.shape[2], k.shape[2]
        if self.window is not None:  # query at p sees keys p - window + 1 … p (causal itself)
            behind = q_pos[:, None] - k_pos[None, :]  # (N_q, N_k)
            band = (behind >= 0) & (behind < self.window)  # (N_q, N_k)
            mask, causal = (band if mask is None else mask & band), False
        causal = causal and n_q > 1  # aligned bottom-right, one query sees every key
        fused = self.fused and not need_weights
        # causal=True: the fused kernel skips the upper triangle itself when nothing else masks
        # (no mask, no ALiBi bias, as many queries as keys); else a mask tensor.
        is_causal = causal and fused and mask is None and self.position != "alibi" and n_q == n_k
        if causal and not is_causal:
            causal_part = causal_mask(n_q, n_k, device=q.device)  # (N_q, N_k) aligned bottom-right
            mask = causal_part if mask is None else mask & causal_part
        bias = None
        if self.position == "alibi":
            bias = relative_alibi_bias(self.alibi_slopes, q_pos, k_pos).to(q.dtype)  # (H, N_q, N_k)
        dropout_p = self.dropout if self.training else 0.0
        # steps 2 + 3 (GQA: each key/value head, read in place, serves H / H_kv query heads)
        heads, weights = _attend(q, k, v, mask, bias, dropout_p, is_causal, fused)  # (B, H, N_q, D_H), weights or None
        return self.out_proj(self.merge_heads(heads)), weights  # step 4: (B, N_q, D), weights or None

    def _project(self, query, key, value, cache: dict | None, self_attention: bool):
        """Step 1, the one projection path: ``q, k, v (B, H or H_kv, N, D_H)`` and the positions
        of the queries and keys (``None`` where nothing needs them). With a ``cache``,
        self-attention appends the new tokens' K, V to the cached ones; cross-attention
        projects the memory's K, V at the first call and reuses them afterwards."""
        reuse = cache is not None and not self_attention and "k" in cache
        q, k, v = self.project_qkv(query, None if reuse else key, None if reuse else value)
        if reuse:
            return self.split_heads(q), cache["k"], cache["v"], None, None  # (B, H, N_q, D_H), cached
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, H, N, D_H), 2 × (B, H_kv, N, D_H)
        n = query.shape[1]
        start = cache_position(cache)
        q_pos = None  # the positions of the new tokens, for RoPE, ALiBi and the window (self-attention)
        if self.position is not None or self.window is not None:
            q_pos = torch.arange(start, start + n, device=query.device)  # (N_q,)
        if self.position == "rope":  # rotate before caching: a cached key keeps its own angle
            q, k = (self._rope(t, start, self.rope_base, self.rope_scale) for t in (q, k))
        if cache is None:
            return q, k, v, q_pos, q_pos
        k, v = append_to_cache(cache, k, v, self_attention, self.window)  # 2 × (B, H_kv, t, D_H): cached + new
        k_pos = None if q_pos is None else torch.arange(start + n - k.shape[2], start + n, device=query.device)
        return q, k, v, q_pos, k_pos

    def load_from_torch(self, torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` with the same sizes; returns ``self``."""
        return _load_torch_weights(self, torch_mha)
