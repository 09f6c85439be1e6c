"""Find the number ranges that a chapter's prose attributes to seeds or runs, and check that
each is tied to the code: asserted by a cell of the same notebook, or linked to a dated
results file of ``benchmarks/results/``.

A range typed in from an earlier run drifts the moment the code changes, and a reader cannot
tell it from a measurement. This check makes such a range fail the tests instead:

    python tools/prose_claims.py                 # every chapter: the ranges and how each is tied
    python tools/prose_claims.py --untied        # only the ranges no cell asserts

A range is *tied* when

- an ``assert`` statement of a code cell (or a call of a function whose name contains
  ``assert`` or ``check``) holds both of its ends as numbers (``7 % to 22 %`` is tied by an
  assert holding 7 and 22, or 0.07 and 0.22), or
- its sentence links to a file of ``benchmarks/results/`` (a dated, labelled measurement of
  ``benchmarks/seed_sweep.py`` or another benchmark).

A range is *attributed to seeds or runs* when its sentence (or the list that the sentence
introduces) speaks of seeds, runs or a sweep. The seed numbers themselves ("seeds 0 to 5") and
chapter numbers are not claims. Math (``$...$``) is left out: it states formulas, not results.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UNIT = r"(?:\s*(?:%|×|x\b|times\b|nats?\b|bits?\b|ms\b|s\b|dB\b|points?\b))?"
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
RANGE = re.compile(NUMBER + r"(" + UNIT + r")\s*(?:to|–|—|-)\s*" + NUMBER + r"(" + UNIT + r")")
ATTRIBUTION = re.compile(r"\bseeds?\b|\bruns?\b|\bsweep\b|`seed`", re.IGNORECASE)
# words right before a range that make it a label, not a measured result
LABEL_BEFORE = re.compile(
    r"(?:\bseeds?|`seed`\s*=|\bchapters?|\bsections?|\bparts?|\bexercises?|\blines?|\bcells?|"
    r"\bsteps?\s+from|\bfigures?|\btables?|\bpages?|\bversions?|\bN\s*=|\blayers?)\s*$",
    re.IGNORECASE,
)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\(([^)]*)\)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*\[])|\n\s*\n|\n\s*[*-]\s+|\n\s*\d+\.\s+")


@dataclass(frozen=True)
class Claim:
    """One range of one chapter's prose: its notebook, the text of the range and its sentence."""

    notebook: str
    text: str  # e.g. "7 % to 22 %"
    low: float
    high: float
    percent: bool
    sentence: str
    tied_by: str  # "assert", "results file" or "" (untied)


def _number(s: str) -> float:
    return float(s.replace(",", ""))


def asserted_numbers(source: str) -> set[float]:
    """The numbers that stand in the assert statements (and in calls of ``*assert*`` or
    ``*check*`` functions) of one code cell. Cells that do not parse (IPython magics) are
    read line by line, skipping the lines that do not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            return set()
    found: set[float] = set()
    for node in ast.walk(tree):
        checking = isinstance(node, ast.Assert)
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            checking = "assert" in name or "check" in name
        if checking:
            for leaf in ast.walk(node):
                if isinstance(leaf, ast.Constant) and isinstance(leaf.value, (int, float)) \
                        and not isinstance(leaf.value, bool):
                    found.add(float(leaf.value))
    return found


def _close(value: float, numbers: set[float]) -> bool:
    return any(abs(value - n) <= 1e-9 * max(1.0, abs(value)) for n in numbers)


def _sentences(markdown: str) -> list[str]:
    text = MATH.sub(" ", markdown)
    return [s.strip() for s in SENTENCE_END.split(text) if s and s.strip()]


def claims(notebook: Path) -> list[Claim]:
    """Every range that the notebook's Markdown attributes to seeds or runs, with its tie."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    numbers: set[float] = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            numbers |= asserted_numbers(cell.source)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        paragraph_attributed = False
        for sentence in _sentences(cell.source):
            plain = CODE.sub(lambda m: m.group(0) if "seed" in m.group(0) else " ", sentence)
            attributed = bool(ATTRIBUTION.search(plain))
            # a sentence ending in ":" introduces a list: its items inherit the attribution
            if attributed and plain.rstrip().endswith(":"):
                paragraph_attributed = True
            if not (attributed or paragraph_attributed):
                continue
            links = LINK_TARGET.findall(sentence)
            for m in RANGE.finditer(plain):
                if LABEL_BEFORE.search(plain[: m.start()]):
                    continue
                low, high = _number(m.group(1)), _number(m.group(3))
                if low >= high:  # "2-dimensional", "3-4" read backwards: not a range of results
                    continue
                percent = "%" in (m.group(2) + m.group(4))
                if _close(low, numbers) and _close(high, numbers) or percent and _close(
                        low / 100, numbers) and _close(high / 100, numbers):
                    tie = "assert"
                elif any("benchmarks/results/" in link for link in links):
                    tie = "results file"
                else:
                    tie = ""
                found.append(Claim(notebook.name, m.group(0).strip(), low, high, percent,
                                   " ".join(sentence.split()), tie))
    return found


def all_claims(root: Path = ROOT) -> list[Claim]:
    return [c for nb in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")) for c in claims(nb)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--untied", action="store_true", help="list only the ranges no cell asserts")
    args = parser.parse_args(argv)
    found = all_claims()
    shown = [c for c in found if not c.tied_by] if args.untied else found
    for c in shown:
        print(f"{c.notebook}: {c.text!r} [{c.tied_by or 'UNTIED'}]\n    {c.sentence[:200]}")
    untied = sum(not c.tied_by for c in found)
    print(f"{len(found)} ranges attributed to seeds or runs; {untied} untied")
    return 1 if untied else 0


if __name__ == "__main__":
    sys.exit(main())
