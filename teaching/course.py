"""What teaching/student_edition.py, autograde.py and student_book.py share: the chapters,
a throw-away nbgrader course directory, and nbgrader's two steps (generate_assignment and
autograde). Each chapter notebook is one nbgrader assignment of one notebook, both named
after the chapter (`04_masking`)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CONFIG = Path(__file__).resolve().parent / "nbgrader_config.py"


def all_chapters() -> list[str]:
    """Every chapter notebook's name, in book order."""
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def nbgrader_cells(chapter: str) -> list[dict]:
    """The cells of a chapter that carry nbgrader metadata."""
    cells = json.loads((NOTEBOOKS / f"{chapter}.ipynb").read_text())["cells"]
    return [c for c in cells if "nbgrader" in c.get("metadata", {})]


def chapters_with_exercises() -> list[str]:
    return [ch for ch in all_chapters() if nbgrader_cells(ch)]


def graded_cells(chapter: str) -> dict[str, float]:
    """``{grade_id: points}`` of the autograded cells (the code cells that check answers) of a
    chapter, in notebook order. Written answers are manually graded cells worth 0 points
    unless a teacher gives them points; they are not autograded."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for c in nbgrader_cells(chapter) if c["metadata"]["nbgrader"].get("grade") and c["cell_type"] == "code"}


def resolve(chapters) -> list[str]:
    """Chapter names from what a user typed: `04`, `04_masking` or `04_masking.ipynb`."""
    known = all_chapters()
    out = []
    for given in chapters:
        stem = Path(given).stem
        matches = [ch for ch in known if ch == stem or ch.split("_", 1)[0] == stem]
        if len(matches) != 1:
            raise SystemExit(f"unknown chapter {given!r}; the chapters are: {', '.join(known)}")
        out.append(matches[0])
    return out


def make_course(course: Path, chapters) -> Path:
    """An nbgrader course directory with each chapter as the source of one assignment."""
    course.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIG, course / "nbgrader_config.py")
    for ch in chapters:
        (course / "source" / ch).mkdir(parents=True, exist_ok=True)
        shutil.copy(NOTEBOOKS / f"{ch}.ipynb", course / "source" / ch / f"{ch}.ipynb")
    return course


def nbgrader(args: list[str], course: Path, env: dict | None = None) -> None:
    """Run one nbgrader command in ``course`` (which holds nbgrader_config.py)."""
    cmd = [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"]
    run_env = {**os.environ, **(env or {})}
    result = subprocess.run(cmd, cwd=course, env=run_env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    if "Exception while loading config file" in result.stderr:  # nbgrader logs it and goes on without
        raise RuntimeError(f"nbgrader could not load {course / 'nbgrader_config.py'}:\n{result.stderr}")


def generate_student_notebooks(chapters, out: Path, course: Path, db: bool = False) -> list[Path]:
    """The student edition of ``chapters`` (solutions replaced by stubs, hidden tests removed,
    made by ``nbgrader generate_assignment``), written to ``out/<chapter>.ipynb``."""
    make_course(course, chapters)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for ch in chapters:
        nbgrader(["generate_assignment", ch, "--force", *([] if db else ["--no-db"])], course)
        shutil.copy(course / "release" / ch / f"{ch}.ipynb", out / f"{ch}.ipynb")
        written.append(out / f"{ch}.ipynb")
    return written


def autograde(submissions: Path, course: Path, chapters=None, exercise_timeout: int | None = None,
              jobs: int = 1) -> list[dict]:
    """Autograde ``submissions/<student>/<chapter>.ipynb`` against the instructor notebooks.

    Each chapter is graded in its own nbgrader course folder ``course/<chapter>`` (``jobs``
    chapters at a time). Returns one row per student, chapter and graded cell (``student,
    chapter, cell, score, max_score``) plus a ``TOTAL`` row per student and chapter.
    """
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir())
    found = {nb.stem for s in students for nb in (submissions / s).glob("*.ipynb")}
    chapters = [ch for ch in (chapters or all_chapters()) if ch in found]
    if not students or not chapters:
        raise SystemExit(f"no submissions found: expected {submissions}/<student>/<chapter>.ipynb, "
                         f"e.g. {submissions}/alice/04_masking.ipynb")
    env = {} if exercise_timeout is None else {"COURSE_EXERCISE_CELL_TIMEOUT": str(exercise_timeout)}

    def grade_chapter(ch: str) -> list[dict]:
        chapter_course = make_course(course / ch, [ch])
        nbgrader(["generate_assignment", ch, "--force"], chapter_course)  # records the assignment in the gradebook
        handed_in = [s for s in students if (submissions / s / f"{ch}.ipynb").exists()]
        for s in handed_in:
            dest = chapter_course / "submitted" / s / ch
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(submissions / s / f"{ch}.ipynb", dest / f"{ch}.ipynb")
        nbgrader(["autograde", ch, "--create", "--force"], chapter_course, env)
        return read_grades(chapter_course, ch, handed_in)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        per_chapter = list(pool.map(grade_chapter, chapters))
    return [row for rows in per_chapter for row in rows]


def read_grades(chapter_course: Path, chapter: str, students) -> list[dict]:
    """The autograded cells' scores of ``chapter`` from an nbgrader course's gradebook."""
    from nbgrader.api import Gradebook

    order = list(graded_cells(chapter))
    rows = []
    with Gradebook(f"sqlite:///{chapter_course / 'gradebook.db'}") as gb:
        for s in students:
            sub = gb.find_submission_notebook(chapter, chapter, s)
            grades = sorted((g for g in sub.grades if g.name in order), key=lambda g: order.index(g.name))
            for g in grades:
                rows.append({"student": s, "chapter": chapter, "cell": g.name, "score": g.score, "max_score": g.max_score})
            rows.append({"student": s, "chapter": chapter, "cell": "TOTAL", "score": sum(g.score for g in grades),
                         "max_score": sum(g.max_score for g in grades)})
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "chapter", "cell", "score", "max_score"])
        writer.writeheader()
        writer.writerows(rows)
