"""Sentence length of the book's prose, per page, in both editions.

    python benchmarks/prose_length.py              # a table: every page, both languages
    python benchmarks/prose_length.py --check      # exit 1 when a chapter misses the target
    python benchmarks/prose_length.py --long 10    # also list each chapter's longest sentences
    python benchmarks/prose_length.py --page 05    # one page (a part of its name)
    python benchmarks/prose_length.py --strict     # also the strict count, from the notebooks

The target (issue #25, d2l's level): in every chapter the median sentence has at most 20 words
and at most 5 % of the sentences have more than 40.

What is read: the translation catalogs (``locales/zh_CN/LC_MESSAGES/**/*.po``), one message per
paragraph, list item, heading or caption of a page: ``msgid`` is the English, ``msgstr`` the
Chinese, so both editions are measured on the same units. Left out: messages whose translation
is the message itself (code, math, names) and headings, captions and labels (a message with no
sentence-ending punctuation and at most 12 words).

How a sentence is cut and counted:

- English: math (``$...$``), inline code, link targets and markup are taken out first (a formula
  or a code name counts as one word); a sentence ends at ``.``, ``!``, ``?`` or ``:`` before a
  list, followed by a space and a capital, a digit or an opening bracket (not after "e.g.",
  "i.e.", "cf.", "vs.", "Fig.", "et al."). Words are the runs of non-space characters that
  hold a letter or a digit.
- Chinese: a sentence ends at ``。``, ``！``, ``？`` (or the English marks); its length is counted
  in "words" as one per Han character divided by the book's own ratio of Han characters to
  English words (printed; measured over all the catalogs), plus one per Latin word or number, so
  that the English target applies to the Chinese text unchanged.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGS = ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
MEDIAN_TARGET = 20
LONG = 40
LONG_SHARE_TARGET = 0.05

MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$", re.DOTALL)
CODE = re.compile(r"`[^`]*`")
ROLE = re.compile(r"\{[a-z:]+\}`([^`]*)`")  # {cite}`x`, {doc}`x`: the role's text
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
TAGS = re.compile(r"<[^>]+>")
ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|cf|vs|Fig|al|approx|Eq|etc)\.", re.IGNORECASE)
EN_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+(?=[\"'(\[*_]*[A-Z0-9])|(?<=:)\s*\n")
ZH_END = re.compile(r"(?<=[。！？])|(?<=[.!?])\s+(?=[A-Z0-9])")
WORD = re.compile(r"[^\W_]", re.UNICODE)
HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
LATIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'.,\-]*")


def _plain(text: str) -> str:
    text = ROLE.sub(r"\1", text)
    text = MATH.sub(" X ", text)
    text = CODE.sub(" X ", text)
    text = LINK.sub(r"\1", text)
    text = TAGS.sub(" ", text)
    return text.replace("**", "").replace("\\n", " ")


def _is_heading(msgid: str) -> bool:
    plain = _plain(msgid).strip()
    return not re.search(r"[.!?:]\s*$|[.!?]\s", plain) and len(plain.split()) <= 12


FENCE = re.compile(r"^(`{3,}|:{3,}).*?^\1", re.DOTALL | re.MULTILINE)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.DOTALL)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
STRICT_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+")


def strict_sentence_texts(markdown: str) -> list[str]:
    """The English sentences of one Markdown cell, as plain text, by the strict count."""
    text = DISPLAY_MATH.sub(" ", FENCE.sub(" ", markdown))
    text = LINK.sub(r"\1", ROLE.sub(r"\1", TAGS.sub(" ", text)))
    text = re.sub(r"\b(e\.g|i\.e)\.", r"\1", text)
    lines = [line for line in text.split("\n") if not line.strip().startswith(("#", "|", "%"))]
    joined = " ".join(LIST_ITEM.sub("", line) for line in lines)
    return [" ".join(s.split()) for s in STRICT_END.split(joined) if any(WORD.search(w) for w in s.split())]


def strict_sentences(markdown: str) -> list[int]:
    """The word counts of the English sentences of one Markdown cell, by the strict count."""
    return [len([w for w in s.split() if WORD.search(w)]) for s in strict_sentence_texts(markdown)]


SPACE_END = re.compile(r"(?<=[.!?]) ")


def space_only_sentences(markdown: str) -> list[int]:
    """The word counts of one Markdown cell by the loosest reader's count (issue #37): a sentence
    ends only at ``.``, ``!`` or ``?`` followed by a space, so a line break, a heading, a list
    item or a table row does not end one; math, code and link targets count as one word."""
    text = FENCE.sub(" ", markdown)
    text = MATH.sub(" X ", text)
    text = LINK.sub(r"\1", ROLE.sub(r"\1", TAGS.sub(" ", text)))
    text = CODE.sub("C", text)
    counts = [len([w for w in s.split() if WORD.search(w)]) for s in SPACE_END.split(text)]
    return [n for n in counts if n]


def notebook_markdown(page_filter: str = "") -> dict[str, list[str]]:
    """``{page: [Markdown cell, ...]}`` for every chapter's notebook."""
    import json

    pages = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = f"notebooks/{path.stem}"
        if page_filter in page:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            pages[page] = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return pages


def english_sentence_texts(text: str) -> list[str]:
    """The English sentences of one message, as plain text, cut as documented above."""
    plain = ABBREVIATIONS.sub(lambda m: m.group(1), _plain(text))
    return [" ".join(s.split()) for s in EN_END.split(plain) if any(WORD.search(w) for w in s.split())]


def english_sentences(text: str) -> list[int]:
    """The word counts of the English sentences of one message."""
    return [len([w for w in s.split() if WORD.search(w)]) for s in english_sentence_texts(text)]


def chinese_sentences(text: str, han_per_word: float) -> list[float]:
    """The lengths (in English-word equivalents) of the Chinese sentences of one message."""
    counts = []
    for sentence in ZH_END.split(_plain(text)):
        han = len(HAN.findall(sentence))
        latin = len(LATIN_WORD.findall(HAN.sub(" ", sentence)))
        if han or latin:
            counts.append(han / han_per_word + latin)
    return counts


def messages(page_filter: str = "") -> dict[str, list[tuple[str, str]]]:
    """``{page: [(English, Chinese), ...]}`` for the prose messages of every catalog."""
    from babel.messages.pofile import read_po

    pages = {}
    for po in sorted(CATALOGS.rglob("*.po")):
        page = po.relative_to(CATALOGS).with_suffix("").as_posix()
        if page_filter not in page:
            continue
        with open(po, "rb") as f:
            catalog = read_po(f)
        pairs = []
        for message in catalog:
            if not message.id or not isinstance(message.id, str) or message.string == message.id:
                continue
            if _is_heading(message.id):
                continue
            pairs.append((message.id, message.string or ""))
        pages[page] = pairs
    return pages


def han_per_word(pages) -> float:
    """The book's own ratio: Han characters of the Chinese per word of the English."""
    han = sum(len(HAN.findall(_plain(zh))) for pairs in pages.values() for _, zh in pairs)
    words = sum(sum(english_sentences(en)) for pairs in pages.values() for en, _ in pairs)
    return han / max(words, 1)


def measure(lengths) -> dict:
    lengths = list(lengths)
    if not lengths:
        return {"sentences": 0, "median": 0.0, "mean": 0.0, "long": 0, "long_share": 0.0}
    long = sum(n > LONG for n in lengths)
    return {"sentences": len(lengths), "median": statistics.median(lengths), "mean": statistics.fmean(lengths),
            "long": long, "long_share": long / len(lengths)}


def meets(m: dict) -> bool:
    return m["median"] <= MEDIAN_TARGET and m["long_share"] <= LONG_SHARE_TARGET


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a chapter misses the target")
    parser.add_argument("--long", type=int, default=0, metavar="K", help="list each page's K longest sentences")
    parser.add_argument("--page", default="", help="only pages whose name contains this")
    parser.add_argument("--strict", action="store_true", help="also the strict count of the chapters (see above)")
    args = parser.parse_args(argv)
    every_page = messages()
    ratio = han_per_word(every_page)
    pages = {p: pairs for p, pairs in every_page.items() if args.page in p}
    print(f"Sentence length in words (Chinese: Han characters / {ratio:.2f}, the book's ratio, "
          f"plus Latin words); target: median <= {MEDIAN_TARGET}, <= {LONG_SHARE_TARGET:.0%} over {LONG}")
    header = f"{'page':<34} {'EN n':>5} {'med':>5} {'>40':>6}   {'ZH n':>5} {'med':>5} {'>40':>6}"
    print(header)
    print("-" * len(header))
    failing = []
    for page, pairs in pages.items():
        en = measure(n for m, _ in pairs for n in english_sentences(m))
        zh = measure(n for _, s in pairs for n in chinese_sentences(s, ratio))
        ok = meets(en) and meets(zh)
        chapter = page.startswith("notebooks/")
        if chapter and not ok:
            failing.append(page)
        mark = "" if ok else ("  <- misses" if chapter else "  (not a chapter)")
        print(f"{page:<34} {en['sentences']:5d} {en['median']:5.1f} {en['long_share']:6.1%}   "
              f"{zh['sentences']:5d} {zh['median']:5.1f} {zh['long_share']:6.1%}{mark}")
        if args.long:
            sentences = [x for m, _ in pairs for x in english_sentence_texts(m)]
            for x, n in sorted(((x, english_sentences(x)[0]) for x in sentences), key=lambda xn: -xn[1])[: args.long]:
                print(f"    {n:3d}  {x[:160]}")
    if args.strict:
        print("\nStrict count (the notebooks' Markdown, English); target as above")
        print(f"{'page':<34} {'n':>5} {'med':>5} {'>40':>6}")
        for page, cells in notebook_markdown(args.page).items():
            m = measure(n for cell in cells for n in strict_sentences(cell))
            if not meets(m):
                failing.append(f"{page} (strict)")
            print(f"{page:<34} {m['sentences']:5d} {m['median']:5.1f} {m['long_share']:6.1%}"
                  + ("" if meets(m) else "  <- misses"))
            if args.long:
                sentences = [x for cell in cells for x in strict_sentence_texts(cell)]
                for x, n in sorted(((x, strict_sentences(x)[0]) for x in sentences), key=lambda xn: -xn[1])[: args.long]:
                    print(f"    {n:3d}  {x[:200]}")
    if args.check and failing:
        print(f"{len(failing)} chapter(s) miss the target: {', '.join(failing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
