"""Blocks, arrows and frames of an architecture diagram, checked against a recording and drawn
with matplotlib only.

A :class:`Diagram` is a list of :class:`Block` (a label, its symbolic shape ``"B, N, d"`` and
the shape recorded from the forward pass), :class:`Link` arrows and :class:`Group` frames.
Creating one checks every recorded shape against its symbolic shape evaluated with the
diagram's sizes; :meth:`Diagram.draw` draws it (no Graphviz needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Rectangle

from .recording import Recording, Shape

__all__ = ["Block", "Diagram", "Group", "Link", "pretty_dims"]

_SAFE = {"__builtins__": {}}


def _plain(label: str) -> str:
    """A label without matplotlib's math markup: ``"token $y_{t-1}$"`` → ``"token y_{t-1}"``."""
    return label.replace("$", "").replace("\\,", " ").replace("\\dots", "…").replace("\\tanh", "tanh")


def _evaluate(dims: str, sizes: dict[str, int]) -> Shape:
    if not dims.strip():
        return ()
    try:
        return tuple(int(eval(part, _SAFE, dict(sizes))) for part in dims.split(","))  # noqa: S307 (our own strings)
    except NameError as e:
        raise ValueError(f"the symbolic shape ({dims}) uses a size that is not given: {e}; sizes: {sizes}") from e


def pretty_dims(dims: str) -> str:
    """``"B, N, 3*d"`` → ``"(B, N, 3d)"``; ``"S//2"`` → ``"S/2"``; ``"p*p*C"`` → ``"p·p·C"``;
    one dimension keeps Python's comma, ``"(B,)"``."""
    text = dims.replace("//", "/")
    text = re.sub(r"(\d)\*([A-Za-z(])", r"\1\2", text)
    text = text.replace("*", "·")
    return f"({text},)" if "," not in text else f"({text})"


@dataclass(frozen=True)
class Block:
    """One box of a diagram.

    ``dims`` is the symbolic shape (Python expressions in the diagram's sizes, e.g.
    ``"B, N, 3*d"``), ``shape`` the recorded one, ``source`` where it was read
    (``("output", module path, index, call)``, ``("input", ...)`` or
    ``("op", module path, op name, nth, "output"/"input", index)``). ``extras`` are
    further recorded tensors of the block, as ``(label, dims, shape, source)`` (e.g. the
    attention weights). ``column``/``row`` place the box; ``kind`` is ``"data"`` (a tensor
    entering or leaving the model) or ``"layer"``."""

    key: str
    label: str
    dims: str
    shape: Shape
    source: tuple
    column: int = 0
    row: float = 0.0
    kind: str = "layer"
    extras: tuple = ()

    def shape_text(self) -> str:
        return f"{pretty_dims(self.dims)} = {self.shape}"


@dataclass(frozen=True)
class Link:
    """An arrow between two blocks (by key), beyond those that chain each column."""

    start: str
    end: str
    label: str = ""
    dashed: bool = False


@dataclass(frozen=True)
class Group:
    """A dashed frame around the blocks ``first`` … ``last`` of one column, e.g. a layer
    repeated L times."""

    first: str
    last: str
    label: str


@dataclass
class Diagram:
    """An architecture diagram whose every shape was recorded from a forward pass.

    ``sizes`` gives the value of every symbol (``B``, ``N``, ``d``, …) from the model's
    configuration and the inputs. Creating a diagram checks that each block's recorded shape
    equals its symbolic shape evaluated with ``sizes``, and raises ``ValueError`` otherwise.
    """

    title: str
    blocks: list[Block]
    sizes: dict[str, int]
    links: list[Link] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    recording: Recording | None = None

    def __post_init__(self):
        keys = [b.key for b in self.blocks]
        if len(set(keys)) != len(keys):
            raise ValueError(f"block keys must be unique, got {keys}")
        for link in self.links:
            self.block(link.start), self.block(link.end)
        for group in self.groups:
            self.block(group.first), self.block(group.last)
        self.check()

    def check(self) -> None:
        """Raise ``ValueError`` if a recorded shape differs from its symbolic shape."""
        for b in self.blocks:
            for label, dims, shape in [(b.label, b.dims, b.shape)] + [(f"{b.label}: {e[0]}", e[1], e[2]) for e in b.extras]:
                want = _evaluate(dims, self.sizes)
                if tuple(shape) != want:
                    raise ValueError(f"block {label!r}: the forward pass recorded shape {tuple(shape)}, "
                                     f"but ({dims}) with sizes {self.sizes} is {want}")

    def block(self, key: str) -> Block:
        for b in self.blocks:
            if b.key == key:
                return b
        raise KeyError(f"no block {key!r}; blocks: {[b.key for b in self.blocks]}")

    def shape(self, key: str, extra: str | None = None) -> Shape:
        """The recorded shape of block ``key``, or of its extra tensor ``extra`` (e.g. ``"weights"``)."""
        block = self.block(key)
        if extra is None:
            return block.shape
        for label, _, shape, _ in block.extras:
            if label == extra:
                return shape
        raise KeyError(f"block {key!r} has no extra {extra!r}; it has {[e[0] for e in block.extras]}")

    def table(self) -> str:
        """The diagram as text: one line per block (and per extra tensor)."""
        lines = [self.title]
        for b in self.blocks:
            lines.append(f"{_plain(b.label):<44} {pretty_dims(b.dims)} = {b.shape}")
            for label, dims, shape, _ in b.extras:
                lines.append(f"{'  ' + label:<44} {pretty_dims(dims)} = {shape}")
        return "\n".join(lines)

    # --- drawing ---
    def draw(self, col_width: float = 3.4, row_height: float = 0.95):
        """Draw the diagram with matplotlib (no Graphviz needed); returns the ``Figure``."""
        n_cols = 1 + max(b.column for b in self.blocks)
        n_rows = 1 + max(b.row for b in self.blocks)
        fig, ax = plt.subplots(figsize=(max(col_width * n_cols, 6.0), row_height * n_rows + 0.9))
        box_w, box_h = 0.9, 0.74
        boxes = {}
        for b in self.blocks:
            x, y = b.column, -b.row
            boxes[b.key] = (x, y)
            colour = "#fff4c2" if b.kind == "data" else "#dcebf7"
            ax.add_patch(FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h,
                                        boxstyle="round,pad=0,rounding_size=0.06", fc=colour, ec="#4a4a4a",
                                        lw=1.0, zorder=2))
            lines = [(b.label, dict(fontsize=8.5, weight="bold")), (b.shape_text(), dict(fontsize=8, family="monospace"))]
            lines += [(f"{lab} {pretty_dims(dims)} = {shape}", dict(fontsize=7, family="monospace", color="#444"))
                      for lab, dims, shape, _ in b.extras]
            top = y + 0.11 * (len(lines) - 1)
            for i, (text, style) in enumerate(lines):
                ax.text(x, top - 0.22 * i, text, ha="center", va="center", zorder=3, **style)
        # the chain of each column, then the other links
        arrow = dict(arrowstyle="-|>", color="#333", lw=1.0, shrinkA=0, shrinkB=0)
        for col in range(n_cols):
            chain = sorted((b for b in self.blocks if b.column == col), key=lambda b: b.row)
            for a, c in zip(chain, chain[1:], strict=False):
                (xa, ya), (xc, yc) = boxes[a.key], boxes[c.key]
                ax.annotate("", xy=(xc, yc + box_h / 2), xytext=(xa, ya - box_h / 2), arrowprops=arrow, zorder=1)
        for link in self.links:
            (xa, ya), (xc, yc) = boxes[link.start], boxes[link.end]
            side = 1 if xc > xa else -1
            start = (xa + side * box_w / 2, ya)
            end = (xc - side * box_w / 2, yc)
            style = dict(arrow, color="#b03a2e", linestyle="--" if link.dashed else "-",
                         connectionstyle="arc3,rad=0.0" if ya == yc else f"arc3,rad={0.2 * side}")
            ax.annotate("", xy=end, xytext=start, arrowprops=style, zorder=1)
            if link.label:
                ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + (0.09 if ya == yc else -0.05),
                        link.label, ha="center",
                        va="bottom", fontsize=7.5, color="#b03a2e", style="italic", zorder=4,
                        bbox=dict(fc="white", ec="none", pad=0.5, alpha=0.9))
        for group in self.groups:
            (x, y1), (_, y2) = boxes[group.first], boxes[group.last]
            pad = 0.08
            ax.add_patch(Rectangle((x - box_w / 2 - pad, y2 - box_h / 2 - pad), box_w + 2 * pad,
                                   y1 - y2 + box_h + 2 * pad, fill=False, ls="--", ec="#777", lw=1.0, zorder=1))
            ax.text(x - box_w / 2 - pad + 0.02, y1 + box_h / 2 + pad + 0.02, group.label, ha="left", va="bottom",
                    fontsize=7.5, color="#555", style="italic")
        for col, name in enumerate(self.columns):
            ax.text(col, 0.72, name, ha="center", va="bottom", fontsize=9.5, color="#222")
        half = max(col_width * n_cols, 6.0) / col_width / 2
        ax.set_xlim((n_cols - 1) / 2 - half, (n_cols - 1) / 2 + half)
        ax.set_ylim(-(n_rows - 1) - 0.6, 1.05 if self.columns else 0.7)
        ax.set_axis_off()
        ax.set_title(self.title, fontsize=11)
        fig.tight_layout()
        return fig
