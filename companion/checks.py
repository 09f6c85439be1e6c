"""Checks that students call in the exercises.

Each check returns quietly when the answer is right and raises an ``AssertionError``
whose message says what differed and by how much when it is not, e.g.::

    check_shape(out, (2, 5, 16), name="out")
    check_close(my_mask, causal_mask(5), name="my_causal_mask(5)")

A check never passes a wrong answer: NaN must sit exactly where the expected
value has NaN, infinities must match exactly, and tolerances must be finite
numbers ``>= 0``. A mistake in how a check is *called* (a negative tolerance, an
expected value that is not a plain value) is a ``TypeError``/``ValueError``.
"""

from __future__ import annotations

import contextlib
import math
import os
import reprlib

import torch

from ._validate import require_bool_mask, require_tensor

_PLAIN_SCALARS = (bool, int, float, str, type(None))
_SHORT = reprlib.Repr()  # an answer in an error message: a few entries and levels, never all of a huge one
_SHORT.maxlist = _SHORT.maxtuple = 12
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3


def _short(value) -> str:
    return _SHORT.repr(value)


def _require_tolerance(name: str, value) -> float:
    """A tolerance must be a real, finite number >= 0 (``nan`` would accept anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _as_tensor(name: str, x, role: str) -> torch.Tensor:
    """``x`` as a CPU tensor; an answer that is no array of numbers fails the check."""
    if x is None or x is Ellipsis:
        raise AssertionError(f"{name} is {x!r}: replace it by your answer")
    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        message = f"{name}: the {role} value ({type(x).__name__}) is not an array of numbers: {err}"
        if role == "expected":
            raise TypeError(message) from None
        raise AssertionError(message) from None
    return t.detach().cpu()


def rel_error(x, y, eps: float = 1e-12) -> float:
    """Largest relative error ``max |x - y| / max(|x|, |y|, eps)``, elementwise, as a float.

    NaN in either input gives NaN (the error is not a number), never 0.
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    x, y = torch.as_tensor(x).detach().cpu(), torch.as_tensor(y).detach().cpu()
    if x.is_complex() or y.is_complex():
        raise TypeError(f"rel_error needs real numbers, got dtypes {x.dtype} and {y.dtype}")
    x, y = x.double(), y.double()
    if x.shape != y.shape:
        raise ValueError(f"rel_error needs tensors of the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.numel() == 0:
        return 0.0
    denom = torch.maximum(x.abs(), y.abs()).clamp_min(eps)
    err = (x - y).abs() / denom
    both_inf = torch.isinf(x) & torch.isinf(y) & (x == y)  # the same infinity: no error
    err = err.masked_fill(both_inf, 0.0)
    if torch.isnan(err).any():
        return float("nan")
    return float(err.max())


def check_shape(x, expected, name: str = "tensor") -> None:
    """Assert that ``x.shape == expected``; ``None`` in ``expected`` matches any size."""
    require_tensor(name, x)
    try:
        expected = tuple(expected)
    except TypeError:
        raise TypeError(f"expected must be a tuple of sizes, got {type(expected).__name__}") from None
    for e in expected:
        if e is not None and (isinstance(e, bool) or not isinstance(e, int)):
            raise TypeError(f"expected must hold ints or None, got {expected!r}")
    ok = x.dim() == len(expected) and all(e is None or s == e for s, e in zip(x.shape, expected, strict=False))
    if not ok:
        raise AssertionError(f"{name} has shape {tuple(x.shape)}, expected {expected}")


def check_like(actual, expected, name: str = "result") -> None:
    """Assert that ``actual`` is a tensor of the same shape and dtype as ``expected``; nothing
    else is computed. Call it before any arithmetic on a student's value, so that a value of
    the wrong shape fails here instead of broadcasting to a huge tensor (``acc / l`` with
    ``l`` of shape (N, 1) and ``acc`` of shape (1, N) makes N x N numbers)."""
    expected_t = _as_tensor(name, expected, "expected")
    if actual is None or actual is Ellipsis:
        raise AssertionError(f"{name} is {actual!r}: replace it by your answer")
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{name} must be a tensor of shape {tuple(expected_t.shape)}, got a {type(actual).__name__}")
    if actual.shape != expected_t.shape:
        raise AssertionError(f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected_t.shape)}")
    if actual.dtype != expected_t.dtype:
        raise AssertionError(f"{name} has dtype {actual.dtype}, expected {expected_t.dtype}")


def check_close(actual, expected, name: str = "result", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Assert that ``actual`` matches ``expected``: same shape, booleans equal exactly,
    numbers within ``|actual - expected| <= atol + rtol·|expected|``, NaN exactly where
    ``expected`` has NaN and infinities exactly where it has the same infinity."""
    atol = _require_tolerance("atol", atol)
    rtol = _require_tolerance("rtol", rtol)
    expected_t = _as_tensor(name, expected, "expected")
    actual_t = _as_tensor(name, actual, "actual")
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
    if actual_t.is_complex() != expected_t.is_complex():
        raise AssertionError(f"{name} has dtype {actual_t.dtype}, expected {expected_t.dtype} "
                             "(complex and real numbers are not interchangeable)")
    kind = torch.complex128 if expected_t.is_complex() else torch.float64
    a, e = actual_t.to(kind), expected_t.to(kind)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    if (nan_a & ~nan_e).any():
        first = tuple(torch.nonzero(nan_a & ~nan_e)[0].tolist())
        raise AssertionError(f"{name} contains NaN where no NaN is expected ({int((nan_a & ~nan_e).sum())} entries, "
                             f"first at index {first})")
    if (nan_e & ~nan_a).any():
        first = tuple(torch.nonzero(nan_e & ~nan_a)[0].tolist())
        raise AssertionError(f"{name} has a number where NaN is expected ({int((nan_e & ~nan_a).sum())} entries, "
                             f"first at index {first}: got {a[first].item():.6g})")
    good = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)  # inf only matches the same inf
    if not good.all():
        bad = ~good
        diff = (a - e).abs().masked_fill(~bad, 0).nan_to_num(nan=math.inf)
        worst = tuple(torch.nonzero(bad & (diff == diff.max()))[0].tolist())
        raise AssertionError(f"{name} differs in {int(bad.sum())} of {a.numel()} entries; largest difference "
                             f"{diff.max().item():.3g} at index {worst} (got {a[worst].item():.6g}, "
                             f"expected {e[worst].item():.6g}); relative error {_safe_rel_error(a, e):.3g}")


def _safe_rel_error(a: torch.Tensor, e: torch.Tensor) -> float:
    if a.is_complex():
        return float(((a - e).abs() / torch.maximum(a.abs(), e.abs()).clamp_min(1e-12)).nan_to_num(nan=math.inf).max())
    return rel_error(a.nan_to_num(nan=0.0), e.nan_to_num(nan=0.0))


def check_attention_weights(weights, mask=None, name: str = "weights", atol: float = 1e-5, shape=None) -> None:
    """Assert that attention ``weights (..., N_q, N_k)`` are valid: a floating-point tensor
    (of ``shape`` when given, checked first), finite, non-negative, rows summing to 1, and
    exactly 0 wherever the boolean ``mask`` (True = may attend) blocks (a row whose every key
    is blocked must be all 0). Shape and dtype are checked before any conversion or arithmetic."""
    atol = _require_tolerance("atol", atol)
    require_tensor(name, weights)
    if shape is not None:
        check_shape(weights, shape, name=name)
    if weights.dim() < 2:
        raise AssertionError(f"{name} must have at least 2 dimensions (..., N_q, N_k), got shape {tuple(weights.shape)}")
    if weights.is_complex():
        raise AssertionError(f"{name} has complex dtype {weights.dtype}; attention weights are real numbers")
    if not weights.is_floating_point():
        raise AssertionError(f"{name} has dtype {weights.dtype}; attention weights are floating-point numbers")
    if mask is not None:
        require_bool_mask("mask", mask, tuple(weights.shape))
    w = weights.detach().cpu().double()
    if not torch.isfinite(w).all():
        bad = ~torch.isfinite(w)
        first = tuple(torch.nonzero(bad)[0].tolist())
        raise AssertionError(f"{name} has {int(bad.sum())} entries that are NaN or infinite, first at index {first} "
                             f"({w[first].item()}): softmax output is always a finite number in [0, 1]")
    if (w < 0).any():
        raise AssertionError(f"{name} has negative entries (smallest {w.min().item():.3g}): softmax output is never negative")
    sums = w.sum(-1)
    if mask is None:
        allowed_rows = torch.ones_like(sums, dtype=torch.bool)
    else:
        m = mask.detach().cpu().expand(weights.shape)
        allowed_rows = m.any(-1)
    off = (sums - 1).abs().masked_fill(~allowed_rows, 0)
    if (off > atol).any():
        worst = tuple(torch.nonzero(off == off.max())[0].tolist())
        raise AssertionError(f"{name} rows must sum to 1; row {worst} sums to {sums[worst].item():.6g}")
    if mask is not None:
        leaked = w.masked_select(~m)
        if (leaked != 0).any():
            raise AssertionError(f"{name} gives weight to {int((leaked != 0).sum())} blocked positions "
                                 f"(largest {leaked.abs().max().item():.3g}); masked entries must be exactly 0")


def _plain(value) -> bool:
    """Is ``value`` a plain Python value: exactly bool/int/float/str/None, or a tuple/list
    (or ``torch.Size``) of plain values? Subclasses are refused: their ``==`` could say anything."""
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) in (tuple, list, torch.Size):
        return all(_plain(v) for v in value)
    return False


def _equal(actual, expected) -> bool:
    """Strict equality of two plain values: bools only equal bools, numbers equal by value
    (``3 == 3.0``; NaN equals nothing), strings equal strings, sequences element by element."""
    if type(expected) is bool or type(actual) is bool:
        return type(actual) is bool and type(expected) is bool and actual is expected
    if type(expected) in (int, float):
        return type(actual) in (int, float) and actual == expected
    if type(expected) is str or expected is None:
        return type(actual) is type(expected) and actual == expected
    # sequences: a list or torch.Size may stand for a tuple of sizes
    if type(actual) not in (tuple, list, torch.Size) or len(actual) != len(expected):
        return False
    return all(_equal(a, e) for a, e in zip(actual, expected, strict=True))


def check_equal(actual, expected, name: str = "answer") -> None:
    """Assert that an exact answer (an int, a bool, a tuple of sizes, a string) equals ``expected``.

    Only plain Python values are compared (``bool``, ``int``, ``float``, ``str``, ``None`` and
    tuples/lists of them; a ``torch.Size`` counts as a tuple). Numbers are compared by value
    (``3 == 3.0``), so a prediction may be typed either way; a bool only equals a bool.
    Tensors, arrays and other objects are refused: compare tensors with :func:`check_close`.
    """
    if not _plain(expected):
        raise TypeError(f"expected must be a plain Python value (bool, int, float, str, None, or a tuple/list of "
                        f"them), got {type(expected).__name__}")
    if actual is None or actual is Ellipsis:
        raise AssertionError(f"{name} is {_short(actual)}: replace it by your answer")
    if isinstance(actual, torch.Tensor) or hasattr(actual, "__array__"):
        raise AssertionError(f"{name} must be a plain Python value such as {_short(expected)}, got a {type(actual).__name__}; "
                             f"use check_close for tensors")
    if not _plain(actual):
        raise AssertionError(f"{name} must be a plain Python value (bool, int, float, str, or a tuple/list of them) "
                             f"such as {_short(expected)}, got a {type(actual).__name__}")
    if (type(actual) is bool) != (type(expected) is bool):
        raise AssertionError(f"{name} is {_short(actual)} ({type(actual).__name__}), expected {_short(expected)} ({type(expected).__name__})")
    if not _equal(actual, expected):
        raise AssertionError(f"{name} is {_short(actual)}, expected {_short(expected)}")


GRADING_SEED = "COMPANION_GRADING_SEED"  # set by the grader, a new value for each run


def fresh_inputs() -> torch.Generator:
    """A generator for a check's hidden inputs that no one has seen: seeded from the environment
    variable ``COMPANION_GRADING_SEED``, which the grader draws anew for each run (the students'
    code never sees it), and from 0 when it is not set (the book, self-learners)."""
    seed = os.environ.get(GRADING_SEED, "0")
    if not seed.isdigit():
        raise ValueError(f"{GRADING_SEED} must be a non-negative integer, got {seed!r}")
    return torch.Generator().manual_seed(int(seed))


@contextlib.contextmanager
def fresh_rng():
    """torch's global random generator, for the block only, seeded from :func:`fresh_inputs`:
    the hidden tests' random tensors, modules and sizes, new for each grading run. The global
    generator's state before the block is restored after it, so the fixed inputs of the checks
    that follow stay what the handout shows. Yields the generator of :func:`fresh_inputs`
    (``with fresh_rng() as g: n = int(torch.randint(3, 40, ()))``: a size drawn anew for
    each grading run)."""
    g = fresh_inputs()
    seed = int(torch.randint(2**62, (1,), generator=g))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield g
