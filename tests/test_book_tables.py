"""The introduction's chapter table and the teaching guide's exercise table are generated from
the notebooks (book/_ext/chapters.py): every chapter is listed, with the points the grader
gives (teaching/course.py), in both editions."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import NOT_BUILT

from teaching import course

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import chapters  # noqa: E402  (book/_ext/chapters.py)


class FakeEnv:
    """What chapters.Chapters reads of Sphinx's environment, for the English edition."""

    def __init__(self):
        self.srcdir = str(ROOT)
        self.docname = "book/intro"
        self.config = type("Config", (), {"language": "en", "locale_dirs": ["locales"]})()


def test_first_sentence():
    assert chapters.first_sentence("how a works. Then b.") == "how a works."
    assert chapters.first_sentence("no full stop") == "no full stop"
    assert chapters.first_sentence("甲如何工作。然后乙。", chinese=True) == "甲如何工作。"


@pytest.mark.parametrize("chapter", course.all_chapters())
def test_every_chapter_gives_the_tables_what_they_need(chapter, recwarn):
    """A title, a "What you will learn" paragraph, and for each exercise its title and stars."""
    table = chapters.Chapters(FakeEnv())
    cells = chapters._cells(ROOT / "notebooks" / f"{chapter}.ipynb")
    assert table.title(cells), f"{chapter}: no title"
    assert table.idea(chapter, cells).endswith("."), f"{chapter}: no 'What you will learn' sentence"
    listed = table.exercises(chapter, cells)
    if course.nbgrader_cells(chapter):
        assert len(listed) == len(course.exercise_points(chapter)), f"{chapter}: an exercise without title or stars"
        assert sum(p for _, _, p in listed) == sum(course.graded_cells(chapter).values())
        assert table.minutes(cells), f"{chapter}: its Exercises section gives no 'About N minutes in all'"


def test_exercise_points_follow_the_graded_cells():
    """Every graded cell's points count for the exercise before it, and only once."""
    for chapter in course.chapters_with_exercises():
        points = course.exercise_points(chapter)
        assert sum(points.values()) == sum(course.graded_cells(chapter).values()), chapter
        assert all(p >= 0 for p in points.values())


def rows(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    body = re.search(r"<tbody>(.*?)</tbody>", text, re.S)
    assert body, f"{page}: no table"
    return re.findall(r"<tr.*?</tr>", body.group(1), re.S)


def plain(row: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row))


@pytest.mark.parametrize("edition", ["", "zh/"])
def test_the_built_tables_list_every_chapter(edition):
    intro, teaching = HTML / edition / "book" / "intro.html", HTML / edition / "book" / "teaching.html"
    if not intro.exists():
        pytest.skip(NOT_BUILT if not edition else "the Chinese edition is not built")
    listed = rows(intro)
    assert len(listed) == len(course.all_chapters())
    for row, chapter in zip(listed, course.all_chapters(), strict=True):
        assert f"notebooks/{chapter}.html" in row, f"row {plain(row)!r} should link {chapter}"
    graded = rows(teaching)
    assert len(graded) == len(course.chapters_with_exercises())
    for row, chapter in zip(graded, course.chapters_with_exercises(), strict=True):
        cells = re.findall(r"<td.*?</td>", row, re.S)
        assert f"notebooks/{chapter}.html" in cells[0]
        assert plain(cells[2]).strip() == f"{sum(course.graded_cells(chapter).values()):g}", plain(row)
        stars = re.findall("★+", plain(cells[1]))
        assert len(stars) == len(course.exercise_points(chapter)), plain(row)
    if edition:  # the Chinese rows are the chapters' Chinese text
        assert all(chapters_cjk(plain(r)) > 3 for r in listed + graded), [plain(r) for r in listed]


def chapters_cjk(text: str) -> int:
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")


NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def stated_autograded(chapter: str) -> set[int] | None:
    """The exercises a chapter's *Exercises* introduction says are autograded, or None."""
    for cell in chapters._cells(ROOT / "notebooks" / f"{chapter}.ipynb"):
        text = chapters._source(cell)
        found = re.search(r"Exercises (\d+) to (\d+)(?: and (\d+))? are autograded", text)
        if found:
            first, last, extra = found.groups()
            return set(range(int(first), int(last) + 1)) | ({int(extra)} if extra else set())
        found = re.search(r"All (\w+)(?: exercises)? are autograded", text)
        if found:
            return set(range(1, NUMBERS[found.group(1).lower()] + 1))
    return None


@pytest.mark.parametrize("chapter", course.chapters_with_exercises())
def test_each_chapter_states_what_the_grader_grades(chapter):
    """One source of truth: the graded cells. The chapter's sentence ("Exercises 1 to 4 are
    autograded", "All five exercises are autograded") names exactly the exercises with points
    (the teaching guide's table shows the same points)."""
    graded = {i for i, points in enumerate(course.exercise_points(chapter).values(), 1) if points}
    stated = stated_autograded(chapter)
    assert stated is not None, f"{chapter}: its Exercises introduction does not say which exercises are autograded"
    assert stated == graded, f"{chapter} says exercises {sorted(stated)} are autograded; the graded cells: {sorted(graded)}"
