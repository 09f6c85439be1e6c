"""The shipped text: the exact file of karpathy/char-rnn, read offline, split by the fixed rule."""

import gzip

import pytest

from companion.data import text


def test_shipped_text_is_char_rnns_tiny_shakespeare():
    t = text.load_shakespeare()
    assert len(t) == text.SHAKESPEARE_CHARS == 1_115_394
    assert len(t.encode("utf-8")) == 1_115_394  # ASCII: one byte per character
    assert text.text_sha256(t) == text.SHAKESPEARE_SHA256
    assert t.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")
    assert len(set(t)) == 65


def test_the_file_is_gzip_and_the_checksum_is_of_its_bytes():
    with gzip.open(text.SHAKESPEARE_FILE, "rb") as f:
        raw = f.read()
    import hashlib
    assert hashlib.sha256(raw).hexdigest() == text.SHAKESPEARE_SHA256
    assert text.SHAKESPEARE_FILE.stat().st_size < 450_000  # shipped compressed
    assert text.SHAKESPEARE_FILE.with_name("TINYSHAKESPEARE_LICENSE.md").exists()


def test_split_rule_is_first_ninety_percent():
    s = text.shakespeare_split()
    whole = text.load_shakespeare()
    assert s.cut == int(0.9 * len(whole)) == 1_003_854
    assert s.train + s.held_out == whole
    assert len(s.held_out) == 111_540
    assert s.train == whole[: s.cut]


def test_split_text_rule_and_errors():
    s = text.split_text("abcdefghij", 0.7)
    assert (s.train, s.held_out, s.cut) == ("abcdefg", "hij", 7)
    with pytest.raises(ValueError, match="train_fraction"):
        text.split_text("abcdef", 1.0)
    with pytest.raises(ValueError, match="empty"):
        text.split_text("ab", 0.1)
    with pytest.raises(TypeError, match="text must be a str"):
        text.split_text(b"abc")
