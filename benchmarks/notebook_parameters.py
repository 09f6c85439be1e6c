"""Set a chapter's parameters the way papermill does, without papermill (which command 1
does not install): a cell ``name = value`` inserted after the cell tagged ``parameters``."""

from __future__ import annotations

import nbformat


def with_parameters(notebook: nbformat.NotebookNode, **values) -> nbformat.NotebookNode:
    """The notebook with a cell setting ``values`` inserted after its ``parameters`` cell."""
    tagged = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.get("metadata", {}).get("tags", [])]
    if not tagged:
        raise ValueError("the notebook has no cell tagged 'parameters'")
    source = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(tagged[0] + 1, injected)
    return notebook
