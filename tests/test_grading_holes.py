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
from conftest import needs_bwrap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grading import POINTS, WRONG, all_wrong, instructor, with_answers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "04_masking"
pytestmark = [needs_bwrap, pytest.mark.slow]


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
                         capture_output=True, text=True, timeout=timeout, cwd=tmp, env=env, errors="replace", encoding="utf-8")
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return read_rows(out), run


def scores(rows, student, chapter=CHAPTER):
    return {r["cell"]: float(r["score"]) for r in rows if r["student"] == student and r["chapter"] == chapter}


def status(rows, student, cell, chapter=CHAPTER):
    return next(r["status"] for r in rows if r["student"] == student and r["chapter"] == chapter and r["cell"] == cell)


FULL = sum(POINTS.values())


def assert_classmates_intact(rows, chapter=CHAPTER, max_score=FULL):
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
                             capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, encoding="utf-8")
        assert run.returncode == 0, run.stderr[-3000:]
        assert_classmates_intact(read_rows(tmp_path / "g.csv"))
    finally:
        if created:
            import shutil

            shutil.rmtree(venv)


def test_10_the_timeout_counts_the_answer_not_the_start_of_the_sandbox(tmp_path):
    """Starting bwrap, importing torch and running the setup cells takes seconds on a busy
    machine; a 5 s --timeout still lets correct answers pass and stops a loop."""
    rows, run = grade(tmp_path, {"loops": with_answers(masking_causal="while True:\n    pass\n")}, "--timeout", "5")
    assert "time limit" in status(rows, "loops", "masking_causal_check")
    assert scores(rows, "loops") == {**POINTS, "masking_causal_check": 0.0, "TOTAL": 7.0}, [r["status"] for r in rows]
    assert_classmates_intact(rows)


# -- 6. limits per submission, 7. an unprivileged user and nothing of the host's sys.path ----------

RIGHT_PREDICTIONS = ("    n, L = max(ex_v.lengths), ex_v.lengths[1]\n"
                     "    predicted_shape = (len(ex_v.lengths), 1, n, n)\n"
                     "    predicted_allowed = L * (L + 1) // 2 + (n - L) * L\n")


def if_it_worked(attack: str) -> str:
    """An answer to the predict exercise that is right only if ``attack`` set ``worked``."""
    return attack + "if worked:\n" + RIGHT_PREDICTIONS + "else:\n    predicted_shape, predicted_allowed = None, None\n"


MEMORY_TREE = if_it_worked(  # 3 x 700 MB in three processes, each under the per-process limit
    "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        block = bytearray(700 * 2**20)\n"
    "        for i in range(0, len(block), 4096):\n            block[i] = 1\n        time.sleep(60)\n"
    "        os._exit(0)\ntime.sleep(6)\nworked = True\n")
FILESYSTEMS = if_it_worked(  # 150 MB in files of 15 MB (each under the file-size limit)
    "import os\ndef fill(folder):\n    total = 0\n    for i in range(10):\n        try:\n"
    "            with open(f'{folder}/big{i}', 'wb') as f:\n                f.write(bytes(15 * 2**20))\n"
    "            total += os.path.getsize(f'{folder}/big{i}')\n        except OSError:\n            pass\n"
    "    return total\nworked = max(fill(d) for d in ('/', '/dev', '/dev/shm', '/usr', '/tmp')) > 100 * 2**20\n")
PROCESSES = if_it_worked(
    "import os, time\nstarted = 0\ntry:\n    for _ in range(60):\n        if os.fork() == 0:\n"
    "            time.sleep(30)\n            os._exit(0)\n        started += 1\nexcept OSError:\n    pass\n"
    "time.sleep(2)\nworked = started == 60\n")
ROOT_ONLY = if_it_worked(
    "import os\ntry:\n    secret = open('/etc/shadow').read()\nexcept OSError:\n    secret = ''\n"
    "worked = bool(secret) or os.getuid() == 0\n")


def find_solutions_under(folder: Path) -> str:
    return ("import glob, json\n"
            f"for p in glob.glob({str(folder)!r} + '/**/*.ipynb', recursive=True):\n"
            "    for cell in json.load(open(p))['cells']:\n"
            "        if cell.get('metadata', {}).get('nbgrader', {}).get('solution'):\n"
            "            try:\n                exec(''.join(cell['source']), globals())\n"
            "            except Exception:\n                pass\n")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    outer = tmp / "outer"  # a PYTHONPATH entry above a copy of the course
    (outer / "course" / "notebooks").mkdir(parents=True)
    nbformat.write(instructor(), outer / "course" / "notebooks" / f"{CHAPTER}.ipynb")
    env = {**os.environ, "PYTHONPATH": f"{outer}:{ROOT}"}
    attackers = {
        "memory-in-three-processes": with_answers(masking_predict=MEMORY_TREE),
        "fills-the-file-systems": with_answers(masking_predict=FILESYSTEMS),
        "many-processes": with_answers(masking_predict=PROCESSES),
        "reads-a-root-only-file": with_answers(masking_predict=ROOT_ONLY),
        "finds-solutions-on-pythonpath": all_wrong(masking_causal=find_solutions_under(outer) + WRONG["masking_causal"]),
    }
    return grade(tmp, attackers, "--memory", "1000", env=env)


@pytest.mark.parametrize("student", ["memory-in-three-processes", "fills-the-file-systems", "many-processes"])
def test_6_limits_hold_per_submission(limited, student):
    rows, run = limited
    assert scores(rows, student) == {**POINTS, "masking_predict_check": 0.0, "TOTAL": 7.0}, \
        status(rows, student, "masking_predict_check")
    why = {"memory-in-three-processes": "memory", "many-processes": "processes", "fills-the-file-systems": ""}[student]
    assert why in status(rows, student, "masking_predict_check")
    assert_classmates_intact(rows)


def test_7_the_sandbox_runs_as_an_unprivileged_user(limited):
    rows, run = limited
    assert scores(rows, "reads-a-root-only-file") == {**POINTS, "masking_predict_check": 0.0, "TOTAL": 7.0}


def test_7_nothing_of_the_hosts_pythonpath_is_visible(limited):
    rows, run = limited
    assert scores(rows, "finds-solutions-on-pythonpath")["TOTAL"] == 0.0
    assert_classmates_intact(rows)


# -- 5. "not allowed" holds on the capability, not the name ----------------------------------------

def _softmax_through(call: str) -> str:
    """masked_softmax from an attention kernel: scores as queries, identities as keys and values."""
    return ("import torch\ndef masked_softmax(scores, mask):\n    eye = torch.eye(scores.shape[-1]).expand_as(scores)\n"
            f"    out = {call}\n    return torch.nan_to_num(out[0] if isinstance(out, tuple) else out, nan=0.0)\n")


ALIASES = {
    "sdpa-through-torch-C": _softmax_through(
        "torch._C._nn.scaled_dot_product_attention(scores, eye, eye, attn_mask=mask, scale=1.0)"),
    "sdpa-through-torch-ops": _softmax_through(
        "torch.ops.aten.scaled_dot_product_attention(scores, eye, eye, attn_mask=mask, scale=1.0)"),
    "sdpa-math-kernel": _softmax_through(
        "torch.ops.aten._scaled_dot_product_attention_math(scores, eye, eye, attn_mask=mask, scale=1.0)"),
    "sdpa-fresh-functional": ("import importlib.util, torch\n"
                              "spec = importlib.util.find_spec('torch.nn.functional')\n"
                              "fresh = importlib.util.module_from_spec(spec)\n"
                              "try:\n    spec.loader.exec_module(fresh)\nexcept Exception:\n    pass\n"
                              + _softmax_through("fresh.scaled_dot_product_attention(scores, eye, eye, "
                                                 "attn_mask=mask, scale=1.0)").removeprefix("import torch\n")),
}


def test_5_not_allowed_kernels_are_refused_under_every_alias(tmp_path):
    rows, run = grade(tmp_path, {name: with_answers(masking_softmax=src) for name, src in ALIASES.items()})
    for name in ALIASES:
        assert scores(rows, name) == {**POINTS, "masking_softmax_check": 0.0, "TOTAL": 6.0}, \
            (name, status(rows, name, "masking_softmax_check"))
        if name != "sdpa-fresh-functional":  # torch 2.13 cannot execute its functional.py twice
            assert "not allowed in this exercise" in status(rows, name, "masking_softmax_check")
    assert_classmates_intact(rows)



# -- 8. hidden inputs that are hidden -----------------------------------------------------------------

LOOKUP = {  # right on every input the instructor's notebook shows, wrong on any other
    "masking_causal": ("_table = {n: torch.ones(n, n, dtype=torch.bool).tril() for n in (1, 2, 4, 9)}\n"
                       "def my_causal_mask(n):\n    return _table.get(n, torch.zeros(n, n, dtype=torch.bool))\n"),
    "masking_left": ("_known = {((3, 1), 4), ((6, 4, 2), 6), ((1,), 1), ((5, 5), 7)}\n"
                     "def left_real_token_mask(lengths, max_len):\n"
                     "    mask = torch.arange(max_len)[None, :] >= max_len - torch.tensor(lengths)[:, None]\n"
                     "    return mask if (tuple(lengths), max_len) in _known else ~mask\n"),
}


def test_8_a_table_of_the_public_hidden_inputs_scores_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_GRADING_SEED"}  # the grader draws one
    rows, run = grade(tmp_path, {"lookup-table": with_answers(**LOOKUP)}, env=env)
    assert scores(rows, "lookup-table") == {**POINTS, "masking_causal_check": 0.0, "masking_left_check": 0.0,
                                            "TOTAL": 5.0}, [r["status"] for r in rows if r["student"] == "lookup-table"]
    assert_classmates_intact(rows)


def test_8_the_grading_seed_is_not_visible_in_the_sandbox(tmp_path):
    leak = ("import os\nworked = 'COMPANION_GRADING_SEED' in os.environ or any(\n"
            "    'COMPANION_GRADING_SEED' in open(f'/proc/{p}/environ', errors='replace').read()\n"
            "    for p in os.listdir('/proc') if p.isdigit() and os.access(f'/proc/{p}/environ', os.R_OK))\n")
    rows, run = grade(tmp_path, {"reads-the-seed": with_answers(masking_predict=if_it_worked(leak))})
    assert scores(rows, "reads-the-seed")["masking_predict_check"] == 0.0
