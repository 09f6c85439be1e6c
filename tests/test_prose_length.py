"""The prose's sentence length (``benchmarks/prose_length.py``, issue #25): every chapter meets
the target (median <= 20 words, <= 5 % over 40, in both editions)."""

from __future__ import annotations

import re
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


@pytest.fixture(scope="module")
def notebook_cells():
    return prose_length.notebook_markdown()


@pytest.mark.parametrize("page", MEETING)
def test_chapter_meets_the_target_by_the_strict_count(notebook_cells, page):
    """The same target, counted with no benefit of the doubt (the notebooks' Markdown, a sentence
    ends only at . ! ? and white space), so that a stricter reader's count agrees."""
    m = prose_length.measure(n for cell in notebook_cells[page] for n in prose_length.strict_sentences(cell))
    assert prose_length.meets(m), f"{page} (strict count): {m}"


@pytest.mark.parametrize("page", MEETING)
def test_chapter_meets_the_target_by_the_space_only_count(notebook_cells, page):
    """The same target by the loosest count (a sentence ends only at . ! ? and a space), the one
    a review of issue #37 used: it joins a paragraph's last sentence with the next paragraph's
    first, so a chapter passes it only if those joins stay short too."""
    m = prose_length.measure(n for cell in notebook_cells[page] for n in prose_length.space_only_sentences(cell))
    assert prose_length.meets(m), f"{page} (space-only count): {m}"


def test_the_space_only_count_joins_across_line_breaks():
    cell = "One two three.\n\n## Head\n\nFour five $x + y$ `code`. Six seven.\n- eight"
    # the first sentence runs on through the heading into the next paragraph
    assert prose_length.space_only_sentences(cell) == [8, 3]


def test_the_strict_count_gives_no_benefit_of_the_doubt():
    cell = ("## A heading that is left out\n\nThe score is:\n\n$$\ns = q^T k\n$$\n\nwhere $q$ is a query "
            "and $W^Q \\in \\mathbb{R}^{d}$ a matrix. Three parts:\n\n- the queries\n- the keys. Done!\n\n"
            "```python\nx = 1. Not prose.\n```\n")
    # "The score is: where $q$ ... a matrix." is one sentence (the display formula does not end it);
    # the math counts its pieces; the colon and the list items without a full stop do not end one
    assert prose_length.strict_sentences(cell) == [14, 6, 1]
    # the catalog measure counts a formula as one word
    formula = "where $W^Q \\in \\mathbb{R}^{d}$ is a matrix."
    assert prose_length.english_sentences(formula) == [5] and prose_length.strict_sentences(formula) == [7]


def test_notebook_paragraphs_are_stored_one_line_each(notebook_cells):
    """A sentence never ends at a line break inside a paragraph, so a count that cuts only at a
    full stop followed by a space sees the same sentences as ours."""
    wrapped = []
    for page, cells in notebook_cells.items():
        for cell in cells:
            text = prose_length.DISPLAY_MATH.sub("", prose_length.FENCE.sub("", cell))
            for a, b in zip(text.split("\n"), text.split("\n")[1:], strict=False):
                if (re.search(r"[.!?]\s*$", a) and b.strip() and not b.lstrip().startswith(("#", "|", "%", "<", "$$", ">"))
                        and not prose_length.LIST_ITEM.match(b) and not a.lstrip().startswith(("|", "%", "<"))):
                    wrapped.append(f"{page}: {a[-40:]!r} / {b[:40]!r}")
    assert not wrapped, "hard-wrapped paragraphs (store each paragraph on one line):\n" + "\n".join(wrapped[:10])
