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
    if classmates:  # written first: an attacker may link to them
        mates = {"honest": nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)}
        if chapter == "04":
            mates["wrong"] = all_wrong()
        students = {**mates, **students}
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


# -- 2. a reply that costs the grader its memory ----------------------------------------------

AMPLIFY = ("import json, struct, sys\n"
           "def _bomb(value, _n=16 * 2**20):\n"
           "    node = {'$': 'tensor', 'dtype': 'uint8', 'shape': [_n], 'offset': 0, 'nbytes': _n}\n"
           "    h = json.dumps({'$': 'tuple', 'v': [node] * 64}).encode()\n"
           "    return struct.pack('>Q', len(h)) + h + bytes(_n)\n"
           "sys.modules['wire'].encode = _bomb\n")


def test_2_a_reply_that_would_decode_to_a_gigabyte_is_refused(tmp_path):
    """16 MB of bytes, referenced 64 times: 1 GB in the grader if it copied them per reference."""
    rows, run = grade(tmp_path, {"amplifier": with_answers(masking_left=AMPLIFY + "left_real_token_mask = None\n")})
    assert "unreadable reply" in status(rows, "amplifier", "masking_left_check"), rows
    assert scores(rows, "amplifier") == {**POINTS, "masking_left_check": 0.0, "TOTAL": 7.0}
    assert_classmates_intact(rows)


# -- 3. one line that breaks the CSV ------------------------------------------------------------

def test_3_a_lone_surrogate_or_a_latin1_name_cannot_break_the_csv(tmp_path):
    def latin1_file(folder):
        nbformat.write(instructor(), Path(os.fsdecode(os.fsencode(folder) + b"/04_masking_\xe9t\xe9.ipynb")))

    rows, run = grade(tmp_path, {"surrogate": with_answers(masking_causal='raise RuntimeError("\\ud800")\n'),
                                 b"jos\xe9": instructor(), "latin1-file": latin1_file})
    assert run.returncode == 0, run.stderr[-3000:]
    assert scores(rows, "surrogate") == {**POINTS, "masking_causal_check": 0.0, "TOTAL": 7.0}
    assert "RuntimeError" in status(rows, "surrogate", "masking_causal_check")
    assert scores(rows, "jos\\xe9")["TOTAL"] == 9.0, {r["student"] for r in rows}
    assert scores(rows, "latin1-file")["TOTAL"] == 9.0
    assert_classmates_intact(rows)
    assert "wrote" in run.stdout and "student-chapters" in run.stdout


# -- 4. links are not followed --------------------------------------------------------------------

def _link(target):
    def fill(folder):
        (folder / f"{CHAPTER}.ipynb").symlink_to(target(folder))
    return fill


def _linked_folder(folder):
    folder.rmdir()
    folder.symlink_to(folder.parent / "honest")


def _hard_link(target):
    def fill(folder):
        os.link(target(folder), folder / f"{CHAPTER}.ipynb")
    return fill


def test_4_links_are_refused_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET: the exam's answers\n", encoding="utf-8")
    attackers = {
        "link-to-instructor": _link(lambda f: ROOT / "notebooks" / f"{CHAPTER}.ipynb"),
        "link-to-classmate": _link(lambda f: Path("..") / "honest" / f"{CHAPTER}.ipynb"),
        "link-to-a-file": _link(lambda f: secret),
        "hard-link-outside": _hard_link(lambda f: outside),
        "linked-folder": _linked_folder,
    }
    outside = tmp_path / f"{CHAPTER}.ipynb"  # e.g. the instructor's notebook, on the same disk
    nbformat.write(instructor(), outside)
    rows, run = grade(tmp_path, {**attackers, "hard-link-to-classmate": _hard_link(
        lambda f: f.parent / "honest" / f"{CHAPTER}.ipynb")})
    assert run.returncode == 0, run.stderr[-3000:]
    # a hard link between two folders is a copy (the grader cannot tell which is the original):
    # graded for both, and both TOTAL rows say so
    assert scores(rows, "hard-link-to-classmate")["TOTAL"] == 9.0
    assert "hard link" in status(rows, "hard-link-to-classmate", "TOTAL") and "honest" in \
        status(rows, "hard-link-to-classmate", "TOTAL")
    assert "hard-link-to-classmate" in status(rows, "honest", "TOTAL")
    for student in attackers:
        assert scores(rows, student) == {**{c: 0.0 for c in POINTS}, "TOTAL": 0.0}, (student, scores(rows, student))
        why = " ".join(r["status"] for r in rows if r["student"] == student)
        assert "refused" in why, (student, why)
        assert "SECRET" not in why
    assert "TOP SECRET" not in run.stdout + run.stderr
    assert_classmates_intact(rows)


# -- 9. what a name can do -----------------------------------------------------------------------

FAKE_LINE = "evil\n\x1b[2K\rhonest               04_masking                   9 \u2215 9   4 of 4 checks passed\x1b[0m"


def test_9_names_cannot_be_formulas_or_fake_terminal_lines(tmp_path):
    def formula_file(folder):
        nbformat.write(all_wrong(), folder / f"{CHAPTER}.ipynb")
        (folder / "=HYPERLINK(1).ipynb").write_text("{}", encoding="utf-8")

    attackers = {'=HYPERLINK("x","ok")': all_wrong(), "@SUM(1+1)": all_wrong(), "+1": formula_file,
                 "-2+3": all_wrong(), FAKE_LINE: all_wrong()}
    rows, run = grade(tmp_path, attackers)
    assert run.returncode == 0, run.stderr[-3000:]
    for r in rows:
        for value in r.values():
            assert not value.lstrip(" ").startswith(("=", "+", "-", "@")), r
            assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in value), r
    assert {r["student"] for r in rows} >= {"'=HYPERLINK(\"x\",\"ok\")", "'@SUM(1+1)", "'+1", "'-2+3",
                                            "evil\\n\\x1b[2K\\rhonest               04_masking                   "
                                            "9 \u2215 9   4 of 4 checks passed\\x1b[0m"}
    totals = {r["student"]: float(r["score"]) for r in rows if r["cell"] == "TOTAL"}
    assert len(totals) == len(attackers) + 2 and sum(totals.values()) == totals["honest"] == 9.0, totals
    output = run.stdout + run.stderr
    assert "\x1b" not in output and "\r" not in output
    assert sum(line.startswith("honest ") for line in run.stdout.splitlines()) == 1, run.stdout
    assert_classmates_intact(rows)


# -- 10. honest setups that fail --------------------------------------------------------------------

def test_10_a_venv_inside_the_repository_grades(tmp_path):
    """The instructor's venv at ``repo/.venv`` (the name .gitignore suggests) is inside the
    repository, which the sandbox hides: its Python must stay visible all the same."""
    venv = ROOT / ".venv-grading-test"
    created = not venv.exists()
    if created:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    try:
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
        python = str(venv / "bin" / "python")
        assert subprocess.run([python, "-c", "import sys; assert sys.prefix != sys.base_prefix"]).returncode == 0
        subs = tmp_path / "subs"
        for student, nb in {"honest": instructor(), "wrong": all_wrong()}.items():
            (subs / student).mkdir(parents=True)
            nbformat.write(nb, subs / student / f"{CHAPTER}.ipynb")
        run = subprocess.run([python, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out",
                              str(tmp_path / "g.csv"), "--chapters", "04", "--jobs", "2"],
                             capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        assert_classmates_intact(read_rows(tmp_path / "g.csv"))
    finally:
        if created:
            import shutil

            shutil.rmtree(venv)


def test_10_the_timeout_counts_the_answer_not_the_start_of_the_sandbox(tmp_path):
    """Starting bwrap, importing torch and running the setup cells takes seconds on a busy
    machine; a 1.5 s --timeout still lets correct answers pass and stops a loop."""
    rows, run = grade(tmp_path, {"loops": with_answers(masking_causal="while True:\n    pass\n")}, "--timeout", "1.5")
    assert "time limit" in status(rows, "loops", "masking_causal_check")
    assert scores(rows, "loops") == {**POINTS, "masking_causal_check": 0.0, "TOTAL": 7.0}
    assert_classmates_intact(rows)
