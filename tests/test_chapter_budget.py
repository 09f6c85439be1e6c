"""No chapter grows past its time budget unnoticed (issue #42).

The book build (README, command 1) executes every chapter and jupyter-cache records each run's
wall time (``execution_seconds``). A chapter's budget is 60 s on the quiet 2-core machine the
budgets were set on; machines of CI's kind differ up to 2x in speed, so each time is first
divided by this machine's speed factor (``benchmarks/calibration.py``: a fixed workload's time
here over its time there). The test fails when a chapter, so normalised, exceeds its budget by
more than 50 %. It skips where the build has not run (or ran before the last companion change).
"""

import sys
from pathlib import Path

import pytest

from book_executions import CACHE, current_record

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 60.0
TOLERANCE = 1.5
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def speed():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import calibration
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return calibration.speed_factor()


def normalised_seconds(seconds: float, speed_factor: float) -> float:
    """A time measured here, as it would be on the reference machine: a slower machine's time
    scales down, a faster one's up."""
    return seconds / speed_factor


def test_normalising_scales_by_the_machine():
    assert normalised_seconds(120.0, 2.0) == 60.0  # a machine twice as slow
    assert normalised_seconds(30.0, 0.5) == 60.0  # twice as fast


# Chapters known to be over budget, each with the measurement that showed it: they fail as
# xfail (shown in every run's summary) until issue #42 brings them back, then pass as xpass.
KNOWN_OVER: dict[str, str] = {}  # chapter stem -> why it is over budget (chapter 10 left it: 39.7 s on 2026-12-07)


def _chapter_param(path):
    reason = KNOWN_OVER.get(path.stem)
    marks = [pytest.mark.xfail(reason=f"known over budget: {reason}", strict=False)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("notebook", [_chapter_param(p) for p in CHAPTERS])
def test_the_chapter_runs_within_its_budget(notebook, speed):
    record = current_record(notebook)
    if record is None:
        pytest.skip(f"no current book-build run of {notebook.name} (README, command 1)")
    seconds = record.data.get("execution_seconds")
    if seconds is None:
        pytest.skip(f"the build's run of {notebook.name} recorded no time")
    normalised = normalised_seconds(seconds, speed)
    limit = TOLERANCE * BUDGET_S
    assert normalised <= limit, (
        f"{notebook.name} took {seconds:.0f} s in the book build; at this machine's speed factor "
        f"{speed:.2f} that is {normalised:.0f} s on the reference machine, over {limit:.0f} s "
        f"({TOLERANCE:.0%} of its {BUDGET_S:.0f} s budget)")
