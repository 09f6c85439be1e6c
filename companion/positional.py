"""Positional encodings.

Sinusoidal encoding of position ``t`` in ``d`` dimensions (Vaswani et al., 2017):

    PE[t, 2i]   = sin(t · ω_i),      PE[t, 2i+1] = cos(t · ω_i),
    ω_i = 1 / base^(2i / d),         i = 0, ..., d/2 - 1.

``base`` is a parameter because the course compares ``base = 10`` with the
usual ``base = 10000``. Each (sin, cos) pair is a point on a circle turning at
angular speed ω_i, so moving from ``t`` to ``t + Δ`` is a fixed rotation
``R(Δ)`` of every pair: ``PE(t + Δ) = R(Δ) PE(t)`` (see :func:`rotation_matrix`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import require_float, require_int, require_number, require_positive_int, require_rank, require_tensor


def _check_d_model_and_base(d_model: int, base: float) -> None:
    require_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (sin and cos come in pairs), got {d_model}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1 (the wavelengths grow as base^(2i/d)), got {base!r}")


def frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The angular frequencies ``ω_i = base^(-2i/d)``, shape ``(d_model // 2,)``, float64."""
    _check_d_model_and_base(d_model, base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    return base ** (-two_i / d_model)  # (d/2,)


def sinusoidal_encoding(length: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal position table ``PE`` of shape ``(length, d_model)`` (float32).

    ``PE[t, 2i] = sin(t / base^(2i/d))``, ``PE[t, 2i+1] = cos(t / base^(2i/d))``.
    """
    require_positive_int("length", length)
    omega = frequencies(d_model, base)  # (d/2,)
    t = torch.arange(length, dtype=torch.float64)  # (length,)
    angles = t[:, None] * omega[None, :]  # (length, d/2)
    pe = torch.empty(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def rotation_matrix(delta: float, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The block-diagonal rotation ``R(Δ)`` with ``PE(t + Δ) = R(Δ) PE(t)`` for every ``t``.

    Block ``i`` rotates the pair ``(sin tω_i, cos tω_i)`` by the angle ``Δω_i``::

        [ cos Δω_i   sin Δω_i ]
        [-sin Δω_i   cos Δω_i ]

    Shape ``(d_model, d_model)``, float64. ``R`` depends on ``Δ`` but not on ``t``:
    relative positions are a *linear* function of the encoding.
    """
    require_number("delta", delta)
    omega = frequencies(d_model, base)  # (d/2,)
    c, s = torch.cos(delta * omega), torch.sin(delta * omega)  # (d/2,)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx] = c  # new sin = sin·cos + cos·sin
    R[idx, idx + 1] = s
    R[idx + 1, idx] = -s  # new cos = cos·cos - sin·sin
    R[idx + 1, idx + 1] = c
    return R


def binary_encoding(length: int, bits: int) -> torch.Tensor:
    """Positions written in binary: row ``t`` holds the ``bits`` binary digits of ``t``,
    most significant first, as floats 0/1. Shape ``(length, bits)``.

    The naive "carry" code that sinusoids smooth out: neighbouring positions
    can differ in many digits (``0111 → 1000``), so distances jump.
    """
    require_positive_int("length", length)
    require_positive_int("bits", bits)
    if length > 2**bits:
        raise ValueError(f"{bits} bits hold only {2**bits} positions, got length={length}")
    # Only the low bits of t < length can be 1; higher digits are 0. Computing 2^b for
    # b >= 63 would overflow int64, so the high digits are written as zeros instead.
    low = min(bits, max(1, (length - 1).bit_length()))  # digits that can be nonzero
    t = torch.arange(length)[:, None]  # (length, 1)
    powers = 2 ** torch.arange(low - 1, -1, -1)  # (low,)
    digits = ((t // powers) % 2).float()  # (length, low)
    return torch.cat([torch.zeros(length, bits - low), digits], dim=1)  # (length, bits)


def static_fraction(pe: torch.Tensor, threshold: float = 0.05) -> float:
    """Fraction of the dimensions (columns) of ``pe`` whose value changes by less than
    ``threshold`` over all positions (rows): ``mean_j [max_t pe[t, j] - min_t pe[t, j] < threshold]``.

    These near-constant columns form the "static region" of a sinusoidal table:
    at low frequencies ``sin ≈ 0`` and ``cos ≈ 1`` for every position in range.
    """
    require_rank("pe", require_tensor("pe", pe), 2, "positions, dimensions")
    if not (isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold > 0):
        raise ValueError(f"threshold must be a number > 0, got {threshold!r}")
    if pe.is_complex() or pe.dtype == torch.bool:
        raise TypeError(f"pe must hold real numbers, got dtype {pe.dtype}")
    if 0 in pe.shape:
        raise ValueError(f"pe must have at least one position and one dimension, got shape {tuple(pe.shape)}")
    if not torch.isfinite(pe).all():
        raise ValueError(f"pe holds NaN or infinite values ({int((~torch.isfinite(pe)).sum())} of {pe.numel()}): "
                         "a column's spread is then not a number")
    spread = pe.amax(dim=0) - pe.amin(dim=0)  # (d,)
    return float((spread < threshold).double().mean())


def pairwise_distances(pe: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ``‖pe[s] - pe[t]‖`` between all positions: ``(length, length)``, float64."""
    require_rank("pe", require_tensor("pe", pe), 2, "positions, dimensions")
    if pe.is_complex() or pe.dtype == torch.bool:
        raise TypeError(f"pe must hold real numbers, got dtype {pe.dtype}")
    if pe.shape[1] == 0:
        raise ValueError(f"pe must have at least one dimension, got shape {tuple(pe.shape)}")
    if not torch.isfinite(pe).all():
        raise ValueError(f"pe holds NaN or infinite values ({int((~torch.isfinite(pe)).sum())} of {pe.numel()}): "
                         "their distances are not numbers")
    return torch.cdist(pe.double(), pe.double())


def near_collisions(pe: torch.Tensor, eps: float) -> int:
    """Number of pairs of *distinct* positions ``s < t`` whose encodings are closer
    than ``eps``: ``#{s < t : ‖pe[s] - pe[t]‖ < eps}``."""
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
        raise ValueError(f"eps must be a number > 0, got {eps!r}")
    dist = pairwise_distances(pe)  # (L, L)
    upper = torch.ones_like(dist, dtype=torch.bool).triu(1)  # pairs s < t
    return int((dist[upper] < eps).sum())


def min_distance(pe: torch.Tensor) -> float:
    """Smallest distance between the encodings of two distinct positions."""
    dist = pairwise_distances(pe)  # (L, L)
    if dist.shape[0] < 2:
        raise ValueError(f"pe needs at least 2 positions, got shape {tuple(pe.shape)}")
    upper = torch.ones_like(dist, dtype=torch.bool).triu(1)
    return float(dist[upper].min())


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``(B, N, d_model)`` inputs (no parameters).

    ``pe(x, offset=t)`` adds the rows ``t … t + N - 1``: the positions of tokens that
    continue a sequence (one decoding step after another). Positions at or past
    ``max_len`` are refused with an error that says so.
    """

    def __init__(self, d_model: int, max_len: int = 512, base: float = 10000.0):
        super().__init__()
        self.max_len = require_positive_int("max_len", max_len)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def positions(self, length: int, offset: int = 0) -> torch.Tensor:
        """The rows ``PE[offset : offset + length]`` of the table, shape ``(length, d_model)``."""
        require_int("length", length, minimum=0)
        require_int("offset", offset, minimum=0)
        if offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}…{offset + length - 1} go past max_len={self.max_len}: the table holds "
                f"positions 0…{self.max_len - 1}; build the model with a larger max_len"
            )
        return self.pe[offset: offset + length]  # (length, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        require_float("x", x)
        if x.dim() != 3 or x.shape[-1] != self.pe.shape[1]:
            raise ValueError(f"expected x of shape (B, N, {self.pe.shape[1]}), got {tuple(x.shape)}")
        return x + self.positions(x.shape[1], offset).to(x.dtype)  # (B, N, d_model)


class LearnedPositionalEmbedding(nn.Module):
    """A learned position table (GPT, BERT): row ``t`` of a ``(max_len, d_model)`` parameter
    is added to the token at position ``t``. Same call as :class:`SinusoidalPositionalEncoding`:
    ``pe(x, offset=t)`` adds rows ``t … t + N - 1``; positions past ``max_len`` are refused.

    It has ``max_len · d_model`` parameters (786,432 in GPT-2 small) and knows no position it
    was not trained on: unlike the sinusoids, it cannot be read past ``max_len``.
    """

    def __init__(self, max_len: int, d_model: int, std: float = 0.02):
        super().__init__()
        self.max_len = require_positive_int("max_len", max_len)
        require_positive_int("d_model", d_model)
        require_number("std", std, 0.0)
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * std)  # (max_len, d)

    def positions(self, length: int, offset: int = 0) -> torch.Tensor:
        """The rows ``weight[offset : offset + length]``, shape ``(length, d_model)``."""
        require_int("length", length, minimum=0)
        require_int("offset", offset, minimum=0)
        if offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}…{offset + length - 1} go past max_len={self.max_len}: a learned table "
                f"holds positions 0…{self.max_len - 1} only; build the model with a larger max_len"
            )
        return self.weight[offset: offset + length]  # (length, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        require_float("x", x)
        if x.dim() != 3 or x.shape[-1] != self.weight.shape[1]:
            raise ValueError(f"expected x of shape (B, N, {self.weight.shape[1]}), got {tuple(x.shape)}")
        return x + self.positions(x.shape[1], offset)  # (B, N, d_model)
