"""Architecture diagrams drawn from a forward pass of the real module.

A diagram's shapes are never typed by hand. :func:`record` runs the model once under
`torchview <https://github.com/mert-kurttutan/torchview>`_, which notes the input and output
shapes of every module call and every torch operation. A :class:`Diagram` is a list of
blocks (:class:`Block`), each with a label, its symbolic shape (``"B, N, d"``) and the shape read
from that recording. The sizes of the symbols come from the model's configuration and the
inputs, and a diagram whose recorded shape disagrees with its symbolic one is refused
(``ValueError``): what is drawn is what the module computes.

- :func:`captioner_diagram`   CNN + RNN captioner (chapter 1)
- :func:`seq2seq_diagram`     GRU encoder-decoder with attention (chapter 2)
- :func:`multihead_diagram`   multi-head attention in its four steps (chapter 5)
- :func:`transformer_diagram` the encoder-decoder Transformer (chapter 7)
- :func:`vit_diagram`         the Vision Transformer (chapter 8)
- :func:`gpt_diagram`         the decoder-only language model (chapter 10)

:meth:`Diagram.draw` draws the student-level figure with matplotlib only (it works in
JupyterLab, Colab and the book, with or without Graphviz). :func:`show_torchview` draws
torchview's full graph of the same kind of pass with Graphviz's ``dot`` when it is installed,
and prints a note instead when it is not.

The package keeps recording apart from drawing:

- ``companion.diagrams.recording`` :func:`record`, :class:`Recording` (what the pass did)
- ``companion.diagrams.drawing``   :class:`Block`, :class:`Link`, :class:`Group`, :class:`Diagram`
- ``companion.diagrams.models``    the ``*_diagram`` functions, one per model
- ``companion.diagrams.torchview`` :func:`has_dot`, :func:`torchview_graph`, :func:`show_torchview`
"""

from __future__ import annotations

from .drawing import Block, Diagram, Group, Link, pretty_dims
from .models import (
    captioner_diagram,
    gpt_diagram,
    multihead_diagram,
    seq2seq_diagram,
    transformer_diagram,
    vit_diagram,
)
from .recording import ModuleCall, OpCall, Recording, record
from .torchview import NO_DOT_NOTE, has_dot, show_torchview, torchview_graph

__all__ = ["NO_DOT_NOTE", "Block", "Diagram", "Group", "Link", "ModuleCall", "OpCall", "Recording",
           "captioner_diagram", "gpt_diagram", "has_dot", "multihead_diagram", "pretty_dims", "record",
           "seq2seq_diagram", "show_torchview", "torchview_graph", "transformer_diagram", "vit_diagram"]
