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

:meth:`Diagram.draw` draws the student-level figure with matplotlib only (it works in
JupyterLab, Colab and the book, with or without Graphviz). :func:`show_torchview` draws
torchview's full graph of the same kind of pass with Graphviz's ``dot`` when it is installed,
and prints a note instead when it is not.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch, Rectangle
from torch import nn

from ._validate import require_tensor

__all__ = ["Block", "Diagram", "Group", "Link", "Recording", "captioner_diagram", "has_dot", "multihead_diagram", "record",
           "seq2seq_diagram", "show_torchview", "torchview_graph", "transformer_diagram", "vit_diagram"]

Shape = tuple[int, ...]

NO_DOT_NOTE = ("Graphviz's `dot` program is not installed, so torchview's full graph is not drawn here; "
               "the diagram above needs only matplotlib. To see it, install Graphviz "
               "(Debian/Ubuntu: `apt-get install graphviz`, macOS: `brew install graphviz`, "
               "conda: `conda install graphviz`) and run the cell again.")


# --- recording ------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpCall:
    """One torch operation (``matmul``, ``softmax``, ...) run directly inside a module."""

    name: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]


@dataclass(frozen=True)
class ModuleCall:
    """One call of a module: the shapes of its tensor inputs and outputs (in the order
    torchview meets them in the arguments and in the result), and the operations it ran
    itself (not those of its submodules)."""

    path: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    ops: tuple[OpCall, ...]


def _shapes(shapes) -> tuple[Shape, ...]:
    return tuple(tuple(int(n) for n in s) for s in shapes)


class Recording:
    """Every module call of one forward pass, by the module's name in ``model.named_modules()``
    (``""`` is the model itself). ``graph`` is torchview's ``ComputationGraph``."""

    def __init__(self, calls: list[ModuleCall], graph=None):
        self.calls_by_path: dict[str, list[ModuleCall]] = {}
        for call in calls:
            self.calls_by_path.setdefault(call.path, []).append(call)
        self.graph = graph

    def calls(self, path: str) -> list[ModuleCall]:
        """All calls of the module ``path``, in order (a decoder cell is called once per step)."""
        if path not in self.calls_by_path:
            known = ", ".join(repr(p) for p in self.calls_by_path)
            raise ValueError(f"module {path!r} was not called in the recorded forward pass; recorded: {known}")
        return self.calls_by_path[path]

    def _pick(self, path, call, side, index) -> Shape:
        calls = self.calls(path)
        if call >= len(calls):
            raise ValueError(f"module {path!r} was called {len(calls)} times, no call {call}")
        shapes = getattr(calls[call], side)
        if index >= len(shapes):
            raise ValueError(f"call {call} of {path!r} has {len(shapes)} tensor {side}, no number {index}")
        return shapes[index]

    def output(self, path: str, index: int = 0, call: int = 0) -> Shape:
        """Shape of output ``index`` of call ``call`` of module ``path``."""
        return self._pick(path, call, "outputs", index)

    def input(self, path: str, index: int = 0, call: int = 0) -> Shape:
        """Shape of tensor input ``index`` of call ``call`` of module ``path``."""
        return self._pick(path, call, "inputs", index)

    def op(self, path: str, name: str, nth: int = 0, call: int = 0) -> OpCall:
        """The ``nth`` operation called ``name`` (e.g. ``"softmax"``) run by module ``path`` itself."""
        found = [op for op in self.calls(path)[call].ops if op.name == name]
        if nth >= len(found):
            ran = sorted({op.name for op in self.calls(path)[call].ops})
            raise ValueError(f"module {path!r} ran {len(found)} {name!r} operations, no number {nth}; it ran {ran}")
        return found[nth]


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _draw_graph(model: nn.Module, inputs, kwargs, depth, **options):
    try:
        from torchview import draw_graph
    except ImportError as e:  # a dependency of the companion; only an old environment lacks it
        raise ImportError("companion.diagrams records shapes with torchview: pip install torchview") from e
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for i, x in enumerate(inputs):
        require_tensor(f"input {i}", x)
    # torchview runs the pass in eval mode and then sets every submodule to the model's own mode:
    # keep each submodule's mode instead (a frozen CNN inside a captioner stays in eval mode)
    modes = [(m, m.training) for m in model.modules()]
    try:
        # the model's own device: torchview would otherwise move the model to CUDA when it exists
        return draw_graph(model, input_data=list(inputs), device=_device_of(model), depth=depth, **options,
                          **kwargs)
    except RuntimeError as e:
        if str(e).startswith("Failed to run torchgraph") and e.__cause__ is not None:
            raise e.__cause__ from None  # the model's own error (a wrong shape, say), not torchview's wrapper
        raise
    finally:
        for m, training in modes:
            m.training = training


def record(model: nn.Module, *inputs: torch.Tensor, **kwargs) -> Recording:
    """Run ``model(*inputs, **kwargs)`` once (eval mode, no gradients; the model's mode is
    restored) and record the shapes of every module call and of the operations in it."""
    graph = _draw_graph(model, inputs, kwargs, depth=1)  # imports torchview, or says how to install it
    from torchview.computation_node import FunctionNode, ModuleNode
    names: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        names.setdefault(id(module), name)
    calls: list[ModuleCall] = []

    def walk(items):
        for item in items:
            if not isinstance(item, dict):
                continue
            (node, children), = item.items()
            if isinstance(node, ModuleNode) and node.compute_unit_id in names:
                calls.append(ModuleCall(names[node.compute_unit_id], _shapes(node.input_shape or ()),
                                        _shapes(node.output_shape or ()), _ops_in_order(children, FunctionNode)))
            walk(children)

    walk(next(iter(graph.node_hierarchy.values())))
    return Recording(calls, graph)


def _ops_in_order(children, function_node_type) -> tuple[OpCall, ...]:
    """The operations a module ran itself, in order (torchview nests an op's own record as a
    one-entry dict when it has children)."""
    ops = []
    for child in children:
        node = next(iter(child)) if isinstance(child, dict) else child
        if isinstance(node, function_node_type):
            ops.append(OpCall(node.name, _shapes(node.input_shape or ()), _shapes(node.output_shape or ())))
    return tuple(ops)


# --- blocks and diagrams ----------------------------------------------------------------------

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


def _symbolic(diagram_blocks, rec: Recording) -> list[Block]:
    """Fill in each block's recorded shape from its source."""
    out = []
    for spec in diagram_blocks:
        key, label, dims, source = spec[:4]
        opts = spec[4] if len(spec) > 4 else {}
        extras = tuple((lab, d, _read(rec, src), src) for lab, d, src in opts.pop("extras", ()))
        out.append(Block(key, label, dims, _read(rec, source), source, extras=extras, **opts))
    return out


def _read(rec: Recording, source: tuple) -> Shape:
    kind = source[0]
    if kind in ("output", "input"):
        _, path, index, call = source
        return getattr(rec, kind)(path, index, call)
    if kind == "op":
        _, path, name, nth, side, index = source
        return getattr(rec.op(path, name, nth), side + "s")[index]
    raise ValueError(f"unknown source {source!r}")


# --- the course's five diagrams ------------------------------------------------------------------

def transformer_diagram(model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor) -> Diagram:
    """The encoder-decoder :class:`~companion.models.transformer.Transformer` on ``src (B, N)`` and
    ``tgt_in (B, T)``: embeddings, one encoder and one decoder layer (each repeated L times),
    the memory feeding the cross-attention, the logits."""
    from .models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    c = model.config
    rec = record(model, src, tgt_in, need_weights=True)
    B, N = src.shape
    sizes = dict(B=B, N=N, T=tgt_in.shape[1], d=c.d_model, H=c.num_heads, d_ff=c.d_ff, V=c.vocab_size)
    enc, dec = "encoder.layers.0.", "decoder.layers.0."
    specs = [
        ("src", "source tokens", "B, N", ("input", "", 0, 0), dict(kind="data")),
        ("src_embed", "embedding × √d + positions", "B, N, d", ("input", "encoder", 0, 0), dict(row=1)),
        ("enc_self", "multi-head self-attention", "B, N, d", ("output", enc + "self_attn", 0, 0),
         dict(row=2, extras=[("weights", "B, H, N, N", ("output", enc + "self_attn", 1, 0))])),
        ("enc_ffn", "feed-forward network", "B, N, d", ("output", enc + "ffn", 0, 0),
         dict(row=3, extras=[("hidden", "B, N, d_ff", ("output", enc + "ffn.linear1", 0, 0))])),
        ("memory", "encoder output: the memory", "B, N, d", ("output", "encoder", 0, 0), dict(row=4)),
        ("tgt", "target tokens, shifted right", "B, T", ("input", "", 1, 0), dict(column=1, kind="data")),
        ("tgt_embed", "embedding × √d + positions", "B, T, d", ("input", "decoder", 0, 0), dict(column=1, row=1)),
        ("dec_self", "masked multi-head self-attention", "B, T, d", ("output", dec + "self_attn", 0, 0),
         dict(column=1, row=2, extras=[("weights", "B, H, T, T", ("output", dec + "self_attn", 1, 0))])),
        ("cross", "cross-attention (queries: decoder)", "B, T, d", ("output", dec + "cross_attn", 0, 0),
         dict(column=1, row=4, extras=[("weights", "B, H, T, N", ("output", dec + "cross_attn", 1, 0))])),
        ("dec_ffn", "feed-forward network", "B, T, d", ("output", dec + "ffn", 0, 0), dict(column=1, row=5)),
        ("logits", "Linear d → V: logits", "B, T, V", ("output", "generator", 0, 0),
         dict(column=1, row=6, kind="data")),
    ]
    norm = "pre-norm" if c.norm_first else "post-norm"
    return Diagram(
        title=f"The Transformer ({norm}), shapes recorded from one forward pass",
        blocks=_symbolic(specs, rec), sizes=sizes, recording=rec, columns=["encoder", "decoder"],
        links=[Link("memory", "cross", "keys, values")],
        groups=[Group("enc_self", "enc_ffn", f"encoder layer × {c.num_encoder_layers}"),
                Group("dec_self", "dec_ffn", f"decoder layer × {c.num_decoder_layers}")])


def vit_diagram(model: nn.Module, images: torch.Tensor) -> Diagram:
    """The :class:`~companion.models.vit.ViT` on ``images (B, C, S, S)``: patches, patch
    embedding, positions, the encoder layer (repeated), pooling and the class scores."""
    from .models.vit import ViT

    if not isinstance(model, ViT):
        raise TypeError(f"model must be a companion ViT, got {type(model).__name__}")
    rec = record(model, images, need_weights=True)
    p = model.patch_embed.patch_size
    layer = model.encoder.layers[0]
    sizes = dict(B=images.shape[0], C=model.patch_embed.in_channels, S=model.image_size, p=p,
                 N=model.num_patches, d=model.head.in_features, H=layer.self_attn.num_heads,
                 d_ff=layer.ffn.linear1.out_features, K=model.head.out_features)
    cls = model.pool == "cls"
    tokens = "N + 1" if cls else "N"
    enc = "encoder.layers.0."
    specs = [
        ("image", "images", "B, C, S, S", ("input", "", 0, 0), dict(kind="data")),
        ("patches", "patchify: N = (S/p)² patches", "B, N, p*p*C", ("input", "patch_embed.proj", 0, 0), dict(row=1)),
        ("embed", "patch embedding: Linear p·p·C → d", "B, N, d", ("output", "patch_embed", 0, 0), dict(row=2)),
        ("tokens", ("[class] token + positions" if cls else "+ learned positions"), f"B, {tokens}, d",
         ("input", "encoder", 0, 0), dict(row=3)),
        ("self_attn", "multi-head self-attention", f"B, {tokens}, d", ("output", enc + "self_attn", 0, 0),
         dict(column=1, row=3, extras=[("weights", f"B, H, {tokens}, {tokens}", ("output", enc + "self_attn", 1, 0))])),
        ("ffn", "feed-forward network", f"B, {tokens}, d", ("output", enc + "ffn", 0, 0),
         dict(column=1, row=4, extras=[("hidden", f"B, {tokens}, d_ff", ("output", enc + "ffn.linear1", 0, 0))])),
        ("features", "encoder output (final LayerNorm)", f"B, {tokens}, d", ("output", "encoder", 0, 0),
         dict(column=1, row=5)),
        ("pooled", "[class] token's output" if cls else "mean over the N tokens", "B, d", ("input", "head", 0, 0),
         dict(column=1, row=6)),
        ("logits", "Linear d → K classes: logits", "B, K", ("output", "head", 0, 0),
         dict(column=1, row=7, kind="data")),
    ]
    return Diagram(
        title="The Vision Transformer, shapes recorded from one forward pass",
        blocks=_symbolic(specs, rec), sizes=sizes, recording=rec,
        columns=["image → tokens", "Transformer encoder → class scores"],
        links=[Link("tokens", "self_attn", "tokens")],
        groups=[Group("self_attn", "ffn", f"encoder layer × {len(model.encoder.layers)}")])


def multihead_diagram(mha: nn.Module, x: torch.Tensor) -> Diagram:
    """:class:`~companion.multihead.MultiHeadAttention` as self-attention on ``x (B, N, D)``,
    in the four steps of chapter 5 (the explicit path, which keeps the weights)."""
    from .multihead import MultiHeadAttention

    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a companion MultiHeadAttention, got {type(mha).__name__}")
    rec = record(mha, x, need_weights=True)
    sizes = dict(B=x.shape[0], N=x.shape[1], D=mha.d_model, H=mha.num_heads, D_H=mha.head_dim)
    specs = [
        ("x", "input tokens x", "B, N, D", ("input", "", 0, 0), dict(column=1, kind="data")),
        ("qkv", "step 1: QKV projection", "B, N, 3*D", ("output", "in_proj", 0, 0), dict(column=1, row=1)),
        ("q", "Q, split into H heads", "B, H, N, D_H", ("op", "", "matmul", 0, "input", 0), dict(row=2)),
        ("k", "K, split into H heads", "B, H, N, D_H", ("op", "", "transpose", 0, "input", 0),
         dict(column=1, row=2)),
        ("v", "V, split into H heads", "B, H, N, D_H", ("op", "", "matmul", 1, "input", 1), dict(column=2, row=2)),
        ("weights", "step 2: softmax($QK^T/\\sqrt{D_H}$)", "B, H, N, N", ("op", "", "softmax", 0, "output", 0),
         dict(column=1, row=3)),
        ("heads", "step 3: weights × V", "B, H, N, D_H", ("op", "", "matmul", 1, "output", 0),
         dict(column=1, row=4)),
        ("concat", "concatenate the heads", "B, N, H*D_H", ("input", "out_proj", 0, 0), dict(column=1, row=5)),
        ("out", "step 4: output projection", "B, N, D", ("output", "", 0, 0), dict(column=1, row=6, kind="data")),
    ]
    links = [Link("qkv", "q"), Link("qkv", "v"), Link("q", "weights"), Link("v", "heads")]
    return Diagram(title="Multi-head attention, shapes recorded from one forward pass",
                   blocks=_symbolic(specs, rec), sizes=sizes, recording=rec, links=links)


def seq2seq_diagram(model: nn.Module, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> Diagram:
    """The GRU :class:`~companion.models.seq2seq.Seq2Seq` on ``src (B, N)``, ``src_lengths (B,)``
    and ``tgt_in (B, T)``: the encoder, one decoder step (run T times) and, with attention,
    the context it reads from every encoder state."""
    from .models.seq2seq import Seq2Seq

    if not isinstance(model, Seq2Seq):
        raise TypeError(f"model must be a companion Seq2Seq, got {type(model).__name__}")
    rec = record(model, src, src_lengths, tgt_in)
    hidden = model.encoder.hidden_size
    sizes = dict(B=src.shape[0], N=src.shape[1], T=tgt_in.shape[1], E=model.src_embed.embedding_dim,
                 h=hidden, V=model.tgt_vocab)
    specs = [
        ("src", "source tokens", "B, N", ("input", "", 0, 0), dict(kind="data")),
        ("src_embed", "embedding", "B, N, E", ("output", "src_embed", 0, 0), dict(row=1)),
        ("states", "GRU encoder: states $h_1 \\dots h_N$", "B, N, h", ("output", "encoder", 0, 0), dict(row=2)),
        ("tgt", "target tokens, shifted right", "B, T", ("input", "", 2, 0), dict(column=2, kind="data")),
        ("prev", "token $y_{t-1}$", "B", ("input", "tgt_embed", 0, 0), dict(column=2, row=1)),
        ("tgt_embed", "embedding", "B, E", ("output", "tgt_embed", 0, 0), dict(column=2, row=2)),
        ("cell_in", "[embedding; context $c_t$]", "B, E + h", ("input", "cell", 0, 0), dict(column=2, row=3)),
        ("cell", "GRU cell: state $s_t$", "B, h", ("output", "cell", 0, 0), dict(column=2, row=4)),
        ("step_logits", "Linear $[s_t; c_t]$ → V", "B, V", ("output", "out", 0, 0), dict(column=2, row=5)),
        ("logits", "logits of the T steps", "B, T, V", ("output", "", 0, 0), dict(column=2, row=6, kind="data")),
    ]
    links = []
    kind = model.attention_kind
    if kind is not None:
        specs.append(("attention", f"{'additive' if kind == 'additive' else 'dot-product'} attention: context $c_t$",
                      "B, h", ("output", "attend", 0, 0),
                      dict(column=1, row=3, extras=[("weights", "B, N", ("output", "attend", 1, 0))])))
        links += [Link("states", "attention", "keys, values"), Link("attention", "cell_in", "$c_t$"),
                  Link("cell", "attention", "query $s_{t-1}$", dashed=True)]
        title = f"Seq2seq with {'additive' if kind == 'additive' else 'dot-product'} attention"
    else:
        links.append(Link("states", "cell_in", "$c = h_N$ at every step"))
        title = "Seq2seq without attention (the bottleneck)"
    return Diagram(title=title + ", shapes recorded from one forward pass", blocks=_symbolic(specs, rec),
                   sizes=sizes, recording=rec, columns=["encoder", "attention" if kind else "", "decoder, one step"],
                   links=links, groups=[Group("prev", "step_logits", "each of the T steps")])


class _EncoderThenCaptioner(nn.Module):
    """``captioner(encoder(images), tokens_in)``: a captioner built with ``encoder=None``
    (image codes computed once) drawn together with its CNN. No parameters of its own."""

    def __init__(self, encoder: nn.Module, captioner: nn.Module):
        super().__init__()
        self.encoder, self.captioner = encoder, captioner

    def forward(self, images, tokens_in):
        return self.captioner(self.encoder(images), tokens_in)


def captioner_diagram(model: nn.Module, images: torch.Tensor, tokens_in: torch.Tensor,
                      encoder: nn.Module | None = None) -> Diagram:
    """The :class:`~companion.models.captioning.ImageCaptioner` on ``images (B, 3, S, S)`` and
    ``tokens_in (B, T)``: the truncated CNN, the image code's bias ``b_v``, one step of
    the recurrent decoder (run T times) and the logits. A captioner built with
    ``encoder=None`` is drawn with the ``encoder`` given here (e.g. ``cnn.truncate()``)."""
    from .models.captioning import ImageCaptioner

    if not isinstance(model, ImageCaptioner):
        raise TypeError(f"model must be a companion ImageCaptioner, got {type(model).__name__}")
    if model.encoder is None and encoder is None:
        raise ValueError("this captioner reads image codes (encoder=None): pass the CNN as encoder=")
    if model.encoder is not None:
        encoder, whole, cap = model.encoder, model, ""
    else:
        whole, cap = _EncoderThenCaptioner(encoder, model), "captioner."
    rec = record(whole, images, tokens_in)
    sizes = dict(B=images.shape[0], S=images.shape[-1], F=model.feature_dim, h=model.hidden_dim,
                 E=model.embed.embedding_dim, V=model.vocab_size, T=tokens_in.shape[1])
    specs = [("image", "images", "B, 3, S, S", ("input", "", 0, 0), dict(kind="data"))]
    pools = [name for name, m in encoder.named_modules() if isinstance(m, nn.MaxPool2d)]
    convs = [m for m in encoder.modules() if isinstance(m, nn.Conv2d)]
    if len(pools) == 3 and len(convs) == 3:  # ShapesCNN(...).truncate(): three conv blocks
        sizes["w"] = convs[0].out_channels
        for k, (name, dims) in enumerate(zip(pools, ["B, w, S//2, S//2", "B, 2*w, S//4, S//4",
                                                     "B, 4*w, S//8, S//8"], strict=True)):
            specs.append((f"conv{k + 1}", f"conv block {k + 1} (conv, BN, ReLU, pool)", dims,
                          ("output", "encoder." + name, 0, 0), dict(row=k + 1)))
        row = 4
    else:
        row = 1
    specs += [
        ("code", "image code CNN(I)", "B, F", ("output", "encoder", 0, 0), dict(row=row)),
        ("b_v", "$b_v = W_{hi}\\,$CNN(I)", "B, h", ("output", cap + "W_hi", 0, 0), dict(row=row + 1)),
        ("tokens", "caption tokens, shifted right", "B, T", ("input", "", 1, 0), dict(column=1, kind="data")),
        ("prev", "token $y_{t-1}$", "B", ("input", cap + "embed", 0, 0), dict(column=1, row=row - 2)),
        ("embed", "embedding", "B, E", ("output", cap + "embed", 0, 0), dict(column=1, row=row - 1)),
        ("cell", f"{model.cell_kind.upper()} cell: state $h_t$", "B, h", ("output", cap + "cell", 0, 0),
         dict(column=1, row=row + 1)),
        ("step_logits", "$W_{hy} h_t$: scores of the next word", "B, V", ("output", cap + "W_hy", 0, 0),
         dict(column=1, row=row + 2)),
        ("logits", "logits of the T steps", "B, T, V", ("output", "", 0, 0),
         dict(column=1, row=row + 3, kind="data")),
    ]
    how = "added at $t = 1$ only" if model.cell_kind == "rnn" else "$h_0 = \\tanh(b_v)$"
    return Diagram(title=f"Image captioner (CNN + {model.cell_kind.upper()}), shapes recorded from one forward pass",
                   blocks=_symbolic(specs, rec), sizes=sizes, recording=rec,
                   columns=["image encoder (CNN)", "decoder, one step"],
                   links=[Link("b_v", "cell", how)], groups=[Group("prev", "step_logits", "each of the T steps")])


# --- torchview's own graph, drawn by Graphviz ---------------------------------------------------------

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
