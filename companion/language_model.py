"""Training and measuring a language model on one long text (chapter 10).

A text is one long sequence of ids. A training example is a **window** of ``T + 1``
consecutive ids starting anywhere: the first ``T`` are the input, the last ``T`` (the same
shifted by one) the targets, so position ``t`` learns to predict token ``t + 1``::

    ids      w_0 w_1 w_2 … w_T
    inputs   w_0 w_1 … w_{T-1}
    targets  w_1 w_2 … w_T

:func:`window_loss` turns a batch of start offsets into that loss, so the course's training
loop (:func:`companion.train.train`) shuffles the offsets like any other examples. A loss in
nats per *token* depends on the tokenizer; :func:`bits_per_character` turns it into bits per
*character*, the unit that compares models with different tokenizers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ._validate import require_int, require_number, require_positive_int, require_tensor


def _check_ids(ids) -> None:
    require_tensor("ids", ids)
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"ids must be a 1-D tensor of integer token ids (one long text), "
                         f"got {ids.dtype} {tuple(ids.shape)}")


def next_token_targets(ids: torch.Tensor, pad_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of next-token prediction for a batch ``ids (B, T)``:
    ``inputs = ids[:, :-1]``, ``targets = ids[:, 1:]`` (both ``(B, T - 1)``). With ``pad_id``
    the targets that are padding become ``-100``, the index ``F.cross_entropy`` ignores."""
    require_tensor("ids", ids)
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be (B, T) with T >= 2 (something to predict), got {tuple(ids.shape)}")
    inputs, targets = ids[:, :-1], ids[:, 1:].clone()  # (B, T-1) each
    if pad_id is not None:
        require_int("pad_id", pad_id)
        targets[targets == pad_id] = -100
    return inputs, targets


def windows(ids: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows beginning at ``starts (B,)``: inputs ``ids[s : s + T]`` and targets
    ``ids[s + 1 : s + T + 1]``, each ``(B, T)`` for ``T = context``."""
    _check_ids(ids)
    require_positive_int("context", context)
    offsets = torch.arange(context + 1, device=starts.device)  # (T + 1,)
    chunk = ids[starts[:, None] + offsets]  # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]


def window_starts(ids: torch.Tensor, context: int) -> torch.Tensor:
    """Every offset where a window of ``context + 1`` ids fits: ``0 … len(ids) - context - 1``."""
    _check_ids(ids)
    require_positive_int("context", context)
    n = ids.shape[0] - context
    if n < 1:
        raise ValueError(f"a text of {ids.shape[0]} ids holds no window of context + 1 = {context + 1}")
    return torch.arange(n)


def window_loss(ids: torch.Tensor, context: int) -> Callable:
    """``loss_fn(model, starts)`` for :func:`companion.train.train`: the model's mean
    next-token cross-entropy (nats per token) on the windows beginning at ``starts``.
    ``ids`` should already be on the training device."""
    _check_ids(ids)
    require_positive_int("context", context)

    def loss_fn(model, starts):
        x, y = windows(ids, starts, context)  # (B, T), (B, T)
        logits = model(x)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())

    return loss_fn


@torch.inference_mode()
def loss_by_position(model, ids: torch.Tensor, context: int, batch_size: int = 64,
                     max_windows: int | None = None) -> torch.Tensor:
    """The mean loss (nats) at each position ``t`` of the context, ``(T,)``, over
    non-overlapping windows of ``ids`` (the first ``max_windows`` of them)."""
    _check_ids(ids)
    require_positive_int("context", context)
    require_positive_int("batch_size", batch_size)
    starts = torch.arange(0, ids.shape[0] - context, context)  # non-overlapping
    if max_windows is not None:
        starts = starts[: require_positive_int("max_windows", max_windows)]
    if starts.numel() == 0:
        raise ValueError(f"a text of {ids.shape[0]} ids holds no window of context + 1 = {context + 1}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = torch.zeros(context, dtype=torch.float64, device=device)
    for i in range(0, starts.numel(), batch_size):
        x, y = windows(ids, starts[i: i + batch_size].to(ids.device), context)
        logits = model(x.to(device))  # (b, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2).float(), y.to(device), reduction="none")  # (b, T)
        total += nll.double().sum(0)
    model.train(was_training)
    return (total / starts.numel()).float().cpu()


def held_out_loss(model, ids: torch.Tensor, context: int, batch_size: int = 64,
                  max_windows: int | None = None) -> float:
    """Mean next-token loss (nats per token) on non-overlapping windows of ``ids``."""
    return float(loss_by_position(model, ids, context, batch_size, max_windows).mean())


def bits_per_character(nats_per_token: float, tokens: int, characters: int) -> float:
    """A loss per token in nats, as bits per character of the text::

        bits/char = nats/token × (tokens / characters) / ln 2

    ``tokens / characters`` is 1 for a character model and about 1 / 1.96 for 512-token BPE on
    tiny Shakespeare, so a BPE model's loss per token must be larger to be as good."""
    require_number("nats_per_token", nats_per_token, 0.0)
    require_positive_int("tokens", tokens)
    require_positive_int("characters", characters)
    return nats_per_token * tokens / characters / math.log(2)


def perplexity(nats_per_token: float) -> float:
    """``exp(loss)``: the number of equally likely tokens the model is as unsure as."""
    require_number("nats_per_token", nats_per_token, 0.0)
    return math.exp(nats_per_token)


def unigram_loss(train_ids: torch.Tensor, held_ids: torch.Tensor, vocab_size: int) -> float:
    """The loss (nats per token) on ``held_ids`` of the **unigram** model of ``train_ids``:
    every token predicted from its frequency alone, ``p(v) = (count(v) + 1) / (n + V)``
    (add-one smoothing, so a token unseen in training costs a finite loss)."""
    _check_ids(train_ids)
    _check_ids(held_ids)
    require_positive_int("vocab_size", vocab_size)
    counts = torch.bincount(train_ids.cpu(), minlength=vocab_size).double() + 1.0  # (V,)
    if counts.numel() != vocab_size:
        raise ValueError(f"train_ids hold ids >= vocab_size={vocab_size}")
    log_p = torch.log(counts / counts.sum())  # (V,)
    return float(-log_p[held_ids.cpu()].mean())
