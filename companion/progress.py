"""Progress bars that degrade quietly.

``tqdm.auto`` draws a live widget in Jupyter, but only with ipywidgets installed: without
it every bar warns ``TqdmWarning: IProgress not found`` and falls back to text anyway.
``progress.tqdm`` is ``tqdm.auto``'s bar where ipywidgets can be imported and tqdm's
plain text bar otherwise, so a bare Jupyter install shows text bars and no warning.
With ``COMPANION_PROGRESS=text`` in the environment it is always the text bar: the book's
build sets it (book/_ext/offline.py), so the built pages hold no widget state and load no
widget scripts from the internet.

    from companion.progress import tqdm
    for step in tqdm(range(steps), desc="training"): ...
"""

from __future__ import annotations

import importlib.util
import os


def has_ipywidgets() -> bool:
    """True when ipywidgets can be imported (what tqdm.auto's widget bar needs)."""
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):  # a broken install, or sys.modules["ipywidgets"] is None
        return False


def bar_class() -> type:
    """The bar to use here: ``tqdm.auto.tqdm`` with ipywidgets, ``tqdm.std.tqdm`` without
    (or when ``COMPANION_PROGRESS=text``)."""
    if os.environ.get("COMPANION_PROGRESS") != "text" and has_ipywidgets():
        from tqdm.auto import tqdm as bar
    else:
        from tqdm.std import tqdm as bar
    return bar


def tqdm(*args, **kwargs):
    """A progress bar, as ``tqdm.tqdm(*args, **kwargs)``, of the class :func:`bar_class` picks."""
    return bar_class()(*args, **kwargs)
