"""Put the chapters' Exercises sections in the form every notebook front end renders.

    python tools/exercise_markdown.py                 # every notebooks/*.ipynb, in place
    python tools/exercise_markdown.py notebooks/09_*.ipynb
    python tools/exercise_markdown.py --check         # exit 1 if a notebook is not converted
    python tools/exercise_markdown.py --prose         # also the chapter's prose: {cite} and ../book links

Converts sphinx-exercise's MyST (```{exercise}```, ```{solution-start}```/```{solution-end}```)
in the *Exercises* section to plain Markdown with folded solutions and absolute links to the
published book, and (re)applies the fold metadata; see ``book/_ext/exercise_markdown.py``,
which also turns the plain form back into MyST when the book is built. Only the Markdown
cells of the Exercises sections (with --prose: every Markdown cell) and the metadata of their
solution cells change; code cells' sources and nbgrader metadata are left as they are. Safe
to re-run (on merged or new chapters): a converted notebook stays as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import exercise_markdown as em  # noqa: E402


def convert(path: Path, url: str, prose=None):
    """Convert one notebook in memory: (whether it changed, exercises converted, the notebook)."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    converted = em.to_plain(nb, url, prose)
    return nbformat.writes(nb) != before, converted, nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--prose", action="store_true",
                        help="also turn {cite} roles and ../book/ links of the prose cells into plain links")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook would change")
    args = parser.parse_args(argv)
    url = em.book_url(em.read_config(ROOT))
    prose = em.citation_names(ROOT / "book" / "references.bib") if args.prose else None
    changed = []
    for path in args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb")):
        differs, converted, nb = convert(path, url, prose)
        if differs:
            changed.append(path)
            if not args.check:
                nbformat.validate(nb)
                nbformat.write(nb, path)
        print(f"{path.name}: {converted} exercises converted, {'changed' if differs else 'unchanged'}")
    if args.check and changed:
        print(f"not in the plain form: {', '.join(p.name for p in changed)} (run python tools/exercise_markdown.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
