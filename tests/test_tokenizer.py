"""Tokenizers: characters, and byte-level BPE checked against a pure-Python reference."""

import time

import numpy as np
import pytest

from companion.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    merge_pair,
    most_frequent_pair,
    pair_counts,
    text_to_bytes,
)


# --- an independent reference: minbpe's BasicTokenizer written plainly ------------------
def ref_train(text: str, vocab_size: int):
    ids = list(text.encode("utf-8"))
    merges = []
    for new_id in range(256, vocab_size):
        if len(ids) < 2:
            break
        counts = {}
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)  # ties: the smallest pair
        ids = ref_merge(ids, pair, new_id)
        merges.append(pair)
    return merges, ids


def ref_merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


SAMPLES = [
    "the cat sat on the mat; the cat sat on the hat. aaaaa bbbb aaa",
    "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 3,
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。床前明月光 🙂🙂🙂 👍🏽 naïve café",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_bpe_training_matches_the_reference(text):
    vocab_size = 256 + 40
    merges, ref_ids = ref_train(text, vocab_size)
    tok = BPETokenizer.train(text, vocab_size)
    assert tok.merges == merges
    assert tok.encode(text) == ref_ids  # encoding the training text repeats the training merges


@pytest.mark.parametrize("pair", [(97, 97), (97, 98), (1, 1)])
def test_merge_pair_matches_the_reference_on_runs(pair):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, size=500).tolist() + [97] * 7 + [97, 98] * 5 + [1] * 6
    assert merge_pair(ids, pair, 300).tolist() == ref_merge(ids, pair, 300)


def test_merge_pair_of_three_equal_ids():
    assert merge_pair([5, 5, 5], (5, 5), 9).tolist() == [9, 5]
    assert merge_pair([5, 5, 5, 5], (5, 5), 9).tolist() == [9, 9]


def test_pair_counts_count_overlaps_and_ties_go_to_the_smallest_pair():
    counts = pair_counts([1, 1, 1, 2], 4)
    assert counts[1 * 4 + 1] == 2 and counts[1 * 4 + 2] == 1 and counts.sum() == 3
    assert most_frequent_pair([3, 2, 1, 0], 4) == ((1, 0), 1)
    with pytest.raises(ValueError, match="fewer than two"):
        most_frequent_pair([1], 4)
    with pytest.raises(ValueError, match="vocab_size=4"):
        pair_counts([1, 7], 4)


@pytest.mark.parametrize("text", ["", "a", "你好，世界", "emoji 🙂👍🏽🇫🇷 mixed 中文 and ASCII", "\x00\n\t ü"])
def test_round_trip_any_unicode(text):
    tok = BPETokenizer.train(SAMPLES[2] + SAMPLES[1], 300)
    assert tok.decode(tok.encode(text)) == text


def test_merges_in_order_and_vocab_bytes():
    tok = BPETokenizer.train("abababab cdcd", 259)
    a, b = ord("a"), ord("b")
    assert tok.merges[0] == (a, b)  # "ab" occurs 4 times
    assert tok.vocab[256] == b"ab"
    assert tok.merges[1] == (256, 256)  # then "abab"
    assert tok.token_bytes(257) == b"abab"
    assert BPETokenizer(tok.merges).encode("abababab") == tok.encode("abababab") == [257, 257]


def test_a_merge_of_an_unmade_id_is_refused():
    with pytest.raises(ValueError, match="not yet made"):
        BPETokenizer([(256, 1)])


def test_decode_of_a_cut_character_replaces_it():
    tok = BPETokenizer()
    ids = tok.encode("中")  # three bytes
    assert tok.decode(ids[:2]) == "\ufffd"


def test_bytes_per_token():
    tok = BPETokenizer()
    assert tok.bytes_per_token("中文") == 1.0  # bytes only: one byte per token
    tok = BPETokenizer.train("aaaa", 258)
    assert tok.bytes_per_token("aaaa") == 4.0


def test_train_512_on_the_whole_text_is_fast_and_compresses():
    from companion.data.text import load_shakespeare

    text = load_shakespeare()
    start = time.process_time()  # CPU time: what a shared machine's load does not inflate
    tok = BPETokenizer.train(text, 512)
    seconds = time.process_time() - start
    assert tok.vocab_size == 512
    assert seconds < 5.0, seconds
    bpt = tok.bytes_per_token(text)
    assert 1.95 < bpt < 2.0, bpt  # 1.963 for tiny Shakespeare


def test_char_tokenizer():
    tok = CharTokenizer.from_text("hello world")
    assert tok.vocab_size == 8 and tok.chars[0] == " "
    ids = tok.encode("hold")
    assert tok.decode(ids) == "hold"
    with pytest.raises(ValueError, match="'z' is not in"):
        tok.encode("zoo")
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        tok.decode([8])


def test_text_to_bytes_and_errors():
    assert text_to_bytes("é").tolist() == [0xC3, 0xA9]
    with pytest.raises(TypeError, match="text must be a str"):
        BPETokenizer().encode(b"abc")
    with pytest.raises(ValueError, match="vocab_size must be >= 256"):
        BPETokenizer.train("abc", 100)
    with pytest.raises(TypeError, match="integer ids"):
        BPETokenizer().decode(np.array([1.5]))
