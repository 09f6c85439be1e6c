"""Copy and reverse: tasks whose output must carry the *whole* input.

A source is a random string of symbols; the target is the same string
(``task="copy"``) or the string backwards (``task="reverse"``). The longer the
source, the more an encoder must squeeze into a fixed-size vector if the
decoder sees only its last state: the task that exposes the bottleneck.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import torch

from .._validate import require_positive_int, require_seed
from .cache import cached_dataset
from .vocab import Vocab

SYMBOLS = list(string.ascii_lowercase[:20])


def symbol_vocab(n_symbols: int = 20) -> Vocab:
    """A vocabulary of ``n_symbols`` letters (``a``, ``b``, …) plus the specials."""
    require_positive_int("n_symbols", n_symbols)
    if n_symbols > len(SYMBOLS):
        raise ValueError(f"n_symbols must be <= {len(SYMBOLS)}, got {n_symbols}")
    return Vocab(SYMBOLS[:n_symbols])


@dataclass
class SequenceBatch:
    """One generated batch. ``src (B, N)`` is padded with 0 after ``src_lengths``;
    ``tgt (B, T)`` is ``<start> y_1 … y_n <end> <pad>…``: a decoder reads
    ``tgt[:, :-1]`` and learns to predict ``tgt[:, 1:]``."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt: torch.Tensor
    vocab: Vocab

    def __len__(self) -> int:
        return self.src.shape[0]


@cached_dataset
def make_sequence_task(n: int, min_len: int, max_len: int, task: str = "copy", n_symbols: int = 20,
                       seed: int = 0) -> SequenceBatch:
    """``n`` examples of the copy or reverse task, lengths uniform in ``[min_len, max_len]``.

    Generated in one batch with a seeded ``torch.Generator`` on the CPU, so the
    same arguments give the same data on every machine.
    """
    for name, value in (("n", n), ("min_len", min_len), ("max_len", max_len), ("n_symbols", n_symbols)):
        require_positive_int(name, value)
    require_seed("seed", seed)
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len} and max_len={max_len}")
    if task not in ("copy", "reverse"):
        raise ValueError(f"task must be 'copy' or 'reverse', got {task!r}")
    vocab = symbol_vocab(n_symbols)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)  # (n,)
    symbols = torch.randint(3, 3 + n_symbols, (n, max_len), generator=g)  # (n, N) ids of letters
    pos = torch.arange(max_len)  # (N,)
    real = pos[None, :] < lengths[:, None]  # (n, N) True = real symbol
    src = symbols.masked_fill(~real, vocab.pad_id)  # (n, N)
    if task == "copy":
        out = src
    else:
        # reversed position of t is length-1-t; padding positions read index 0 and are masked below
        idx = (lengths[:, None] - 1 - pos[None, :]).clamp(min=0)  # (n, N)
        out = src.gather(1, idx).masked_fill(~real, vocab.pad_id)  # (n, N)
    tgt = torch.full((n, max_len + 2), vocab.pad_id, dtype=torch.long)  # (n, N + 2)
    tgt[:, 0] = vocab.start_id
    tgt[:, 1:-1] = out
    tgt[torch.arange(n), lengths + 1] = vocab.end_id
    return SequenceBatch(src=src, src_lengths=lengths, tgt=tgt, vocab=vocab)
