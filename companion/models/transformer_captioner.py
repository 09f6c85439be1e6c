"""A Transformer that captions images (chapter 9): chapter 8's patch encoder, chapter 7's decoder::

    image (B, 3, S, S) → N = (S/p)² patches → Linear p²·3 → d, + learned positions   (chapter 8)
                       → Encoder (chapter 7's EncoderLayer stack)          memory (B, N, d)
    <start> y_1 … y_{T-1} → Embedding · sqrt(d) + sinusoidal positions      (chapters 6, 7)
                       → Decoder: causal self-attention, cross-attention to the memory, FFN
                       → Linear d → V                                      logits for y_1 … y_T

The cross-attention weights of decoder position ``t``,
``α_{t,n} = softmax_n(q_t · k_n / sqrt(D_h))``, say how much the decoder reads image patch
``n`` while it writes word ``y_{t+1}``. Patches are numbered row by row, as in
:func:`companion.models.vit.patchify`.

Helpers for the chapter's measurements: :func:`object_masks` (the pixels of each shape of a
:mod:`companion.data.shapes` image), :func:`patch_coverage` (the share of each patch an object
covers) and :func:`word_objects` (which object each word of a caption names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from einops import rearrange
from torch import nn

from .._validate import require_float, require_int, require_positive_int, require_rank, require_tensor, require_token_ids
from ..data.shapes import CAPTION_VOCAB, COLORS, RELATIONS, SHAPES
from ..data.vocab import Vocab
from ..masks import causal_mask
from ..positional import SinusoidalPositionalEncoding
from .transformer import Decoder, Encoder, TransformerConfig
from .vit import PatchEmbedding


@dataclass
class CaptionerConfig(TransformerConfig):
    """Sizes of a :class:`TransformerCaptioner`: a :class:`~companion.models.transformer.TransformerConfig` (the caption side
    and the stacks) plus the image's, with defaults for chapter 9's 32×32 images and short
    captions. ``num_encoder_layers=0``: the decoder reads the embedded patches themselves (no
    self-attention between patches)."""

    num_encoder_layers: int = 1
    max_len: int = 32
    image_size: int = 32
    patch_size: int = 8
    in_channels: int = 3

    def check(self) -> None:
        super().check()
        for name in ("image_size", "patch_size", "in_channels"):
            require_positive_int(name, getattr(self, name))
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a multiple of patch_size={self.patch_size}")
        require_int("num_encoder_layers", self.num_encoder_layers, minimum=0)


class TransformerCaptioner(nn.Module):
    """Patch encoder + Transformer decoder with cross-attention.

    ``model(images (B, C, S, S), tokens_in (B, T)) -> logits (B, T, V)`` with teacher forcing
    (``tokens_in`` = ``<start> y_1 … y_{T-1}``). Decoding follows the course's protocol
    (:mod:`companion.decoding`): ``state = model.start(images)``, then
    ``logits, state = model.step(prev (B,), state)``; the state keeps a key/value cache and the
    last step's cross-attention weights ``state["cross"] (B, L, H, N)`` (L decoder layers).
    """

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        if not isinstance(config, CaptionerConfig):
            raise TypeError(f"config must be a CaptionerConfig, got {type(config).__name__}")
        c = config
        c.check()
        self.config = c
        self.grid = c.image_size // c.patch_size  # patches per side
        self.num_patches = self.grid**2  # N
        self.patch_embed = PatchEmbedding(c.in_channels, c.patch_size, c.d_model)
        self.patch_pos = nn.Parameter(torch.randn(1, self.num_patches, c.d_model) * 0.02)  # learned positions
        self.encoder = (Encoder(c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
                        if c.num_encoder_layers else nn.Identity())
        self.tgt_embed = nn.Embedding(c.vocab_size, c.d_model)
        nn.init.normal_(self.tgt_embed.weight, std=c.d_model**-0.5)  # × sqrt(d) gives unit scale
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.pe_base) if c.pe_base is not None else nn.Identity()
        self.decoder = Decoder(c.num_decoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
        self.generator = nn.Linear(c.d_model, c.vocab_size)  # d -> V logits

    # --- the two halves ---------------------------------------------------------------
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """``images (B, C, S, S)`` -> ``memory (B, N, d)``, one vector per patch."""
        require_float("images", images)
        require_rank("images", images, 4, "batch, channels, height, width")
        S = self.config.image_size
        if images.shape[1:] != (self.config.in_channels, S, S):
            raise ValueError(f"images must have shape (B, {self.config.in_channels}, {S}, {S}), got {tuple(images.shape)}")
        x = self.patch_embed(images) + self.patch_pos  # (B, N, d)
        if isinstance(self.encoder, Encoder):
            return self.encoder(x)  # (B, N, d)
        return x

    def embed(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``Embedding(ids) · sqrt(d)`` plus the sinusoidal position ``offset + t`` of each token."""
        x = self.tgt_embed(ids) * math.sqrt(self.config.d_model)  # (B, T, d)
        return self.pos(x, offset) if isinstance(self.pos, SinusoidalPositionalEncoding) else x  # (B, T, d)

    def _check_ids(self, ids: torch.Tensor, offset: int = 0) -> None:
        require_token_ids("tokens_in", ids, self.config.vocab_size, rank=2)  # range read on the CPU only
        if offset + ids.shape[1] > self.config.max_len:
            raise ValueError(f"tokens_in reaches position {offset + ids.shape[1]}, beyond max_len={self.config.max_len}")

    def decode(self, tokens_in: torch.Tensor, memory: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        """``tokens_in (B, T)`` -> ``logits (B, T, V)``, every position at once under the causal mask."""
        self._check_ids(tokens_in)
        T = tokens_in.shape[1]
        y = self.decoder(self.embed(tokens_in), memory, causal_mask(T, device=tokens_in.device), None,
                         need_weights)  # (B, T, d)
        return self.generator(y)  # (B, T, V)

    def forward(self, images: torch.Tensor, tokens_in: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        if tokens_in.shape[0] != images.shape[0]:
            raise ValueError(f"images and tokens_in must have the same batch size, got images "
                             f"{tuple(images.shape)} and tokens_in {tuple(tokens_in.shape)}")
        return self.decode(tokens_in, self.encode(images), need_weights)

    def cross_attention(self, images: torch.Tensor, tokens_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced cross-attention weights ``(B, L, H, T, N)``: layer, head, the decoder
        position that writes word ``t + 1``, image patch."""
        with torch.no_grad():
            self(images, tokens_in, need_weights=True)
        return torch.stack([layer.cross_weights for layer in self.decoder.layers], dim=1)  # (B, L, H, T, N)

    # --- step-by-step decoding (greedy, beam search) ------------------------------------
    def start(self, images: torch.Tensor) -> dict:
        """Encode the images once; the state for :meth:`step`."""
        memory = self.encode(images)  # (B, N, d)
        return {"memory": memory, "caches": [{} for _ in self.decoder.layers], "t": 0}

    def step(self, prev: torch.Tensor, state: dict):
        """One step: ``prev (B,)`` the last token -> ``(logits (B, V), new state)``.

        Only the new token goes through the decoder; the keys and values of the earlier tokens
        (and of the image patches) come from the per-layer caches."""
        t = state["t"]
        self._check_ids(prev[:, None], offset=t)
        caches = [dict(c) for c in state["caches"]]  # shallow copies: the old state stays valid
        y = self.decoder(self.embed(prev[:, None], offset=t), state["memory"], None, None, caches=caches)  # (B, 1, d)
        cross = torch.stack([layer.cross_weights[:, :, 0] for layer in self.decoder.layers], dim=1)  # (B, L, H, N)
        return self.generator(y[:, 0]), {**state, "caches": caches, "t": t + 1, "cross": cross}  # (B, V)


# --- what the chapter measures ---------------------------------------------------------------

def object_masks(images: torch.Tensor, n_shapes: torch.Tensor, relation: torch.Tensor,
                 threshold: float = 0.5) -> torch.Tensor:
    """The pixels of each shape of :func:`companion.data.shapes.make_shapes` images:
    ``(B, 2, S, S)`` bool, slot 0 the shape a caption names first (all False in slot 1 when
    there is one shape).

    A pixel belongs to a shape when its brightest channel exceeds ``threshold`` (shapes are
    ≥ 0.8 there, the background 0 plus noise). With two shapes, the first lies in the top
    half ("above") or the left half ("left of") and the second in the other half."""
    require_float("images", images)
    require_rank("images", images, 4, "batch, 3, S, S")
    for name, x in (("n_shapes", n_shapes), ("relation", relation)):
        require_tensor(name, x)
        if x.shape != images.shape[:1]:
            raise ValueError(f"{name} must have shape ({images.shape[0]},), got {tuple(x.shape)}")
    S = images.shape[-1]
    fg = images.max(dim=1).values > threshold  # (B, S, S)
    idx = torch.arange(S, device=images.device)
    first_half = torch.where(relation[:, None, None] == 0, idx[None, :, None] < S / 2,
                             idx[None, None, :] < S / 2)  # (B, S, S): top half (above) or left half
    two = (n_shapes == 2)[:, None, None]  # (B, 1, 1)
    slot0 = fg & (first_half | ~two)
    slot1 = fg & ~first_half & two
    return torch.stack([slot0, slot1], dim=1)  # (B, 2, S, S)


def patch_coverage(masks: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Share of the pixels of each ``p×p`` patch that a mask covers: ``(..., S, S)`` ->
    ``(..., N)`` floats in [0, 1], patches row by row (the order of ``patchify``)."""
    require_tensor("masks", masks)
    require_positive_int("patch_size", patch_size)
    if masks.dim() < 2 or masks.shape[-1] % patch_size or masks.shape[-2] % patch_size:
        raise ValueError(f"masks (..., H, W) must tile into {patch_size}×{patch_size} patches, got {tuple(masks.shape)}")
    p = patch_size
    return rearrange(masks.float(), "... (h p1) (w p2) -> ... (h w) (p1 p2)", p1=p, p2=p).mean(-1)  # (..., N)


def word_objects(targets: torch.Tensor, vocab: Vocab = CAPTION_VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """Which object each word of shapes captions ``targets (B, T)`` (without ``<start>``) names.

    Returns ``named (B, T)``: 0 or 1 for a colour or shape word of the first or second object
    (the first or second "a" of the caption), -1 for other tokens; and ``relational (B, T)``
    bool, True for "above", "left" and "of"."""
    require_tensor("targets", targets)
    require_rank("targets", targets, 2, "batch, length")
    ids = lambda words: torch.tensor([vocab.stoi[w] for w in words], device=targets.device)  # noqa: E731
    slot = torch.cumsum(targets == vocab.stoi["a"], dim=1) - 1  # (B, T) 0 after the first "a", 1 after the second
    content = torch.isin(targets, ids(COLORS + SHAPES))
    named = torch.where(content, slot, -1)
    relation_words = sorted({w for r in RELATIONS for w in r.split()})  # above, left, of
    return named, torch.isin(targets, ids(relation_words))


def object_attention(weights: torch.Tensor, masks: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Attention mass on each object: ``weights (B, T, N)`` (rows over the N patches) and
    object ``masks (B, K, S, S)`` -> ``(B, T, K)``, the summed weight of the patches that hold
    at least one pixel of object ``k``."""
    require_float("weights", weights)
    require_rank("weights", weights, 3, "batch, words, patches")
    require_rank("masks", masks, 4, "batch, objects, S, S")
    on = (patch_coverage(masks, patch_size) > 0).to(weights.dtype)  # (B, K, N) patches touching object k
    if on.shape[-1] != weights.shape[-1] or on.shape[0] != weights.shape[0]:
        raise ValueError(f"weights {tuple(weights.shape)} and masks {tuple(masks.shape)} with patch_size={patch_size} "
                         f"do not match: expected weights (B={masks.shape[0]}, T, N={on.shape[-1]})")
    return torch.einsum("btn,bkn->btk", weights, on)  # (B, T, K)
