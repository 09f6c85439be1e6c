"""Tokenizers: characters, and byte-level BPE checked against a pure-Python reference."""

import time

import numpy as np
import pytest

from companion.tokenizer import (
    ENDOFTEXT,
    GPT2_SPLIT_PATTERN,
    BPETokenizer,
    CharTokenizer,
    RegexBPETokenizer,
    merge_pair,
    most_frequent_pair,
    pair_counts,
    split_text,
    text_to_bytes,
)


# --- an independent reference: minbpe's BasicTokenizer written plainly ------------------
# One change: ties go to the smallest pair, the companion's rule. minbpe takes the tied
# pair it met first (max over an insertion-ordered dict); see test_ties_*.
def ref_train(text: str, vocab_size: int):
    ids = list(text.encode("utf-8"))
    merges = []
    for new_id in range(256, vocab_size):
        if len(ids) < 2:
            break
        counts = {}
        for pair in zip(ids, ids[1:], strict=False):
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


def test_ties_go_to_the_smallest_pair_not_to_minbpes_first_met_pair():
    text = "cdab"  # three pairs, each once: a three-way tie
    ids = list(text.encode("utf-8"))
    stats = {}
    for pair in zip(ids, ids[1:], strict=False):
        stats[pair] = stats.get(pair, 0) + 1
    assert max(stats, key=stats.get) == (ord("c"), ord("d"))  # minbpe: met first
    assert BPETokenizer.train(text, 257).merges == [(ord("a"), ord("b"))]  # the smallest
    assert RegexBPETokenizer.train(text, 257).merges == [(ord("a"), ord("b"))]
    no_tie = "aab aab ab"  # (a, b) leads: both rules agree
    assert BPETokenizer.train(no_tie, 257).merges == [(ord("a"), ord("b"))]


def test_pair_counts_count_overlaps_and_ties_go_to_the_smallest_pair():
    assert pair_counts([1, 1, 1, 2], 4) == {(1, 1): 2, (1, 2): 1}
    assert pair_counts([2, 0, 2, 0, 2], 3) == {(2, 0): 2, (0, 2): 2}
    assert most_frequent_pair([2, 0, 2, 0, 2], 3) == ((0, 2), 2)  # a tie: the smallest pair
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


# --- GPT-2's level: the regex split first, checked against minbpe's RegexTokenizer ---------
def ref_regex_train(text: str, vocab_size: int):
    """minbpe's RegexTokenizer.train written plainly, except ties: the smallest pair, the
    companion's rule (minbpe takes the tied pair it met first)."""
    import regex

    chunks = [list(c.encode("utf-8")) for c in regex.findall(GPT2_SPLIT_PATTERN, text)]
    merges = []
    for new_id in range(256, vocab_size):
        counts = {}
        for ids in chunks:
            for pair in zip(ids, ids[1:], strict=False):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        chunks = [ref_merge(ids, pair, new_id) for ids in chunks]
        merges.append(pair)
    return merges, [i for ids in chunks for i in ids]


@pytest.mark.parametrize("text", SAMPLES)
def test_regex_bpe_matches_minbpe_regex_tokenizer(text):
    merges, ref_ids = ref_regex_train(text, 256 + 40)
    tok = RegexBPETokenizer.train(text, 256 + 40)
    assert tok.merges == merges
    assert tok.encode(text) == ref_ids
    assert tok.decode(tok.encode(text)) == text


def test_the_split_is_gpt2s():
    pieces = split_text("Hello world, it's 2019!\n\n  ok")
    assert pieces == ["Hello", " world", ",", " it", "'s", " 2019", "!", "\n\n ", " ok"]
    assert "".join(pieces) == "Hello world, it's 2019!\n\n  ok"


def test_no_regex_token_crosses_a_word():
    from companion.data.text import load_shakespeare

    text = load_shakespeare()[:200_000]
    tok = RegexBPETokenizer.train(text, 400)
    basic = BPETokenizer.train(text, 400)

    def letter_space(vocab):
        return sum(len(v) > 1 and v[-1:] == b" " and chr(v[-2]).isalpha() for v in vocab[256:])

    assert letter_space(tok.vocab) == 0
    assert letter_space(basic.vocab) > 20  # the basic tokenizer merges "e " and its like


def test_special_tokens():
    tok = RegexBPETokenizer.train("the cat and the hat " * 20, 300, special_tokens=[ENDOFTEXT])
    eot = 256 + len(tok.merges)  # training stopped early: every piece is one token
    assert len(tok.merges) < 44 and tok.special_tokens == {ENDOFTEXT: eot}
    assert tok.vocab_size == eot + 1
    ids = tok.encode(f"the cat{ENDOFTEXT}the hat")
    assert ids.count(eot) == 1 and tok.decode(ids) == f"the cat{ENDOFTEXT}the hat"
    plain = tok.encode(f"a{ENDOFTEXT}", allowed_special=False)  # read as ordinary text
    assert eot not in plain and tok.decode(plain) == f"a{ENDOFTEXT}"
    with pytest.raises(ValueError, match="already"):
        RegexBPETokenizer([(116, 104)], special_tokens={ENDOFTEXT: 256})
    with pytest.raises(ValueError, match="share"):
        RegexBPETokenizer(special_tokens={"<a>": 300, "<b>": 300})


def test_regex_training_is_fast_against_minbpe():
    from companion.data.text import load_shakespeare

    text = load_shakespeare()[:40_000]
    start = time.process_time()
    ref_merges, _ = ref_regex_train(text, 256 + 30)
    ref_seconds = time.process_time() - start
    start = time.process_time()
    tok = RegexBPETokenizer.train(text, 256 + 30)
    ours = time.process_time() - start
    assert tok.merges == ref_merges
    assert ref_seconds > 20 * ours, (ref_seconds, ours)


def test_regex_train_512_on_the_whole_text_is_fast():
    from companion.data.text import load_shakespeare

    text = load_shakespeare()
    start = time.process_time()
    tok = RegexBPETokenizer.train(text, 512)
    seconds = time.process_time() - start
    assert tok.vocab_size == 512 and seconds < 3.0, seconds
    assert 1.8 < tok.bytes_per_token(text) < 1.95


def test_training_a_vocabulary_of_4096_takes_memory_of_the_text_not_of_v_squared():
    """A V² table of pair counters is 134 MB per merge at V = 4,096 (20 GB at GPT-2's 50,257);
    counting the pairs that occur takes memory of the text's size."""
    import tracemalloc

    from companion.data.text import load_shakespeare

    text = load_shakespeare()[:20_000]
    tracemalloc.start()
    try:
        tok = BPETokenizer.train(text, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tok.vocab_size == 4096 and tok.decode(tok.encode(text)) == text
    assert peak < 16 * 2**20, f"training peaked at {peak / 2**20:.0f} MiB"
    regex_tok = RegexBPETokenizer.train(text, 4096)
    assert regex_tok.decode(regex_tok.encode(text)) == text


def test_bpe_tokenizer_is_as_strict_about_ids_as_merge_pair():
    with pytest.raises(TypeError, match=r"merges\[0\]\[1\] must be an int id, got float"):
        BPETokenizer([(104, 105.5)])
    with pytest.raises(TypeError, match=r"merges\[0\]\[0\] must be an int id, got bool"):
        BPETokenizer([(True, 105)])
    with pytest.raises(ValueError, match=r"merges\[0\]\[0\] must be >= 0"):
        BPETokenizer([(-1, 105)])
