"""Checks that students call in the exercises.

Each check returns quietly when the answer is right and raises an ``AssertionError``
whose message says what differed and by how much when it is not, e.g.::

    check_shape(out, (2, 5, 16), name="out")
    check_close(my_mask, causal_mask(5), name="my_causal_mask(5)")
"""

from __future__ import annotations

import torch

from ._validate import require_tensor


def rel_error(x, y, eps: float = 1e-12) -> float:
    """Largest relative error ``max |x - y| / max(|x|, |y|, eps)``, elementwise, as a float."""
    x = torch.as_tensor(x, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64)
    if x.shape != y.shape:
        raise ValueError(f"rel_error needs tensors of the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.numel() == 0:
        return 0.0
    denom = torch.maximum(x.abs(), y.abs()).clamp_min(eps)
    return float(((x - y).abs() / denom).max())


def check_shape(x, expected, name: str = "tensor") -> None:
    """Assert that ``x.shape == expected``; ``None`` in ``expected`` matches any size."""
    require_tensor(name, x)
    expected = tuple(expected)
    ok = x.dim() == len(expected) and all(e is None or s == e for s, e in zip(x.shape, expected, strict=False))
    if not ok:
        raise AssertionError(f"{name} has shape {tuple(x.shape)}, expected {expected}")


def check_close(actual, expected, name: str = "result", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Assert that ``actual`` matches ``expected`` (same shape, dtype kind, values within tolerance)."""
    actual_t = torch.as_tensor(actual)
    expected_t = torch.as_tensor(expected)
    if actual_t.shape != expected_t.shape:
        raise AssertionError(f"{name} has shape {tuple(actual_t.shape)}, expected {tuple(expected_t.shape)}")
    if expected_t.dtype == torch.bool or actual_t.dtype == torch.bool:
        if actual_t.dtype != expected_t.dtype:
            raise AssertionError(f"{name} has dtype {actual_t.dtype}, expected {expected_t.dtype}")
        wrong = (actual_t != expected_t).nonzero()
        if len(wrong):
            first = tuple(wrong[0].tolist())
            raise AssertionError(f"{name} differs at {len(wrong)} of {actual_t.numel()} entries, first at index {first}: "
                                 f"got {actual_t[first].item()}, expected {expected_t[first].item()}")
        return
    a, e = actual_t.double(), expected_t.double()
    if torch.isnan(a).any() and not torch.isnan(e).any():
        raise AssertionError(f"{name} contains NaN ({int(torch.isnan(a).sum())} entries)")
    diff = (a - e).abs()
    bad = diff > atol + rtol * e.abs()
    if bad.any():
        worst = tuple(torch.nonzero(diff == diff.max())[0].tolist())
        raise AssertionError(f"{name} differs in {int(bad.sum())} of {a.numel()} entries; largest difference "
                             f"{diff.max().item():.3g} at index {worst} (got {a[worst].item():.6g}, "
                             f"expected {e[worst].item():.6g}); relative error {rel_error(a, e):.3g}")


def check_attention_weights(weights, mask=None, name: str = "weights", atol: float = 1e-5) -> None:
    """Assert that attention ``weights (..., N_q, N_k)`` are valid: non-negative, rows summing
    to 1, and exactly 0 wherever the boolean ``mask`` (True = may attend) blocks."""
    require_tensor(name, weights)
    if weights.dim() < 2:
        raise AssertionError(f"{name} must have at least 2 dimensions (..., N_q, N_k), got shape {tuple(weights.shape)}")
    if (weights < 0).any():
        raise AssertionError(f"{name} has negative entries (smallest {weights.min().item():.3g}): softmax output is never negative")
    sums = weights.sum(-1)
    allowed_rows = torch.ones_like(sums, dtype=torch.bool) if mask is None else mask.expand_as(weights).any(-1)
    off = (sums - 1).abs().masked_fill(~allowed_rows, 0)
    if (off > atol).any():
        worst = tuple(torch.nonzero(off == off.max())[0].tolist())
        raise AssertionError(f"{name} rows must sum to 1; row {worst} sums to {sums[worst].item():.6g}")
    if mask is not None:
        leaked = weights.masked_select(~mask.expand_as(weights))
        if (leaked != 0).any():
            raise AssertionError(f"{name} gives weight to {int((leaked != 0).sum())} blocked positions "
                                 f"(largest {leaked.abs().max().item():.3g}); masked entries must be exactly 0")


def check_equal(actual, expected, name: str = "answer") -> None:
    """Assert that an exact answer (an int, a bool, a tuple of sizes, a string) equals ``expected``.

    Numbers are compared by value (``3 == 3.0``), so a prediction may be typed either way;
    tensors and arrays are refused: compare those with :func:`check_close`.
    """
    if isinstance(actual, torch.Tensor) or hasattr(actual, "__array__"):
        raise AssertionError(f"{name} must be a plain Python value such as {expected!r}, got a {type(actual).__name__}; "
                             f"use check_close for tensors")
    if isinstance(expected, tuple) and isinstance(actual, (list, torch.Size)):
        actual = tuple(actual)
    if actual is None or actual is Ellipsis:
        raise AssertionError(f"{name} is {actual!r}: replace it by your answer")
    if type(actual) is bool and type(expected) is not bool or type(expected) is bool and type(actual) is not bool:
        raise AssertionError(f"{name} is {actual!r} ({type(actual).__name__}), expected {expected!r} ({type(expected).__name__})")
    if actual != expected:
        raise AssertionError(f"{name} is {actual!r}, expected {expected!r}")
