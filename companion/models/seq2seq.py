"""Sequence to sequence with GRUs: the bottleneck, then attention (additive or dot-product,
both from :mod:`companion.attention`).

Encoder: ``h_1 … h_N = GRU(embed(x_1 … x_N))``.

Decoder at step ``t`` (state ``s_{t-1}``, previous token ``y_{t-1}``):

* no attention: the context is the encoder's last state, ``c = h_N``, the
  same fixed-size vector at every step (the bottleneck);
* attention: ``e_i = f_att(s_{t-1}, h_i)``, ``a = softmax(e)``, ``c_t = Σ_i a_i h_i``
  with ``f_att`` additive (Bahdanau) or scaled dot-product;

then ``s_t = GRUCell([embed(y_{t-1}); c_t], s_{t-1})`` and
``logits_t = W_o [s_t; c_t]``. Both start from ``s_0 = h_N``.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validate import (
    require_int,
    require_positive_int,
    require_tensor,
    require_token_ids,
)
from ..attention import AdditiveAttention, DotProductAttention
from ..masks import real_token_mask


class Seq2Seq(nn.Module):
    """GRU encoder-decoder; ``attention`` is ``None`` (last state only),
    ``"additive"`` or ``"dot"``.

    ``forward(src (B, N), src_lengths (B,), tgt_in (B, T))`` runs the decoder with
    teacher forcing and returns ``(logits (B, T, V), weights (B, T, N) or None)``.
    ``start``/``step`` expose the decoder to :func:`companion.decoding.greedy_decode`
    (or :func:`companion.decoding.generate`).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden_dim: int = 64,
                 attention: str | None = None, pad_id: int = 0):
        super().__init__()
        for name, value in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab), ("emb_dim", emb_dim),
                            ("hidden_dim", hidden_dim)):
            require_positive_int(name, value)
        if attention not in (None, "additive", "dot"):
            raise ValueError(f"attention must be None, 'additive' or 'dot', got {attention!r}")
        require_int("pad_id", pad_id, minimum=0)
        if pad_id >= min(src_vocab, tgt_vocab):
            raise ValueError(f"pad_id={pad_id} must be a token of both vocabularies (sizes {src_vocab} and {tgt_vocab})")
        self.attention_kind, self.pad_id = attention, pad_id
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.src_embed = nn.Embedding(src_vocab, emb_dim, padding_idx=pad_id)
        self.encoder = nn.GRU(emb_dim, hidden_dim, batch_first=True)
        self.tgt_embed = nn.Embedding(tgt_vocab, emb_dim, padding_idx=pad_id)
        if attention == "additive":
            self.attend = AdditiveAttention(hidden_dim, hidden_dim, hidden_dim)
        elif attention == "dot":
            self.attend = DotProductAttention(hidden_dim, hidden_dim, hidden_dim)
        self.cell = nn.GRUCell(emb_dim + hidden_dim, hidden_dim)
        self.out = nn.Linear(2 * hidden_dim, tgt_vocab)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor):
        """Encoder states ``H (B, N, hidden)``, the last real state ``h_N (B, hidden)``
        and the real-token mask ``(B, N)`` (True = real token)."""
        require_token_ids("src", src, self.src_vocab, rank=2)
        require_tensor("src_lengths", src_lengths)
        if src_lengths.is_floating_point() or src_lengths.is_complex() or src_lengths.dtype == torch.bool:
            raise TypeError(f"src_lengths must hold integers, got dtype {src_lengths.dtype}")
        if src_lengths.shape != src.shape[:1]:
            raise ValueError(f"src_lengths must have shape ({src.shape[0]},) for src {tuple(src.shape)}, "
                             f"got {tuple(src_lengths.shape)}")
        if src.shape[1] == 0:
            raise ValueError(f"src must hold at least one token per sequence, got shape {tuple(src.shape)}")
        if src_lengths.device.type == "cpu" and src_lengths.numel() and (
                int(src_lengths.min()) < 1 or int(src_lengths.max()) > src.shape[1]):
            # a length of 0 would read the state at index -1 (the last padding): refuse it
            raise ValueError(f"every source length must be in [1, N={src.shape[1]}], got src_lengths "
                             f"{src_lengths.tolist()}")
        H, _ = self.encoder(self.src_embed(src))  # (B, N, hidden)
        # A unidirectional GRU's state at the last real token ignores the padding after it.
        last = H[torch.arange(src.shape[0], device=src.device), src_lengths - 1]  # (B, hidden)
        mask = real_token_mask(src_lengths, src.shape[1])  # (B, N)
        return H, last, mask

    def start(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        """The decoder's initial state: ``s_0 = h_N`` and what attention reads."""
        H, last, mask = self.encode(src, src_lengths)
        state = {"s": last, "H": H, "mask": mask, "last": last, "weights": None}
        if self.attention_kind == "dot":
            state["KV"] = self.attend.project(H)  # (B, N, d) keys and values, once
        return state

    def step(self, prev: torch.Tensor, state: dict):
        """One decoder step: ``prev (B,)`` token ids -> ``logits (B, V)``, new state
        (whose ``"weights" (B, N)`` are this step's attention weights)."""
        s = state["s"]  # (B, hidden)
        require_token_ids("prev", prev, self.tgt_vocab, rank=1)
        if prev.shape[0] != s.shape[0]:
            raise ValueError(f"prev must hold one token per sequence: shape ({s.shape[0]},), got {tuple(prev.shape)}")
        if self.attention_kind is None:
            c, a = state["last"], None  # the same vector at every step
        elif self.attention_kind == "dot":
            c, a = self.attend(s, state["H"], mask=state["mask"], projected=state["KV"])  # (B, hidden), (B, N)
        else:
            c, a = self.attend(s, state["H"], mask=state["mask"])  # (B, hidden), (B, N)
        s = self.cell(torch.cat([self.tgt_embed(prev), c], dim=-1), s)  # (B, hidden)
        logits = self.out(torch.cat([s, c], dim=-1))  # (B, V)
        return logits, {**state, "s": s, "weights": a}

    def forward(self, src, src_lengths, tgt_in):
        require_token_ids("tgt_in", tgt_in, self.tgt_vocab, rank=2)
        require_tensor("src", src)
        if tgt_in.shape[1] == 0 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must have shape (B, T) with T >= 1 and the batch size of src, got tgt_in "
                             f"{tuple(tgt_in.shape)} and src {tuple(src.shape)}")
        state = self.start(src, src_lengths)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):  # teacher forcing: feed the true previous token
            step_logits, state = self.step(tgt_in[:, t], state)
            logits.append(step_logits)
            weights.append(state["weights"])
        logits = torch.stack(logits, dim=1)  # (B, T, V)
        weights = None if self.attention_kind is None else torch.stack(weights, dim=1)  # (B, T, N)
        return logits, weights
