"""What the teaching tools share: the chapters, and nbgrader's generate_assignment (the student
edition) in a throw-away nbgrader course directory. Each chapter notebook is one nbgrader
assignment of one notebook, both named after the chapter (`04_masking`). Grading does not use
nbgrader: see autograde.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CONFIG = Path(__file__).resolve().parent / "nbgrader_config.py"


def all_chapters() -> list[str]:
    """Every chapter notebook's name, in book order."""
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def nbgrader_cells(chapter: str) -> list[dict]:
    """The cells of a chapter that carry nbgrader metadata."""
    cells = nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4).cells
    return [c for c in cells if "nbgrader" in c.get("metadata", {})]


def chapters_with_exercises() -> list[str]:
    return [ch for ch in all_chapters() if nbgrader_cells(ch)]


def is_graded(cell) -> bool:
    """True for an autograded cell: a code cell that nbgrader grades (a check cell)."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade")) and cell["cell_type"] == "code"


def graded_cells(chapter: str) -> dict[str, float]:
    """``{grade_id: points}`` of the autograded cells (the code cells that check answers) of a
    chapter, in notebook order. Written answers are manually graded cells worth 0 points
    unless a teacher gives them points; they are not autograded."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for c in nbgrader_cells(chapter) if is_graded(c)}


def exercise_points(chapter: str) -> dict[str, float]:
    """``{exercise label: autograded points}`` of a chapter's exercises, in order: the points of
    the graded cells (:func:`graded_cells`) after the exercise's text and before the next
    exercise's. 0 for an exercise that is not autograded (the experiment). The book's teaching
    guide draws its table from this (book/_ext/chapters.py)."""
    cells = nbformat.read(NOTEBOOKS / f"{chapter}.ipynb", as_version=4).cells
    points: dict[str, float] = {}
    label = None
    for cell in cells:
        found = cell.get("metadata", {}).get("exercise", {}).get("label")
        if found and cell["cell_type"] == "markdown":
            label = found
            points[label] = 0
        elif label is not None and is_graded(cell):
            points[label] += cell["metadata"]["nbgrader"]["points"]
    return points


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
    # nbgrader runs tools of its own (alembic) by name: find them beside this Python, whatever PATH says
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    run_env = {**os.environ, "PATH": path, **(env or {})}
    result = subprocess.run(cmd, cwd=course, env=run_env, capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    if "Exception while loading config file" in result.stderr:  # nbgrader logs it and goes on without
        raise RuntimeError(f"nbgrader could not load {course / 'nbgrader_config.py'}:\n{result.stderr}")


def unfold_answer_cells(src: Path, dest: Path) -> None:
    """The student edition as students need it: the answer cells (nbgrader's stubs) open, with
    no "Solution (folded)" cue before them (the book's notebooks fold their solutions)."""
    import nbformat  # noqa: PLC0415

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import exercise_markdown  # noqa: PLC0415

    nb = nbformat.read(src, as_version=4)
    exercise_markdown.unfold_for_students(nb)
    nbformat.write(nb, dest)


def generate_student_notebooks(chapters, out: Path, course: Path, db: bool = False, unfold: bool = True) -> list[Path]:
    """The student edition of ``chapters`` (solutions replaced by stubs, hidden tests removed,
    made by ``nbgrader generate_assignment``), written to ``out/<chapter>.ipynb``."""
    make_course(course, chapters)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for ch in chapters:
        nbgrader(["generate_assignment", ch, "--force", *([] if db else ["--no-db"])], course)
        release = course / "release" / ch / f"{ch}.ipynb"
        if unfold:  # a handout; the student book (unfold=False) needs the cues to leave the stubs out
            unfold_answer_cells(release, out / f"{ch}.ipynb")
        else:
            shutil.copy(release, out / f"{ch}.ipynb")
        written.append(out / f"{ch}.ipynb")
    return written
