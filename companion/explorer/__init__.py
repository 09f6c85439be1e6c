"""An interactive, offline view of attention weights: point at a token, see where each head looks.

``head_view`` draws, for the query token you select, one line to every key per head, as
strong as the weight, one colour per head (Okabe and Ito's colour-blind-safe palette);
heads are switched on and off, the layer (and, for encoder-decoder models, the attention:
encoder, decoder or cross) is chosen, and the exact weight is shown on hover and focus.
``model_view`` shows every head of every layer as a thumbnail; clicking one opens it.

The weights come in the layout BertViz documents, so the same data can be handed to it:
one array or tensor per layer, each ``(batch, heads, queries, keys)``::

    head_view(attention=[w_layer1, w_layer2], tokens=words)            # self-attention
    head_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross,
              encoder_tokens=src, decoder_tokens=tgt)                  # encoder-decoder
    head_view(cross_attention=[w], encoder_tokens=src, decoder_tokens=tgt)  # cross only

The view is one HTML fragment with its script and style inline (shipped beside this
module: ``explorer.js``, ``explorer.css``): nothing is downloaded, no require.js and no
kernel is needed once the cell has run, and every id is namespaced, so several views work
on one page (the book, JupyterLab, Notebook 7, Colab). Viewers that run no scripts (a PDF,
GitHub) get the static figure of ``_repr_png_`` or the text the fragment holds.
The weights are rounded to 3 decimals and only the chosen item, layers and tokens are kept.
This module imports nothing else of the course (numpy always, matplotlib for the figure).
"""

from __future__ import annotations

import html
import io
import json
import uuid
from importlib import resources

import numpy as np

__all__ = ["AttentionView", "head_view", "model_view", "PALETTE", "MIME_TYPE"]

# Okabe & Ito (2008): eight colours that readers with any common colour-vision deficiency
# tell apart; the grey stands in for their black, which a dark page would hide.
PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00", "#F0E442", "#999999"]
# The full-precision weights of a view travel in this MIME type beside the HTML: the
# notebook file keeps them (tests compare the page with them), the book's pages do not.
MIME_TYPE = "application/vnd.attention-course.explorer+json"
MAX_BYTES = 500_000  # a view's HTML stays well under 1 MB
DECIMALS = 3

_KINDS = {  # name -> (label, query tokens, key tokens)
    "self": ("self-attention", "tokens", "tokens"),
    "encoder": ("encoder self-attention", "encoder_tokens", "encoder_tokens"),
    "decoder": ("decoder self-attention", "decoder_tokens", "decoder_tokens"),
    "cross": ("cross-attention", "decoder_tokens", "encoder_tokens"),
}


def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def _to_numpy(x, what: str) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device, without importing torch
        x = x.detach().float().cpu().numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be an array or tensor of weights, got {type(x).__name__}") from err


def _layers(attention, kind: str, item: int) -> np.ndarray:
    """Stack one kind's per-layer weights ``(batch, heads, Q, K)`` into ``(layers, heads, Q, K)``."""
    name = "attention" if kind == "self" else f"{kind}_attention"
    if hasattr(attention, "shape") and len(attention.shape) == 4:
        raise TypeError(f"{name} must be a list with one (batch, heads, queries, keys) array per layer; "
                        f"got one array of shape {tuple(attention.shape)}: wrap it as [{name}]")
    if not isinstance(attention, (list, tuple)) or not attention:
        raise TypeError(f"{name} must be a non-empty list or tuple of per-layer weights, got {type(attention).__name__}")
    arrays = [_to_numpy(a, f"{name}[{i}]") for i, a in enumerate(attention)]
    for i, a in enumerate(arrays):
        if a.ndim != 4:
            raise ValueError(f"{name}[{i}] must have 4 dimensions (batch, heads, queries, keys), got shape {a.shape}")
        if a.shape != arrays[0].shape:
            raise ValueError(f"every layer of {name} must have the same shape: layer 0 is {arrays[0].shape}, "
                             f"layer {i} is {a.shape}")
    batch = arrays[0].shape[0]
    if not 0 <= item < batch:
        raise ValueError(f"item {item} is out of range for {name} with batch size {batch} (shape {arrays[0].shape})")
    w = np.stack([a[item] for a in arrays])  # (L, H, Q, K)
    if not np.isfinite(w).all():
        raise ValueError(f"{name} holds non-finite weights (NaN or inf), shape {arrays[0].shape}")
    if w.min() < -1e-6 or w.max() > 1 + 1e-6:
        raise ValueError(f"{name} must hold attention weights in [0, 1], got values from {w.min():.4g} to {w.max():.4g}")
    return w.clip(0.0, 1.0)


def _tokens(tokens, name: str, n: int, axis: str, shape) -> list[str]:
    if tokens is None:
        raise ValueError(f"{name} are needed: the weights have {n} {axis} (shape {shape})")
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} tokens but the weights have {n} {axis} "
                         f"(shape (layers, heads, queries, keys) = {shape}); slice padding off both")
    return tokens


class AttentionView:
    """One interactive view; Jupyter and the book show it through its ``_repr_*_`` methods.

    ``weights[kind]`` holds the full-precision ``(layers, heads, queries, keys)`` weights it
    shows, ``data`` the rounded payload that its page carries.
    """

    def __init__(self, kinds: dict, mode: str, *, layers=None, heads=None, layer=None, query=0,
                 title: str | None = None):
        if mode not in ("head", "model"):
            raise ValueError(f"mode must be 'head' or 'model', got {mode!r}")
        first = next(iter(kinds.values()))
        n_layers, n_heads = first["w"].shape[:2]
        layers = list(range(n_layers)) if layers is None else [int(i) for i in layers]
        for name, k in kinds.items():
            if k["w"].shape[:2] != (n_layers, n_heads):
                raise ValueError(f"every attention must have the same layers and heads: {name} is "
                                 f"(layers, heads) = {k['w'].shape[:2]}, the first is {(n_layers, n_heads)}")
        bad = [i for i in layers if not 0 <= i < n_layers]
        if bad or not layers:
            raise ValueError(f"layers {layers} must be a non-empty list of indices below {n_layers}")
        heads_on = list(range(n_heads)) if heads is None else [int(h) for h in heads]
        if any(not 0 <= h < n_heads for h in heads_on):
            raise ValueError(f"heads {heads_on} must be indices below {n_heads}")
        layer = layers[-1] if layer is None else int(layer)
        if layer not in layers:
            raise ValueError(f"layer {layer} is not among the layers shown, {layers}")
        n_queries = len(first["q"])
        if not 0 <= int(query) < n_queries:
            raise ValueError(f"query {query} is out of range for {n_queries} query tokens")
        self.mode = mode
        self.title = title
        self.weights = {name: k["w"][layers] for name, k in kinds.items()}  # full precision, shown layers
        self.id = "ax-" + uuid.uuid4().hex[:10]
        scale = 10 ** DECIMALS
        self.data = {
            "mode": mode,
            "title": title or "",
            "layers": [i + 1 for i in layers],
            "heads": n_heads,
            "layer": layers.index(layer),
            "on": heads_on,
            "query": int(query),
            "palette": PALETTE,
            "kinds": [{"name": name, "label": _KINDS[name][0], "q": k["q"], "k": k["k"],
                       # integers in thousandths: 3 decimals, about 4 bytes a weight
                       "w": np.rint(k["w"][layers] * scale).astype(int).tolist()}
                      for name, k in kinds.items()],
        }
        size = len(self.html().encode("utf-8"))
        if size > MAX_BYTES:
            shape = {name: w.shape for name, w in self.weights.items()}
            raise ValueError(f"the view would be {size / 1e3:.0f} kB (more than {MAX_BYTES / 1e3:.0f} kB): "
                             f"show fewer layers or tokens; (layers, heads, queries, keys) = {shape}")

    def rounded(self, kind: str | None = None) -> np.ndarray:
        """The weights the page shows, ``(layers, heads, queries, keys)``, rounded to 3 decimals."""
        kinds = {k["name"]: k for k in self.data["kinds"]}
        k = kinds[kind or next(iter(kinds))]
        return np.asarray(k["w"], dtype=np.float64) / 10**DECIMALS

    def html(self) -> str:
        """The self-contained fragment: its style, its data, the renderer and the call."""
        payload = json.dumps(self.data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
        first = self.data["kinds"][0]
        summary = (f"Interactive attention view ({html.escape(first['label'])}, {len(self.data['layers'])} layer(s), "
                   f"{self.data['heads']} head(s)); it needs JavaScript. The static figure beside it shows the "
                   "same weights.")
        return (f'<div class="ax-root" id="{self.id}" data-mode="{self.mode}">'
                f'<style>{_asset("explorer.css")}</style>'
                f'<p class="ax-fallback">{summary}</p>'
                f'<script type="application/json" class="ax-data">{payload}</script>'
                f'<script>{_asset("explorer.js")}\n'
                f'window.companionExplorer.render(document.getElementById("{self.id}"));</script></div>')

    def _repr_html_(self) -> str:
        return self.html()

    def figure(self):
        """The static figure of the same weights, with titles and token labels (matplotlib)."""
        import matplotlib.pyplot as plt

        kind, layers, w = self._static()
        side = max(1.6, min(3.2, 0.22 * max(len(kind["q"]), len(kind["k"]))))
        fig, axes = plt.subplots(w.shape[0], w.shape[1], figsize=(side * w.shape[1] + 0.6, side * w.shape[0] + 0.6),
                                 squeeze=False)
        for r, layer in enumerate(layers):
            for h in range(w.shape[1]):
                ax = axes[r, h]
                ax.imshow(w[r, h], cmap="viridis", vmin=0, vmax=1, aspect="auto")
                ax.set_title(f"layer {layer}, head {h + 1}", fontsize=8)
                ax.set_xticks(range(len(kind["k"])), kind["k"], rotation=90, fontsize=6)
                ax.set_yticks(range(len(kind["q"])), kind["q"], fontsize=6)
                ax.set(xlabel="key", ylabel="query")
        fig.suptitle(f"{kind['label']}: each row is a query's weights over the keys (0 to 1)", fontsize=9)
        fig.tight_layout()
        return fig

    def _static(self):
        """The first attention's weights a static image shows: the selected layer (head view)
        or every layer (model view), ``(rows, heads, Q, K)``, with the layers' numbers."""
        kind = self.data["kinds"][0]
        w = self.weights[kind["name"]]  # (L, H, Q, K)
        if self.mode == "head":
            i = self.data["layer"]
            return kind, [self.data["layers"][i]], w[i : i + 1]
        return kind, self.data["layers"], w

    def _repr_png_(self) -> bytes:
        """A static mosaic for viewers without scripts: rows are layers, columns heads, each a
        heat map (viridis, 0 to 1) of queries (rows) by keys (columns). Built with numpy, in
        milliseconds (a labelled matplotlib figure, ``figure()``, takes about a second)."""
        from matplotlib import colormaps
        from matplotlib.image import imsave

        _, _, w = self._static()  # (R, H, Q, K)
        rows, heads, n_q, n_k = w.shape
        px = max(2, 96 // max(n_q, n_k))  # pixels per weight: about 96 px per map
        gap = 6
        cells = np.kron(w, np.ones((px, px)))  # (R, H, Q px, K px)
        canvas = np.ones((rows * (n_q * px + gap) + gap, heads * (n_k * px + gap) + gap, 4))  # white RGBA
        colours = colormaps["viridis"](cells)  # (R, H, Q px, K px, 4)
        for r in range(rows):
            for h in range(heads):
                y, x = gap + r * (n_q * px + gap), gap + h * (n_k * px + gap)
                canvas[y : y + n_q * px, x : x + n_k * px] = colours[r, h]
        buffer = io.BytesIO()
        imsave(buffer, canvas, format="png")
        return buffer.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None):
        full = {"layers": self.data["layers"], "query": self.data["query"],
                "kinds": {name: np.round(w, 7).tolist() for name, w in self.weights.items()}}
        bundle = {"text/html": self.html(), "image/png": self._repr_png_(), MIME_TYPE: full,
                  "text/plain": repr(self)}
        return {k: v for k, v in bundle.items() if (include is None or k in include) and
                not (exclude and k in exclude)}

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {tuple(w.shape)}" for k, w in self.weights.items())
        return f"<AttentionView {self.mode} view: {shapes} (layers, heads, queries, keys)>"


def _collect(attention, tokens, encoder_attention, decoder_attention, cross_attention,
             encoder_tokens, decoder_tokens, item) -> dict:
    given = {"self": attention, "encoder": encoder_attention, "decoder": decoder_attention,
             "cross": cross_attention}
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        raise ValueError("no weights given: pass attention= (self-attention) or encoder_attention=, "
                         "decoder_attention=, cross_attention= (encoder-decoder)")
    if "self" in given and len(given) > 1:
        raise ValueError("pass either attention= (one self-attention) or the encoder/decoder/cross weights, not both")
    names = {"tokens": tokens, "encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
    kinds = {}
    for kind, attn in given.items():
        w = _layers(attn, kind, item)  # (L, H, Q, K)
        _, q_name, k_name = _KINDS[kind]
        q = _tokens(names[q_name], q_name, w.shape[2], "queries", w.shape)
        k = _tokens(names[k_name], k_name, w.shape[3], "keys", w.shape)
        kinds[kind] = {"w": w, "q": q, "k": k}
    return kinds


def head_view(attention=None, tokens=None, *, encoder_attention=None, decoder_attention=None,
              cross_attention=None, encoder_tokens=None, decoder_tokens=None, item: int = 0,
              layer: int | None = None, heads=None, query: int = 0, include_layers=None,
              title: str | None = None) -> AttentionView:
    """The head view: the lines from one query token to every key, one colour per head.

    ``attention``: one ``(batch, heads, queries, keys)`` array or tensor per layer (BertViz's
    layout) with ``tokens``; or ``encoder_attention``/``decoder_attention`` (square) and
    ``cross_attention`` (decoder queries, encoder keys) with ``encoder_tokens`` and
    ``decoder_tokens``. ``item``: which element of the batch; ``include_layers``: the layer
    indices kept (default all); ``layer``, ``heads``, ``query``: what is shown first (default
    the last layer, every head, the first query token).
    """
    kinds = _collect(attention, tokens, encoder_attention, decoder_attention, cross_attention,
                     encoder_tokens, decoder_tokens, item)
    return AttentionView(kinds, "head", layers=include_layers, heads=heads, layer=layer, query=query, title=title)


def model_view(attention=None, tokens=None, *, encoder_attention=None, decoder_attention=None,
               cross_attention=None, encoder_tokens=None, decoder_tokens=None, item: int = 0,
               layer: int | None = None, heads=None, query: int = 0, include_layers=None,
               title: str | None = None) -> AttentionView:
    """The model view: every head of every layer as a thumbnail; a click opens it in the head
    view below the grid. Arguments as :func:`head_view`."""
    kinds = _collect(attention, tokens, encoder_attention, decoder_attention, cross_attention,
                     encoder_tokens, decoder_tokens, item)
    return AttentionView(kinds, "model", layers=include_layers, heads=heads, layer=layer, query=query, title=title)
