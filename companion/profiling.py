"""What a computation costs: time and memory (the same on CPU and GPU), and a model's size.

Timing goes through PyTorch's own benchmark timer, :class:`torch.utils.benchmark.Timer`,
rather than a loop of ``time.perf_counter()`` calls. The timer

* warms up first (its first calls, which pick the block size, are not measured),
* picks the number of runs itself: it calls ``fn`` in blocks, as many calls per block as
  make the cost of reading the clock negligible (one call for slow functions, thousands
  for fast ones), and repeats blocks until ``min_run_time`` seconds have been measured,
* and, here, synchronises the device before every reading of the clock, so a GPU's time
  covers its kernels and not only their launch.

Each block gives one time per call (block time / calls in the block); :func:`time_call`
returns their median (or minimum).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils import benchmark

from ._validate import require_number


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure(fn: Callable[[], object], *, device: torch.device | str | None = None, cpu_time: bool = False,
            min_run_time: float = 0.2) -> benchmark.Measurement:
    """Time ``fn()`` with :class:`torch.utils.benchmark.Timer` (``blocked_autorange``).

    Returns the timer's ``Measurement``: ``.times`` (seconds per call, one per block),
    ``.median``, ``.number_per_run`` (calls per block), ``.iqr``. ``fn`` runs with the
    caller's ``torch.get_num_threads()`` (the Timer alone would use one thread).

    ``device``: the device ``fn`` computes on; it is synchronised before every clock
    reading. ``cpu_time=True`` reads the processor time of this process
    (``time.process_time``, all threads) instead of wall time: on a busy CPU it counts
    the work done, not the waiting for a free core. It is refused for GPU devices, whose
    work the process's CPU time does not include. (The timer sizes its blocks by the clock
    it reads: a function that mostly waits, sleeping or reading files, uses little
    processor time and is called many times.)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    require_number("min_run_time", min_run_time, 0.0, strict=True)
    device = torch.device(device) if device is not None else torch.device("cpu")
    if cpu_time and device.type != "cpu":
        raise ValueError(f"cpu_time=True measures CPU work and cannot time a {device.type} device")
    read = time.process_time if cpu_time else time.perf_counter

    def clock() -> float:  # the device's queued work is finished before the clock is read
        _sync(device)
        return read()

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, timer=clock, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time)


def time_call(fn: Callable[[], object], *, device: torch.device | str | None = None, stat: str = "median",
              cpu_time: bool = False, min_run_time: float = 0.2) -> float:
    """Seconds per call of ``fn()``, measured by :func:`measure` (warm-up, device
    synchronisation and the number of runs handled by ``torch.utils.benchmark.Timer``).

    ``stat="median"`` (typical time) or ``"min"`` (best time: the least disturbed by other
    programs on a busy machine) over the timer's blocks. ``min_run_time``: seconds of
    measurement at least (a slow ``fn`` is called at least twice: once to warm up and size
    the blocks, once measured). ``device`` and ``cpu_time`` as in :func:`measure`.
    """
    if stat not in ("median", "min"):
        raise ValueError(f"stat must be 'median' or 'min', got {stat!r}")
    m = measure(fn, device=device, cpu_time=cpu_time, min_run_time=min_run_time)
    return m.median if stat == "median" else min(m.times)


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
