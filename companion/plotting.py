"""Figures used by every chapter: attention heat maps and log-log cost plots."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def plot_attention(weights, xlabels=None, ylabels=None, ax=None, title="Attention weights",
                   xlabel="key position", ylabel="query position", cmap="viridis", colorbar=True):
    """Heat map of an attention matrix ``weights`` of shape ``(N_q, N_k)``.

    Row ``i`` shows how query ``i`` spreads its attention over the keys (it sums
    to 1). ``xlabels``/``ylabels`` name the keys and queries (e.g. tokens).
    Returns the matplotlib ``Axes``.
    """
    w = _to_numpy(weights)
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
