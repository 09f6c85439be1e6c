"""Exercises that read well in the book, in JupyterLab/Notebook 7 and in Colab, from one source.

The chapter notebooks store their *Exercises* sections in plain Markdown, which every
notebook front end renders, with the folding in cell metadata:

- an exercise is a Markdown cell ``**Exercise 2: Title**`` + text, with cell metadata
  ``{"exercise": {"label": "ex-..."}}``;
- the next cell is the cue, ``{"exercise": {"solution": "ex-..."}}``: one line saying that the
  solution is folded and how to open it;
- the solution cells that follow (nbgrader ``solution`` cells) are folded: code cells by
  ``jupyter.source_hidden``/``outputs_hidden`` (JupyterLab, Notebook 7) and
  ``cellView: "form"`` (Colab's form view), written answers (Markdown) by
  ``jupyter.source_hidden`` and a ``<details>`` element inside nbgrader's solution region;
- links to the book's pages point to the published book (``../book/`` is out of reach of
  ``jupyter lab notebooks/`` and of a notebook opened from GitHub in Colab).

The book sees the MyST form it always had: this module is also a Sphinx extension that, on
``source-read``, turns the plain form back into sphinx-exercise's ``{exercise}`` directive and
a ``{solution-start}``/``{solution-end}`` dropdown, and the book's URLs back into relative
links, so the built book is what it was. With sphinx-exercise's ``hide_solutions`` (the student
book) it leaves the solutions out instead, as ``teaching/student_book.py`` used to do with the
gated markers.

``tools/exercise_markdown.py`` converts notebooks (MyST -> plain) and checks them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

EXERCISES_HEADING = re.compile(r"^## Exercises\s*$", re.M)
# the MyST form: the exercise, then the gated solution's opening marker, in one cell
MYST_EXERCISE = re.compile(
    r"\A```\{exercise\} (?P<title>[^\n]+)\n:label: (?P<label>\S+)\n\n(?P<body>.*?)\n```\n\n"
    r"```\{solution-start\} (?P=label)\n:class: dropdown\n```\s*\Z", re.S)
MYST_SOLUTION_END = "```{solution-end}\n```"
PLAIN_TITLE = re.compile(r"\A\*\*Exercise (?P<number>\d+): (?P<title>[^\n]+)\*\*\n\n")
CUE = ("**Solution** (folded: try the exercise first, then click the **⋯** below to open it; "
       "in Colab, *Show code*)")
DETAILS_OPEN = "<details><summary><b>Show the answer</b></summary>\n"
DETAILS_CLOSE = "\n</details>"
BEGIN, END = "% BEGIN SOLUTION", "% END SOLUTION"
FOLD_CODE = {"source_hidden": True, "outputs_hidden": True}


# --- where the book is published ---------------------------------------------------------------

def book_url(config: dict) -> str:
    """The published book's address, from ``_config.yml``: ``html.baseurl`` if set, else the
    GitHub Pages site of ``repository.url`` (https://github.com/OWNER/NAME ->
    https://OWNER.github.io/NAME)."""
    base = (config.get("html") or {}).get("baseurl")
    if base:
        return base.rstrip("/")
    url = (config.get("repository") or {}).get("url", "")
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", url)
    if not m:
        raise ValueError(f"_config.yml: no html.baseurl, and repository.url {url!r} is not a GitHub repository")
    return f"https://{m.group(1).lower()}.github.io/{m.group(2)}"


def read_config(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def relative_links_to_book(text: str, url: str) -> str:
    """``[x](../book/page.md#a)`` -> ``[x](URL/book/page.html#a)``."""
    return re.sub(r"\]\(\.\./book/([\w/-]+)\.md(#[\w-]+)?\)", lambda m: f"]({url}/book/{m.group(1)}.html{m.group(2) or ''})",
                  text)


def book_links_to_relative(text: str, url: str) -> str:
    """The inverse of :func:`relative_links_to_book`, for the book (whose links Sphinx checks)."""
    return re.sub(rf"\]\({re.escape(url)}/book/([\w/-]+)\.html(#[\w-]+)?\)",
                  lambda m: f"](../book/{m.group(1)}.md{m.group(2) or ''})", text)


CITE = re.compile(r"\{cite(?::[pt])?\}`([^`]+)`")


def citation_names(bib: Path) -> dict[str, str]:
    """{key: "Author, year"} for every entry of a .bib file (author-year, as the book cites)."""
    from pybtex.database import parse_file
    from pybtex.richtext import Text

    names = {}
    for key, entry in parse_file(str(bib)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [Text.from_latex(" ".join(p.last_names)).render_as("text") for p in people]  # Veli\\v{c}kovi\\'c -> Veličković
        who = last[0] if len(last) == 1 else " and ".join(last) if len(last) == 2 else f"{last[0]} et al."
        names[key] = f"{who}, {entry.fields.get('year', 'n.d.')}".replace("{", "").replace("}", "")
    return names


def plain_citations(text: str, url: str, names: dict[str, str]) -> str:
    """``{cite}`a,b``` -> ``([A, 2017](URL/book/references.html#cite-a); [B, 2015](...))``."""
    def one(m):
        keys = [k.strip() for k in m.group(1).split(",")]
        missing = [k for k in keys if k not in names]
        if missing:
            raise ValueError(f"citation keys not in the bibliography: {missing}")
        return "(" + "; ".join(f"[{names[k]}]({url}/book/references.html#cite-{k})" for k in keys) + ")"
    return CITE.sub(one, text)


def myst_citations(text: str, url: str) -> str:
    """The inverse of :func:`plain_citations`, for the book."""
    link = rf"\[[^\]]+\]\({re.escape(url)}/book/references\.html#cite-([\w-]+)\)"
    return re.sub(rf"\(({link}(?:; {link})*)\)",
                  lambda m: "{cite}`" + ",".join(re.findall(link, m.group(1))) + "`", text)


# --- helpers on cells (dicts as nbformat gives them) ---------------------------------------------

def _source(cell) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def _is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def exercises_start(cells) -> int | None:
    return next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and EXERCISES_HEADING.search(_source(c))),
                None)


def _new_markdown(source: str, metadata: dict, cell_id: str) -> dict:
    import nbformat

    cell = nbformat.v4.new_markdown_cell(source, id=cell_id[:64])  # a fixed id: reruns give the same file
    cell.metadata.update(metadata)
    return cell


def _wrap_answer(text: str) -> str:
    """Fold a written answer: ``<details>`` inside nbgrader's region, so the student edition,
    whose region becomes *YOUR ANSWER HERE*, has no fold."""
    if DETAILS_OPEN in text or BEGIN not in text:
        return text
    head, rest = text.split(BEGIN + "\n", 1)
    answer, tail = rest.split("\n" + END, 1)
    return f"{head}{BEGIN}\n{DETAILS_OPEN}\n{answer}\n{DETAILS_CLOSE}\n{END}{tail}"


def _unwrap_answer(text: str) -> str:
    return text.replace(f"{BEGIN}\n{DETAILS_OPEN}\n", f"{BEGIN}\n").replace(f"\n{DETAILS_CLOSE}\n{END}", f"\n{END}")


# --- MyST -> plain (the stored form) ----------------------------------------------------------------

def to_plain(nb, url: str, prose: dict[str, str] | None = None) -> int:
    """Convert a notebook's *Exercises* section to the plain form, in place; returns the number
    of exercises converted. Idempotent: a plain section only gets its fold metadata (again).
    With ``prose`` (the :func:`citation_names` of the bibliography), the chapter's other
    Markdown cells get plain citations and absolute links to the book too."""
    cells, start = nb.cells, exercises_start(nb.cells)
    for cell in cells if prose is not None else []:
        if cell.cell_type == "markdown":
            cell.source = plain_citations(relative_links_to_book(_source(cell), url), url, prose)
    if start is None:
        return 0
    out, converted, number, i = cells[:start], 0, 0, start
    while i < len(cells):
        cell = cells[i]
        text = _source(cell)
        if cell.cell_type == "markdown":
            text = relative_links_to_book(text, url)
            cell.source = text
        m = MYST_EXERCISE.match(text) if cell.cell_type == "markdown" else None
        if m:
            number += 1
            converted += 1
            cell.source = f"**Exercise {number}: {m['title']}**\n\n{m['body']}"
            cell.metadata["exercise"] = {"label": m["label"]}
            out += [cell, _new_markdown(CUE, {"exercise": {"solution": m["label"]}}, f"{m['label']}-solution")]
            i += 1
            continue
        if cell.cell_type == "markdown" and text.strip() == MYST_SOLUTION_END:
            i += 1
            continue
        if "label" in cell.metadata.get("exercise", {}):
            number += 1
        out.append(cell)
        i += 1
    nb.cells = out
    fold_solutions(nb)
    return converted


def solution_regions(cells):
    """(cue index, [solution cell indices]) for every cue of the plain form."""
    for i, cell in enumerate(cells):
        if "solution" in cell.get("metadata", {}).get("exercise", {}):
            j = i + 1
            while j < len(cells) and _is_solution(cells[j]):
                j += 1
            yield i, list(range(i + 1, j))


def fold_solutions(nb) -> None:
    """Fold every solution cell that follows a cue (see the module's docstring)."""
    for _, region in solution_regions(nb.cells):
        for j in region:
            cell = nb.cells[j]
            jupyter = cell.metadata.setdefault("jupyter", {})
            if cell.cell_type == "code":
                jupyter.update(FOLD_CODE)
                cell.metadata["cellView"] = "form"
            else:
                jupyter["source_hidden"] = True
                cell.source = _wrap_answer(_source(cell))


def unfold_for_students(nb) -> int:
    """For a student edition (nbgrader's stubs in the solution cells): drop the cues and the
    fold metadata, so the answer cells are open. Returns the number of cues removed."""
    cues = {i for i, _ in solution_regions(nb.cells)}
    for _, region in solution_regions(nb.cells):
        for j in region:
            meta = nb.cells[j].metadata
            meta.pop("cellView", None)
            for key in FOLD_CODE:
                meta.get("jupyter", {}).pop(key, None)
            if meta.get("jupyter") == {}:
                del meta["jupyter"]
    nb.cells = [c for i, c in enumerate(nb.cells) if i not in cues]
    return len(cues)


# --- plain -> MyST (what the book reads) -------------------------------------------------------------

def to_myst(data: dict, url: str, hide_solutions: bool = False) -> dict:
    """The book's view of a plain notebook (a JSON dict): exercise directives with gated
    dropdown solutions, relative links; with ``hide_solutions``, no solutions at all."""
    cells = [dict(c, source=book_links_to_relative(myst_citations(_source(c), url), url))
             if c["cell_type"] == "markdown" else c for c in data["cells"]]
    start = exercises_start(cells)
    if start is None:
        return dict(data, cells=cells)
    regions = dict(solution_regions(cells))
    out, i = cells[:start], start
    while i < len(cells):
        cell = cells[i]
        meta = cell.get("metadata", {})
        text = _source(cell)
        label = meta.get("exercise", {}).get("label")
        if label:
            m = PLAIN_TITLE.match(text)
            if not m:
                raise ValueError(f"exercise {label}: the cell does not start with '**Exercise N: title**'")
            text = f"```{{exercise}} {m['title']}\n:label: {label}\n\n{text[m.end():].rstrip()}\n```"
            following = cells[i + 1] if i + 1 < len(cells) else {}
            if not hide_solutions and following.get("metadata", {}).get("exercise", {}).get("solution") == label:
                text += f"\n\n```{{solution-start}} {label}\n:class: dropdown\n```"
        if i in regions:  # the cue: the dropdown replaces it
            region = regions[i]
            if not hide_solutions:
                for j in region:
                    solution = dict(cells[j], metadata=_without_folds(cells[j].get("metadata", {})))
                    if solution["cell_type"] == "markdown":
                        solution["source"] = _unwrap_answer(_source(solution))
                    out.append(solution)
                out.append({"cell_type": "markdown", "metadata": {}, "source": MYST_SOLUTION_END,
                            **({"id": cells[i]["id"]} if "id" in cells[i] else {})})
            i = (region[-1] if region else i) + 1
            continue
        if cell["cell_type"] == "markdown":
            meta = {k: v for k, v in meta.items() if k != "exercise"}
        out.append(dict(cell, source=text, metadata=meta))
        i += 1
    return dict(data, cells=out)


def _without_folds(meta: dict) -> dict:
    meta = {k: v for k, v in meta.items() if k != "cellView"}
    jupyter = {k: v for k, v in meta.get("jupyter", {}).items() if k not in FOLD_CODE}
    meta.pop("jupyter", None)
    return {**meta, **({"jupyter": jupyter} if jupyter else {})}


# --- the Sphinx extension ---------------------------------------------------------------------------

def _source_read(app, docname, source):
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    data = json.loads(source[0])
    url = book_url({"html": {"baseurl": app.config.exercise_markdown_book_url}} if app.config.exercise_markdown_book_url
                   else read_config(Path(app.srcdir)))
    hide = bool(getattr(app.config, "hide_solutions", False))
    source[0] = json.dumps(to_myst(data, url, hide_solutions=hide), ensure_ascii=False)


def setup(app):
    app.add_config_value("exercise_markdown_book_url", "", "env")
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
