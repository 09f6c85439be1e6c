"""What the grader knows about a chapter's exercises, read from the INSTRUCTOR's notebook only.

A chapter's *Exercises* section (everything from the `## Exercises` heading on) holds:

- a setup cell: the section's first code cell, importing everything the exercises use;
- for each exercise an answer cell (nbgrader ``solution: true``, a ``grade_id``), and, for the
  graded ones, a check cell after it (nbgrader ``grade: true``, ``points``, hidden tests).

Nothing here reads a submission: which cells run, in which order, with which checks and
points comes from the instructor's source alone. A submission contributes the *source of its
answer cells*, found by ``grade_id`` (:func:`answer_sources`), and nothing else.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

EXERCISES_HEADING = re.compile(r"^## Exercises\s*$", re.M)


@dataclass(frozen=True)
class Exercise:
    """One graded exercise: the answer the student writes and the check that grades it."""

    answer_id: str  # grade_id of the answer (solution) cell
    instructor_answer: str  # the instructor's solution source
    names: tuple[str, ...]  # the top-level names the answer defines (what the check may use)
    check_id: str  # grade_id of the check cell
    check_source: str  # the check, hidden tests included
    points: float
    not_allowed: tuple[str, ...] = ()  # companion names the answer may not use ("companion.masks.causal_mask")
    context: tuple[str, ...] = ()  # the instructor's plain code cells before the answer (e.g. a student's variant)


@dataclass(frozen=True)
class Chapter:
    name: str
    parameters_source: str  # the `parameters` cell (seed, scale, student_id)
    setup_source: str  # the Exercises section's first code cell
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)

    @property
    def max_score(self) -> float:
        return sum(e.points for e in self.exercises)


def bound_names(source: str) -> tuple[str, ...]:
    """The names a cell binds at top level (assignments, defs, classes, imports), in order.

    >>> bound_names("def f(x):\\n    y = 1\\na, (b, c) = 1, (2, 3)\\nimport numpy as np")
    ('f', 'a', 'b', 'c', 'np')
    """
    names: list[str] = []

    def targets(node):
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                targets(t)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.extend((a.asname or a.name).split(".")[0] for a in node.names)
    return tuple(dict.fromkeys(names))


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def read_chapter(path: Path) -> Chapter:
    """The exercises of the instructor notebook at ``path``."""
    nb = nbformat.read(path, as_version=4)
    params = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    headings = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and EXERCISES_HEADING.search(c.source)]
    if not headings:
        return Chapter(Path(path).stem, params[0].source if params else "", "", ())
    section = nb.cells[headings[0]:]
    code = [c for c in section if c.cell_type == "code"]
    setup = code[0] if code and not _nbgrader(code[0]) else None
    exercises = []
    answer = None
    context = []  # plain code cells (no nbgrader metadata) since the last check: they run before the answer
    for cell in code[1 if setup is not None else 0:]:
        meta = _nbgrader(cell)
        if not meta:
            context.append(cell.source)
        elif meta.get("solution") and not meta.get("grade"):
            answer = cell
        elif meta.get("grade") and meta.get("points", 0) > 0:
            if answer is None:
                raise ValueError(f"{path}: check cell {meta.get('grade_id')!r} has no answer cell before it")
            exercises.append(Exercise(
                answer_id=_nbgrader(answer)["grade_id"],
                instructor_answer=answer.source,
                names=bound_names(strip_solution_markers(answer.source)),
                check_id=meta["grade_id"],
                check_source=cell.source,
                points=float(meta["points"]),
                not_allowed=tuple(answer.metadata.get("grading", {}).get("not_allowed", ())),
                context=tuple(context),
            ))
            answer, context = None, []
    return Chapter(Path(path).stem, params[0].source if params else "", setup.source if setup else "", tuple(exercises))


def strip_solution_markers(source: str) -> str:
    """The instructor's solution as plain code (the BEGIN/END SOLUTION comments removed)."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in ("# BEGIN SOLUTION", "# END SOLUTION"))


def answer_sources(submission: Path, chapter: Chapter) -> dict[str, str]:
    """``{answer grade_id: source}`` of the answer cells found in a submitted notebook.

    Only code cells whose nbgrader metadata marks them as the chapter's answer cells count; the
    first cell with a given ``grade_id`` wins. Tags, other metadata, headings, the order of the
    cells and stored outputs are ignored. Raises ``ValueError`` for a file that is not a notebook
    or not a regular file (a link is never followed).
    """
    from .submissions import read_regular  # noqa: PLC0415

    try:
        nb = nbformat.reads(read_regular(submission).decode("utf-8"), as_version=4)
    except Exception as err:  # noqa: BLE001 (any unreadable file: JSON, schema, encoding)
        raise ValueError(f"not a readable notebook: {type(err).__name__}: {err}") from None
    wanted = {e.answer_id for e in chapter.exercises}
    found: dict[str, str] = {}
    for cell in nb.cells:
        gid = _nbgrader(cell).get("grade_id") if isinstance(_nbgrader(cell), dict) else None
        if cell.get("cell_type") == "code" and gid in wanted and gid not in found and isinstance(cell.get("source"), str):
            found[gid] = cell["source"]
    return found
