"""What the red-team tests share (``test_round4_holes.py`` to ``test_round6_holes.py``): the
chapters, an attack's answers (``tests/attacks/<folder>/chNN_answers.py``, a dict ``ANSWERS``
from grade id to the answer cell's source), and a student's notebook built from the
instructor's with those answers in place."""

from __future__ import annotations

import runpy
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = ROOT / "tests" / "attacks"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def notebook(chapter: str) -> Path:
    return next(p for p in NOTEBOOKS if p.name.startswith(chapter + "_"))


def attack(path: str) -> dict[str, str]:
    return runpy.run_path(str(ATTACKS / path))["ANSWERS"]


def write_submission(subs: Path, student: str, chapter: str, file: str | None) -> None:
    """``subs/student/<chapter's notebook>``: the instructor's notebook with the answer cells of
    the attack ``file`` (none: the instructor's answers, an honest student) in place."""
    path = notebook(chapter)
    nb = nbformat.read(path, as_version=4)
    table = attack(file) if file else {}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in table:
            cell.source = table[gid]
    (subs / student).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, subs / student / path.name)
