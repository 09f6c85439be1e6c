"""Grades a student cannot forge: planted submissions of chapter 4 that cheat, crash, loop,
flood, tamper and read files, graded with the documented command, each scoring what its
honest equivalent scores; the CSV has every row; nothing outside the sandboxes changes.

One autograde run (``python teaching/autograde.py``, two jobs) grades every planted student;
the tests below read its CSV. Chapter 4 has four graded answers: my_causal_mask (2 points),
masked_softmax (3), the predictions (2), left_real_token_mask (2).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "04_masking"
POINTS = {"masking_causal_check": 2.0, "masking_softmax_check": 3.0, "masking_predict_check": 2.0,
          "masking_left_check": 2.0}
ANSWERS = {"masking_causal": "masking_causal_check", "masking_softmax": "masking_softmax_check",
           "masking_predict": "masking_predict_check", "masking_left": "masking_left_check"}

bwrap = needs_bwrap

WRONG = {  # wrong answers: an honest student with these scores 0 on each
    "masking_causal": "def my_causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).triu()\n",
    "masking_softmax": "def masked_softmax(scores, mask):\n    return torch.softmax(scores, dim=-1)\n",
    "masking_predict": "predicted_shape = (5, 5)\npredicted_allowed = 9\n",
    "masking_left": "def left_real_token_mask(lengths, max_len):\n    return torch.ones(len(lengths), max_len).bool()\n",
}


def instructor() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / f"{CHAPTER}.ipynb", as_version=4)


def answer_cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def with_answers(**sources) -> nbformat.NotebookNode:
    """The instructor notebook (right answers) with some answer cells' sources replaced."""
    nb = instructor()
    for grade_id, src in sources.items():
        answer_cell(nb, grade_id).source = src
    return nb


def all_wrong(**extra) -> nbformat.NotebookNode:
    return with_answers(**{**WRONG, **extra})


def tampered(nb, fn):
    fn(nb)
    return nb


def tag_checks_skip(nb):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade"):
            c.metadata.setdefault("tags", []).append("skip-execution")


def move_heading(nb):
    heading = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Exercises"))
    nb.cells.remove(heading)
    nb.cells.append(heading)


def break_check_metadata(nb):
    for c in nb.cells:
        m = c.metadata.get("nbgrader", {})
        if m.get("grade"):
            m["grade_id"] = m["grade_id"] + "_renamed"
            m["grade"] = False
            c.source = "print('correct')"


def forge_outputs(nb):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade"):
            c.outputs = [nbformat.v4.new_output("stream", text="correct\n")]
            c.execution_count = 1
    nb.metadata["kernelspec"] = {"name": "bash", "display_name": "Bash", "language": "bash"}


# Each planted student: (notebook, {check cell: expected score}); None means "all of POINTS".
NO_SIGINT_LOOP = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
CHEAT_CHECKS = ("import companion.checks as cc\n"
                "check_close = check_equal = check_attention_weights = lambda *a, **k: None\n"
                "for name in ('check_close', 'check_equal', 'check_shape', 'check_attention_weights'):\n"
                "    getattr(cc, name).__code__ = (lambda *a, **k: None).__code__\n"
                "import builtins\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
                "import sys\nsys.modules['companion.checks'] = type(sys)('fake')\n")
FIND_SOLUTIONS = ("import companion, glob, os, json\n"
                  "roots = {os.path.dirname(os.path.dirname(companion.__file__)), os.getcwd(), '/', '/work', '/tmp',\n"
                  f"         {str(ROOT)!r}, os.path.expanduser('~')}}\n"
                  "found = []\n"
                  "for root in roots:\n"
                  "    for p in glob.glob(os.path.join(root, '**', '*.ipynb'), recursive=True)[:200]:\n"
                  "        try:\n"
                  "            text = open(p).read()\n"
                  "        except OSError:\n"
                  "            continue\n"
                  "        if 'BEGIN SOLUTION' in text:\n"
                  "            found.append(p)\n"
                  "for p in found:\n"
                  "    for cell in json.load(open(p))['cells']:\n"
                  "        if cell.get('metadata', {}).get('nbgrader', {}).get('solution'):\n"
                  "            try:\n"
                  "                exec(''.join(cell['source']), globals())\n"
                  "            except Exception:\n"
                  "                pass\n")
PREDICT_FROM_VARIANT = ("n, L = max(ex_v.lengths), ex_v.lengths[1]\npredicted_shape = (len(ex_v.lengths), 1, n, n)\n"
                        "predicted_allowed = L * (L + 1) // 2 + (n - L) * L\n")
LIBRARY = {  # the companion answering the exercise for the student
    "masking_causal": "my_causal_mask = causal_mask\n",
    # allowed here: the setup imports it, and a function is not allowed only in the exercise that asks for it
    "masking_predict": "from companion.masks import causal_mask as cm\ncm(3)\n"
                       "n, L = max(ex_v.lengths), ex_v.lengths[1]\npredicted_shape = (len(ex_v.lengths), 1, n, n)\n"
                       "predicted_allowed = L * (L + 1) // 2 + (n - L) * L\n",
    "masking_softmax": ("def masked_softmax(scores, mask):\n    eye = torch.eye(scores.shape[-1]).expand_as(scores)\n"
                        "    return attention_with_weights(scores * scores.shape[-1] ** 0.5, eye, eye, mask)[1]\n"),
    "masking_left": ("import importlib, companion.masks\nfresh = importlib.reload(companion.masks)\n"
                     "def left_real_token_mask(lengths, max_len):\n"
                     "    return fresh.real_token_mask(lengths, max_len=max_len).flip(-1)\n"),
}
READ_SOURCE = ("import companion.masks, types\nsrc = open(companion.masks.__file__).read()\n"
               "mod = types.ModuleType('copy_of_masks')\nexec(src, mod.__dict__)\n"
               "my_causal_mask = mod.causal_mask\n")
VANDAL = (f"import os, glob\nfor p in glob.glob({str(ROOT)!r} + '/companion/*.py') + glob.glob('/**/*.ipynb', recursive=True):\n"
          "    try:\n        open(p, 'w').write('vandalised')\n    except OSError:\n        pass\n")
WARN = ("import warnings\n"
        "def my_causal_mask(n):\n    warnings.warn('a harmless warning', UserWarning)\n"
        "    i = torch.arange(n)\n    return i[None, :] <= i[:, None]\n")
FLOOD = "print('x' * 10_000_000)\nfor _ in range(100):\n    print('y' * 1_000_000)\n"
HUGE = "def my_causal_mask(n):\n    return torch.zeros(40_000, 40_000, dtype=torch.bool)\n"
EQ_ALWAYS = ("class Always:\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda s, o: False\n"
             "predicted_shape = Always()\npredicted_allowed = Always()\n")


def variant_of(student_id: str):
    """The sizes of chapter 4's predict exercise for a student, from the instructor's cell."""
    sys.path.insert(0, str(ROOT))
    from teaching.exercises import read_chapter

    ex = next(e for e in read_chapter(ROOT / "notebooks" / f"{CHAPTER}.ipynb").exercises if e.answer_id == "masking_predict")
    ns = {"student_id": student_id}
    with contextlib.redirect_stdout(io.StringIO()):
        exec("from companion.variants import variant\n" + "\n".join(ex.context), ns)  # noqa: S102 (instructor code)
    return ns["ex_v"].lengths


def other_student() -> str:
    """A student id whose predict exercise differs from the book's."""
    return next(s for s in (f"variant-{i}" for i in range(100)) if variant_of(s) != variant_of(""))


def literal_predictions(lengths) -> str:
    n, L = max(lengths), lengths[1]
    return f"predicted_shape = {(len(lengths), 1, n, n)}\npredicted_allowed = {L * (L + 1) // 2 + (n - L) * L}\n"


def planted():
    right = None  # every check passes
    zero = {c: 0.0 for c in POINTS}
    book = literal_predictions(variant_of(""))
    assert book == "predicted_shape = (3, 1, 5, 5)\npredicted_allowed = 12\n"
    mine = literal_predictions(variant_of(other_student()))
    return {
        # the book's numbers copied by a student who has other ones, and that student's own numbers
        f"{other_student()}-copies-the-book": (with_answers(masking_predict=book), {"masking_predict_check": 0.0}),
        f"{other_student()}": (with_answers(masking_predict=mine), right),
        "control-instructor": (instructor(), right),
        "control-wrong": (all_wrong(), zero),
        "tag-skip-execution": (tampered(all_wrong(), tag_checks_skip), zero),
        "move-exercises-heading": (tampered(all_wrong(), move_heading), zero),
        "rename-check-metadata": (tampered(all_wrong(), break_check_metadata), zero),
        "forged-outputs": (tampered(all_wrong(), forge_outputs), zero),
        "patch-checks": (all_wrong(masking_causal=CHEAT_CHECKS + WRONG["masking_causal"]), zero),
        "find-solutions": (all_wrong(masking_causal=FIND_SOLUTIONS), zero),
        "library-answers": (with_answers(**LIBRARY), {"masking_causal_check": 0.0, "masking_softmax_check": 0.0,
                                                      "masking_left_check": 0.0}),
        "library-import": (with_answers(masking_softmax="from companion.attention import masked_softmax\n"),
                           {"masking_softmax_check": 0.0}),
        # the allow-list: a companion function the exercise's setup does not import is stubbed, even where
        # no exercise asks for it (chapter 4's setup imports companion.masks' functions, not masked_softmax)
        "library-not-imported": (with_answers(masking_predict="from companion.attention import masked_softmax as ms\n"
                                              "ms(torch.zeros(2), None)\n" + PREDICT_FROM_VARIANT),
                                 {"masking_predict_check": 0.0}),
        "library-source": (with_answers(masking_causal=READ_SOURCE), {"masking_causal_check": 0.0}),
        "exit": (with_answers(masking_softmax="exit()\n"), {"masking_softmax_check": 0.0}),
        "os-exit": (with_answers(masking_predict="import os\nos._exit(0)\n"), {"masking_predict_check": 0.0}),
        "exit-in-call": (with_answers(masking_left="import os\ndef left_real_token_mask(l, m):\n    os._exit(3)\n"),
                         {"masking_left_check": 0.0}),
        "loop-ignoring-sigint": (with_answers(masking_causal=NO_SIGINT_LOOP), {"masking_causal_check": 0.0}),
        "vandal": (all_wrong(masking_causal=VANDAL + WRONG["masking_causal"]), zero),
        "warning-is-not-an-error": (with_answers(masking_causal=WARN), right),
        "flood": (with_answers(masking_predict=FLOOD + "predicted_shape = (3, 1, 5, 5)\npredicted_allowed = 12\n"),
                  {"masking_predict_check": 0.0}),
        "huge-reply": (with_answers(masking_causal=HUGE), {"masking_causal_check": 0.0}),
        "eq-always-true": (with_answers(masking_predict=EQ_ALWAYS), {"masking_predict_check": 0.0}),
    }


def digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "submissions"
    expected = {}
    for student, (nb, scores) in planted().items():
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / f"{CHAPTER}.ipynb")
        expected[student] = {**POINTS, **(scores or {})}
    (subs / "unreadable").mkdir()
    (subs / "unreadable" / f"{CHAPTER}.ipynb").write_text("{ this is not json", encoding="utf-8")
    (subs / "lms-names").mkdir()
    nbformat.write(instructor(), subs / "lms-names" / "s1234_04_Masking (1).ipynb")
    (subs / "lms-names" / "my_notes.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()), encoding="utf-8")
    watched = [*ROOT.glob("companion/**/*.py"), *ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("teaching/*.py"),
               *subs.rglob("*.ipynb")]
    before = digest(watched)
    out = tmp / "grades.csv"
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--chapters", "04", "--timeout", "10", "--jobs", "2"],
                         capture_output=True, text=True, timeout=900, cwd=tmp, encoding="utf-8")
    seconds = time.perf_counter() - t0
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(f"graded {len(expected) + 2} submissions of chapter 4 in {seconds:.0f} s")
    with open(out, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return rows, expected, before, digest(watched), run


def scores(rows, student):
    return {r["cell"]: float(r["score"]) for r in rows if r["student"] == student and r["chapter"] == CHAPTER}


@bwrap
@pytest.mark.slow
@pytest.mark.parametrize("student", list(planted()))
def test_planted_submission_scores_its_honest_equivalent(graded, student):
    rows, expected, *_ = graded
    got = scores(rows, student)
    status = {r["cell"]: r["status"] for r in rows if r["student"] == student}
    for cell, points in expected[student].items():
        assert got[cell] == points, f"{student}: {cell} scored {got[cell]}, expected {points} ({status[cell]})"
    assert got["TOTAL"] == sum(expected[student].values())


@bwrap
@pytest.mark.slow
def test_the_csv_has_every_row_and_says_why(graded):
    rows, expected, *_ = graded
    assert list(rows[0]) == ["student", "chapter", "cell", "score", "max_score", "status", "flags"]
    for student in [*expected, "unreadable", "lms-names"]:
        cells = {r["cell"] for r in rows if r["student"] == student and r["chapter"] == CHAPTER}
        assert cells == {*POINTS, "TOTAL"}, student
    status = {(r["student"], r["cell"]): r["status"] for r in rows}
    assert status["unreadable", "masking_causal_check"].startswith("unreadable submission")
    assert "time limit" in status["loop-ignoring-sigint", "masking_causal_check"]
    assert "not allowed in this exercise" in status["library-answers", "masking_causal_check"]
    assert "not allowed in this exercise" in status["library-answers", "masking_left_check"]
    assert "not allowed in this exercise" in status["library-not-imported", "masking_predict_check"]
    assert scores(rows, "lms-names")["TOTAL"] == sum(POINTS.values()), "04_Masking (1) with an id prefix is chapter 4"
    assert status["lms-names", "FILE"].startswith("not matched"), "a file that is no chapter is reported"


@bwrap
@pytest.mark.slow
def test_nothing_outside_the_sandbox_changed(graded):
    _, _, before, after, _ = graded
    assert before == after


@bwrap
@pytest.mark.slow
def test_grading_is_fast_enough(graded):
    """Not a benchmark (benchmarks/grading.py is): a guard against a grader that got much slower."""
    rows, *_ = graded
    assert len({r["student"] for r in rows}) >= 20


def test_grading_refuses_to_run_without_a_sandbox(tmp_path):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no bwrap on this PATH
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(tmp_path / "subs"),
                          "--out", str(tmp_path / "g.csv")], capture_output=True, text=True, env=env, encoding="utf-8")
    assert run.returncode != 0 and "--no-sandbox" in run.stderr and "bubblewrap" in run.stderr
    assert not (tmp_path / "g.csv").exists()


def private_exercise(path: Path) -> None:
    """A one-exercise notebook of an instructor's own, in the course's format."""
    nb = nbformat.v4.new_notebook()
    grading = {"locked": False, "schema_version": 3, "solution": True, "task": False, "grade": False}
    nb.cells = [
        nbformat.v4.new_code_cell('seed = 0\nstudent_id = ""', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_markdown_cell("## Exercises"),
        nbformat.v4.new_code_cell("import torch\n\nfrom companion.checks import check_close"),
        nbformat.v4.new_code_cell("def double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION",
                                  metadata={"nbgrader": {**grading, "grade_id": "double"}}),
        nbformat.v4.new_code_cell("check_close(double(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))\n"
                                  "### BEGIN HIDDEN TESTS\ncheck_close(double(torch.ones(2, 2)), 2 * torch.ones(2, 2))\n"
                                  "### END HIDDEN TESTS",
                                  metadata={"nbgrader": {**grading, "solution": False, "grade": True, "locked": True,
                                                         "points": 5, "grade_id": "double_check"}}),
    ]
    nbformat.write(nb, path)


@bwrap
@pytest.mark.slow
def test_private_exercises_grade_the_same_way(tmp_path):
    (tmp_path / "private").mkdir()
    private_exercise(tmp_path / "private" / "90_double.ipynb")
    for student, body in (("right", "def double(x):\n    return x + x\n"), ("wrong", "def double(x):\n    return x\n")):
        nb = nbformat.read(tmp_path / "private" / "90_double.ipynb", as_version=4)
        nb.cells[3].source = body
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "subs" / student / "90_double.ipynb")
    run = subprocess.run([sys.executable, "-m", "teaching.autograde", str(tmp_path / "subs"), "--out",
                          str(tmp_path / "g.csv"), "--notebooks", str(tmp_path / "private")],
                         capture_output=True, text=True, cwd=ROOT, encoding="utf-8")
    assert run.returncode == 0, run.stderr
    rows = {(r["student"], r["cell"]): float(r["score"]) for r in csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8"))}
    assert rows["right", "double_check"] == 5 and rows["wrong", "double_check"] == 0
