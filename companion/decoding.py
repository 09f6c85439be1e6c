"""Decoding: turning a model that predicts the next token into a sequence.

Every decoder of the course (the captioning RNN, the seq2seq GRUs, later the
Transformer) exposes the same *step function*::

    step_fn(prev_tokens (B,), state) -> (logits (B, V), new_state)

``state`` is whatever the model carries between steps (a hidden vector, the
encoder outputs, a key/value cache); the decoding loop never looks inside it.
Greedy decoding lives here, once; beam search sits beside it with the same
step function plus a way to reorder the rows of ``state`` (see
:func:`index_state`), and :func:`sample_decode` draws each token instead, with the
temperature, top-k and top-p of :mod:`companion.sampling` (chapter 10).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._validate import require_int, require_number, require_positive_int, require_tensor
from .sampling import _check_sampling_args, _sample_next

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


@dataclass
class Decoded:
    """The result of a decoding run.

    ``tokens (B, T)``: the generated ids, ``<start>`` not included, ``pad_id``
    after each row's ``<end>``; ``lengths (B,)``: tokens up to and including
    ``<end>`` (``T`` for a row that never ended); ``log_prob (B,)``: the sum of the
    log-probabilities of the chosen tokens (what beam search maximises);
    ``finished (B,)``: whether the row produced ``<end>``.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    log_prob: torch.Tensor
    finished: torch.Tensor


def _check_decoding_args(step_fn, max_len, batch_size, bos_id, eos_id, pad_id) -> None:
    """The arguments greedy decoding and beam search share."""
    if not callable(step_fn):
        raise TypeError(f"step_fn must be callable, got {type(step_fn).__name__}")
    require_positive_int("max_len", max_len)
    require_positive_int("batch_size", batch_size)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        require_int(name, value)  # eos_id=-1 is allowed: it never stops a row


def _check_logits(logits, rows: int, what: str, pad_id: int) -> None:
    """``step_fn`` must return float logits ``(rows, V)`` with ``pad_id`` one of the ``V`` tokens."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"step_fn must return (logits, state) with logits a tensor, got {type(logits).__name__}")
    if logits.dim() != 2 or logits.shape[0] != rows:
        raise ValueError(f"step_fn must return logits of shape ({what}={rows}, V), got {tuple(logits.shape)}")
    if not 0 <= pad_id < logits.shape[1]:
        raise ValueError(f"pad_id={pad_id} must be one of the V={logits.shape[1]} tokens the logits score")
    if not logits.is_floating_point():
        raise TypeError(f"step_fn must return real float logits, got dtype {logits.dtype}")
    if bool(torch.isnan(logits).any()):  # decoding syncs once per step anyway; argmax of NaN is garbage
        raise ValueError("step_fn returned NaN logits: the model's output is not a number (diverged training?)")


def greedy_decode(step_fn: StepFn, state: Any, bos_id: int, eos_id: int, max_len: int, *, batch_size: int,
                  device: torch.device | str | None = None, pad_id: int = 0,
                  on_step: Callable[[int, torch.Tensor, Any], None] | None = None) -> Decoded:
    """Autoregressive greedy decoding: feed ``<start>``, take the most likely
    token, feed it back, until every row has produced ``eos_id`` or ``max_len``
    tokens were made::

        y_0 = <start>;   y_t = argmax_v  p(v | y_<t, state)

    ``on_step(t, tokens (B,), state)`` is called after each step (e.g. to
    collect attention weights kept in ``state``). Call it inside
    ``torch.inference_mode()`` when no gradients are needed.
    """
    _check_decoding_args(step_fn, max_len, batch_size, bos_id, eos_id, pad_id)
    prev = torch.full((batch_size,), bos_id, dtype=torch.long, device=device)  # (B,)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # (B,)
    lengths = torch.full((batch_size,), max_len, dtype=torch.long, device=device)
    log_prob = torch.zeros(batch_size, device=device)
    out = []
    for t in range(max_len):
        logits, state = step_fn(prev, state)
        _check_logits(logits, batch_size, "B", pad_id)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
        token = logp.argmax(dim=-1)  # (B,)
        log_prob = log_prob + torch.where(finished, 0.0, logp.gather(1, token[:, None]).squeeze(1))
        token = token.masked_fill(finished, pad_id)
        out.append(token)
        just_ended = (token == eos_id) & ~finished
        lengths = torch.where(just_ended, t + 1, lengths)
        finished = finished | just_ended
        if on_step is not None:
            on_step(t, token, state)
        prev = token
        if bool(finished.all()):  # one sync per step; decoding is not the training loop
            break
    tokens = torch.stack(out, dim=1)  # (B, T)
    return Decoded(tokens=tokens, lengths=lengths, log_prob=log_prob, finished=finished)


def sample_decode(step_fn: StepFn, state: Any, first: torch.Tensor, max_len: int, *, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Autoregressive sampling: feed ``first (B,)``, draw the next token from the step's
    logits with :func:`companion.sampling.sample_next`, feed it back, ``max_len`` times::

        y_0 = first;   y_t ~ filter(softmax(z_t / T)),  z_t = step_fn(y_{t-1}, state)

    ``temperature=0`` is greedy decoding. There is no end token (a language model writes on);
    returns the ``max_len`` drawn ids ``(B, max_len)``. Call it inside ``torch.inference_mode()``.
    """
    if not callable(step_fn):
        raise TypeError(f"step_fn must be callable, got {type(step_fn).__name__}")
    require_tensor("first", first)
    if first.dim() != 1 or first.is_floating_point():
        raise ValueError(f"first must be (B,) integer ids, one per sequence, got {first.dtype} {tuple(first.shape)}")
    require_positive_int("max_len", max_len)
    _check_sampling_args(temperature, top_k, top_p)  # once, not at every token
    prev, out = first, []
    for _ in range(max_len):
        logits, state = step_fn(prev, state)
        _check_logits(logits, first.shape[0], "B", 0)  # the one check of each step's logits
        prev = _sample_next(logits, temperature, top_k, top_p, generator)  # (B,)
        out.append(prev)
    return torch.stack(out, dim=1)  # (B, max_len)


def index_state(state: Any, index: torch.Tensor) -> Any:
    """Select rows ``index`` (dim 0) of every tensor in a nested ``state``
    (tensors, tuples, lists, dicts; other values are kept). This is what beam
    search needs to reorder its hypotheses."""
    if not isinstance(index, torch.Tensor) or index.dim() != 1 or index.dtype not in (torch.long, torch.int32):
        raise TypeError(f"index must be a 1-D tensor of int64/int32 row numbers, got "
                        f"{index.dtype if isinstance(index, torch.Tensor) else type(index).__name__}"
                        f"{tuple(index.shape) if isinstance(index, torch.Tensor) else ''}")
    return _index_state(state, index)


def _index_state(state: Any, index: torch.Tensor) -> Any:
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index)
    if isinstance(state, dict):
        return {k: _index_state(v, index) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(_index_state(v, index) for v in state)
    return state


def generate(model, *inputs: torch.Tensor, bos_id: int, eos_id: int, max_len: int, pad_id: int = 0,
             keep: str | None = None):
    """Greedy decoding of any model with ``model.start(*inputs) -> state`` and
    ``model.step(prev, state) -> (logits, state)`` (the course's decoder protocol).

    Returns the token ids ``(B, T)``; with ``keep="weights"`` (a key of the state
    dict) also that entry of every step stacked on dim 1, e.g. attention weights
    ``(B, T, N)``.
    """
    for name in ("start", "step"):
        if not callable(getattr(model, name, None)):
            raise TypeError(f"model must have a {name}() method (the decoder protocol), "
                            f"{type(model).__name__} has none")
    if not inputs:
        raise TypeError("generate needs the model's inputs after the model, e.g. generate(model, src, ...)")
    if not isinstance(inputs[0], torch.Tensor):
        raise TypeError(f"the first input must be a tensor (its first dimension is the batch), "
                        f"got {type(inputs[0]).__name__}")
    kept = []

    def on_step(t, tok, st):  # the state after each step (a model may add keys in step, not start)
        if not (isinstance(st, dict) and keep in st):
            raise ValueError(f"keep={keep!r} is not a key of the decoding state of {type(model).__name__}"
                             + (f" (keys: {sorted(st)})" if isinstance(st, dict) else ""))
        kept.append(st[keep])

    state = model.start(*inputs)
    result = greedy_decode(model.step, state, bos_id, eos_id, max_len, batch_size=inputs[0].shape[0],
                           device=inputs[0].device, pad_id=pad_id, on_step=on_step if keep is not None else None)
    if keep is None:
        return result.tokens
    return result.tokens, torch.stack(kept, dim=1)


def beam_search(step_fn: StepFn, state: Any, bos_id: int, eos_id: int, max_len: int, *, batch_size: int,
                beam_size: int = 4, length_penalty: float = 0.0, device: torch.device | str | None = None,
                pad_id: int = 0) -> Decoded:
    """Beam search: keep the ``beam_size`` most likely prefixes at every step.

    Each step extends every kept prefix by every token, scores the candidates by
    their summed log-probability ``log p(y_1 … y_t | state)``, and keeps the best
    ``k`` per row. A prefix that produced ``eos_id`` is finished: it is carried
    on unchanged (its score no longer changes). At the end the best hypothesis of
    each row is chosen by the *length-normalised* score ``log p / length^α``
    (``length_penalty = α``; 0 keeps the raw sum, which favours short outputs).

    Same step function as :func:`greedy_decode`; the rows of ``state`` are
    reordered with :func:`index_state` as hypotheses are kept or dropped.
    ``beam_size=1`` is greedy decoding. Returns the best hypothesis per row
    (``log_prob`` is its raw summed log-probability).
    """
    _check_decoding_args(step_fn, max_len, batch_size, bos_id, eos_id, pad_id)
    require_positive_int("beam_size", beam_size)
    require_number("length_penalty", length_penalty, 0.0)
    B, k = batch_size, beam_size
    rows = torch.arange(B, device=device)  # (B,)
    state = index_state(state, rows.repeat_interleave(k))  # every row copied k times: (B*k, ...)
    prev = torch.full((B * k,), bos_id, dtype=torch.long, device=device)  # (B*k,)
    scores = torch.full((B, k), float("-inf"), device=device)  # (B, k)
    scores[:, 0] = 0.0  # at the start the k copies are the same prefix: keep only one
    tokens = torch.zeros(B, k, 0, dtype=torch.long, device=device)  # (B, k, t)
    finished = torch.zeros(B, k, dtype=torch.bool, device=device)  # (B, k)
    lengths = torch.zeros(B, k, dtype=torch.long, device=device)  # (B, k)
    for _ in range(max_len):
        logits, state = step_fn(prev, state)
        _check_logits(logits, B * k, "B*k", pad_id)
        V = logits.shape[-1]
        logp = torch.log_softmax(logits.float(), dim=-1).view(B, k, V)  # (B, k, V)
        # a finished hypothesis can only be followed by padding, at no cost
        done_row = torch.full((V,), float("-inf"), device=logp.device)
        done_row[pad_id] = 0.0
        logp = torch.where(finished[..., None], done_row, logp)  # (B, k, V)
        cand = (scores[..., None] + logp).view(B, k * V)  # (B, k·V) every prefix × every token
        scores, flat = cand.topk(k, dim=-1)  # (B, k) the k best candidates per row
        beam, token = flat // V, flat % V  # (B, k) which prefix each extends, with which token
        tokens = torch.cat([tokens.gather(1, beam[..., None].expand(-1, -1, tokens.shape[2])), token[..., None]], dim=2)
        was_done = finished.gather(1, beam)  # (B, k)
        lengths = lengths.gather(1, beam) + (~was_done).long()  # tokens up to and including <end>
        finished = was_done | (token == eos_id)
        state = index_state(state, (rows[:, None] * k + beam).flatten())  # reorder the (B*k) rows
        prev = token.flatten()  # (B*k,)
        if bool(finished.all()):
            break
    norm = scores / lengths.clamp(min=1).float() ** length_penalty  # (B, k) length-normalised
    best = norm.argmax(dim=1)  # (B,)
    pick = lambda x: x[rows, best]  # noqa: E731
    return Decoded(tokens=pick(tokens), lengths=pick(lengths), log_prob=pick(scores), finished=pick(finished))
