"""Human-readable dates -> ISO dates, character by character.

``"wednesday, march 3, 2021"``, ``"mar 03, 21"`` or ``"on 3 march 2021"`` all
become ``"2021-03-03"``. Every output character comes from one *field* of the
input (year, month or day), which makes the attention heat maps readable: the
decoder writing the year digits should look at the year.

Two-digit years are read with a pivot: ``50``–``99`` mean 19xx, ``00``–``49`` 20xx.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validate import require_positive_int, require_seed
from .cache import cached_dataset
from .vocab import Vocab

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
FIRST_YEAR, LAST_YEAR = 1950, 2049


def _ordinal(d: int) -> str:
    suffix = "th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    return f"{d}{suffix}"


# Each format returns the text and, for every field, the (start, end) character
# span holding it: the ground truth the attention maps are checked against.
def _render(fmt: int, y: int, m: int, d: int, wd: int) -> tuple[str, dict]:
    month, mon, yy = MONTHS[m - 1], MONTHS[m - 1][:3], f"{y % 100:02d}"
    parts = {
        0: [(str(d), "day"), (" ", None), (month, "month"), (" ", None), (str(y), "year")],
        1: [(mon, "month"), (" ", None), (f"{d:02d}", "day"), (", ", None), (yy, "year")],
        2: [(WEEKDAYS[wd], None), (", ", None), (month, "month"), (" ", None), (str(d), "day"),
            (", ", None), (str(y), "year")],
        3: [(f"{d:02d}", "day"), (".", None), (f"{m:02d}", "month"), (".", None), (str(y), "year")],
        4: [(month, "month"), (" ", None), (_ordinal(d), "day"), (", ", None), (str(y), "year")],
        5: [("on ", None), (str(d), "day"), (" ", None), (mon, "month"), (" ", None), (str(y), "year")],
        6: [("the ", None), (_ordinal(d), "day"), (" of ", None), (month, "month"), (" ", None), (yy, "year")],
    }[fmt]
    text, spans, pos = "", {}, 0
    for piece, field in parts:
        if field is not None:
            spans[field] = (pos, pos + len(piece))
        text += piece
        pos += len(piece)
    return text, spans


FORMATS = [_render(i, 2021, 3, 3, 2)[0] for i in range(7)]
"""One example of each input format, for 3 March 2021."""

INPUT_VOCAB = Vocab(list(" ,.0123456789abcdefghijklmnopqrstuvwxyz"))
OUTPUT_VOCAB = Vocab(list("-0123456789"))
ISO_FIELDS = ["year"] * 4 + [None] + ["month"] * 2 + [None] + ["day"] * 2
"""Which input field each of the 10 output characters ``YYYY-MM-DD`` comes from."""


@dataclass
class DateBatch:
    """Generated dates. ``src (B, N)``, ``src_lengths (B,)``, ``tgt (B, 12)`` =
    ``<start> YYYY-MM-DD <end>``; ``texts``/``isos`` the strings; ``fmt (B,)`` the
    format of each input; ``spans[b][field] = (start, end)`` the characters of
    each field in input ``b``."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt: torch.Tensor
    texts: list[str]
    isos: list[str]
    fmt: torch.Tensor
    spans: list[dict]
    src_vocab: Vocab = INPUT_VOCAB
    tgt_vocab: Vocab = OUTPUT_VOCAB

    def __len__(self) -> int:
        return self.src.shape[0]


@cached_dataset
def make_dates(n: int, seed: int = 0, formats=None) -> DateBatch:
    """``n`` random dates between 1950-01-01 and 2049-12-31 in random formats.

    The random draws are made in one batch by NumPy's ``PCG64`` generator and
    calendar arithmetic is vectorised with ``datetime64``; a fixed ``seed`` gives
    the same data on every machine.
    """
    require_positive_int("n", n)
    require_seed("seed", seed)
    formats = list(range(len(FORMATS))) if formats is None else list(formats)
    bad = [f for f in formats if type(f) is not int or f not in range(len(FORMATS))]
    if bad or not formats:
        raise ValueError(f"formats must be a non-empty list of format numbers 0..{len(FORMATS) - 1}, got {formats}")
    rng = np.random.default_rng(seed)
    first = np.datetime64(f"{FIRST_YEAR}-01-01")
    span = int((np.datetime64(f"{LAST_YEAR + 1}-01-01") - first).astype(int))
    days = first + rng.integers(0, span, n)  # (n,) datetime64[D]
    years = days.astype("datetime64[Y]").astype(int) + 1970
    months = days.astype("datetime64[M]").astype(int) % 12 + 1
    mdays = (days - days.astype("datetime64[M]")).astype(int) + 1
    weekdays = (days.astype(int) + 3) % 7  # day 0 = 1970-01-01 was a Thursday (index 3)
    fmt = np.asarray(formats)[rng.integers(0, len(formats), n)]
    rendered = [_render(int(f), int(y), int(m), int(d), int(w))
                for f, y, m, d, w in zip(fmt, years, months, mdays, weekdays, strict=True)]
    texts = [t for t, _ in rendered]
    spans = [s for _, s in rendered]
    isos = [str(d) for d in days]
    src, lengths = INPUT_VOCAB.encode_batch([list(t) for t in texts])
    tgt, _ = OUTPUT_VOCAB.encode_batch([list(s) for s in isos], start=True, end=True)
    return DateBatch(src=src, src_lengths=lengths, tgt=tgt, texts=texts, isos=isos,
                     fmt=torch.as_tensor(fmt, dtype=torch.long), spans=spans)
