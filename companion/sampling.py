"""Sampling the next token from a language model's logits (chapter 10).

A model gives logits ``z`` over the ``V`` tokens; the next token is drawn from
``softmax(z / T)`` after keeping only some tokens:

* **temperature** ``T``: ``p_i ∝ exp(z_i / T)``. ``T → 0`` is greedy (all mass on the
  argmax), ``T = 1`` the model's own distribution, ``T > 1`` flatter (higher entropy).
* **top-k**: keep the ``k`` largest logits (``k = 1`` is greedy).
* **top-p (nucleus)** (Holtzman et al., 2020): keep the *smallest* set of most likely
  tokens whose probability mass reaches ``p``.

Each filter returns logits with ``-inf`` on the dropped tokens, so they chain and a softmax
renormalises what is kept. :func:`sample_next` applies them in the usual order (temperature,
top-k, top-p) and draws with a ``torch.Generator``, so a seeded generator reproduces a sample.
"""

from __future__ import annotations

import torch

from ._validate import require_float, require_int, require_number, require_positive_int, require_tensor


def _check_logits(logits) -> None:
    require_float("logits", require_tensor("logits", logits))
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a last dimension of V >= 1 tokens, got shape {tuple(logits.shape)}")


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``z / T`` for ``T > 0`` (use ``T = 0`` in :func:`sample_next` for greedy)."""
    _check_logits(logits)
    require_number("temperature", temperature, 0.0, strict=True)
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (ties at the cut kept), ``-inf`` elsewhere."""
    _check_logits(logits)
    require_positive_int("k", k)
    return _top_k(logits, k)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def nucleus_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The nucleus of each row (True = kept): the smallest set of most likely tokens whose
    probabilities sum to at least ``p``. Token ``i`` of the sorted row is kept when the mass
    of the tokens *before* it is still below ``p``, so the most likely token is always kept."""
    _check_logits(logits)
    require_number("p", p, 0.0, strict=True)
    if p > 1:
        raise ValueError(f"p must be in (0, 1], got {p!r}")
    return _nucleus(logits, p)


def _nucleus(logits: torch.Tensor, p: float) -> torch.Tensor:
    probs = torch.softmax(logits.float(), dim=-1)  # (..., V)
    sorted_p, order = probs.sort(dim=-1, descending=True)  # (..., V)
    before = sorted_p.cumsum(dim=-1) - sorted_p  # (..., V) mass of the more likely tokens
    keep_sorted = before < p  # (..., V)
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the nucleus (:func:`nucleus_mask`) of each row, ``-inf`` elsewhere."""
    return logits.masked_fill(~nucleus_mask(logits, p), float("-inf"))


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """The entropy ``H = -Σ p_i log p_i`` of ``softmax(logits)`` in nats, one per row."""
    _check_logits(logits)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (..., V)
    return -(logp.exp() * logp).nan_to_num().sum(dim=-1)  # 0 · log 0 = 0


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of ``logits (B, V)``: ``(B,)`` int64 ids.

    ``temperature = 0`` is greedy decoding (the argmax, no random number drawn). Otherwise
    the logits are divided by ``temperature``, filtered by ``top_k`` and ``top_p`` (``None``:
    no filter) and sampled with ``torch.multinomial`` from ``generator``."""
    _check_logits(logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (B, V), got shape {tuple(logits.shape)}")
    _check_sampling_args(temperature, top_k, top_p)
    return _sample_next(logits, temperature, top_k, top_p, generator)


def _check_sampling_args(temperature, top_k, top_p) -> None:
    require_number("temperature", temperature, 0.0)
    if top_k is not None:
        require_positive_int("top_k", top_k)
    if top_p is not None:
        require_number("top_p", top_p, 0.0, strict=True)
        if top_p > 1:
            raise ValueError(f"p must be in (0, 1], got {top_p!r}")


def _sample_next(logits, temperature, top_k, top_p, generator) -> torch.Tensor:
    """:func:`sample_next` unchecked, for a decoding loop that checked its arguments once."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    z = logits.float() / temperature  # temperature first: it changes the nucleus, not the top k
    if top_k is not None:
        z = _top_k(z, top_k)
    if top_p is not None:
        z = z.masked_fill(~_nucleus(z, top_p), float("-inf"))
    probs = torch.softmax(z, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def repeated_ngram_share(ids, n: int = 4) -> float:
    """The share of the ``n``-grams of ``ids`` that already occurred earlier in ``ids``: 0 for
    text that never repeats itself, near 1 for a loop. (How greedy decoding degenerates.)"""
    require_int("n", n, minimum=1)
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    grams = [tuple(ids[i: i + n]) for i in range(len(ids) - n + 1)]
    if not grams:
        raise ValueError(f"a sequence of {len(ids)} tokens holds no {n}-gram")
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)
