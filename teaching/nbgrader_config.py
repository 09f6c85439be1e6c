"""nbgrader configuration of the course (https://nbgrader.readthedocs.io).

teaching/student_edition.py and teaching/autograde.py copy this file into the nbgrader
course directory they create; to grade in your own nbgrader course, copy it there as
`nbgrader_config.py`.
"""

import os
import re

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    Execute,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    SaveAutoGrades,
)

c = get_config()  # noqa: F821 (defined by traitlets when the file is loaded)

# The notebooks mark solutions and hidden tests the way nbgrader expects (its defaults,
# spelled out here so that the course's conventions are visible in one place).
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"

# One time limit per cell. The chapter's own cells (its experiments) get the book's limit;
# the exercise cells (answers and checks, all small and fast) a short one, so that an answer
# that loops forever costs its own cell after a few seconds and grading goes on: nbgrader
# interrupts the kernel, records the cell as failed, and runs the next cell.
CHAPTER_CELL_TIMEOUT = int(os.environ.get("COURSE_CHAPTER_CELL_TIMEOUT", "300"))
EXERCISE_CELL_TIMEOUT = int(os.environ.get("COURSE_EXERCISE_CELL_TIMEOUT", "30"))


def cell_timeout(cell):
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return EXERCISE_CELL_TIMEOUT if nbgrader.get("grade") or nbgrader.get("solution") else CHAPTER_CELL_TIMEOUT


c.Execute.timeout = CHAPTER_CELL_TIMEOUT
c.Execute.timeout_func = cell_timeout
c.Execute.interrupt_on_timeout = True


# Grading runs the exercises, not the chapter. A chapter's experiments train models for up to a
# minute; the exercises need none of it (the first cell of each Exercises section imports all
# they use), so the autograder runs only the `parameters` cell (for `seed`) and the cells from
# the "## Exercises" heading on. The chapter's other cells stay in the graded notebook, tagged
# `skip-execution` (nbclient's tag for "do not run"), without outputs.
class RunOnlyTheExercises(NbGraderPreprocessor):
    """Tag every code cell before the "## Exercises" heading, except the parameters cell, with
    `skip-execution`. A notebook without that heading is run whole."""

    def preprocess(self, nb, resources):
        headings = [i for i, cell in enumerate(nb.cells)
                    if cell.cell_type == "markdown" and re.search(r"^## Exercises\s*$", cell.source, re.M)]
        if headings:
            for cell in nb.cells[: headings[0]]:
                tags = cell.metadata.setdefault("tags", [])
                if cell.cell_type == "code" and "parameters" not in tags and "skip-execution" not in tags:
                    tags.append("skip-execution")
        return nb, resources


# nbgrader 0.9's autograde steps, with the one above before Execute.
c.Autograde.autograde_preprocessors = [
    RunOnlyTheExercises,
    Execute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
