"""Where computations run, and how to make them repeatable.

``default_device()`` picks CUDA, then Apple's MPS, then the CPU, so the same
notebook runs on a laptop, in Colab, or on a GPU server without edits.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._validate import require_int


def default_device() -> torch.device:
    """The best available device: ``cuda``, then ``mps``, then ``cpu``.

    Set the environment variable ``COMPANION_DEVICE`` (e.g. ``cpu``) to override.
    """
    forced = os.environ.get("COMPANION_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def describe_device(device: torch.device | None = None) -> str:
    """A one-line description of ``device`` for notebooks to print."""
    try:
        device = torch.device(device) if device is not None else default_device()
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a device such as 'cpu' or 'cuda', got {device!r}") from err
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return f"cuda ({name})"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy and torch (all devices).

    Returns a ``torch.Generator`` seeded with ``seed`` for code that wants its
    own stream of random numbers.
    """
    require_int("seed", seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
