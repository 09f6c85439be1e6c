"""Tokenizers for chapter 10: characters, and byte-level BPE trained from scratch.

A tokenizer turns text into integer ids and back. Two are here:

* :class:`CharTokenizer`: one id per distinct character of a text (65 for tiny Shakespeare).
* :class:`BPETokenizer`: byte-level **byte-pair encoding** (Sennrich et al., 2016; GPT-2's
  byte-level form). Start from the UTF-8 bytes (ids 0–255), then repeat::

      (a, b) = the most frequent pair of neighbouring ids     (ties: the smallest (a, b))
      replace every (a, b), left to right, by a new id 256 + i

  Ties go to the smallest ``(a, b)``, a rule that does not depend on the order of the
  text. minbpe breaks them differently: ``max(stats, key=stats.get)`` over an
  insertion-ordered dict takes the tied pair it met first. On a tie the two can learn
  different merges; without ties they agree.

  The merges are kept **in order**; encoding new text applies them in the same order, and
  decoding joins the bytes of each id. Because everything is bytes, any Unicode string
  (Chinese, emoji) round-trips: ``decode(encode(s)) == s``.

Pair counting is vectorised: the ids are a numpy array, each pair ``(a, b)`` becomes the one
number ``a · V + b``, and ``np.unique`` counts them all at once (:func:`pair_counts`), in
memory that grows with the text, not with ``V²``.
:func:`merge_pair` is one merge step, also on whole arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ._validate import require_int

BYTE_VOCAB = 256  # ids 0–255 are the bytes themselves


def _require_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def _as_id_array(name: str, ids) -> np.ndarray:
    """``ids`` (a sequence of ints, a numpy array or a torch tensor) as a 1-D int64 array."""
    if hasattr(ids, "detach"):  # a torch tensor
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one sequence of ids), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


class CharTokenizer:
    """One id per character: ``chars[i]`` has id ``i`` (the characters sorted).

    ``CharTokenizer.from_text(text)`` takes the distinct characters of ``text``. Encoding a
    character that is not in the vocabulary raises an error naming it.
    """

    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise TypeError(f"chars must be single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("chars must be distinct")
        if not chars:
            raise ValueError("chars must hold at least one character")
        self.chars = sorted(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the distinct characters of ``text``."""
        return cls(set(_require_text("text", text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """``text`` -> ids, one per character."""
        _require_text("text", text)
        try:
            return [self.index[c] for c in text]
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in this tokenizer's vocabulary of "
                             f"{self.vocab_size} characters") from None

    def decode(self, ids) -> str:
        """ids -> text."""
        arr = _as_id_array("ids", ids)
        _check_ids_in_range("ids", arr, self.vocab_size)
        return "".join(self.chars[i] for i in arr.tolist())

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def text_to_bytes(text: str) -> np.ndarray:
    """The UTF-8 bytes of ``text`` as ids 0–255 (int64): where byte-level BPE starts."""
    return np.frombuffer(_require_text("text", text).encode("utf-8"), dtype=np.uint8).astype(np.int64)


def pair_counts(ids, vocab_size: int) -> dict[tuple[int, int], int]:
    """How often each pair of neighbours ``(a, b)`` occurs in ``ids``: ``{(a, b): count}``
    for the pairs that occur (minbpe's ``get_stats``), counted in one pass (``_count_pairs``).

    Overlapping pairs are all counted (``a a a`` holds ``(a, a)`` twice), as minbpe does."""
    require_int("vocab_size", vocab_size, minimum=1)
    arr = _check_ids_in_range("ids", _as_id_array("ids", ids), vocab_size, "vocab_size=")
    codes, counts = _count_pairs(arr, vocab_size)
    return {(int(c) // vocab_size, int(c) % vocab_size): int(n) for c, n in zip(codes, counts, strict=True)}


def _count_pairs(arr: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of neighbours of ``arr`` as codes ``a · V + b`` (sorted, each once) and their
    counts (:func:`_count_codes`)."""
    return _count_codes(arr[:-1] * vocab_size + arr[1:], vocab_size * vocab_size)


def _count_codes(codes: np.ndarray, size: int, weights: np.ndarray | None = None):
    """The distinct ``codes`` (each in ``[0, size)``), sorted, and how often each occurs (or
    its summed ``weights``). Memory grows with ``len(codes)``, never with ``size = V²``: a
    table of ``V²`` counters is 134 MB at ``V = 4,096`` and 20 GB at GPT-2's 50,257. When
    the table is no larger than a few times the text (a small vocabulary on a long text)
    ``np.bincount`` fills it in one pass; otherwise ``np.unique`` sorts the codes. Sorted
    codes make ``argmax`` pick the smallest ``(a, b)`` of a tie."""
    if size <= 8 * max(codes.size, 1 << 16):
        table = np.bincount(codes, weights=weights, minlength=size)  # (size,)
        present = np.flatnonzero(table)
        return present, table[present]
    distinct, which = np.unique(codes, return_inverse=True)  # (m,), (n - 1,)
    return distinct, np.bincount(which.ravel(), weights=weights, minlength=distinct.size)


def _check_ids_in_range(name: str, arr: np.ndarray, size: int, what: str = "") -> np.ndarray:
    """The one range check of the tokenizers: every id of ``arr`` in ``[0, size)``."""
    if arr.size and (arr.min() < 0 or arr.max() >= size):
        raise ValueError(f"{name} must be in [0, {what}{size}), got range [{arr.min()}, {arr.max()}]")
    return arr


def most_frequent_pair(ids, vocab_size: int) -> tuple[tuple[int, int], int]:
    """``((a, b), count)``: the most frequent pair of neighbours; ties go to the smallest
    ``(a, b)`` (the codes are sorted and ``np.argmax`` returns the first maximum)."""
    require_int("vocab_size", vocab_size, minimum=1)
    arr = _check_ids_in_range("ids", _as_id_array("ids", ids), vocab_size, "vocab_size=")
    if arr.size < 2:
        raise ValueError("ids hold fewer than two tokens: there is no pair to count")
    codes, counts = _count_pairs(arr, vocab_size)
    best = int(counts.argmax())
    code = int(codes[best])
    return (code // vocab_size, code % vocab_size), int(counts[best])


def merge_pair(ids, pair: tuple[int, int], new_id: int) -> np.ndarray:
    """One merge step: every occurrence of ``pair = (a, b)`` in ``ids``, taken left to
    right without overlap, becomes the one id ``new_id``. Returns a new int64 array.

    ``a a a`` with the pair ``(a, a)`` becomes ``new a``: the first two merge, and the third
    ``a`` has no partner left. It gives the same ids as minbpe's ``merge``, a Python loop
    over ids (chapter 10 asks you to write that loop).

    This function works on whole arrays. The one subtle case is ``a == b``: in
    ``x a a a a a y`` the pair starts at 1, 2, 3, 4 (one run of consecutive starts); left to
    right, the loop merges at 1 and 3 (2 is the b of 1, 4 the b of 3), so only every other
    start of a run merges: its place in the run (0, 1, 2, 3) is even."""
    arr = _as_id_array("ids", ids)
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise TypeError(f"pair must be a tuple (a, b) of two ids, got {pair!r}")
    a, b = (_id_int(f"pair[{i}]", pair[i]) for i in (0, 1))
    new_id = _id_int("new_id", new_id)
    return _merge_keep(arr, (a, b), new_id)[0]


def _id_int(name: str, value) -> int:
    """An id: a Python or numpy integer >= 0, as an int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int id, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


class BPETokenizer:
    """Byte-level BPE: ``merges[i] = (a, b)`` made the id ``256 + i``; ``vocab[id]`` is its bytes.

    Build it with :meth:`train`, or from a list of merges (e.g. saved from an earlier training).
    """

    def __init__(self, merges: Sequence[tuple[int, int]] = ()):
        vocab = [bytes([i]) for i in range(BYTE_VOCAB)]
        checked = []
        for i, pair in enumerate(merges):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"merges[{i}] must be a pair (a, b) of ids, got {pair!r}")
            a, b = _id_int(f"merges[{i}][0]", pair[0]), _id_int(f"merges[{i}][1]", pair[1])
            if not (a < len(vocab) and b < len(vocab)):
                raise ValueError(f"merges[{i}] = {pair!r} uses an id not yet made (ids so far: 0..{len(vocab) - 1})")
            vocab.append(vocab[a] + vocab[b])
            checked.append((a, b))
        self.merges: list[tuple[int, int]] = checked
        self.vocab: list[bytes] = vocab

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``, most frequent pair first.

        Stops early (a smaller vocabulary) only when the text has been merged into one token."""
        require_int("vocab_size", vocab_size, minimum=BYTE_VOCAB)
        ids = text_to_bytes(text)  # (n,)
        merges = []
        for new_id in range(BYTE_VOCAB, vocab_size):
            if ids.size < 2:
                break
            codes, counts = _count_pairs(ids, vocab_size)
            code = int(codes[counts.argmax()])  # ties: the smallest pair (codes are sorted)
            pair = (code // vocab_size, code % vocab_size)
            ids = _merge_keep(ids, pair, new_id)[0]
            merges.append(pair)
        return cls(merges)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """``text`` -> ids: its UTF-8 bytes, then every merge applied in the order it was learned."""
        ids = text_to_bytes(text)
        for i, (a, b) in enumerate(self.merges):
            if ids.size < 2:
                break
            if np.any((ids[:-1] == a) & (ids[1:] == b)):
                ids = merge_pair(ids, (a, b), BYTE_VOCAB + i)
        return ids.tolist()

    def decode(self, ids) -> str:
        """ids -> text: the bytes of each id joined, read as UTF-8. An id sequence that cuts a
        character's bytes apart (possible when sampling) decodes to U+FFFD there."""
        arr = _as_id_array("ids", ids)
        _check_ids_in_range("ids", arr, self.vocab_size)
        return b"".join(self.vocab[i] for i in arr.tolist()).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a single id stands for."""
        require_int("token_id", token_id, minimum=0)
        if token_id >= self.vocab_size:
            raise ValueError(f"token_id must be < vocab_size={self.vocab_size}, got {token_id}")
        return self.vocab[token_id]

    def bytes_per_token(self, text: str) -> float:
        """The compression: UTF-8 bytes of ``text`` per token of its encoding."""
        n = len(self.encode(text))
        if n == 0:
            raise ValueError("text is empty: no tokens to divide by")
        return len(text.encode("utf-8")) / n

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"


# --- GPT-2's level: split the text with a regex first (minbpe's RegexTokenizer) -----------
# GPT-2's split pattern (Radford et al., 2019; openai/gpt-2, src/encoder.py): contractions,
# a run of letters, of digits or of other symbols (each with at most one space in front), and
# whitespace. BPE then merges inside each piece only, so no token spans two words, and no
# token ends in "letter + space": the space goes to the front of the next word.
GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENDOFTEXT = "<|endoftext|>"  # GPT-2's one special token: it separates documents


def split_text(text: str, pattern: str = GPT2_SPLIT_PATTERN) -> list[str]:
    """The pieces of ``text`` that BPE merges within (``regex.findall`` with GPT-2's pattern).

    The pieces join back to ``text`` exactly."""
    import regex  # the third-party `regex` package: `re` has no \\p{L}

    return regex.findall(pattern, _require_text("text", text))


def _pieces_as_array(pieces: Sequence[str], separator: int) -> np.ndarray:
    """The UTF-8 bytes of every piece, one after another, with ``separator`` between them."""
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    sep = bytes([0])  # a placeholder byte, replaced below: a piece may hold byte 0 itself
    joined = np.frombuffer(sep.join(p.encode("utf-8") for p in pieces), dtype=np.uint8).astype(np.int64)
    lengths = np.array([len(p.encode("utf-8")) for p in pieces], dtype=np.int64)
    ends = np.cumsum(lengths + 1)[:-1] - 1  # where each separator sits
    joined[ends] = separator
    return joined


class RegexBPETokenizer:
    """GPT-2's kind of byte-level BPE (minbpe's ``RegexTokenizer``): the text is first split
    into pieces by a regex (``GPT2_SPLIT_PATTERN``), and merges never cross a piece.

    Training counts each distinct piece once, weighted by how often it occurs, so it reads a
    few tens of thousands of pieces instead of a million bytes. ``special_tokens`` (e.g.
    ``{"<|endoftext|>": 512}``) are whole strings that get one id each and are never split or
    merged; :meth:`encode` finds them in the text first.
    """

    def __init__(self, merges: Sequence[tuple[int, int]] = (), pattern: str = GPT2_SPLIT_PATTERN,
                 special_tokens: dict[str, int] | None = None):
        base = BPETokenizer(merges)  # checks the merges and builds the bytes of each id
        self.merges, self.vocab, self.pattern = base.merges, base.vocab, pattern
        self.special_tokens: dict[str, int] = {}
        for name, token_id in (special_tokens or {}).items():
            _require_text("a special token", name)
            if not name:
                raise ValueError("a special token must not be empty")
            if _id_int(f"the id of {name!r}", token_id) < len(self.vocab):
                raise ValueError(f"special token {name!r} has id {token_id}, which a merge or a byte already "
                                 f"uses (ids 0..{len(self.vocab) - 1})")
            if token_id in self.special_tokens.values():
                raise ValueError(f"two special tokens share the id {token_id}")
            self.special_tokens[name] = int(token_id)
        self.special_of_id = {i: s for s, i in self.special_tokens.items()}

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str = GPT2_SPLIT_PATTERN,
              special_tokens: Sequence[str] = ()) -> RegexBPETokenizer:
        """Learn ``vocab_size - 256`` merges inside the pieces of ``text`` (ties: the smallest
        pair, as :class:`BPETokenizer`). The ``special_tokens`` get the ids after the merges."""
        require_int("vocab_size", vocab_size, minimum=BYTE_VOCAB)
        counts: dict[str, int] = {}
        for piece in split_text(text, pattern):
            counts[piece] = counts.get(piece, 0) + 1
        pieces = list(counts)
        sep = vocab_size  # an id no merge makes: pairs that touch it are not counted
        ids = _pieces_as_array(pieces, sep)  # (n,) every distinct piece once
        # each position carries the count of its piece (pairs that touch a separator are not counted)
        weight = np.repeat(np.array([counts[p] for p in pieces] or [0], dtype=np.int64),
                           [len(p.encode("utf-8")) + 1 for p in pieces] or [0])[: ids.size]
        merges = []
        for new_id in range(BYTE_VOCAB, vocab_size):
            valid = (ids[:-1] != sep) & (ids[1:] != sep)  # (n - 1,) pairs inside a piece
            if not valid.any():
                break
            codes = ids[:-1][valid] * (vocab_size + 1) + ids[1:][valid]
            codes, pair_count = _count_codes(codes, (vocab_size + 1) ** 2, weight[:-1][valid])
            best = int(codes[pair_count.argmax()])  # ties: the smallest pair (codes are sorted)
            pair = (best // (vocab_size + 1), best % (vocab_size + 1))
            ids, keep = _merge_keep(ids, pair, new_id)
            weight = weight[keep]
            merges.append(pair)
        names = list(dict.fromkeys(special_tokens))
        first = BYTE_VOCAB + len(merges)  # the first id after the merges
        return cls(merges, pattern, {s: first + i for i, s in enumerate(names)})

    @property
    def vocab_size(self) -> int:
        """The number of ids (bytes, merges and special tokens)."""
        return len(self.vocab) + len(self.special_tokens)

    def _encode_pieces(self, pieces: list[str]) -> list[list[int]]:
        """Every piece's ids: the distinct pieces merged together in one array, merges in order."""
        distinct = list(dict.fromkeys(pieces))
        sep = -1
        ids = _pieces_as_array(distinct, sep)
        for i, (a, b) in enumerate(self.merges):
            if ids.size < 2:
                break
            if np.any((ids[:-1] == a) & (ids[1:] == b)):
                ids = merge_pair_any(ids, (a, b), BYTE_VOCAB + i)
        parts = np.split(ids, np.flatnonzero(ids == sep)) if ids.size else []
        table = {}
        for k, (piece, part) in enumerate(zip(distinct, parts, strict=True)):
            table[piece] = (part[1:] if k else part).tolist()  # drop the leading separator
        return [table[p] for p in pieces]

    def encode(self, text: str, allowed_special: bool = True) -> list[int]:
        """``text`` -> ids: special tokens first (when ``allowed_special``), then the regex
        pieces of the text between them, each merged on its own."""
        _require_text("text", text)
        import regex

        if allowed_special and self.special_tokens:
            alternatives = "|".join(regex.escape(s) for s in sorted(self.special_tokens, key=len, reverse=True))
            chunks = regex.split(f"({alternatives})", text)
        else:
            chunks = [text]
        out: list[int] = []
        for k, chunk in enumerate(chunks):
            if k % 2 and len(chunks) > 1:  # a special token
                out.append(self.special_tokens[chunk])
            elif chunk:
                for ids in self._encode_pieces(split_text(chunk, self.pattern)):
                    out.extend(ids)
        return out

    def decode(self, ids) -> str:
        """ids -> text (special tokens as their strings; a cut character as U+FFFD)."""
        arr = _as_id_array("ids", ids)
        _check_ids_in_range("ids", arr, self.vocab_size)
        parts = []
        for i in arr.tolist():
            parts.append(self.special_of_id[i].encode("utf-8") if i in self.special_of_id else self.vocab[i])
        return b"".join(parts).decode("utf-8", errors="replace")

    bytes_per_token = BPETokenizer.bytes_per_token  # the same compression measure, on this encode

    def __repr__(self) -> str:
        return (f"RegexBPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
                f"special_tokens={len(self.special_tokens)})")


def merge_pair_any(ids: np.ndarray, pair: tuple[int, int], new_id: int) -> np.ndarray:
    """:func:`merge_pair` for arrays that may hold negative separators (never part of a pair)."""
    return _merge_keep(ids, pair, new_id)[0]


def _merge_keep(ids: np.ndarray, pair: tuple[int, int], new_id: int) -> tuple[np.ndarray, np.ndarray]:
    """One merge step on an int64 array (as :func:`merge_pair`), and the mask of the positions kept."""
    a, b = pair
    keep = np.ones(ids.size, dtype=bool)
    if ids.size < 2:
        return ids.copy(), keep
    starts = np.flatnonzero((ids[:-1] == a) & (ids[1:] == b))  # where the pair begins
    if a == b and starts.size > 1:
        # a run of consecutive starts i, i+1, i+2, ... is a run of a's: merge every other one
        new_run = np.ones(starts.size, dtype=bool)
        new_run[1:] = np.diff(starts) != 1
        run_first = np.flatnonzero(new_run)  # index (into starts) of each run's first start
        offset = np.arange(starts.size) - run_first[np.cumsum(new_run) - 1]  # place within its run
        starts = starts[offset % 2 == 0]
    out = ids.copy()
    out[starts] = new_id
    keep[starts + 1] = False  # the b of each merged pair goes
    return out[keep], keep
