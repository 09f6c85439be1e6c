"""nbgrader configuration of the course (https://nbgrader.readthedocs.io).

teaching/student_edition.py and teaching/autograde.py copy this file into the nbgrader
course directory they create; to grade in your own nbgrader course, copy it there as
`nbgrader_config.py`.
"""

import os

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
