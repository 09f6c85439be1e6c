"""The book's tables of chapters, generated from the notebooks when the book is built.

Two directives, each given its table's header row (one Markdown table row) as content:

- ``{chapter-table}`` (book/intro.md): one row per chapter notebook: its number, a link to it
  (the chapter's own title) and what it teaches: the first sentence of the chapter's "What
  you will learn" paragraph.
- ``{exercise-table}`` (book/teaching.md): one row per chapter with exercises: each
  exercise's title, stars (from its text) and autograded points (teaching/course.py's
  ``exercise_points``, the graded cells nbgrader and the grader use), the chapter's points
  and the time its *Exercises* section gives ("About 40 minutes in all").

A new chapter notebook appears in both tables by itself.

**Translation.** The header row is the page's own text: Sphinx extracts it into the page's
catalog (``locales/zh_CN/LC_MESSAGES/book/intro.po``) like any table cell. The generated
rows are the chapters' text, already translated in each chapter's catalog: in the Chinese
edition they are looked up there (the title, the exercise titles, the "What you will learn"
paragraph), so they are translated once, with the chapter, and never copied into a second
catalog. The rows are marked untranslatable so that the gettext builder leaves them out of
the page's catalog. A message with no translation in its chapter's catalog is a warning
(the build fails with ``-W``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

LEARN = re.compile(r"^\*?(What you will learn):?\*?:?\s*", re.I)
EXERCISE_TITLE = re.compile(r"^\*\*Exercise \d+: (.+?)\*\*")
STARS = re.compile(r"\((★{1,3})[,;)]")
MINUTES = re.compile(r"About (\d+) minutes in all")
# the few words the rows need besides the chapters' own text, per language
WORDS = {
    "en": {"open": " (", "close": ")", "sep": ", ", "end": ". ", "minutes": "about {} min"},
    "zh": {"open": "（", "close": "）", "sep": "，", "end": "。", "minutes": "约 {} 分钟"},
}


def _notebooks(srcdir: Path) -> list[Path]:
    return sorted((srcdir / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def first_sentence(text: str, chinese: bool = False) -> str:
    """The first sentence of a paragraph ("。" ends a Chinese one)."""
    if chinese:
        head = text.split("。", 1)[0]
        return head + ("。" if head != text else "")
    found = re.match(r"(.+?[.!?])(\s|$)", text)
    return found.group(1) if found else text


def _cell_text(text: str) -> str:
    """Markdown as one table cell: no pipes, no line breaks."""
    return text.replace("|", "\\|").replace("\n", " ").strip()


class Chapters:
    """What the tables say of the chapters, in the build's language."""

    def __init__(self, env):
        self.env = env
        self.srcdir = Path(env.srcdir)
        self.language = env.config.language or "en"
        self.words = WORDS["zh" if self.language.startswith("zh") else "en"]
        self._catalogs: dict[str, object] = {}

    def translate(self, chapter: str, message: str) -> str:
        """``message`` of ``chapter``'s page in the build's language (its catalog)."""
        if self.language == "en":
            return message
        if chapter not in self._catalogs:
            from sphinx.locale import init as init_locale

            dirs = [str(self.srcdir / d) for d in self.env.config.locale_dirs]
            catalog, found = init_locale(dirs, self.language, f"notebooks/{chapter}")
            self._catalogs[chapter] = catalog if found else None
        catalog = self._catalogs[chapter]
        translated = catalog.gettext(message) if catalog else message
        if translated == message:
            logger.warning(f"chapter tables: no {self.language} translation of {message[:60]!r} "
                           f"in {chapter}'s catalog", location=self.env.docname)
        return translated

    def title(self, cells) -> str:
        return _source(cells[0]).splitlines()[0].lstrip("#").strip()

    def idea(self, chapter: str, cells) -> str:
        """The first sentence of the chapter's "What you will learn" paragraph."""
        for cell in cells[:3]:
            for paragraph in _source(cell).split("\n\n"):
                if LEARN.match(paragraph.strip()):
                    text = self.translate(chapter, paragraph.strip())
                    if self.language == "en":
                        return first_sentence(LEARN.sub("", text))
                    # the Chinese paragraph opens with its own "你将学到：" label
                    head, colon, rest = text.partition("：")
                    return first_sentence(rest if colon and len(head) <= 12 else text, chinese=True)
        logger.warning(f"chapter tables: {chapter} has no 'What you will learn' paragraph",
                       location=self.env.docname)
        return ""

    def exercises(self, chapter: str, cells) -> list[tuple[str, str, float]]:
        """(title, stars, autograded points) of each exercise, in order."""
        sys.path.insert(0, str(self.srcdir))
        from teaching import course

        points = course.exercise_points(chapter)
        found = []
        for cell in cells:
            label = cell.get("metadata", {}).get("exercise", {}).get("label")
            if not label or cell["cell_type"] != "markdown":
                continue
            text = _source(cell)
            title = EXERCISE_TITLE.match(text)
            stars = STARS.search(text)
            if not title or not stars:
                logger.warning(f"chapter tables: exercise {label} of {chapter} has no "
                               "'**Exercise N: title**' or no stars", location=self.env.docname)
                continue
            found.append((self.translate(chapter, title.group(1)), stars.group(1), points.get(label, 0)))
        return found

    def minutes(self, cells) -> str:
        for cell in cells:
            found = MINUTES.search(_source(cell))
            if found:
                return self.words["minutes"].format(found.group(1))
        return ""


def _points(value: float) -> str:
    return f"{value:g}"


class _TableDirective(SphinxDirective):
    has_content = True

    def rows(self, chapters: Chapters) -> list[list[str]]:
        raise NotImplementedError

    def run(self):
        header = [line for line in self.content if line.strip()]
        if len(header) != 1 or not header[0].strip().startswith("|"):
            raise self.error(f"{self.name}: give the table's header row, one Markdown table row")
        columns = header[0].strip().strip("|").count("|") + 1
        chapters = Chapters(self.env)
        rows = self.rows(chapters)
        for row in rows:
            if len(row) != columns:
                raise self.error(f"{self.name}: the header has {columns} columns, the rows {len(row)}")
        for path in _notebooks(Path(self.env.srcdir)):
            self.env.note_dependency(str(path))
        lines = [header[0].strip(), "|" + "---|" * columns]
        lines += ["| " + " | ".join(_cell_text(cell) for cell in row) + " |" for row in rows]
        container = nodes.container(classes=["chapter-table"])
        self.state.nested_parse(StringList(lines, source=self.env.docname), self.content_offset, container)
        # the rows are the chapters' text, translated in the chapters' catalogs: keep them out
        # of this page's catalog; the header row stays this page's message
        # (nested parsing leaves the cells without a source, which Sphinx's i18n needs)
        source, line = self.state_machine.get_source_and_line(self.lineno)
        for thead in container.findall(nodes.thead):
            for node in thead.findall(nodes.TextElement):
                node.source, node.line = source, line
        for tbody in container.findall(nodes.tbody):
            for node in tbody.findall(nodes.TextElement):
                node["translatable"] = False
        return container.children


class ChapterTable(_TableDirective):
    def rows(self, chapters):
        rows = []
        for path in _notebooks(chapters.srcdir):
            cells = _cells(path)
            number = int(path.stem.split("_", 1)[0])
            rows.append([str(number), f"{{doc}}`/notebooks/{path.stem}`", chapters.idea(path.stem, cells)])
        return rows


class ExerciseTable(_TableDirective):
    def rows(self, chapters):
        w = chapters.words
        rows = []
        for path in _notebooks(chapters.srcdir):
            cells = _cells(path)
            exercises = chapters.exercises(path.stem, cells)
            if not exercises:
                continue
            number = int(path.stem.split("_", 1)[0])
            listed = []
            for title, stars, points in exercises:
                grade = stars + (w["sep"] + _points(points) if points else "")
                listed.append(f"{title}{w['open']}{grade}{w['close']}")
            rows.append([f"{number} {{doc}}`/notebooks/{path.stem}`",
                         w["end"].join(listed) + w["end"].strip(),
                         _points(sum(p for _, _, p in exercises)), chapters.minutes(cells)])
        return rows


def setup(app):
    app.add_directive("chapter-table", ChapterTable)
    app.add_directive("exercise-table", ExerciseTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
