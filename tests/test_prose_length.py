"""The prose's sentence length (``benchmarks/prose_length.py``, issue #25): every chapter meets
the target (median <= 20 words, <= 5 % over 40, in both editions)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import prose_length  # noqa: E402

# Every chapter meets the target (issue #25 brought chapters 1-9 there).
MEETING = sorted(f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def pages():
    every = prose_length.messages()
    return every, prose_length.han_per_word(every)


@pytest.mark.parametrize("page", MEETING)
def test_chapter_meets_the_sentence_length_target(pages, page):
    every, ratio = pages
    en = prose_length.measure(n for m, _ in every[page] for n in prose_length.english_sentences(m))
    zh = prose_length.measure(n for _, s in every[page] for n in prose_length.chinese_sentences(s, ratio))
    assert prose_length.meets(en), f"{page} (English): {en}"
    assert prose_length.meets(zh), f"{page} (Chinese): {zh}"


def test_sentences_are_cut_and_counted_as_documented():
    text = ("Attention, e.g. in $QK^T$, is a soft lookup. It weighs `values` by similarity! "
            "Does it? Yes: see [the chapter](x.md).")
    assert prose_length.english_sentences(text) == [8, 5, 2, 4]
    # 12 Han characters at 1.5 per word are 8 words, plus "GPT": 9; the second sentence: 2 + 0
    assert prose_length.chinese_sentences("注意力是一种软性查找方法GPT。很好。", 1.5) == [8 + 1, 2 / 1.5]


def test_a_long_rambling_chapter_misses_the_target():
    long = prose_length.measure([45] * 10 + [10] * 90)  # 10 % over 40: misses
    assert not prose_length.meets(long)
    assert prose_length.meets(prose_length.measure([45] * 5 + [10] * 95))
