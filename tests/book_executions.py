"""Run each chapter once per CI run: nbval reuses the book build's execution when it is current.

The README's command 1 builds the book, and the build executes every chapter with
``allow_errors: false`` (``_config.yml``), caching each successful run in
``_build/.jupyter_cache`` (jupyter-cache, keyed by a hash of the notebook's code cells).
Command 2 then runs nbval over ``notebooks/``, which would execute every chapter a second time
to prove the same thing: that each chapter runs without an error.

So, for each notebook nbval collects, this plugin looks for a cache record of the same code
(hashed as the book build hashes it: the notebook as ``book/_ext/exercise_markdown.py`` hands
it to the book, whose solution cells lose their folding metadata) that is newer than every file of the companion package (the code the chapter imports). Where
there is one, the notebook's nbval cells are replaced by one test,
``notebooks/NN_name.ipynb::executed by the book build``, which asserts that the cached run
holds every code cell and no error output. Where there is none (no build, the code changed,
the companion changed after the build), nbval executes the notebook as before. Set
``COURSE_NBVAL_RERUN=1`` to make nbval execute every notebook regardless.
"""

from __future__ import annotations

import os
from datetime import timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"
RERUN_VARIABLE = "COURSE_NBVAL_RERUN"


def _newest_source_time(package: Path = ROOT / "companion") -> float:
    """The latest modification time (seconds since the epoch) of any source or data file of the
    package (byte-code caches, which importing it writes, do not count)."""
    return max((p.stat().st_mtime for p in package.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts), default=0.0)


def book_view(notebook: Path, root: Path = ROOT):
    """``notebook`` as the book build executes and caches it: the Sphinx extension
    ``book/_ext/exercise_markdown.py`` rewrites each chapter on ``source-read`` (its solution
    cells lose the folding metadata, which jupyter-cache's hash includes)."""
    import importlib.util
    import json

    import nbformat

    spec = importlib.util.spec_from_file_location(
        "_course_exercise_markdown", root / "book" / "_ext" / "exercise_markdown.py")
    markdown = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(markdown)
    data = json.loads(Path(notebook).read_text(encoding="utf-8"))
    url = markdown.book_url(markdown.read_config(root))
    return nbformat.reads(json.dumps(markdown.to_myst(data, url)), as_version=4)


def current_record(notebook: Path, cache_path: Path = CACHE):
    """The cache record of ``notebook``'s current code, or ``None`` with no current record.

    A record is current when its hash matches the notebook's code cells and it was created
    after the last change to any file of the companion package."""
    if not cache_path.is_dir():
        return None
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_path))
    try:
        record = cache.match_cache_notebook(book_view(notebook))
    except KeyError:
        return None
    # jupyter-cache stores naive UTC times (datetime.utcnow)
    if record.created.replace(tzinfo=timezone.utc).timestamp() < _newest_source_time():
        return None
    return record


def cached_run_problems(notebook: Path, record, cache_path: Path = CACHE) -> list[str]:
    """What is wrong with the cached run of ``notebook``: code cells missing from it, error
    outputs; an empty list when it is a complete, error-free run of the notebook's code."""
    import nbformat
    from jupyter_cache import get_cache

    executed = get_cache(str(cache_path)).get_cache_bundle(record.pk).nb
    source = nbformat.read(notebook, as_version=4)
    wanted = [c.source for c in source.cells if c.cell_type == "code"]
    ran = [c for c in executed.cells if c.cell_type == "code"]
    problems = []
    if [c.source for c in ran] != wanted:
        problems.append(f"the cached run holds {len(ran)} code cells that differ from the "
                        f"notebook's {len(wanted)}")
    for index, cell in enumerate(ran):
        if cell.get("execution_count") is None and cell.source.strip():
            problems.append(f"code cell {index} was not executed")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                problems.append(f"code cell {index} raised {output.get('ename')}: "
                                f"{output.get('evalue')}")
    return problems


class BookExecution(pytest.Item):
    """One notebook's check that the book build ran it, complete and without an error."""

    def __init__(self, *, record, **kwargs):
        super().__init__(**kwargs)
        self.record = record

    def runtest(self):
        problems = cached_run_problems(self.path, self.record)
        if problems:
            raise AssertionError(f"{self.path.name}, as the book build ran it: " + "; ".join(problems))

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: executed by the book build"


class _BookExecutions(pytest.File):
    def collect(self):  # pragma: no cover - items are made in replace_nbval_items
        return []


def replace_nbval_items(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Swap each notebook's nbval cells for one :class:`BookExecution` where the build's run of
    it is current (see the module docstring)."""
    if os.environ.get(RERUN_VARIABLE) or not (config.option.nbval or config.option.nbval_lax):
        return
    from nbval.plugin import IPyNbCell

    by_notebook: dict[Path, list] = {}
    for item in items:
        if isinstance(item, IPyNbCell):
            by_notebook.setdefault(Path(item.path), []).append(item)
    replaced, kept = [], list(items)
    for notebook, cells in by_notebook.items():
        record = current_record(notebook)
        if record is None:
            continue
        holder = _BookExecutions.from_parent(session, path=notebook)
        check = BookExecution.from_parent(holder, name="executed by the book build", record=record)
        position = kept.index(cells[0])
        cell_set = set(cells)
        kept = [i for i in kept if i not in cell_set]
        kept.insert(position, check)
        replaced.extend(cells)
    if replaced:
        config.hook.pytest_deselected(items=replaced)
        items[:] = kept
