"""The blocks of the Transformer (chapter 7): LayerNorm, the FFN and the two layers::

    LayerNorm(x) = γ ⊙ (x - μ) / sqrt(σ² + ε) + β     μ, σ² over the features of one token
    FFN(x)       = W_2 · ReLU(W_1 x + b_1) + b_2       applied to every position alone

An encoder layer is two sublayers, each with a residual connection and a LayerNorm; where
the LayerNorm sits is the one choice (``norm_first``, the same default for every class)::

    pre-norm (norm_first=True, the default)      post-norm (norm_first=False)
    (Xiong et al., 2020)                         (the 2017 paper)
    x = x + SelfAttn(norm1(x))                   x = norm1(x + SelfAttn(x))
    x = x + FFN(norm2(x))                        x = norm2(x + FFN(x))

A decoder layer has a third sublayer between the two, cross-attention: queries from the
decoder, keys and values from the encoder output (``memory``).

Masks follow the course convention (True = may attend). Parameters are named like those of
``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` (``self_attn``,
``norm1``…, the FFN's ``linear1``, ``linear2``), so weights copy across
(:mod:`companion.models.torch_weights`) and the two are compared number for number.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import (
    checked_edge,
    inside_checked_edge,
    require_float,
    require_matches_parameters,
    require_number,
    require_positive_int,
    require_probability,
    require_rank,
    require_tensor,
)
from ..multihead import MultiHeadAttention
from ..multihead import _check_call as _check_mha_call
from .torch_weights import load_decoder_layer, load_encoder_layer


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The formula, written out: ``γ ⊙ (x - μ) / sqrt(σ² + ε) + β`` with μ, σ² over the last dimension."""
    _check_layer_norm_args(x, weight, bias, eps)
    mu = x.mean(dim=-1, keepdim=True)  # (..., 1) one mean per token
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)  # (..., 1) one (biased) variance per token
    return weight * (x - mu) / torch.sqrt(var + eps) + bias  # (..., d)


def _check_layer_norm_args(x, weight, bias, eps) -> None:
    require_float("x", x)
    for name, p in (("weight", weight), ("bias", bias)):
        require_tensor(name, p)
        if p.shape != x.shape[-1:]:
            raise ValueError(f"{name} must have shape ({x.shape[-1]},) (one per feature of x), got {tuple(p.shape)} "
                             f"for x {tuple(x.shape)}")
    _check_eps(eps)


def _check_eps(eps) -> None:
    require_number("eps", eps, 0.0, strict=True)  # eps <= 0 divides by sqrt(0) on a constant token


class LayerNorm(nn.Module):
    """Normalise each token over its ``d`` features: ``γ ⊙ (x - μ) / sqrt(σ² + ε) + β``.

    The statistics are per token (last dimension), so they do not depend on the
    other sequences in the batch nor on how much padding they carry. ``forward`` calls
    PyTorch's fused kernel; :func:`layer_norm` is the same formula written out (tested equal).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        require_positive_int("d_model", d_model)
        _check_eps(eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias = nn.Parameter(torch.zeros(d_model))  # β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not inside_checked_edge():  # in a model, x was checked at the model's edge
            _check_tokens("x", x, self.weight.shape[0], self.weight, rank=None)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)  # (..., d)


# The FFN's nonlinearity by name, ReLU (the 2017 paper) or GELU (GPT, BERT, chapter 10).
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _check_activation(activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")


class FeedForward(nn.Module):
    """The position-wise FFN: ``W_2 · act(W_1 x + b_1) + b_2``, ``d → d_ff → d``;
    ``act`` is ReLU (``activation="relu"``, the default) or GELU (``"gelu"``, as in GPT)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("d_ff", d_ff)
        require_probability("dropout", dropout)
        _check_activation(activation)
        self.d_model = d_model
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not inside_checked_edge():  # in a model, x was checked at the model's edge
            _check_tokens("x", x, self.d_model, self.linear1.weight, rank=None)
        act = ACTIVATIONS[self.activation]
        return self.linear2(self.dropout(act(self.linear1(x))))  # (B, N, d) -> (B, N, d_ff) -> (B, N, d)


def _check_tokens(name: str, x: torch.Tensor, d_model: int, param: torch.Tensor, rank: int | None = 3) -> None:
    """``x`` is a float ``(B, N, d_model)`` tensor (any rank with ``rank=None``) that fits ``param``."""
    require_float(name, x)
    if rank is not None:
        require_rank(name, x, rank, "batch, length, d_model")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model}, got shape {tuple(x.shape)}")
    require_matches_parameters(name, x, param)


def _check_norm_first(norm_first) -> None:
    if not isinstance(norm_first, bool):  # "False" or 0/1 would pick a form by truthiness
        raise TypeError(f"norm_first must be True (pre-norm) or False (post-norm), got {norm_first!r}")


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each in a residual connection with its LayerNorm.

    ``layer(x, mask=None, need_weights=False)``: ``x (B, N, d)``, ``mask`` (True = may
    attend) broadcastable to ``(B, H, N, N)``. Returns ``(B, N, d)``; with
    ``need_weights`` the attention weights ``(B, H, N, N)`` are kept in ``self.attn_weights``.
    ``dropout`` applies inside attention and the FFN and to each sublayer's output.

    Under a causal mask this is the block of a decoder-only model (GPT, chapter 10): with a
    dict ``cache`` the self-attention appends the new tokens' keys and values to those kept
    there (chapter 7's KV cache), and ``mask`` must then cover the cached keys too.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = True,
                 activation: str = "relu", **attention):
        super().__init__()
        _check_norm_first(norm_first)
        self.d_model, self.norm_first = d_model, norm_first
        # attention: chapter 11's options of MultiHeadAttention (num_kv_heads, position, window)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, **attention)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)  # on each sublayer's output, before the sum
        self.attn_weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False,
                cache: dict | None = None, causal: bool = False) -> torch.Tensor:
        if inside_checked_edge():  # in a model (GPT): x was made from the model's checked input
            return self._forward(x, mask, need_weights, cache, causal)
        _check_tokens("x", x, self.d_model, self.self_attn.in_proj.weight)
        _check_mha_call(self.self_attn, x, x, x, mask, cache, True, causal)
        with checked_edge():  # the sublayers below check nothing again
            return self._forward(x, mask, need_weights, cache, causal)

    def _forward(self, x, mask, need_weights, cache, causal):
        if self.norm_first:  # pre-norm: the residual stream x is never normalised
            x = x + self._self_attention(self.norm1(x), mask, need_weights, cache, causal)  # (B, N, d)
            x = x + self._feed_forward(self.norm2(x))  # (B, N, d)
        else:  # post-norm: normalise after each sum
            x = self.norm1(x + self._self_attention(x, mask, need_weights, cache, causal))  # (B, N, d)
            x = self.norm2(x + self._feed_forward(x))  # (B, N, d)
        return x

    def _self_attention(self, h, mask, need_weights, cache=None, causal=False):
        out, self.attn_weights = self.self_attn(h, mask=mask, need_weights=need_weights, cache=cache,
                                                causal=causal)  # queries, keys, values: h
        return self.dropout(out)  # (B, N, d)

    def _feed_forward(self, h):
        return self.dropout(self.ffn(h))  # (B, N, d)

    def load_from_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy the weights of a ``torch.nn.TransformerEncoderLayer`` of the same sizes and
        ``norm_first`` (see :func:`companion.models.torch_weights.load_encoder_layer`)."""
        return load_encoder_layer(self, layer)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, FFN, each in a residual connection with its LayerNorm.

    ``layer(y, memory, self_mask=None, memory_mask=None, need_weights=False, cache=None)``:
    ``y (B, T, d)`` the decoder's tokens, ``memory (B, N, d)`` the encoder output.
    Cross-attention takes its **queries from the decoder** and its **keys and values
    from the memory**. ``self_mask`` is usually ``causal_mask(T)``; ``memory_mask``
    hides the source padding, e.g. ``real_key_mask(real_tokens)`` ``(B, 1, 1, N)``.

    With a dict ``cache`` the layer decodes one step: ``y (B, 1, d)`` is the newest
    token and the keys/values of the earlier ones are read from (and added to) the cache.
    With ``need_weights``, ``self.self_weights (B, H, T, T)`` and
    ``self.cross_weights (B, H, T, N)`` keep the attention maps.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = True):
        super().__init__()
        _check_norm_first(norm_first)
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)  # on each sublayer's output, before the sum
        self.self_weights: torch.Tensor | None = None
        self.cross_weights: torch.Tensor | None = None

    def forward(self, y, memory, self_mask=None, memory_mask=None, need_weights: bool = False, cache: dict | None = None):
        _check_tokens("y", y, self.d_model, self.self_attn.in_proj.weight)
        _check_tokens("memory", memory, self.d_model, self.cross_attn.in_proj.weight)
        if y.shape[0] != memory.shape[0]:
            raise ValueError(f"y and memory must have the same batch size, got {tuple(y.shape)} and {tuple(memory.shape)}")
        if cache is not None and y.shape[1] != 1:
            raise ValueError(f"with a cache, y must hold one new token per sequence (B, 1, d), got {tuple(y.shape)}")
        # Each attention keeps its keys/values in its own dict; new dicts (not edits of the
        # old ones) so that an earlier decoding state stays valid.
        self_cache = None if cache is None else dict(cache.get("self", {}))
        cross_cache = None if cache is None else dict(cache.get("cross", {}))
        if cache is not None:
            self_mask = None  # one new token may attend to every earlier one
            need_weights = True  # decoding keeps the attention maps
        if self.norm_first:  # pre-norm: the residual stream y is never normalised
            y = y + self._self_attention(self.norm1(y), self_mask, need_weights, self_cache)  # (B, T, d)
            y = y + self._cross_attention(self.norm2(y), memory, memory_mask, need_weights, cross_cache)  # (B, T, d)
            y = y + self._feed_forward(self.norm3(y))  # (B, T, d)
        else:  # post-norm: normalise after each sum
            y = self.norm1(y + self._self_attention(y, self_mask, need_weights, self_cache))  # (B, T, d)
            y = self.norm2(y + self._cross_attention(y, memory, memory_mask, need_weights, cross_cache))  # (B, T, d)
            y = self.norm3(y + self._feed_forward(y))  # (B, T, d)
        if cache is not None:
            cache["self"], cache["cross"] = self_cache, cross_cache
        return y

    def _self_attention(self, h, mask, need_weights, cache):  # queries, keys, values: the decoder's tokens
        out, self.self_weights = self.self_attn(h, mask=mask, need_weights=need_weights, cache=cache)
        return self.dropout(out)  # (B, T, d)

    def _cross_attention(self, h, memory, mask, need_weights, cache):  # queries: decoder; keys, values: memory
        out, self.cross_weights = self.cross_attn(h, memory, memory, mask=mask, need_weights=need_weights, cache=cache)
        return self.dropout(out)  # (B, T, d)

    def _feed_forward(self, h):
        return self.dropout(self.ffn(h))  # (B, T, d)

    def load_from_torch(self, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Copy the weights of a ``torch.nn.TransformerDecoderLayer`` of the same sizes and
        ``norm_first`` (see :func:`companion.models.torch_weights.load_decoder_layer`)."""
        return load_decoder_layer(self, layer)
