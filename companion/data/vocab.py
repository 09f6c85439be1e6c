"""A vocabulary: tokens <-> integer ids, with the three special tokens every
sequence model of the course needs.

    <pad> = 0   fills the end of shorter sequences in a batch
    <start> = 1 the first input of a decoder ("begin of sequence")
    <end> = 2   the token a decoder emits to stop
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from .._validate import require_tensor

PAD, START, END = "<pad>", "<start>", "<end>"


class Vocab:
    """Map tokens (words or characters) to ids and back.

    ``Vocab(["a", "red", "circle"])`` has ids ``<pad>=0, <start>=1, <end>=2,
    a=3, red=4, circle=5``. The order of ``tokens`` fixes the ids, so a vocabulary
    built from the same list is the same on every machine.
    """

    def __init__(self, tokens: Iterable[str]):
        tokens = list(tokens)
        for t in tokens:
            if not isinstance(t, str):
                raise TypeError(f"tokens must be strings, got {type(t).__name__} ({t!r})")
        if len(set(tokens)) != len(tokens):
            dup = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"tokens must be unique, got duplicates {dup}")
        clash = {PAD, START, END} & set(tokens)
        if clash:
            raise ValueError(f"tokens must not contain the special tokens, got {sorted(clash)}")
        self.itos: list[str] = [PAD, START, END, *tokens]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.start_id, self.end_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[:12]}{' …' if len(self) > 12 else ''})"

    def encode(self, tokens: Sequence[str], start: bool = False, end: bool = False) -> list[int]:
        """Ids of ``tokens``, optionally framed by ``<start>`` and ``<end>``."""
        unknown = [t for t in tokens if t not in self.stoi]
        if unknown:
            raise ValueError(f"tokens not in the vocabulary: {unknown[:5]} (vocabulary {self!r})")
        ids = [self.stoi[t] for t in tokens]
        return ([self.start_id] if start else []) + ids + ([self.end_id] if end else [])

    def decode(self, ids, strip: bool = True) -> list[str]:
        """Tokens of ``ids``. With ``strip``, drop ``<start>``/``<pad>`` and stop at ``<end>``."""
        if isinstance(ids, torch.Tensor):
            if ids.is_floating_point() or ids.is_complex():
                raise TypeError(f"ids must be integers, got dtype {ids.dtype}")
            if ids.dim() != 1:
                raise ValueError(f"decode takes one sequence (1-D ids), got shape {tuple(ids.shape)}; "
                                 "use decode_batch for a batch")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be integers, got {i!r} ({type(i).__name__})")
            if not 0 <= i < len(self):
                raise ValueError(f"id {i} is outside the vocabulary (0..{len(self) - 1})")
            if strip and i == self.end_id:
                break
            if strip and i in (self.pad_id, self.start_id):
                continue
            out.append(self.itos[i])
        return out

    def encode_batch(self, sequences: Sequence[Sequence[str]], start: bool = False, end: bool = False,
                     max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode and pad a batch: returns ``ids (B, T)`` (``<pad>`` after the end)
        and ``lengths (B,)`` (the number of real ids of each row)."""
        rows = [self.encode(s, start=start, end=end) for s in sequences]
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        T = int(lengths.max()) if len(rows) else 0
        if max_len is not None:
            if T > max_len:
                raise ValueError(f"max_len={max_len} is shorter than the longest encoded sequence ({T})")
            T = max_len
        ids = torch.tensor([r + [self.pad_id] * (T - len(r)) for r in rows], dtype=torch.long)  # (B, T)
        return ids.reshape(len(rows), T), lengths

    def decode_batch(self, ids: torch.Tensor, strip: bool = True) -> list[list[str]]:
        """Decode every row of ``ids (B, T)``."""
        require_tensor("ids", ids)
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape (B, T), got {tuple(ids.shape)}")
        return [self.decode(row, strip=strip) for row in ids.cpu()]
