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

from ._validate import inside_checked_edge, require_float, require_int, require_number, require_positive_int, require_rank, require_tensor
from .masks import causal_mask, to_additive


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
        if inside_checked_edge():  # in a model (GPT), which checked its ids and offset
            return x + self.pe[offset: offset + x.shape[1]].to(x.dtype)  # (B, N, d_model)
        require_float("x", x)
        if x.dim() != 3 or x.shape[-1] != self.pe.shape[1]:
            raise ValueError(f"expected x of shape (B, N, {self.pe.shape[1]}), got {tuple(x.shape)}")
        return x + self.positions(x.shape[1], offset).to(x.dtype)  # (B, N, d_model)


class LearnedPositionalEmbedding(nn.Module):
    """A learned position table (GPT, BERT): row ``t`` of a ``(max_len, d_model)`` parameter
    is added to the token at position ``t``. Built and called as
    :class:`SinusoidalPositionalEncoding` (``d_model`` first, then ``max_len``):
    ``pe(x, offset=t)`` adds rows ``t … t + N - 1``; positions past ``max_len`` are refused.

    It has ``max_len · d_model`` parameters (786,432 in GPT-2 small) and knows no position it
    was not trained on: unlike the sinusoids, it cannot be read past ``max_len``.
    """

    def __init__(self, d_model: int, max_len: int = 512, std: float = 0.02):
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
        if inside_checked_edge():  # in a model (GPT), which checked its ids and offset
            return x + self.weight[offset: offset + x.shape[1]]  # (B, N, d_model)
        require_float("x", x)
        if x.dim() != 3 or x.shape[-1] != self.weight.shape[1]:
            raise ValueError(f"expected x of shape (B, N, {self.weight.shape[1]}), got {tuple(x.shape)}")
        return x + self.positions(x.shape[1], offset)  # (B, N, d_model)


# ---------------------------------------------------------------------------------------
# Rotary position embedding (RoPE, Su et al. 2021): chapter 6's rotation applied to q and k.
#
# Pair i of a query (dimensions 2i, 2i+1) at position m is turned by the angle m·ω_i:
#
#     [q'_2i  ]   [cos mω_i  -sin mω_i] [q_2i  ]
#     [q'_2i+1] = [sin mω_i   cos mω_i] [q_2i+1],     ω_i = base^(-2i/d).
#
# A rotation keeps lengths, and R(m)ᵀ R(n) = R(n - m), so q'_m · k'_n = q_m · R(n - m) k_n
# depends on the positions only through n - m.
# ---------------------------------------------------------------------------------------


def _rope_angles(x: torch.Tensor, positions, base: float) -> torch.Tensor:
    """The angles ``positions[t] · ω_i`` (float64) for a ``(..., N, d)`` tensor."""
    require_float("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., length, dim), got {tuple(x.shape)}")
    n, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"RoPE rotates pairs of dimensions: the last dimension must be even, got {tuple(x.shape)}")
    if positions is None:
        positions = torch.arange(n)
    positions = torch.as_tensor(positions, device=x.device)
    if positions.dim() != 1 or positions.shape[0] != n:
        raise ValueError(f"positions must be 1-D with one position per token ({n}), got shape "
                         f"{tuple(positions.shape)}")
    if positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be real numbers, got dtype {positions.dtype}")
    omega = frequencies(d, base).to(x.device)  # (d/2,)
    return positions.double()[:, None] * omega[None, :]  # (N, d/2)


def apply_rope(x: torch.Tensor, positions=None, base: float = 10000.0) -> torch.Tensor:
    """RoPE, real form: rotate pair ``i`` of the token at position ``m`` by ``m · ω_i``.

    ``x (..., N, d)``; ``positions`` ``(N,)`` (default ``0 … N-1``). For each pair::

        x'_2i   = x_2i cos(mω_i) - x_2i+1 sin(mω_i)
        x'_2i+1 = x_2i sin(mω_i) + x_2i+1 cos(mω_i)

    Returns a tensor of the shape and dtype of ``x``.
    """
    angles = _rope_angles(x, positions, base)  # (N, d/2)
    return _rotate_pairs(x, torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype))


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation with the angles' ``cos`` and ``sin`` given, each ``(N, d/2)``, unchecked
    (for :func:`apply_rope` and a module that keeps a table of them, :func:`_rope_table`)."""
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d/2) each
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., N, d/2, 2)
    return out.flatten(-2)  # (..., N, d)


def _rope_table(length: int, d: int, base: float = 10000.0, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's ``cos(m ω_i)`` and ``sin(m ω_i)`` for positions ``m = 0 … length - 1``, each
    ``(length, d/2)`` float32: computed once in float64 on the CPU (the angles of far positions
    need its precision), stored in float32 (accelerators such as MPS refuse float64)."""
    require_positive_int("length", length)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]  # (L, d/2)
    return torch.cos(angles).float().to(device), torch.sin(angles).float().to(device)


class _RopeTable:
    """RoPE with its cos and sin kept (one table per attention module, as lucidrains' rotary
    embedding keeps them): ``table(x, start, base, scale)`` rotates ``x (..., N, d)`` as tokens
    at positions ``(start … start + N - 1) / scale``. Plain RoPE reads a float32
    :func:`_rope_table`, built once and rebuilt (doubled) when a text outgrows it, the device
    or the base changes (chapter 11 changes ``base`` on a trained module); float64 inputs and
    a ``scale`` (position interpolation) compute the angles anew."""

    def __init__(self):
        self.cos = self.sin = self.base = None  # (length, d/2) float32 each, and their base

    def __call__(self, x: torch.Tensor, start: int, base: float = 10000.0, scale: float = 1.0) -> torch.Tensor:
        n = x.shape[-2]
        if scale != 1.0 or x.dtype == torch.float64:
            return apply_rope(x, torch.arange(start, start + n, dtype=torch.float64, device=x.device) / scale, base)
        if self.cos is None or self.cos.shape[0] < start + n or self.cos.device != x.device or self.base != base:
            length = max(start + n, 2 * (0 if self.cos is None else self.cos.shape[0]), 256)
            with torch.inference_mode(False):  # a table built while generating serves training too
                self.cos, self.sin = _rope_table(length, x.shape[-1], base, x.device)
            self.base = base
        return _rotate_pairs(x, self.cos[start:start + n].to(x.dtype), self.sin[start:start + n].to(x.dtype))


def apply_rope_complex(x: torch.Tensor, positions=None, base: float = 10000.0) -> torch.Tensor:
    """RoPE, complex form: pair ``i`` is the complex number ``z_i = x_2i + i·x_2i+1``, and
    position ``m`` multiplies it by ``e^{i m ω_i}``. Equal to :func:`apply_rope`."""
    angles = _rope_angles(x, positions, base)  # (N, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())  # (..., N, d/2)
    turned = z * torch.polar(torch.ones_like(angles), angles)  # (..., N, d/2)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)  # (..., N, d)


# ---------------------------------------------------------------------------------------
# ALiBi (Press et al., 2022): no position vector at all, a linear penalty on the scores.
# ---------------------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The ALiBi slope of each head, shape ``(num_heads,)``, float64.

    For ``H`` a power of two, head ``h = 1 … H`` has slope ``m_h = 2^(-8h/H)`` (a geometric
    sequence from ``2^(-8/H)`` down to ``2^(-8)``). Otherwise (the rule of Press et al.'s
    code): the ``2^⌊log2 H⌋`` slopes of the nearest smaller power of two, then every other
    slope of the next power of two, for the remaining heads.
    """
    require_positive_int("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if num_heads & (num_heads - 1) == 0:
        return torch.tensor(power_of_two(num_heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.cat([torch.tensor(power_of_two(closest), dtype=torch.float64), extra])


def alibi_bias(num_heads: int, length: int) -> torch.Tensor:
    """The ALiBi bias ``B[h, i, j] = -m_h · |i - j|`` added to the scores, ``(H, N, N)`` float32.

    A key ``d`` tokens away costs head ``h`` the score ``m_h · d``: far keys are damped,
    more strongly in the heads with steep slopes. See :func:`alibi_mask` for the causal form.
    """
    require_positive_int("length", length)
    t = torch.arange(length)
    return relative_alibi_bias(alibi_slopes(num_heads), t, t).float()  # (H, N, N)


def relative_alibi_bias(slopes: torch.Tensor, query_positions: torch.Tensor,
                        key_positions: torch.Tensor) -> torch.Tensor:
    """``-m_h · |p_i - p_j|`` for queries at ``query_positions (N_q,)`` and keys at
    ``key_positions (N_k,)``: shape ``(H, N_q, N_k)``, the dtype of ``slopes``.

    The form a decoder needs when its keys come from a cache (positions ``t - N_k + 1 … t``).
    """
    distance = (query_positions[:, None] - key_positions[None, :]).abs()  # (N_q, N_k)
    return -slopes[:, None, None] * distance.to(slopes.dtype)  # (H, N_q, N_k)


def alibi_mask(num_heads: int, length: int) -> torch.Tensor:
    """ALiBi for a decoder as one additive mask (chapter 4's form): ``-m_h · (i - j)`` where
    ``j <= i`` and ``-inf`` on the future keys. Shape ``(H, N, N)``, float32.

    ``softmax(QKᵀ/√d + alibi_mask)`` is causal attention with the ALiBi penalty.
    """
    return alibi_bias(num_heads, length) + to_additive(causal_mask(length))  # (H, N, N)
