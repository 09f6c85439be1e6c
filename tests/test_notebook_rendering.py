"""The chapter notebooks as plain Jupyter front ends show them (JupyterLab, Notebook 7, Colab,
GitHub): no MyST, exercises with titles, solutions folded, links that leave the notebook folder
pointing to the published book.

Markdown is rendered the way those front ends do, without MyST: by nbconvert's Markdown
filter (mistune, what `jupyter nbconvert --to html` uses) and by a CommonMark renderer
(markdown-it-py). What a reader sees is the rendered text outside closed ``<details>`` (a
``<summary>`` shows), in the cells that are not folded: JupyterLab and Notebook 7 fold the
cells whose metadata has ``jupyter.source_hidden``; Colab hides the code of ``cellView: "form"``
cells but shows every Markdown cell. The book's view of the same notebooks is checked by
tests/test_teaching.py (test_exercise_format) and the built book by tests/test_browser.py.
"""

from __future__ import annotations

import html.parser
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import exercise_markdown as em  # noqa: E402

URL = em.book_url(em.read_config(ROOT))
MYST = ["{exercise}", "{solution", "{cite}", ":label:", ":class:", "{ref}", "{numref}", "{doc}", "```{"]


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def cells(notebook: Path):
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def exercise_cells(notebook: Path):
    cs = cells(notebook)
    start = em.exercises_start(cs)
    assert start is not None, f"{notebook.name}: no '## Exercises' section"
    return list(enumerate(cs))[start:]


def nbconvert_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


def commonmark_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(text)


RENDERERS = {"nbconvert": nbconvert_html, "commonmark": commonmark_html}


class Visible(html.parser.HTMLParser):
    """The text a browser shows of an HTML fragment: everything but the body of closed
    ``<details>`` (its ``<summary>`` shows), scripts and comments."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.details, self.summary, self.script = [], 0, 0, 0

    def handle_starttag(self, tag, attrs):
        self.details += tag == "details" and "open" not in dict(attrs)
        self.summary += tag == "summary"
        self.script += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.details -= tag == "details" and self.details > 0
        self.summary -= tag == "summary" and self.summary > 0
        self.script -= tag in ("script", "style") and self.script > 0

    def handle_data(self, data):
        if not self.script and (not self.details or self.summary):
            self.parts.append(data)


def visible_text(fragment: str) -> str:
    parser = Visible()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.parts)


def shown_in_jupyterlab(cell) -> bool:
    return not cell["metadata"].get("jupyter", {}).get("source_hidden")


def shown_in_colab(cell) -> bool:
    """Colab's form view shows a code cell's ``#@title`` and form fields, not its code."""
    return cell["cell_type"] == "markdown" or cell["metadata"].get("cellView") != "form"


def solution_lines(cell) -> list[str]:
    """The lines of a solution cell's nbgrader solution region that carry content."""
    text = source(cell)
    region = re.findall(r"BEGIN SOLUTION\n(.*?)\n[^\n]*END SOLUTION", text, re.S)
    return [line.strip() for r in region for line in r.splitlines()
            if len(line.strip()) > 12 and line.strip() not in (em.DETAILS_OPEN.strip(), em.DETAILS_CLOSE.strip())]


def plain_words(line: str) -> str:
    """A line of Markdown as rendered text (no markup, no math): what to look for on screen."""
    return visible_text(commonmark_html(line)).strip()


# --- the tests ----------------------------------------------------------------------------------

def test_there_are_notebooks_with_exercises():
    assert len([nb for nb in NOTEBOOKS if em.exercises_start(cells(nb)) is not None]) >= 8


@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_render_without_myst(notebook, renderer):
    """No directive or role syntax in what the Exercises section shows; every exercise has
    a rendered title, every solution a visible cue."""
    render = RENDERERS[renderer]
    titles, cues = [], 0
    for i, cell in exercise_cells(notebook):
        if cell["cell_type"] != "markdown":
            continue
        fragment = render(source(cell))
        text = visible_text(fragment)
        shown = [s for s in MYST if s in text]
        assert not shown, f"{notebook.name} cell {i}: {shown} shows as text: {text[:300]!r}"
        assert not re.search(r"^%", text, re.M) or not shown_in_jupyterlab(cell), \
            f"{notebook.name} cell {i}: a MyST comment line shows"
        meta = cell["metadata"].get("exercise", {})
        if "label" in meta:
            m = re.search(r"<strong>Exercise (\d+): ([^<]+)</strong>", fragment)
            assert m, f"{notebook.name} cell {i}: the exercise has no bold title: {fragment[:200]!r}"
            titles.append(int(m.group(1)))
            assert "$" in source(cell) or "\\(" not in text  # math stays as $...$ for MathJax/KaTeX
        if "solution" in meta:
            cues += 1
            assert "Solution" in text and "folded" in text and "⋯" in text, text
    assert 3 <= len(titles) <= 6 and titles == list(range(1, len(titles) + 1)), titles
    assert cues == len(titles), "one 'Solution (folded …)' cue per exercise"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_math_renders_as_math(notebook):
    """Math inside the exercises is $...$ or $$...$$ that front ends typeset: never inside a
    code block, and the dollars pair up in every cell."""
    for i, cell in exercise_cells(notebook):
        if cell["cell_type"] == "markdown" and "$" in source(cell):
            text = re.sub(r"`[^`]*`", "", source(cell))
            assert text.count("$") % 2 == 0, f"{notebook.name} cell {i}: unpaired $"
            assert "<pre>" not in commonmark_html(source(cell)), f"{notebook.name} cell {i}: math in a code block"


@pytest.mark.parametrize("front_end", ["jupyterlab", "colab"])
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_solution_in_plain_sight(notebook, front_end):
    """Every solution cell is folded, and no line of any solution shows in the unfolded cells."""
    shown = shown_in_jupyterlab if front_end == "jupyterlab" else shown_in_colab
    cs = exercise_cells(notebook)
    solutions = [(i, c) for i, c in cs if c["metadata"].get("nbgrader", {}).get("solution")]
    assert len(solutions) >= 4
    elsewhere = "\n".join(source(c) for c in cells(notebook) if not c["metadata"].get("nbgrader", {}).get("solution"))
    secrets = [(i, line) for i, c in solutions for line in solution_lines(c) if line not in elsewhere]
    assert len(secrets) >= 10, f"{notebook.name}: too few solution lines found; is the search looking?"
    screen = []
    for _, cell in cs:
        if not shown(cell):
            continue
        if cell["cell_type"] == "code":
            screen.append(source(cell))
        else:
            screen += [visible_text(render(source(cell))) for render in RENDERERS.values()]
    screen = "\n".join(screen)
    for i, line in secrets:
        words = line if cell_type(cs, i) == "code" else plain_words(line)
        assert words not in screen, f"{notebook.name} cell {i}: solution text in plain sight in {front_end}: {words!r}"
    for i, cell in solutions:
        meta = cell["metadata"]
        assert meta.get("jupyter", {}).get("source_hidden"), f"{notebook.name} cell {i}: not folded in JupyterLab"
        if cell["cell_type"] == "code":
            assert meta.get("jupyter", {}).get("outputs_hidden") and meta.get("cellView") == "form"
        else:
            assert em.DETAILS_OPEN in source(cell), f"{notebook.name} cell {i}: a written answer without <details>"


def cell_type(cs, index):
    return dict(cs)[index]["cell_type"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_links_reach_the_published_book(notebook):
    """`jupyter lab notebooks/` and Colab cannot reach ../book/: the Exercises link the
    published book (its address from _config.yml), to pages that exist."""
    assert URL.startswith("https://") and "github.io" in URL or em.read_config(ROOT).get("html", {}).get("baseurl")
    for i, cell in exercise_cells(notebook):
        if cell["cell_type"] != "markdown":
            continue
        for target in re.findall(r"\]\(([^)\s]+)", source(cell)):
            assert not target.startswith((".", "/")) and "://" in target, f"{notebook.name} cell {i}: link {target}"
            if target.startswith(URL + "/"):
                page = target[len(URL) + 1:].split("#")[0]
                assert (ROOT / page).with_suffix(".md").exists() or (ROOT / page).with_suffix(".ipynb").exists(), \
                    f"{notebook.name} cell {i}: {target} is not a page of the book"


def test_book_url_comes_from_config():
    assert em.book_url({"repository": {"url": "https://github.com/Org/course"}}) == "https://org.github.io/course"
    assert em.book_url({"html": {"baseurl": "https://example.org/book/"},
                        "repository": {"url": "https://github.com/org/course"}}) == "https://example.org/book"
    with pytest.raises(ValueError):
        em.book_url({"repository": {"url": "https://gitlab.com/org/course"}})


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_renders_without_myst(notebook):
    """Citations and links of the chapter's prose: plain, as in the Exercises."""
    for i, cell in enumerate(cells(notebook)):
        if cell["cell_type"] == "markdown":
            text = visible_text(commonmark_html(source(cell)))
            assert "{cite}" not in text and "](../" not in source(cell), f"{notebook.name} cell {i}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_prose_conversion_works(notebook):
    """What `--prose` will do to the chapter: no role left, every citation an (Author, year)
    link to its entry on the references page, and the book's view unchanged."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    book_before = em.to_myst(json.loads(nbformat.writes(nb)), URL)
    em.to_plain(nb, URL, em.citation_names(ROOT / "book" / "references.bib"))
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text = visible_text(commonmark_html(cell.source))
            assert not [s for s in MYST if s in text] and "](../" not in cell.source
            for key in re.findall(r"/book/references\.html#cite-([\w-]+)\)", cell.source):
                assert re.search(rf"\(\[[^\]]+, \d{{4}}\]\({re.escape(URL)}/book/references\.html#cite-{key}\)",
                                 cell.source)
    book_after = em.to_myst(json.loads(nbformat.writes(nb)), URL)
    assert [source(c) for c in book_after["cells"]] == [source(c) for c in book_before["cells"]]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_book_view_round_trips(notebook):
    """Converting the book's view to the plain form again gives the stored notebook: the
    stored form carries everything the book needs, and the tool is idempotent."""
    import nbformat

    stored = nbformat.read(notebook, as_version=4)
    book = nbformat.from_dict(em.to_myst(json.loads(nbformat.writes(stored)), URL))
    assert any("```{exercise}" in source(c) for c in book.cells) and any("{solution-end}" in source(c)
                                                                         for c in book.cells)
    em.to_plain(book, URL, em.citation_names(ROOT / "book" / "references.bib"))  # prose too, as stored
    assert [(c.cell_type, source(c), c.metadata) for c in book.cells] == \
        [(c.cell_type, source(c), c.metadata) for c in stored.cells]


def test_every_notebook_is_converted():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "exercise_markdown.py"), "--check"],
                         capture_output=True, text=True, encoding="utf-8")
    assert run.returncode == 0, run.stdout + run.stderr


def test_hide_solutions_leaves_no_solution_cell():
    """The student book's view (sphinx-exercise's hide_solutions): exercises, no solutions."""
    data = json.loads((ROOT / "notebooks" / "04_masking.ipynb").read_text(encoding="utf-8"))
    view = em.to_myst(data, URL, hide_solutions=True)
    texts = [source(c) for c in view["cells"]]
    assert sum("```{exercise}" in t for t in texts) == 5
    assert not [t for t in texts if "{solution" in t or "BEGIN SOLUTION" in t or "folded" in t]
    assert not [c for c in view["cells"] if c["metadata"].get("nbgrader", {}).get("solution")]


def test_unfold_for_students():
    """A student edition's answer cells (nbgrader's stubs) must not be folded behind a cue."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "04_masking.ipynb", as_version=4)
    assert em.unfold_for_students(nb) == 5
    assert not [c for c in nb.cells if "exercise" in c.metadata and "solution" in c.metadata["exercise"]]
    assert not [c for c in nb.cells if c.metadata.get("jupyter", {}).get("source_hidden") or "cellView" in c.metadata]


@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None, reason="nbgrader is not installed (pip install -r requirements.txt)")
def test_student_edition_has_open_answer_cells(tmp_path):
    """In a handout the answer cells hold nbgrader's stubs: open, with no 'Solution (folded)' cue."""
    sys.path.insert(0, str(ROOT))
    from teaching import course

    [notebook] = course.generate_student_notebooks(["04_masking"], tmp_path / "out", tmp_path / "course")
    cs = cells(notebook)
    assert any("YOUR CODE HERE" in source(c) for c in cs), "not a student edition"
    assert not [c for c in cs if "solution" in c["metadata"].get("exercise", {})], "a 'Solution (folded)' cue"
    assert not [c for c in cs if c["metadata"].get("jupyter", {}).get("source_hidden")], "a folded answer cell"


def test_plain_citations_land_on_their_entry():
    """The references page gives each entry the id the plain citations link to (#cite-KEY)."""
    config = em.read_config(ROOT)
    assert config["sphinx"]["config"].get("bibtex_cite_id") == "cite-{key}"
    names = em.citation_names(ROOT / "book" / "references.bib")
    text = em.plain_citations("as {cite}`vaswani2017attention` showed", URL, names)
    assert text == f"as ([Vaswani et al., 2017]({URL}/book/references.html#cite-vaswani2017attention)) showed"
    assert em.myst_citations(text, URL) == "as {cite}`vaswani2017attention` showed"
    two = em.plain_citations("{cite}`vaswani2017attention,xiong2020layer`", URL, names)
    assert em.myst_citations(two, URL) == "{cite}`vaswani2017attention,xiong2020layer`"
    assert "Veličković et al., 2018" in names.values()
