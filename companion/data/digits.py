"""Handwritten digits for chapter 8: the 8×8 digits of the UCI repository.

1,797 grey images of 8×8 pixels (values 0–16) with labels 0–9, shipped inside this package
(``digits.csv.gz``, 57 kB, the copy scikit-learn ships as ``load_digits``; licence in
``DIGITS_LICENSE.md``): no download, no scikit-learn. :func:`digits_split` returns a seeded, class-balanced-ish
random split as float tensors scaled to [0, 1].
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._validate import require_positive_int, require_seed
from .cache import cached_dataset

DIGITS_FILE = Path(__file__).with_name("digits.csv.gz")


@dataclass
class DigitsSplit:
    """``x_train (n_train, 1, 8, 8)``, ``y_train (n_train,)``, ``x_test``, ``y_test``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@cached_dataset
def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits: images ``(1797, 1, 8, 8)`` in [0, 1] and labels ``(1797,)``."""
    with gzip.open(DIGITS_FILE, "rt", encoding="utf-8") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)  # (1797, 65): 64 pixels, then the label
    x = torch.tensor(rows[:, :64], dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0  # (n, 1, 8, 8)
    y = torch.tensor(rows[:, 64], dtype=torch.long)  # (n,)
    return x, y


def digits_split(n_train: int, n_test: int = 500, seed: int = 0) -> DigitsSplit:
    """A random split: the first ``n_test`` of a seeded permutation are the test set,
    the next ``n_train`` the training set (so test sets agree across ``n_train``)."""
    require_positive_int("n_train", n_train)
    require_positive_int("n_test", n_test)
    require_seed("seed", seed)
    x, y = load_digits_tensors()
    if n_train + n_test > len(x):
        raise ValueError(f"n_train + n_test must be <= {len(x)} digits, got {n_train} + {n_test}")
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    test, train = perm[:n_test], perm[n_test: n_test + n_train]
    return DigitsSplit(x[train], y[train], x[test], y[test])
