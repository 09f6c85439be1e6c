"""The holes of issue 24, each as a planted submission graded beside honest classmates.

Each test grades a small class with the documented command (``python teaching/autograde.py``,
two jobs): the attacker, an honest student (the instructor's answers: full marks) and a wrong
one (zero), and checks that the attack scores what its answers deserve, that every classmate
keeps their grades and that the CSV is complete. Chapter 4 has four graded answers:
my_causal_mask (2 points), masked_softmax (3), the predictions (2), left_real_token_mask (2).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grading import POINTS, WRONG, all_wrong, instructor, with_answers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "04_masking"
bwrap = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")
pytestmark = [bwrap, pytest.mark.slow]


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def grade(tmp: Path, students: dict, *args: str, chapter: str = "04", env: dict | None = None, timeout: float = 600,
          classmates: bool = True):
    """Grade ``students`` ({folder name: notebook, or a function that fills the folder}) and two
    classmates; returns (rows, the finished process)."""
    subs = tmp / "subs"
    subs.mkdir(parents=True, exist_ok=True)
    name = {"04": CHAPTER, "09": "09_capstone_captioning", "05": "05_multihead_attention"}[chapter]
    if classmates:
        students = {**students, "honest": nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)}
        if chapter == "04":
            students["wrong"] = all_wrong()
    for student, what in students.items():
        folder = subs / student if isinstance(student, str) else Path(os.fsdecode(os.fsencode(subs) + b"/" + student))
        folder.mkdir()
        if callable(what):
            what(folder)
        else:
            nbformat.write(what, folder / f"{name}.ipynb")
    out = tmp / "grades.csv"
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--chapters", chapter, "--timeout", "10", "--jobs", "2", *args],
                         capture_output=True, text=True, timeout=timeout, cwd=tmp, env=env, errors="replace")
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return read_rows(out), run


def scores(rows, student, chapter=CHAPTER):
    return {r["cell"]: float(r["score"]) for r in rows if r["student"] == student and r["chapter"] == chapter}


def status(rows, student, cell, chapter=CHAPTER):
    return next(r["status"] for r in rows if r["student"] == student and r["chapter"] == chapter and r["cell"] == cell)


def assert_classmates_intact(rows, chapter=CHAPTER, max_score=sum(POINTS.values())):
    assert scores(rows, "honest", chapter)["TOTAL"] == max_score, [r for r in rows if r["student"] == "honest"]
    if chapter == CHAPTER:
        assert scores(rows, "wrong")["TOTAL"] == 0
        assert set(scores(rows, "wrong")) == {*POINTS, "TOTAL"}


# -- 1. a hang with no end --------------------------------------------------------------------

STALL_READER = ("import sys, time\nsys.modules['__main__'].read_frame = lambda stream: time.sleep(10**6)\n")


def test_1_a_sandbox_that_stops_reading_cannot_stall_the_run(tmp_path):
    """Chapter 9's requests (the model's weights) are larger than a pipe's buffer: the grader's
    write blocks when the sandbox no longer reads. It must time out like any other wait."""
    nb = nbformat.read(ROOT / "notebooks" / "09_capstone_captioning.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "capstone_step")
    cell.source = STALL_READER + cell.source
    rows, run = grade(tmp_path, {"staller": nb}, chapter="09", timeout=240)
    ch = "09_capstone_captioning"
    assert "time limit" in status(rows, "staller", "capstone_step_check", ch)
    assert scores(rows, "staller", ch)["capstone_step_check"] == 0
    assert scores(rows, "staller", ch)["capstone_patches_check"] == 2
    assert_classmates_intact(rows, ch, 10.0)
