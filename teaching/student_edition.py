"""Write the student edition of chapter notebooks: solutions replaced by `# YOUR CODE HERE` /
`YOUR ANSWER HERE` stubs and hidden tests removed, by `nbgrader generate_assignment --no-db`.

    python -m teaching.student_edition                      # every chapter, into handout/
    python -m teaching.student_edition 04 05 --out handout/
    python -m teaching.student_edition 04 --students roster.csv    # one handout per student
    python -m teaching.student_edition 04 --test-submission submissions/   # filled in, to try the grader

`--students roster.csv` (a CSV with a `student` column, or one id per line) writes
`<out>/<student>/<chapter>.ipynb` with `student_id = "<student>"` in the parameters cell, so
that each student's predict-then-check exercises ask about their own numbers; name the
students' submission folders by the same ids. `--test-submission DIR` writes
`DIR/<student>/<chapter>.ipynb` filled in with the instructor's solutions (student `test` unless
`--students` names others): grade it with `python -m teaching.autograde DIR` to check the
grader on your machine (every graded cell should score full points).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python teaching/student_edition.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "teaching"  # noqa: A001

import nbformat  # noqa: E402

from teaching import course  # noqa: E402


def read_roster(path: Path) -> list[str]:
    """Student ids from a CSV with a `student` column, or from a file of one id per line."""
    text = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.DictReader(text))
    if rows and "student" in rows[0]:
        ids = [r["student"].strip() for r in rows]
    else:
        ids = [line.strip() for line in text]
    ids = [i for i in ids if i]
    bad = [i for i in ids if "/" in i or i.startswith(".")]
    if bad or not ids:
        raise SystemExit(f"{path}: student ids must be non-empty folder names, got {bad or 'none'}")
    return ids


def set_student_id(notebook: Path, student: str, dest: Path) -> None:
    """A copy of ``notebook`` whose parameters cell sets ``student_id = "<student>"``."""
    nb = nbformat.read(notebook, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = [line for line in params.source.splitlines() if not line.startswith("student_id =")]
    params.source = "\n".join([*lines, f"student_id = {student!r}  # set by your instructor"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="chapters (e.g. 04 or 04_masking); default: all")
    parser.add_argument("--out", type=Path, default=Path("handout"), help="folder for the student notebooks (default: %(default)s)")
    parser.add_argument("--students", type=Path, default=None, help="a roster: one handout per student id")
    parser.add_argument("--test-submission", type=Path, default=None, metavar="DIR",
                        help="write filled-in submissions (the instructor's solutions) into DIR/<student>/ instead")
    parser.add_argument("--notebooks", type=Path, default=None,
                        help="the instructor notebooks (default: the course's notebooks/), e.g. your private exercises")
    args = parser.parse_args(argv)
    if args.notebooks:
        course.NOTEBOOKS = args.notebooks.resolve()
    chapters = course.resolve(args.chapters) if args.chapters else course.chapters_with_exercises()
    students = read_roster(args.students) if args.students else None
    t0 = time.perf_counter()
    written = []
    if args.test_submission:
        for student in students or ["test"]:
            for ch in chapters:
                dest = args.test_submission / student / f"{ch}.ipynb"
                set_student_id(course.NOTEBOOKS / f"{ch}.ipynb", student, dest)
                written.append(dest)
    else:
        with tempfile.TemporaryDirectory(prefix="nbgrader-course-") as tmp:
            plain = course.generate_student_notebooks(chapters, Path(tmp) / "out", Path(tmp) / "course")
            for path in plain:
                for student in students or [None]:
                    dest = args.out / (student or "") / path.name
                    if student is None:
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(path.read_bytes())
                    else:
                        set_student_id(path, student, dest)
                    written.append(dest)
    for path in written:
        print(path)
    print(f"{len(written)} notebook(s) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
