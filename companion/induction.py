"""Induction heads, grown on purpose (chapter 10; Elhage et al., 2021; Olsson et al., 2022).

An **induction head** completes a repeat: having seen ``… A B …``, when ``A`` comes again it
attends to the ``B`` that followed ``A`` before, and copies it. It needs a head in an earlier
layer that moves each token's identity one position on (a **previous-token head**), so that
the induction head's keys can say "my previous token was A".

Elhage et al. first described them, in attention-only Transformers of two layers. Olsson et
al. found that they form suddenly, in those models and in larger ones with feed-forward
layers: a **phase change** in training, where the loss on repeated text falls
steeply. :class:`AttentionOnly` is such a model (no feed-forward layers), and
:func:`copy_batch` is a task that an induction head solves: random tokens that start to
repeat a pattern of random length at a random place, so that no fixed position says where
to look.

The standard test (:func:`induction_test`) feeds ``R`` random tokens twice. It reports the
loss on each copy, each head's **prefix-matching score** (its mean weight from a token of
the second copy onto the token after that token's first occurrence) and its **copying
score** (Elhage et al.: how positive the eigenvalues of the head's OV circuit
``W_E W_V W_O W_U`` are, ``Σλ / Σ|λ|`` in [-1, 1]; +1: the head raises the logit of the
token it attends to).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_positive_int
from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positional import LearnedPositionalEmbedding


class AttentionOnly(nn.Module):
    """A Transformer with attention layers only: ``x ← x + MHA(x)`` under the causal mask,
    ``num_layers`` times, then an unembedding ``W_U``. ``model(ids (B, T)) -> logits (B, T, V)``;
    :meth:`attention_maps` gives ``(L, B, H, T, T)``."""

    def __init__(self, vocab_size: int, context: int, d_model: int = 64, num_heads: int = 2,
                 num_layers: int = 2):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("context", context), ("d_model", d_model),
                            ("num_heads", num_heads), ("num_layers", num_layers)):
            require_positive_int(name, value)
        self.context = context
        self.token_embed = nn.Embedding(vocab_size, d_model)  # W_E
        self.pos = LearnedPositionalEmbedding(d_model, context)
        self.layers = nn.ModuleList(MultiHeadAttention(d_model, num_heads, bias=False) for _ in range(num_layers))
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)  # W_U
        self.maps: list[torch.Tensor] = []

    def forward(self, ids: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        if ids.dim() != 2 or ids.shape[1] > self.context:
            raise ValueError(f"ids must be (B, T) with T <= {self.context}, got {tuple(ids.shape)}")
        x = self.pos(self.token_embed(ids))  # (B, T, d)
        mask = causal_mask(ids.shape[1], device=ids.device)
        self.maps = []
        for attn in self.layers:
            out, weights = attn(x, mask=mask, need_weights=need_weights)
            x = x + out  # (B, T, d) the residual stream
            self.maps.append(weights)
        return self.unembed(x)  # (B, T, V)

    @torch.no_grad()
    def attention_maps(self, ids: torch.Tensor) -> torch.Tensor:
        self(ids, need_weights=True)
        return torch.stack(self.maps)  # (L, B, H, T, T)


def copy_batch(batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None):
    """Random tokens ``(B, length)`` that repeat: a random start of 0 to 7 tokens, then a
    random pattern of 4 to ``length // 3`` tokens, repeated to the end.

    Returns ``(ids, repeat)``: ``repeat (B, length)`` is True from the second token of the
    second copy on (the tokens an induction head can predict). The pattern's length and
    place change from row to row, so no fixed position says where to look."""
    B, T = batch_size, length
    ids = torch.randint(0, vocab_size, (B, T), generator=generator)
    repeat = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        r = int(torch.randint(4, max(T // 3, 4) + 1, (), generator=generator))
        s = int(torch.randint(0, 8, (), generator=generator))
        if s + r >= T:
            continue
        pattern = ids[b, s:s + r]
        reps = (T - s + r - 1) // r
        ids[b, s:] = pattern.repeat(reps)[: T - s]
        repeat[b, s + r + 1:] = True  # the second copy's first token follows a random one
    return ids, repeat


@dataclass
class InductionRun:
    model: AttentionOnly
    steps: list[int] = field(default_factory=list)
    repeat_loss: list[float] = field(default_factory=list)  # nats, on the repeated tokens
    other_loss: list[float] = field(default_factory=list)  # nats, on the other tokens


def train_induction(seed: int, steps: int = 500, vocab_size: int = 32, length: int = 32, batch_size: int = 32,
                    lr: float = 1e-2, d_model: int = 64, log_every: int = 10) -> InductionRun:
    """Train an :class:`AttentionOnly` model of two layers on :func:`copy_batch`; record the
    training loss on the repeated tokens and on the others every ``log_every`` steps."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = AttentionOnly(vocab_size, length, d_model=d_model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    run = InductionRun(model)
    for step in range(steps):
        ids, second = copy_batch(batch_size, length + 1, vocab_size, gen)
        logits = model(ids[:, :-1])
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T)
        rep = second[:, 1:]
        loss = nll.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % log_every == 0 or step == steps - 1:
            run.steps.append(step)
            run.repeat_loss.append(float(nll.detach()[rep].mean()))
            run.other_loss.append(float(nll.detach()[~rep].mean()))
    run.model.eval()
    return run


def induction_test(model, prefix: int, vocab_size: int, batch_size: int = 64, seed: int = 0) -> dict:
    """The standard test: ``prefix`` random tokens shown twice. Returns the loss (nats) on the
    first copy (tokens 1 … R-1) and on the second (tokens R+1 … 2R-1), and each head's
    prefix-matching score ``(L, H)``: its mean weight from query ``t`` of the second copy
    onto key ``t - R + 1``."""
    gen = torch.Generator().manual_seed(seed)
    R = prefix
    first = torch.randint(0, vocab_size, (batch_size, R), generator=gen)
    ids = first.repeat(1, 2)  # (B, 2R)
    with torch.no_grad():
        logits = model(ids)[:, :-1]
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, 2R - 1)
        maps = model.attention_maps(ids)  # (L, B, H, 2R, 2R)
    q = torch.arange(R, 2 * R)
    return {
        "first_copy": float(nll[:, : R - 1].mean()),
        "second_copy": float(nll[:, R:].mean()),
        "prefix_matching": maps[:, :, :, q, q - R + 1].mean((1, 3)),  # (L, H)
        "previous_token": maps[:, :, :, q, q - 1].mean((1, 3)),  # (L, H) weight on t - 1
    }


def copying_scores(model: AttentionOnly) -> torch.Tensor:
    """Each head's copying score ``(L, H)``: ``Σλ / Σ|λ|`` over the eigenvalues of its OV
    circuit ``W_E W_V^h W_O^h W_U`` (V × V), read straight from the token embedding."""
    W_E = model.token_embed.weight  # (V, d)
    W_U = model.unembed.weight.T  # (d, V)
    rows = []
    with torch.no_grad():
        for attn in model.layers:
            d = W_E.shape[1]
            H = attn.num_heads
            dh = d // H
            w_v = attn.in_proj.weight[2 * d:]  # (d, d) rows: value outputs
            w_o = attn.out_proj.weight  # (d, d)
            row = []
            for h in range(H):
                ov = W_E @ w_v[h * dh:(h + 1) * dh].T @ w_o[:, h * dh:(h + 1) * dh].T @ W_U  # (V, V)
                lam = torch.linalg.eigvals(ov.double())
                row.append(float(lam.real.sum() / lam.abs().sum()))
            rows.append(row)
    return torch.tensor(rows)


def steepest_rise(steps: list[int], values: list[float], window: int) -> tuple[int, int, float]:
    """The steepest stretch of a curve: ``(from_step, to_step, rise)`` for the ``window``
    consecutive logged points over which ``values`` rises most. A phase change is a rise
    that takes a large share of the whole in a short stretch."""
    if len(steps) != len(values) or not 0 < window < len(values):
        raise ValueError(f"steps and values must have one length > window={window}, got {len(steps)} and {len(values)}")
    rises = [values[i + window] - values[i] for i in range(len(values) - window)]
    i = max(range(len(rises)), key=rises.__getitem__)
    return steps[i], steps[i + window], rises[i]


__all__ = ["AttentionOnly", "InductionRun", "copy_batch", "copying_scores", "induction_test", "steepest_rise",
           "train_induction"]
