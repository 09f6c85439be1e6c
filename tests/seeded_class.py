"""One autograde run per grading seed for every test module that grades a class under a fixed
seed (``tests/test_honest_answers.py``, ``tests/test_hidden_inputs.py``).

A module enrols its students at import (:func:`enrol`); the ``seeded_grades`` fixture
(``tests/conftest.py``) gives ``rows(seed)``, and the first call for a seed grades every
student enrolled for it in one run of the real grader (``teaching/autograde.py``: bubblewrap
sandboxes, ``--timeout 60 --jobs 2``, the seed in ``COMPANION_GRADING_SEED``), the only
options both modules used. Each student-chapter is graded in a sandbox of its own whatever
else the run holds, so a test reads the same rows as from a run of its own students; one run
per seed instead of one per module and seed saves a start of the grader (its processes, the
companion copies of every chapter) and the idle end of a two-job run.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT, JOBS = 60, 2

# seed -> student -> a function returning {chapter name: notebook}, called when the seed is graded
ENROLLED: dict[int, dict[str, Callable[[], dict[str, nbformat.NotebookNode]]]] = {}


def enrol(seed: int, student: str, notebooks: Callable[[], dict[str, nbformat.NotebookNode]]) -> None:
    """Grade ``student``'s ``notebooks()`` in the run of grading seed ``seed``."""
    students = ENROLLED.setdefault(seed, {})
    if students.get(student, notebooks) is not notebooks:
        raise ValueError(f"two modules enrol a student {student!r} under seed {seed}: name them apart")
    students[student] = notebooks


def autograde(tmp: Path, seed: int) -> list[dict]:
    """The CSV's rows of one run grading every student enrolled for ``seed``."""
    subs = tmp / "subs"
    for student, notebooks in ENROLLED[seed].items():
        (subs / student).mkdir(parents=True)
        for name, nb in notebooks().items():
            nbformat.write(nb, subs / student / f"{name}.ipynb")
    out = tmp / "grades.csv"
    env = {**os.environ, "COMPANION_GRADING_SEED": str(seed), "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--timeout", str(TIMEOUT), "--jobs", str(JOBS)], capture_output=True, text=True,
                         timeout=3600, env=env, encoding="utf-8", errors="replace", cwd=tmp)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))
