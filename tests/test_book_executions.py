"""nbval reuses the book build's run of a chapter only when that run is current and clean
(tests/book_executions.py); these tests build a small jupyter-cache by hand, no kernel needed."""

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import book_executions

jupyter_cache = pytest.importorskip("jupyter_cache")
from jupyter_cache.base import CacheBundleIn  # noqa: E402


def _notebook(tmp_path, *sources):
    nb = new_notebook(cells=[new_markdown_cell("# A chapter")] + [new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    return path, nb


def _cache(tmp_path, path, executed):
    cache_path = tmp_path / "cache"
    cache = jupyter_cache.get_cache(str(cache_path))
    record = cache.cache_notebook_bundle(CacheBundleIn(executed, str(path)), check_validity=False)
    return cache_path, record


def _ran(nb, outputs_by_cell):
    executed = copy.deepcopy(nb)
    code = [c for c in executed.cells if c.cell_type == "code"]
    for count, (cell, outputs) in enumerate(zip(code, outputs_by_cell), start=1):
        cell.execution_count = count
        cell.outputs = outputs
    return executed


def test_a_clean_current_run_is_reused_and_passes(tmp_path):
    path, nb = _notebook(tmp_path, "x = 1", "print(x)")
    executed = _ran(nb, [[], [new_output("stream", name="stdout", text="1\n")]])
    cache_path, record = _cache(tmp_path, path, executed)
    found = book_executions.current_record(path, cache_path)
    assert found is not None and found.pk == record.pk
    assert book_executions.cached_run_problems(path, found, cache_path) == []


def test_an_error_in_the_cached_run_fails_naming_the_cell(tmp_path):
    path, nb = _notebook(tmp_path, "x = 1", "1 / 0")
    error = new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])
    cache_path, record = _cache(tmp_path, path, _ran(nb, [[], [error]]))
    problems = book_executions.cached_run_problems(path, record, cache_path)
    assert problems == ["code cell 1 raised ZeroDivisionError: division by zero"]


def test_a_cell_the_run_never_reached_fails(tmp_path):
    path, nb = _notebook(tmp_path, "x = 1", "y = 2")
    executed = _ran(nb, [[]])  # only the first cell ran
    cache_path, record = _cache(tmp_path, path, executed)
    assert book_executions.cached_run_problems(path, record, cache_path) == ["code cell 1 was not executed"]


def test_changed_code_or_a_newer_companion_means_nbval_runs_it(tmp_path, monkeypatch):
    path, nb = _notebook(tmp_path, "x = 1")
    cache_path, _ = _cache(tmp_path, path, _ran(nb, [[]]))
    assert book_executions.current_record(path, cache_path) is not None
    # the companion changed after the build: its run may be stale
    monkeypatch.setattr(book_executions, "_newest_source_time", lambda: 4e9)
    assert book_executions.current_record(path, cache_path) is None
    monkeypatch.undo()
    # the chapter's code changed: no record matches it
    _notebook(tmp_path, "x = 2")
    assert book_executions.current_record(path, cache_path) is None
    # no cache at all (command 2 without command 1)
    assert book_executions.current_record(path, tmp_path / "nowhere") is None


def test_a_chapter_matches_the_run_the_book_cached(tmp_path):
    """The book caches each chapter as book/_ext/exercise_markdown.py hands it over: folded
    solution cells without their folding metadata. The chapter file must find that run
    (the fresh-clone CI once re-ran every chapter because the file's own hash never matched)."""
    chapter = book_executions.ROOT / "notebooks" / "04_masking.ipynb"
    as_the_book_runs_it = book_executions.book_view(chapter)
    on_disk = nbformat.read(chapter, as_version=4)
    folded = [c for c in on_disk.cells if c.get("metadata", {}).get("cellView") == "form"]
    assert folded, "the chapter should have folded solution cells (the case this test covers)"
    code = [c.source for c in on_disk.cells if c.cell_type == "code"]
    assert [c.source for c in as_the_book_runs_it.cells if c.cell_type == "code"] == code
    executed = _ran(as_the_book_runs_it, [[] for _ in code])
    cache_path, record = _cache(tmp_path, chapter, executed)
    found = book_executions.current_record(chapter, cache_path)
    assert found is not None and found.pk == record.pk
    assert book_executions.cached_run_problems(chapter, found, cache_path) == []
