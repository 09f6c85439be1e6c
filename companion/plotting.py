"""Figures used by every chapter: attention heat maps and log-log cost plots.

Chinese characters in figures: importing this module adds an installed CJK font (Noto Sans
CJK, Source Han Sans, WenQuanYi, ...) to matplotlib's font list *after* its default, so Latin
text looks as before and each Chinese character falls back to the CJK font instead of an
empty box. ``cjk_font()`` names the font found, or is None (then label with a romanisation).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager

# Fonts with Chinese glyphs, most wanted first (Debian/Colab, Adobe, Linux, Windows, macOS).
CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Microsoft YaHei", "SimHei",
    "PingFang SC", "Heiti SC", "Noto Sans CJK JP", "Noto Sans CJK TC",
)


# The same fonts' file names, for fonts installed after matplotlib cached its font list.
CJK_FILES = ("NotoSansCJK", "NotoSansSC", "SourceHanSans", "wqy-zenhei", "wqy-microhei",
             "msyh", "simhei", "PingFang", "STHeiti")


def _known_cjk_font() -> str | None:
    known = {font.name for font in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in known), None)


def cjk_font() -> str | None:
    """The name of an installed font that has Chinese characters, or None."""
    name = _known_cjk_font()
    if name is None:  # matplotlib's font cache may be older than the font: look on disk
        for path in font_manager.findSystemFonts():
            if any(part.lower() in path.lower() for part in CJK_FILES):
                font_manager.fontManager.addfont(path)
        name = _known_cjk_font()
    return name


def use_cjk_font() -> str | None:
    """Let matplotlib draw Chinese characters: ``font.family`` becomes [its default,
    the CJK font] (matplotlib >= 3.6 falls back glyph by glyph). Returns the font's name,
    or None when no CJK font is installed (``apt-get install fonts-noto-cjk``)."""
    name = cjk_font()
    families = list(plt.rcParams["font.family"])
    if name is not None and name not in families:
        plt.rcParams["font.family"] = [*families, name]
    return name


use_cjk_font()


def _to_numpy(x, name: str, blank_nan: bool = False) -> np.ndarray:
    """``x`` (a tensor or array-like of real numbers) as a float NumPy array; complex numbers
    are refused rather than drawn without their imaginary part, and so are NaN and infinity
    (matplotlib would leave those cells blank), unless ``blank_nan``: then NaN draws a blank
    cell on purpose (chapter 4's masked scores)."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype} (plot .abs() or .real)")
        array = x.detach().float().cpu().numpy()
    else:
        raw = np.asarray(x)
        if np.iscomplexobj(raw):
            raise TypeError(f"{name} must hold real numbers, got dtype {raw.dtype} (plot abs() or .real)")
        try:
            array = raw.astype(float)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must hold numbers, got {raw.dtype} values") from err
    if array.size == 0:
        raise ValueError(f"{name} is empty (shape {array.shape}): there is nothing to draw")
    bad = np.isinf(array) | (np.isnan(array) if not blank_nan else False)
    if bad.any():
        raise ValueError(f"{name} holds {int(bad.sum())} {'infinite' if blank_nan else 'NaN or infinite'} values "
                         f"of {array.size}: there is no colour for them")
    return array


def plot_attention(weights, xlabels=None, ylabels=None, ax=None, title="Attention weights",
                   xlabel="key position", ylabel="query position", cmap="viridis", colorbar=True):
    """Heat map of an attention matrix ``weights`` of shape ``(N_q, N_k)``.

    Row ``i`` shows how query ``i`` spreads its attention over the keys (it sums
    to 1). ``xlabels``/``ylabels`` name the keys and queries (e.g. tokens).
    Returns the matplotlib ``Axes``.
    """
    w = _to_numpy(weights, "weights")
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D (N_q, N_k) matrix, got shape {w.shape}")
    for name, labels, n in (("xlabels", xlabels, w.shape[1]), ("ylabels", ylabels, w.shape[0])):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels for {n} columns/rows of weights {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=max(float(w.max()), 1e-12), aspect="auto")
    if xlabels is not None:
        ax.set_xticks(range(len(xlabels)), [str(s) for s in xlabels], rotation=90)
    if ylabels is not None:
        ax.set_yticks(range(len(ylabels)), [str(s) for s in ylabels])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_loglog(x, ys: dict, ax=None, title="", xlabel="", ylabel="", fit=True):
    """Plot several curves on log-log axes; with ``fit=True`` label each with
    its fitted slope (the exponent ``p`` of ``y ∝ x^p``). Returns the ``Axes``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    x = np.asarray(x, dtype=float)
    for label, y in ys.items():
        y = np.asarray(y, dtype=float)
        if fit:
            slope = fit_power_law(x, y)
            label = f"{label} (slope {slope:.2f})"
        ax.loglog(x, y, "o-", label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return ax


def fit_power_law(x, y) -> float:
    """Slope ``p`` of the least-squares line through ``(log x, log y)``: ``y ≈ c·x^p``."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got {x.shape} and {y.shape}")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("a power law fit needs positive x and y")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def plot_matrix(matrix, ax=None, title="", xlabel="", ylabel="", cmap=None, colorbar_label="value",
                signed=None, vmin=None, vmax=None):
    """Heat map of any 2-D matrix (a positional-encoding table, a similarity or
    distance matrix, a mask).

    With ``signed=True`` (the default when the matrix has negative entries) the
    colour map is the diverging ``RdBu_r`` centred on 0 (red > 0 > blue), so
    equal magnitudes of opposite sign get equally strong colours; otherwise
    ``viridis``. NaN entries are left blank and ignored by the colour scale.
    Returns the matplotlib ``Axes``.
    """
    m = _to_numpy(matrix, "matrix", blank_nan=True)
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {m.shape}")
    finite = m[np.isfinite(m)]  # NaN / inf entries (e.g. masked scores) are drawn blank
    if signed is None:
        signed = bool((finite < 0).any())
    if cmap is None:
        cmap = "RdBu_r" if signed else "viridis"
    if signed and vmin is None and vmax is None:
        lim = max(float(np.abs(finite).max()) if finite.size else 0.0, 1e-12)
        vmin, vmax = -lim, lim
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=colorbar_label)
    return ax


def plot_positional_encoding(pe, ax=None, title="Positional encoding"):
    """Heat map of a positional-encoding table ``pe`` of shape ``(positions, d_model)``:
    one row per position, one column per dimension, diverging colours in [-1, 1]."""
    m = _to_numpy(pe, "pe")
    if m.ndim != 2:
        raise ValueError(f"pe must be a 2-D (positions, d_model) table, got shape {m.shape}")
    return plot_matrix(m, ax=ax, title=title, xlabel="dimension j", ylabel="position t",
                       colorbar_label="PE[t, j]", signed=True, vmin=-1.0, vmax=1.0)
