"""torchview's own full graph of a forward pass, drawn by Graphviz's ``dot`` where it is installed."""

from __future__ import annotations

import shutil

import torch
from torch import nn

from .recording import _draw_graph

__all__ = ["NO_DOT_NOTE", "has_dot", "show_torchview", "torchview_graph"]

NO_DOT_NOTE = ("Graphviz's `dot` program is not installed, so torchview's full graph is not drawn here; "
               "the diagram above needs only matplotlib. To see it, install Graphviz "
               "(Debian/Ubuntu: `apt-get install graphviz`, macOS: `brew install graphviz`, "
               "conda: `conda install graphviz`) and run the cell again.")


def has_dot() -> bool:
    """Whether Graphviz's ``dot`` program is installed (torchview's graphs need it to be drawn)."""
    return shutil.which("dot") is not None


def torchview_graph(model: nn.Module, *inputs: torch.Tensor, depth: int = 2, **kwargs):
    """torchview's graph of ``model(*inputs, **kwargs)`` as a ``graphviz.Digraph`` (every
    module and operation down to ``depth``, with shapes). Making it needs no ``dot``;
    drawing it does (:func:`show_torchview`)."""
    graph = _draw_graph(model, inputs, kwargs, depth=depth, expand_nested=True).visual_graph
    graph.node_attr.update(fontname="DejaVu Sans")  # a font that Graphviz finds on most systems
    graph.graph_attr.update(size="7,9")  # inches at most, for the page
    return graph


def show_torchview(model: nn.Module, *inputs: torch.Tensor, depth: int = 2, **kwargs):
    """Draw torchview's graph with ``dot`` and return it as an SVG for the notebook, or print a
    note and return ``None`` where Graphviz is not installed."""
    if not has_dot():
        print(NO_DOT_NOTE)
        return None
    svg = torchview_graph(model, *inputs, depth=depth, **kwargs).pipe(format="svg").decode()
    try:
        from IPython.display import SVG
    except ImportError:
        return svg
    return SVG(svg)
