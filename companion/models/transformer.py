"""The encoder–decoder Transformer of Vaswani et al. (2017), chapter 7::

    Encoder:      a stack of EncoderLayer (self-attention, FFN)
    Decoder:      a stack of DecoderLayer (causal self-attention, cross-attention, FFN)
    Transformer:  embeddings × sqrt(d) + sinusoidal positions → encoder → decoder
                  → Linear → logits (softmax gives the next-token distribution)

The layers, LayerNorm and the FFN are in :mod:`companion.models.blocks`. Masks follow the
course convention (True = may attend).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .._validate import require_int, require_positive_int, require_probability, require_token_ids
from ..masks import causal_mask, real_key_mask
from ..positional import SinusoidalPositionalEncoding
from .blocks import DecoderLayer, EncoderLayer, LayerNorm


class Encoder(nn.Module):
    """A stack of :class:`~companion.models.blocks.EncoderLayer`; pre-norm stacks end with one more LayerNorm."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = True):
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
    """A stack of :class:`~companion.models.blocks.DecoderLayer`; pre-norm stacks end with one more LayerNorm."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = True):
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
    """Sizes of an encoder–decoder Transformer. ``pe_base=None`` means no positional encoding.

    :class:`companion.models.transformer_captioner.CaptionerConfig` adds the image's sizes to these."""

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

    def check(self) -> None:
        """Raise a clear error for sizes no model can be built with."""
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_decoder_layers", "max_len"):
            require_positive_int(name, getattr(self, name))
        require_int("pad_id", self.pad_id, minimum=0)
        if self.pad_id >= self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} must be a token of the vocabulary [0, {self.vocab_size})")
        require_probability("dropout", self.dropout)


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
        c.check()
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
        memory_mask = real_key_mask(src != self.config.pad_id)  # (B, 1, 1, N) True = real token
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
