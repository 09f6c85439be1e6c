"""Hole 8 of issue 24 in every chapter: the hidden tests' inputs are not all in the public notebook.

The instructor's notebook is public with the book, hidden tests included. A determined student
can therefore answer each exercise with a *lookup table*: the right value for exactly the inputs
the instructor's checks use, anything for the rest. The checks defeat it by also drawing fresh
inputs from the grading seed (``companion.checks.fresh_rng``), which the grader draws anew for
each run and the submission cannot read (``test_grading_holes.test_8_...``).

The table planted here is the strongest one a student can build: every input the checks use
under one grading seed, recorded by running the instructor's answers and checks, and the
instructor's own answer behind it. Graded under that seed it scores full marks (so the table is
faithful and the sandbox sees the very inputs recorded); graded under another seed it scores 0
on every exercise with fresh inputs, while the instructor's answers score full marks under both
seeds.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
from functools import cache

import nbformat
import pytest
import torch
from conftest import needs_bwrap
from seeded_class import enrol

from teaching import course
from teaching.exercises import read_chapter, strip_solution_markers
from teaching.grader import CHECK_SEED

CHAPTERS = course.chapters_with_exercises()
SEED_A, SEED_B = 271828, 314159  # two grading runs (two of tests/test_honest_answers.py's, whose runs they share)

# Runs in the sandbox (standard library and torch only) and here, the same text in both.
TABLE_TOOLS = '''
import hashlib as _hashlib
import torch as _torch


def _fp(x, depth=0):
    """A fingerprint of a call's arguments: tensors by their bytes, modules by their weights."""
    if depth > 12:
        return "deep"
    if isinstance(x, _torch.Tensor):  # integers exactly, numbers to 0.1 in two sums (the
        t = x.detach().cpu()  # grader and the sandbox may differ in the last bits)
        if t.is_complex():
            t = _torch.view_as_real(t)
        if not t.dtype.is_floating_point:
            return ("I", str(x.dtype), tuple(t.shape), _hashlib.sha1(repr(t.tolist()).encode()).hexdigest())
        v = t.double().nan_to_num(nan=7.0, posinf=1e3, neginf=-1e3).flatten()
        w = _torch.arange(1, v.numel() + 1, dtype=_torch.float64) / max(1, v.numel())
        return ("F", str(x.dtype), tuple(t.shape), round(float(v.sum()), 1), round(float((v * w).sum()), 1))
    if isinstance(x, _torch.nn.Module):
        return ("M", type(x).__name__, _fp(x.state_dict(), depth + 1))
    if isinstance(x, _torch.optim.Optimizer):
        return ("O", type(x).__name__, repr([{k: v for k, v in g.items() if k != "params"}
                                              for g in x.param_groups]))
    if isinstance(x, dict):
        return ("D", tuple((str(k), _fp(v, depth + 1)) for k, v in x.items()))
    if isinstance(x, (tuple, list)):
        return ("L", tuple(_fp(v, depth + 1) for v in x))
    if isinstance(x, (bool, int, float, str, type(None))):
        return ("P", repr(x))
    return ("C", type(x).__name__, getattr(x, "__name__", ""))


def _key(*parts):
    return _hashlib.sha1(repr(_fp(parts)).encode()).hexdigest()


def _garbage(out):
    """A wrong answer of the same kind."""
    if isinstance(out, _torch.Tensor):
        return ~out if out.dtype == _torch.bool else out + 1
    if isinstance(out, bool):
        return not out
    if isinstance(out, (int, float)):
        return out + 1
    if isinstance(out, (tuple, list)):
        return type(out)(_garbage(v) for v in out) if out else [0]
    if isinstance(out, dict):
        return {k: _garbage(v) for k, v in out.items()}
    return out
'''


def defined(source: str) -> list[tuple[str, bool]]:
    """The functions and classes an answer defines at top level: (name, is a class)."""
    return [(n.name, isinstance(n, ast.ClassDef)) for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def behind_table(answer: str, table: set[str] | None) -> str:
    """The instructor's ``answer``, each of its functions and classes answering right only for
    calls whose arguments are in ``table``; with ``table=None``, recording them in ``_SEEN``."""
    lines = [answer, TABLE_TOOLS]
    lines.append("_SEEN = set()" if table is None else f"_TABLE = {sorted(table)!r}")
    verdict = ("    _SEEN.add(key)\n    return out\n" if table is None else
               "    return out if key in _TABLE else _garbage(out)\n")
    for name, is_class in defined(answer):
        lines.append(f"_right_{name} = {name}")
        if is_class:
            lines.append(f"class {name}(_right_{name}):\n    def forward(self, *a, **k):\n"
                         f"        out = super().forward(*a, **k)\n        key = _key({name!r}, a, k, self.state_dict())\n"
                         + "\n".join("    " + line for line in verdict.splitlines()) + "\n")
        else:
            lines.append(f"def {name}(*a, **k):\n    out = _right_{name}(*a, **k)\n    key = _key({name!r}, a, k)\n"
                         + verdict)
    return "\n".join(lines)


def has_fresh_inputs(check_source: str) -> bool:
    return "fresh_rng" in check_source or "fresh_inputs" in check_source


def record(chapter_name: str, seed: int) -> dict[str, set[str]]:
    """{answer grade_id: the keys of every call its check makes}, the checks run here as the
    grader runs them (generator seeded before each check; the answer's own random numbers
    apart, as in its sandbox) under grading seed ``seed``."""
    chapter = read_chapter(course.NOTEBOOKS / f"{chapter_name}.ipynb")
    old = os.environ.get("COMPANION_GRADING_SEED")
    os.environ["COMPANION_GRADING_SEED"] = str(seed)
    seen = {}
    try:
        trusted = {"__name__": "__check__"}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(chapter.parameters_source, trusted)  # noqa: S102 (the instructor's code)
            exec(chapter.setup_source, trusted)  # noqa: S102
        for ex in chapter.exercises:
            answer = strip_solution_markers(ex.instructor_answer)
            with contextlib.redirect_stdout(io.StringIO()):
                torch.manual_seed(CHECK_SEED)
                for src in ex.context:
                    exec(src, trusted)  # noqa: S102
                ns = dict(trusted)
                with torch.random.fork_rng(devices=[]):
                    exec(behind_table(answer, None), ns)  # noqa: S102
                    for name, _ in defined(answer):  # as in the sandbox: its own generator
                        ns[name] = _apart(ns[name])
                exec(ex.check_source, ns)  # noqa: S102
            seen[ex.answer_id] = ns["_SEEN"]
    finally:
        if old is None:
            os.environ.pop("COMPANION_GRADING_SEED", None)
        else:
            os.environ["COMPANION_GRADING_SEED"] = old
    return seen


def _apart(fn):
    def call(*a, **k):
        with torch.random.fork_rng(devices=[]):
            return fn(*a, **k)
    return call


def lookup_table_notebook(chapter_name: str, seen: dict[str, set[str]]) -> nbformat.NotebookNode:
    nb = nbformat.read(course.NOTEBOOKS / f"{chapter_name}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in seen and cell.metadata["nbgrader"].get("solution"):
            answer = strip_solution_markers(cell.source)
            if defined(answer):
                cell.source = behind_table(answer, seen[gid])
    return nb


def test_every_exercise_that_asks_for_code_draws_fresh_inputs():
    for name in CHAPTERS:
        for ex in read_chapter(course.NOTEBOOKS / f"{name}.ipynb").exercises:
            if defined(strip_solution_markers(ex.instructor_answer)):
                assert has_fresh_inputs(ex.check_source), (name, ex.check_id)
                hidden = ex.check_source.split("### BEGIN HIDDEN TESTS")[-1]
                assert "fresh_" in hidden.split("### END HIDDEN TESTS")[0], (name, ex.check_id)


def test_a_table_behind_the_right_answer_is_faithful_in_process():
    """The table's own test, without a sandbox: right on what it recorded, wrong elsewhere."""
    src = "def twice(x):\n    return 2 * x\n"
    ns = {}
    exec(behind_table(src, None), ns)  # noqa: S102
    ns["twice"](torch.ones(3))
    table = ns["_SEEN"]
    exec(behind_table(src, table), ns)  # noqa: S102
    assert torch.equal(ns["twice"](torch.ones(3)), torch.full((3,), 2.0))
    assert torch.equal(ns["twice"](torch.ones(4)), torch.full((4,), 3.0))  # garbage


@cache
def recorded() -> dict[str, dict[int, dict[str, set[str]]]]:
    """{chapter: {grading seed: record(chapter, seed)}} for both seeds."""
    return {name: {seed: record(name, seed) for seed in (SEED_A, SEED_B)} for name in CHAPTERS}


def instructor_notebooks() -> dict[str, nbformat.NotebookNode]:
    return {name: nbformat.read(course.NOTEBOOKS / f"{name}.ipynb", as_version=4) for name in CHAPTERS}


# Graded in the runs of seeds A and B that tests/test_honest_answers.py's class shares
# (tests/seeded_class.py): the instructor under both seeds, the two tables under seed A.
enrol(SEED_A, "instructor", instructor_notebooks)
enrol(SEED_B, "instructor", instructor_notebooks)
enrol(SEED_A, "table-of-this-run", lambda: {n: lookup_table_notebook(n, recorded()[n][SEED_A]) for n in CHAPTERS})
enrol(SEED_A, "table-of-another-run", lambda: {n: lookup_table_notebook(n, recorded()[n][SEED_B]) for n in CHAPTERS})


def score(rows, student, chapter):
    return {r["cell"]: (float(r["score"]), r["status"]) for r in rows if r["student"] == student
            and r["chapter"] == chapter}


@needs_bwrap
@pytest.mark.slow
def test_a_lookup_table_of_the_public_inputs_scores_nothing_where_inputs_are_fresh(seeded_grades):
    # the fixed inputs are the same under both seeds, the fresh ones are not
    for name in CHAPTERS:
        for ex in read_chapter(course.NOTEBOOKS / f"{name}.ipynb").exercises:
            if has_fresh_inputs(ex.check_source):
                a, b = recorded()[name][SEED_A][ex.answer_id], recorded()[name][SEED_B][ex.answer_id]
                assert a & b and a - b, (name, ex.check_id)
    rows, rows_b = seeded_grades(SEED_A), seeded_grades(SEED_B)
    for name in CHAPTERS:
        chapter = read_chapter(course.NOTEBOOKS / f"{name}.ipynb")
        full = {ex.check_id: ex.points for ex in chapter.exercises}
        for got in (score(rows, "instructor", name), score(rows_b, "instructor", name)):
            assert {c: s for c, (s, _) in got.items() if c != "TOTAL"} == full, (name, got)
        faithful = score(rows, "table-of-this-run", name)
        assert {c: s for c, (s, _) in faithful.items() if c != "TOTAL"} == full, (name, faithful)
        beaten = score(rows, "table-of-another-run", name)
        for ex in chapter.exercises:
            want = 0.0 if has_fresh_inputs(ex.check_source) else ex.points
            assert beaten[ex.check_id][0] == want, (name, ex.check_id, beaten[ex.check_id])
            if want == 0.0:
                assert beaten[ex.check_id][1].startswith("wrong:"), (name, ex.check_id, beaten[ex.check_id])
