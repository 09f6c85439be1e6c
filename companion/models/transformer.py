"""The Transformer of Vaswani et al. (2017), built from small blocks in the order of chapter 7::

    LayerNorm(x)      = γ ⊙ (x - μ) / sqrt(σ² + ε) + β     μ, σ² over the features of one token
    FFN(x)            = W_2 · ReLU(W_1 x + b_1) + b_2       applied to every position alone
    post-norm sublayer  x ← LayerNorm(x + Sublayer(x))       (the 2017 paper)
    pre-norm sublayer   x ← x + Sublayer(LayerNorm(x))       (Xiong et al., 2020)

    EncoderLayer: self-attention, FFN
    DecoderLayer: masked (causal) self-attention, cross-attention (queries from the
                  decoder, keys/values from the encoder output), FFN
    Transformer:  embeddings × sqrt(d) + sinusoidal positions → encoder → decoder
                  → Linear → logits (softmax gives the next-token distribution)

Masks follow the course convention (True = may attend). The layers' parameters are
named and laid out like ``torch.nn.TransformerEncoderLayer`` /
``TransformerDecoderLayer`` so weights copy across (``load_from_torch``) and the
two can be compared number for number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import (
    require_float,
    require_int,
    require_matches_parameters,
    require_number,
    require_positive_int,
    require_rank,
    require_tensor,
    require_token_ids,
)
from ..masks import causal_mask, key_mask
from ..multihead import MultiHeadAttention
from ..positional import SinusoidalPositionalEncoding


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
        require_float("x", x)
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"x must have last dimension d_model={self.weight.shape[0]}, got shape {tuple(x.shape)}")
        require_matches_parameters("x", x, self.weight)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)  # (..., d)


class FeedForward(nn.Module):
    """The position-wise FFN: ``W_2 · ReLU(W_1 x + b_1) + b_2``, ``d → d_ff → d``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("d_ff", d_ff)
        _check_dropout(dropout)
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens("x", x, self.d_model, self.linear1.weight, rank=None)
        return self.linear2(self.dropout(F.relu(self.linear1(x))))  # (B, N, d) -> (B, N, d_ff) -> (B, N, d)


class Residual(nn.Module):
    """A residual connection around a sublayer, with its LayerNorm before or after.

    ``norm_first=False`` (post-norm): ``LayerNorm(x + dropout(f(x)))``;
    ``norm_first=True``  (pre-norm):  ``x + dropout(f(LayerNorm(x)))``.
    """

    def __init__(self, d_model: int, norm_first: bool, dropout: float = 0.0):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, f) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(f(self.norm(x)))
        return self.norm(x + self.dropout(f(x)))


def _check_dropout(p) -> None:
    require_number("dropout", p, 0.0)
    if p >= 1:
        raise ValueError(f"dropout must be in [0, 1), got {p!r}")


def _check_tokens(name: str, x: torch.Tensor, d_model: int, param: torch.Tensor, rank: int | None = 3) -> None:
    require_float(name, x)
    if rank is not None:
        require_rank(name, x, rank, "batch, length, d_model")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model}, got shape {tuple(x.shape)}")
    require_matches_parameters(name, x, param)


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each inside a :class:`Residual`.

    ``layer(x, mask=None, need_weights=False)``: ``x (B, N, d)``, ``mask`` (True = may
    attend) broadcastable to ``(B, H, N, N)``. Returns ``(B, N, d)``; with
    ``need_weights`` the attention weights ``(B, H, N, N)`` are kept in ``self.attn_weights``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.sub_attn = Residual(d_model, norm_first, dropout)
        self.sub_ffn = Residual(d_model, norm_first, dropout)
        self.attn_weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False) -> torch.Tensor:
        _check_tokens("x", x, self.d_model, self.self_attn.in_proj.weight)

        def attend(h):
            out, self.attn_weights = self.self_attn(h, mask=mask, need_weights=need_weights)
            return out

        x = self.sub_attn(x, attend)  # (B, N, d)
        return self.sub_ffn(x, self.ffn)  # (B, N, d)

    def load_from_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy the weights of a ``torch.nn.TransformerEncoderLayer`` of the same sizes."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}")
        self.self_attn.load_from_torch(layer.self_attn)
        _copy_linear(self.ffn.linear1, layer.linear1)
        _copy_linear(self.ffn.linear2, layer.linear2)
        _copy_norm(self.sub_attn.norm, layer.norm1)
        _copy_norm(self.sub_ffn.norm, layer.norm2)
        return self


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, FFN, each inside a :class:`Residual`.

    ``layer(y, memory, self_mask=None, memory_mask=None, need_weights=False, cache=None)``:
    ``y (B, T, d)`` the decoder's tokens, ``memory (B, N, d)`` the encoder output.
    Cross-attention takes its **queries from the decoder** and its **keys and values
    from the memory**. ``self_mask`` is usually ``causal_mask(T)``; ``memory_mask``
    hides the source padding, e.g. ``key_mask(padding)`` ``(B, 1, 1, N)``.

    With a dict ``cache`` the layer decodes one step: ``y (B, 1, d)`` is the newest
    token and the keys/values of the earlier ones are read from (and added to) the cache.
    With ``need_weights``, ``self.self_weights (B, H, T, T)`` and
    ``self.cross_weights (B, H, T, N)`` keep the attention maps.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.sub_self = Residual(d_model, norm_first, dropout)
        self.sub_cross = Residual(d_model, norm_first, dropout)
        self.sub_ffn = Residual(d_model, norm_first, dropout)
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
            need_weights = True  # decoding keeps the attention maps, as before

        def self_attend(h):  # queries, keys, values: the decoder's tokens
            out, self.self_weights = self.self_attn(h, mask=self_mask, need_weights=need_weights, cache=self_cache)
            return out

        def cross_attend(h):  # queries: decoder; keys, values: encoder output
            out, self.cross_weights = self.cross_attn(h, memory, memory, mask=memory_mask, need_weights=need_weights,
                                                      cache=cross_cache)
            return out

        y = self.sub_self(y, self_attend)  # (B, T, d)
        y = self.sub_cross(y, cross_attend)  # (B, T, d)
        if cache is not None:
            cache["self"], cache["cross"] = self_cache, cross_cache
        return self.sub_ffn(y, self.ffn)  # (B, T, d)

    def load_from_torch(self, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Copy the weights of a ``torch.nn.TransformerDecoderLayer`` of the same sizes."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(f"layer must be a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}")
        self.self_attn.load_from_torch(layer.self_attn)
        self.cross_attn.load_from_torch(layer.multihead_attn)
        _copy_linear(self.ffn.linear1, layer.linear1)
        _copy_linear(self.ffn.linear2, layer.linear2)
        _copy_norm(self.sub_self.norm, layer.norm1)
        _copy_norm(self.sub_cross.norm, layer.norm2)
        _copy_norm(self.sub_ffn.norm, layer.norm3)
        return self


def _copy_linear(mine: nn.Linear, theirs: nn.Linear) -> None:
    if mine.weight.shape != theirs.weight.shape:
        raise ValueError(f"size mismatch: linear weight {tuple(mine.weight.shape)} vs torch's {tuple(theirs.weight.shape)}")
    with torch.no_grad():
        mine.weight.copy_(theirs.weight)
        mine.bias.copy_(theirs.bias)


def _copy_norm(mine: LayerNorm, theirs: nn.LayerNorm) -> None:
    with torch.no_grad():
        mine.weight.copy_(theirs.weight)
        mine.bias.copy_(theirs.bias)
    mine.eps = theirs.eps


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer`; pre-norm stacks end with one more LayerNorm."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        require_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers))
        # pre-norm leaves the residual stream un-normalised: normalise it once at the end
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, mask=None, need_weights: bool = False):
        for layer in self.layers:
            x = layer(x, mask, need_weights)  # (B, N, d)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer`; pre-norm stacks end with one more LayerNorm."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__()
        require_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, y, memory, self_mask=None, memory_mask=None, need_weights: bool = False, caches=None):
        for i, layer in enumerate(self.layers):
            y = layer(y, memory, self_mask, memory_mask, need_weights, None if caches is None else caches[i])  # (B, T, d)
        return self.norm(y)


@dataclass
class TransformerConfig:
    """Sizes of an encoder–decoder Transformer. ``pe_base=None`` means no positional encoding."""

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 128
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dropout: float = 0.0
    norm_first: bool = True
    pe_base: float | None = 10000.0
    max_len: int = 256
    pad_id: int = 0


class Transformer(nn.Module):
    """The encoder–decoder Transformer.

    ``model(src (B, N), tgt_in (B, T)) -> logits (B, T, V)``: ``src`` padded with
    ``pad_id``; ``tgt_in`` is the target *shifted right* (``<start> y_1 … y_{T-1}``),
    and the logits at position ``t`` score ``y_{t+1}`` (teacher forcing).

    Decoding follows the course's protocol: ``state = model.start(src)``, then
    ``logits, state = model.step(prev_tokens (B,), state)`` once per token. The state
    holds a key/value cache (``use_cache=True``, the default) or the tokens so far.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        c = config
        require_positive_int("vocab_size", c.vocab_size)
        require_int("pad_id", c.pad_id, minimum=0)
        if c.pad_id >= c.vocab_size:
            raise ValueError(f"pad_id={c.pad_id} must be a token of the vocabulary [0, {c.vocab_size})")
        _check_dropout(c.dropout)
        self.config = c
        self.src_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.pe_base) if c.pe_base is not None else nn.Identity()
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = Encoder(c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
        self.decoder = Decoder(c.num_decoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
        self.generator = nn.Linear(c.d_model, c.vocab_size)  # the final Linear: d -> V logits
        self.use_cache = True
        # N(0, 1/d) embeddings: after the × sqrt(d) every coordinate has unit scale, like
        # the sinusoids it is added to (N(0, 1) rows would drown the positions)
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, std=c.d_model ** -0.5)

    def _check_ids(self, name: str, ids: torch.Tensor, rank: int = 2) -> None:
        """Integer ids in ``[0, vocab_size)`` (range checked on the CPU only: no device sync),
        at least one token, at most ``max_len``."""
        require_token_ids(name, ids, self.config.vocab_size, rank)
        if rank == 2 and ids.shape[1] == 0:
            raise ValueError(f"{name} must hold at least one token per sequence, got shape {tuple(ids.shape)}")
        if rank == 2 and ids.shape[1] > self.config.max_len:
            raise ValueError(f"{name} is longer ({ids.shape[1]}) than max_len={self.config.max_len}")

    def embed(self, ids: torch.Tensor, table: nn.Embedding, offset: int = 0) -> torch.Tensor:
        """``Embedding(ids) · sqrt(d)`` plus the sinusoidal position of each token
        (positions ``offset, offset + 1, …``)."""
        x = table(ids) * math.sqrt(self.config.d_model)  # (B, N, d)
        if isinstance(self.pos, SinusoidalPositionalEncoding):
            x = self.pos(x, offset)  # (B, N, d)
        return self.dropout(x)

    def encode(self, src: torch.Tensor, need_weights: bool = False):
        """``src (B, N)`` -> ``(memory (B, N, d), memory_mask (B, 1, 1, N))``."""
        self._check_ids("src", src)
        memory_mask = key_mask(src != self.config.pad_id)  # (B, 1, 1, N) True = real token
        memory = self.encoder(self.embed(src, self.src_embed), memory_mask, need_weights)  # (B, N, d)
        return memory, memory_mask

    def decode(self, tgt_in: torch.Tensor, memory, memory_mask, need_weights: bool = False) -> torch.Tensor:
        """``tgt_in (B, T)`` -> logits ``(B, T, V)``, every position at once (causal mask)."""
        self._check_ids("tgt_in", tgt_in)
        T = tgt_in.shape[1]
        y = self.decoder(self.embed(tgt_in, self.tgt_embed), memory, causal_mask(T, device=tgt_in.device),
                         memory_mask, need_weights)  # (B, T, d)
        return self.generator(y)  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        memory, memory_mask = self.encode(src, need_weights)
        return self.decode(tgt_in, memory, memory_mask, need_weights)

    # --- step-by-step decoding (greedy, beam search) -------------------------------
    def start(self, src: torch.Tensor) -> dict:
        """Encode ``src`` once; the state for :meth:`step`."""
        memory, memory_mask = self.encode(src)
        state = {"memory": memory, "memory_mask": memory_mask, "t": 0}
        if self.use_cache:
            state["caches"] = [{} for _ in self.decoder.layers]
        else:
            state["tokens"] = torch.zeros(src.shape[0], 0, dtype=torch.long, device=src.device)
        return state

    def step(self, prev: torch.Tensor, state: dict):
        """One decoding step: ``prev (B,)`` the last token -> ``(logits (B, V), new state)``."""
        self._check_ids("prev", prev, rank=1)
        if prev.shape[0] != state["memory"].shape[0]:
            raise ValueError(f"prev must hold one token per sequence: shape ({state['memory'].shape[0]},), "
                             f"got {tuple(prev.shape)}")
        t = state["t"]
        if "caches" in state:
            # only the new token goes through the decoder; earlier keys/values come from the caches
            caches = [dict(c) for c in state["caches"]]  # shallow copies: the old state stays valid
            y = self.embed(prev[:, None], self.tgt_embed, offset=t)  # (B, 1, d)
            y = self.decoder(y, state["memory"], None, state["memory_mask"], caches=caches)  # (B, 1, d)
            logits = self.generator(y[:, -1])  # (B, V)
            new = {**state, "caches": caches, "t": t + 1}
        else:
            # no cache: run the whole prefix again and keep the last position
            tokens = torch.cat([state["tokens"], prev[:, None]], dim=1)  # (B, t+1)
            logits = self.decode(tokens, state["memory"], state["memory_mask"])[:, -1]  # (B, V)
            new = {**state, "tokens": tokens, "t": t + 1}
        return logits, new
