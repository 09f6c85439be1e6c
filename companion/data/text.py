"""Real text for chapter 10: tiny Shakespeare, shipped inside this package.

1,115,394 characters (all ASCII, 65 distinct) of Shakespeare's plays, public domain
(``tinyshakespeare.txt.gz``, 434 kB; source and licence in ``TINYSHAKESPEARE_LICENSE.md``):
no download. :func:`shakespeare_split` cuts it by a fixed rule, the one nanoGPT uses::

    train    = text[: int(0.9 · n)]      the first 90 % of the characters
    held_out = text[int(0.9 · n) :]      the last 10 %, never trained on

so a held-out loss here is comparable with nanoGPT's validation loss on the same text.
``SHAKESPEARE_SHA256`` is the SHA-256 of the uncompressed text, ``SHAKESPEARE_CHARS`` its
length and ``TRAIN_FRACTION`` the 0.9 of the rule.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

from .._validate import require_number

SHAKESPEARE_FILE = Path(__file__).with_name("tinyshakespeare.txt.gz")
# SHA-256 of the uncompressed text (``data/tinyshakespeare/input.txt`` of karpathy/char-rnn).
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
# Its length in characters, which is also its length in bytes (the text is ASCII).
SHAKESPEARE_CHARS = 1_115_394
# The share of the text used for training; the rest is held out.
TRAIN_FRACTION = 0.9

_text_memo: dict[str, str] = {}


@dataclass(frozen=True)
class TextSplit:
    """``train`` and ``held_out`` text (``str``), cut at character ``cut`` of the whole."""

    train: str
    held_out: str
    cut: int


def load_shakespeare() -> str:
    """The whole text, decoded as UTF-8 (read once per session; ``str`` is immutable)."""
    if "text" not in _text_memo:
        with gzip.open(SHAKESPEARE_FILE, "rt", encoding="utf-8", newline="") as f:
            _text_memo["text"] = f.read()
    return _text_memo["text"]


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of ``text`` encoded as UTF-8: compare with ``SHAKESPEARE_SHA256``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_text(text: str, train_fraction: float = TRAIN_FRACTION) -> TextSplit:
    """The fixed rule: the first ``int(train_fraction · len(text))`` characters train, the rest is held out."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    require_number("train_fraction", train_fraction, 0.0, strict=True)
    if not train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1) (some text must be held out), got {train_fraction!r}")
    cut = int(train_fraction * len(text))
    if cut == 0 or cut == len(text):
        raise ValueError(f"a text of {len(text)} characters split at {train_fraction} leaves one side empty")
    return TextSplit(train=text[:cut], held_out=text[cut:], cut=cut)


def shakespeare_split(train_fraction: float = TRAIN_FRACTION) -> TextSplit:
    """Tiny Shakespeare cut by :func:`split_text`: 1,003,854 training and 111,540 held-out characters."""
    return split_text(load_shakespeare(), train_fraction)
