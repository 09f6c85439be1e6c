"""Where computations run, and how to make them repeatable.

The device policy, in ``default_device(scale)``, so the same notebook runs on a laptop, in
Colab, or on a GPU server without edits:

1. ``COMPANION_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) wins: you asked for it.
2. CUDA, when PyTorch sees an NVIDIA GPU, at either scale.
3. Apple's MPS only at ``scale="gpu"``. The chapters' asserted claims are checked on the CPU
   (and CUDA), never on MPS, where training can stall or give other losses than the CPU's; at
   ``scale="cpu"`` the models are too small to gain from a GPU anyway.
4. The CPU.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._validate import require_int

SCALES = ("cpu", "gpu")


def default_device(scale: str = "cpu") -> torch.device:
    """The device the course uses, by the policy above: ``COMPANION_DEVICE`` if set, else
    CUDA if available, else MPS at ``scale="gpu"`` if available, else the CPU.

    Args:
        scale: the notebook's ``scale`` parameter, ``"cpu"`` (default) or ``"gpu"``.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    forced = os.environ.get("COMPANION_DEVICE")
    if forced:
        return _forced_device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if scale == "gpu" and _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def _forced_device(name: str) -> torch.device:
    """``COMPANION_DEVICE``'s device, refused with a clear error where it does not exist."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"COMPANION_DEVICE must name a device such as 'cpu', 'cuda' or 'mps', got {name!r}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"COMPANION_DEVICE={name!r}, but PyTorch sees no CUDA device here")
    if device.type == "mps" and not _mps_available():
        raise ValueError(f"COMPANION_DEVICE={name!r}, but Apple's MPS is not available here")
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"COMPANION_DEVICE must be a cpu, cuda or mps device, got {name!r}")
    return device


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
