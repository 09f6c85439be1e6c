"""What a computation costs: time and memory (the same on CPU and GPU), and a model's size."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
              device: torch.device | str | None = None, stat: str = "median",
              cpu_time: bool = False) -> float:
    """Wall time of ``fn()`` in seconds over ``repeats`` runs, after ``warmup`` runs.

    ``stat="median"`` (typical time) or ``"min"`` (best time: the least disturbed
    by other programs on a busy machine). On a GPU the device is synchronised
    before and after each run, so the time covers the kernels and not only
    their launch.

    ``cpu_time=True`` measures the processor time this process used instead of
    wall time (``time.process_time``, all threads): on a busy CPU it counts the
    work done, not the waiting for a free core. It is refused for GPU devices,
    whose work the process's CPU time does not include.
    """
    if stat not in ("median", "min"):
        raise ValueError(f"stat must be 'median' or 'min', got {stat!r}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    if cpu_time and device.type != "cpu":
        raise ValueError(f"cpu_time=True measures CPU work and cannot time a {device.type} device")
    clock = time.process_time if cpu_time else time.perf_counter
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = clock()
        fn()
        _sync(device)
        times.append(clock() - start)
    return statistics.median(times) if stat == "median" else min(times)


def cuda_peak_memory(fn: Callable[[], object], device: torch.device | str) -> int | None:
    """Peak bytes allocated on a CUDA ``device`` while ``fn()`` runs (``None`` off CUDA)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters of ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
