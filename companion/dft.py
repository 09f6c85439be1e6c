"""The discrete Fourier transform as a matrix (chapter 3): attention seen from signal processing.

:func:`dft_matrix` is the ``N × N`` matrix ``F[j, k] = exp(-2πi·jk/N)``. Used as the value
matrix ``W_V`` of a layer whose attention weights are the identity, it turns the layer into one
that outputs spectra: ``x @ F == torch.fft.fft(x)``.
"""

from __future__ import annotations

import math

import torch

from ._validate import require_positive_int


def dft_matrix(n: int, dtype: torch.dtype = torch.complex128) -> torch.Tensor:
    """The DFT matrix ``F`` of shape ``(n, n)``: ``F[j, k] = exp(-2πi·jk/n)``.

    ``F`` is symmetric, so for a row of samples ``x`` (shape ``(..., n)``) the
    spectrum is ``x @ F`` and equals ``torch.fft.fft(x)``.
    """
    require_positive_int("n", n)
    if dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"dtype must be torch.complex64 or torch.complex128, got {dtype}")
    k = torch.arange(n, dtype=torch.float64)  # (n,)
    angle = -2 * math.pi * torch.outer(k, k).remainder(n) / n  # (n, n); remainder keeps angles small
    return torch.polar(torch.ones_like(angle), angle).to(dtype)
