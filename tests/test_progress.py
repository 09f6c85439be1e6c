"""companion.progress: tqdm.auto's widget bar with ipywidgets, a quiet text bar without."""

import sys
import warnings

import pytest
import tqdm.auto
import tqdm.std

from companion import progress


def test_with_ipywidgets_the_bar_is_tqdm_auto(monkeypatch):
    monkeypatch.delenv("COMPANION_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "has_ipywidgets", lambda: True)
    assert progress.bar_class() is tqdm.auto.tqdm


def test_the_book_build_asks_for_the_text_bar(monkeypatch):
    """Under the book's build (book/_ext/offline.py sets COMPANION_PROGRESS=text) the bar is
    text even with ipywidgets, so no widget state reaches the pages."""
    monkeypatch.setattr(progress, "has_ipywidgets", lambda: True)
    monkeypatch.setenv("COMPANION_PROGRESS", "text")
    assert progress.bar_class() is tqdm.std.tqdm
    monkeypatch.setenv("COMPANION_PROGRESS", "widget")
    assert progress.bar_class() is tqdm.auto.tqdm


def test_without_ipywidgets_the_bar_is_plain_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # what `import ipywidgets` fails on
    assert not progress.has_ipywidgets()
    assert progress.bar_class() is tqdm.std.tqdm
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a TqdmWarning would fail here
        assert list(progress.tqdm(range(3), disable=True)) == [0, 1, 2]


def test_training_uses_the_quiet_bar():
    from companion import train

    assert train.tqdm is progress.tqdm


def stderr_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stderr")


@pytest.mark.slow
def test_in_a_jupyter_kernel_without_ipywidgets_no_warning():
    """In a real kernel without ipywidgets, tqdm.auto warns; companion's bar does not."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('import sys\nsys.modules["ipywidgets"] = None  # as if it were not installed'),
        nbformat.v4.new_code_cell("from companion.progress import tqdm\nsum(tqdm(range(3)))"),
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm as auto\nsum(auto(range(3)))"),
    ])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    ours, auto = stderr_of(nb.cells[1]), stderr_of(nb.cells[2])
    assert "IProgress not found" in auto, f"the kernel does not reproduce tqdm.auto's warning: {auto!r}"
    assert "Warning" not in ours and "3/3" in ours, ours
