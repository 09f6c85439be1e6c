"""Build the student edition of the book: the book built from the student notebooks
(nbgrader's, see student_edition.py), without executing them, with sphinx-exercise's
`hide_solutions`, no `_sources` copies (`html_copy_source: false`), no download button and
no launch or repository buttons (they would lead to the instructor notebooks).

    python teaching/student_book.py [--out _build/student-book]

Writes the site to `<out>/_build/html` (open `index.html`); `<out>/src` holds its sources.
tests/test_teaching.py builds it and fails if any solution or hidden test leaks into it.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as `python teaching/student_book.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "teaching"  # noqa: A001

from teaching import course  # noqa: E402

ROOT = course.ROOT


def student_config(config: dict) -> dict:
    """The book's _config.yml, turned into the student edition's."""
    config = dict(config)
    config["title"] = f"{config['title']} (student edition)"
    config["execute"] = {**config.get("execute", {}), "execute_notebooks": "off"}
    config.pop("launch_buttons", None)  # Colab/Binder would open the instructor notebooks
    config["html"] = {**config.get("html", {}), "use_repository_button": False, "use_issues_button": False,
                      "use_edit_page_button": False}
    sphinx = dict(config.get("sphinx", {}))
    sphinx["config"] = {
        **sphinx.get("config", {}),
        "hide_solutions": True,  # sphinx-exercise: drop every {solution} and gated solution
        "html_copy_source": False,  # no _sources/ copies of the pages
        "html_show_sourcelink": False,
        "language_switch": {},  # the student book has no Chinese edition to switch to
        # replaces the theme options that jupyter-book derives from the `html:` section
        "html_theme_options": {"use_download_button": False, "use_repository_button": False,
                               "use_issues_button": False, "use_edit_page_button": False,
                               "use_source_button": False, "launch_buttons": {},
                               "home_page_in_toc": config["html"].get("home_page_in_navbar", True),
                               "search_bar_text": "Search this book..."},
    }
    config["sphinx"] = sphinx
    return config


def drop_gated_solutions(notebook: Path) -> int:
    """Remove the cells from each ``{solution-start}`` to its ``{solution-end}`` (inclusive).

    In a student notebook these cells hold only nbgrader's stubs (``# YOUR CODE HERE``);
    the student book leaves them out. sphinx-exercise 1.2's ``hide_solutions`` drops
    ``{solution}`` directives and the ``{solution-start}`` markers but not the gated
    content or the ``{solution-end}`` node, on which the HTML writer fails.
    """
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    kept, inside, dropped = [], False, 0
    for cell in nb.cells:
        text = cell.source if cell.cell_type == "markdown" else ""
        if "{solution-start}" in text:
            inside = True
            before = text[: text.index("```{solution-start}")].rstrip()  # e.g. the exercise itself
            if before:
                cell.source = before
                kept.append(cell)
                continue
        if inside:
            dropped += 1
        else:
            kept.append(cell)
        if "{solution-end}" in text:
            inside = False
    nb.cells = kept
    nbformat.write(nb, notebook)
    return dropped


def build(out: Path, warnings_as_errors: bool = False) -> Path:
    """Assemble the student book's sources in ``out/src`` and build them; returns the HTML folder."""
    src = out / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    (src / "_config.yml").write_text(yaml.safe_dump(student_config(config), sort_keys=False, allow_unicode=True), encoding="utf-8")
    shutil.copy(ROOT / "_toc.yml", src / "_toc.yml")
    shutil.copytree(ROOT / "book", src / "book")
    for page in (ROOT / "book").glob("*.md"):  # files that the pages include from elsewhere
        for target in re.findall(r"^```\{(?:include|literalinclude)\} (\S+)", page.read_text(encoding="utf-8"), re.M):
            path = (page.parent / target).resolve()
            if path.is_file() and ROOT in path.parents and not (src / path.relative_to(ROOT)).exists():
                (src / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, src / path.relative_to(ROOT))
    with tempfile.TemporaryDirectory(prefix="nbgrader-course-") as tmp:
        for notebook in course.generate_student_notebooks(course.all_chapters(), src / "notebooks", Path(tmp),
                                                              unfold=False):
            drop_gated_solutions(notebook)
    html = out / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    # jupyter-book by the Python that runs this script, whatever PATH says
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
           "build", str(src), "--path-output", str(out), "--keep-going"]
    if warnings_as_errors:
        cmd += ["-W", "-n"]
    result = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0 or not (html / "index.html").exists():
        raise RuntimeError(f"the student book did not build:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return html


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "student-book",
                        help="output folder (default: %(default)s)")
    parser.add_argument("-W", dest="strict", action="store_true", help="fail on any Sphinx warning")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    html = build(args.out.resolve(), args.strict)
    print(f"student book: {html / 'index.html'} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
