"""What the red-team tests share (``test_round4_holes.py`` to ``test_round7_holes.py``): the
chapters, an attack's answers (``tests/attacks/<folder>/chNN_answers.py``, a dict ``ANSWERS``
from grade id to the answer cell's source), a student's notebook built from the
instructor's with those answers in place, and a probe of the runner's refusals in a fresh
process (rounds 6 and 7)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = ROOT / "tests" / "attacks"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUNNER = ROOT / "teaching" / "sandbox_runner.py"


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


# The end of a probe script: it runs each of ``setup["calls"]`` (names of the script's ``calls``
# dict) and prints, as JSON, "ran", "refused" (the runner's refusal) or "failed: ..." for each.
PROBE_LOOP = r'''
out = {}
for name in setup["calls"]:
    try:
        calls[name]()
        out[name] = "ran"
    except Exception as err:
        text = str(err)
        refused = "not allowed in this exercise" in text or "not allowed in a graded answer" in text
        out[name] = "refused" if refused else f"failed: {type(err).__name__}: {text[:300]}"
print(json.dumps(out))
'''


def run_probe(script: str, calls, **setup) -> dict[str, str]:
    """Run a probe ``script`` (it ends with :data:`PROBE_LOOP`) in a fresh process, given the
    runner's path and ``{**setup, "calls": calls}`` as JSON; return its verdict per call."""
    run = subprocess.run([sys.executable, "-c", script, str(RUNNER), json.dumps({**setup, "calls": calls})],
                         capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
