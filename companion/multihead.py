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

from ._validate import require_float, require_matches_parameters, require_positive_int, require_probability, require_rank
from .attention import _attention_with_weights, check_attention_shapes


class MultiHeadAttention(nn.Module):
    """Multi-head attention on ``(batch, length, d_model)`` tensors.

    Args:
        d_model: size ``D`` of each token vector.
        num_heads: number of heads ``H``; must divide ``d_model``.
        bias: whether the projections have biases.
        dropout: dropout on the attention weights (training only).
        fused: use ``torch.nn.functional.scaled_dot_product_attention`` for
            steps 2–3 (fast, does not keep the weights). The explicit path
            (matmul, softmax, matmul) runs when ``fused=False`` or when the
            caller asks for the weights.

    Call ``mha(query, key=None, value=None, mask=None, need_weights=False)``:
    ``query (B, N_q, D)``, ``key``/``value (B, N_k, D)`` (default: ``query``,
    i.e. self-attention), ``mask`` boolean (True = may attend) broadcastable to
    ``(B, H, N_q, N_k)``, e.g. ``causal_mask(N)`` of shape ``(N_q, N_k)`` or
    ``real_key_mask(real_tokens)`` of shape ``(B, 1, 1, N_k)``. ``causal=True`` adds the
    causal mask (query ``i`` sees key ``j <= i``, counted from the end when a cache makes the
    keys outnumber the queries) without a tensor: the fused kernel, told ``is_causal``, then
    skips the blocked upper triangle.

    Returns ``(output (B, N_q, D), weights (B, H, N_q, N_k) or None)``.

    **Key/value cache** (step-by-step decoding): pass a dict ``cache`` that the module
    reads and fills. In self-attention (``key=None``) the new tokens' keys and values are
    appended to those of the earlier tokens kept in ``cache``, so step ``t`` projects one
    token instead of ``t``; in cross-attention (``key``/``value`` given) they are projected
    at the first call and reused afterwards. ``mask`` then covers all keys, cached ones
    included.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0, fused: bool = True):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                f"each head needs d_model / num_heads dimensions"
            )
        require_probability("dropout", dropout)
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.fused = fused
        # W^Q, W^K, W^V stacked: [D × 3 H D_H] (stored transposed, as nn.Linear does)
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        # W^O: [H D_H × D]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def project_qkv(self, query, key, value):
        """Step 1: ``Q = query W^Q``, ``K = key W^K``, ``V = value W^V``, each ``(B, N, D)``.

        The one place where ``W^Q, W^K, W^V`` are split; ``key``/``value`` may be ``None``
        (then ``None`` comes back for them: only ``Q`` is computed)."""
        if query is key and key is value:
            # Self-attention: one [N × D][D × 3D] matmul, then split in three.
            qkv = self.in_proj(query)  # (B, N, 3D)
            return qkv.chunk(3, dim=-1)  # 3 × (B, N, D)
        w_q, w_k, w_v = self.in_proj.weight.chunk(3, dim=0)  # 3 × (D, D)
        b_q = b_k = b_v = None
        if self.in_proj.bias is not None:
            b_q, b_k, b_v = self.in_proj.bias.chunk(3)
        k = None if key is None else F.linear(key, w_k, b_k)
        v = None if value is None else F.linear(value, w_v, b_v)
        return F.linear(query, w_q, b_q), k, v

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, H·D_H) -> (B, H, N, D_H)``."""
        return rearrange(x, "b n (h d) -> b h n d", h=self.num_heads)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, H, N, D_H) -> (B, N, H·D_H)``: concatenate the heads."""
        return rearrange(x, "b h n d -> b n (h d)")

    def forward(self, query, key=None, value=None, mask=None, need_weights: bool = False, cache: dict | None = None,
                causal: bool = False):
        self_attention = key is None
        key = query if key is None else key
        value = key if value is None else value
        # The only check of the call: the steps below call torch and the unchecked explicit path.
        self._check_inputs(query, key, value, mask, cache, self_attention, causal)

        # Step 1: QKV projection, then split into heads (with a cache: only the new tokens).
        if cache is None:
            q, k, v = self.project_qkv(query, key, value)  # 3 × (B, N, D)
            q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # 3 × (B, H, N, D_H)
        else:
            q, k, v = self._project_with_cache(query, key, value, cache, self_attention)  # 3 × (B, H, N, D_H)

        dropout_p = self.dropout if self.training else 0.0
        fused = self.fused and not need_weights
        is_causal = causal and fused and mask is None and q.shape[2] == k.shape[2]
        if causal and not is_causal:  # the explicit path, a mask beside it, or a cache: a tensor
            n_q, n_k = q.shape[2], k.shape[2]
            causal_part = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)  # (N_q, N_k)
            mask = causal_part if mask is None else mask & causal_part
        if fused:
            # Steps 2 + 3 in one fused kernel; the (N_q × N_k) weights are never stored.
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                   is_causal=is_causal)  # (B, H, N_q, D_H)
            weights = None
        else:
            # Step 2: QK similarity -> softmax; Step 3: V weighting (dropout on the weights).
            heads, weights = _attention_with_weights(q, k, v, mask, dropout_p)  # (B, H, N_q, D_H), (B, H, N_q, N_k)

        # Step 4: concatenate heads and project back to D.
        out = self.out_proj(self.merge_heads(heads))  # (B, N_q, D)
        return out, weights

    def _project_with_cache(self, query, key, value, cache: dict, self_attention: bool):
        """Step 1 for step-by-step decoding. Self-attention: project the new tokens and
        append their K, V to the cached ones. Cross-attention: project the memory's K, V
        at the first call, reuse them afterwards. Returns ``q, k, v (B, H, N, D_H)``."""
        if not self_attention and "k" in cache:
            q = self.split_heads(self.project_qkv(query, None, None)[0])  # (B, H, N_q, D_H)
            return q, cache["k"], cache["v"]
        q, k, v = self.project_qkv(query, key, value)  # 3 × (B, N, D)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # 3 × (B, H, N, D_H)
        if self_attention and "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)  # (B, H, t, D_H): earlier tokens, then the new ones
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        return q, k, v

    def _check_inputs(self, query, key, value, mask, cache=None, self_attention: bool = True, causal: bool = False):
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be True or False, got {type(causal).__name__}; "
                            "a mask tensor goes to mask=")
        for name, x in (("query", query), ("key", key), ("value", value)):
            require_float(name, x)
            require_rank(name, x, 3, "batch, length, d_model")
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")
            require_matches_parameters(name, x, self.in_proj.weight)
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
        cached = cache["k"].shape[2] if cache is not None and self_attention and "k" in cache else 0
        B, Nq, Nk = query.shape[0], query.shape[1], key.shape[1] + cached
        q_shape = (B, self.num_heads, Nq, self.head_dim)  # the heads' shapes
        k_shape = (B, self.num_heads, Nk, self.head_dim)
        check_attention_shapes(q_shape, k_shape, k_shape, mask)

    def load_from_torch(self, torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` with the same sizes."""
        if not isinstance(torch_mha, nn.MultiheadAttention):
            raise TypeError(f"torch_mha must be a torch.nn.MultiheadAttention, got {type(torch_mha).__name__}")
        if torch_mha.embed_dim != self.d_model or torch_mha.num_heads != self.num_heads:
            raise ValueError(
                f"size mismatch: this module has d_model={self.d_model}, num_heads={self.num_heads}; "
                f"torch's has embed_dim={torch_mha.embed_dim}, num_heads={torch_mha.num_heads}"
            )
        if torch_mha.in_proj_weight is None:
            raise ValueError("torch_mha uses separate q/k/v sizes (kdim/vdim); only the shared layout is supported")
        with torch.no_grad():
            self.in_proj.weight.copy_(torch_mha.in_proj_weight)
            self.out_proj.weight.copy_(torch_mha.out_proj.weight)
            if self.in_proj.bias is not None:
                self.in_proj.bias.copy_(torch_mha.in_proj_bias)
                self.out_proj.bias.copy_(torch_mha.out_proj.bias)
        return self
