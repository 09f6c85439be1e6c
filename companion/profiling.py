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
returns their median (or minimum). To compare functions on a busy machine,
:func:`time_in_rounds` times them in rounds, back to back, and :func:`median_ratio` compares
them round by round.

Memory: :func:`peak_memory` counts the bytes of the tensors a call creates that are alive at
the same moment, on any device. On the CPU, torch 2.13 keeps no allocator statistics (CUDA's
``torch.cuda.max_memory_allocated`` has no CPU twin) and the profiler's memory timeline
(``profile(profile_memory=True).export_memory_timeline``) is deprecated, its replacement
CUDA-only, so the count is kept here, op by op, by a ``TorchDispatchMode``.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.utils import benchmark
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

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


def time_in_rounds(calls: Mapping[str, Callable[[], object]], *, rounds: int = 9, min_block_time: float = 0.02,
                   number: int | None = None, device: torch.device | str | None = None,
                   cpu_time: bool = False) -> dict[str, list[float]]:
    """Seconds per call of each function in ``calls`` (``{name: fn}``), one time per round.

    A round times a block of calls of every function, back to back; the order turns by one
    function from round to round. Something else slowing the machine for a moment slows the
    blocks of one round alike, so compare the functions round by round
    (:func:`median_ratio`), not through separate medians. Each function is called once
    first, unmeasured (its first call may allocate). A block holds ``number`` calls, or, by
    default, as many as last ``min_block_time`` seconds: unmeasured blocks of 1 call, then up
    to ten times more each, until one lasts that long by the clock read or by the wall clock
    (a call that reads as no time, such as a wait under ``cpu_time=True`` or a call on a
    coarse clock, does not make the block huge). ``device`` and ``cpu_time`` as in
    :func:`measure`.

    Returns ``{name: [seconds per call in round 1, round 2, ...]}``.
    """
    from ._validate import require_positive_int

    if not isinstance(calls, Mapping):
        raise TypeError(f"calls must be a mapping from names to functions, got {type(calls).__name__}")
    if not calls:
        raise ValueError("calls must name at least one function, got an empty mapping")
    for name, fn in calls.items():
        if not callable(fn):
            raise TypeError(f"calls[{name!r}] must be a callable taking no arguments, got {type(fn).__name__}")
    require_positive_int("rounds", rounds)
    require_number("min_block_time", min_block_time, 0.0, strict=True)
    if number is not None:
        require_positive_int("number", number)
    device = torch.device(device) if device is not None else torch.device("cpu")
    if cpu_time and device.type != "cpu":
        raise ValueError(f"cpu_time=True measures CPU work and cannot time a {device.type} device")
    read = time.process_time if cpu_time else time.perf_counter

    def seconds(fn: Callable[[], object], number: int) -> float:  # per call, over a block
        _sync(device)
        start = read()
        for _ in range(number):
            fn()
        _sync(device)
        return (read() - start) / number

    def block_size(fn: Callable[[], object]) -> int:  # calls that last min_block_time
        size = 1
        while True:
            wall = time.perf_counter()
            lasted = max(seconds(fn, size) * size, time.perf_counter() - wall)
            if lasted >= min_block_time:
                return size
            wanted = math.ceil(size * min_block_time / lasted) if lasted > 0 else 10 * size
            size = min(max(wanted, size + 1), 10 * size)

    names = list(calls)
    block = {}
    for name in names:  # warm-up: the first call allocates; then the block is sized
        calls[name]()
        block[name] = number or block_size(calls[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name].append(seconds(calls[name], block[name]))
    return times


def median_ratio(times: Mapping[str, Sequence[float]], numerator: str, denominator: str) -> float:
    """The median over rounds of ``times[numerator][r] / times[denominator][r]``: the
    ratio of two functions' times, compared round by round (``times`` from
    :func:`time_in_rounds`)."""
    for name in (numerator, denominator):
        if name not in times:
            raise KeyError(f"no times for {name!r}; timed: {sorted(times)}")
    a, b = times[numerator], times[denominator]
    if len(a) != len(b) or not a:
        raise ValueError(f"need as many rounds of {numerator!r} as of {denominator!r}, at least one; "
                         f"got {len(a)} and {len(b)}")
    for name, values in ((numerator, a), (denominator, b)):
        if not all(x > 0 and math.isfinite(x) for x in values):  # NaN fails x > 0 too
            raise ValueError(f"times of {name!r} must be positive and finite, got {list(values)}")
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


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


class _LiveBytes(TorchDispatchMode):
    """Sees every tensor operation; adds the bytes of each new storage an operation returns
    (not views or in-place results: those share an input's storage) and subtracts them when
    the storage is freed. ``peak`` is the most bytes alive at once."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak = set(), 0, 0

    def _free(self, key, nbytes):
        self.live.discard(key)
        self.now -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in inputs or key in self.live:
                continue  # a view, an in-place result, or counted already
            self.live.add(key)
            self.now += nbytes
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._free, key, nbytes)
        return out


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of the tensors that ``fn()`` creates, alive at the same moment: the
    intermediate results, those autograd saves for the backward pass, gradients. Tensors
    that existed before the call (inputs, parameters) are not counted. Any device."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    with _LiveBytes() as counter:
        fn()
    return counter.peak


def attention_memory(lengths, *, heads: int = 4, head_dim: int = 32, block: int = 64, backward: bool = False,
                     device: torch.device | str | None = None) -> dict[str, list[int]]:
    """Peak bytes (:func:`peak_memory`) of causal self-attention of one
    sequence of each length ``N`` in ``lengths``, with ``heads`` heads of size ``head_dim``:
    ``{"explicit": [...], "tiled": [...]}``, one number per length. Forward only (no autograd),
    or forward and backward with ``backward=True``. The explicit path stores the
    ``heads × N × N`` scores and weights; the tiled path stores tiles of ``block × block``.
    Runs on one CPU thread (bytes do not depend on threads; on a shared CPU one is faster)."""
    from ._validate import require_positive_int

    for name, value in (("heads", heads), ("head_dim", head_dim), ("block", block)):
        require_positive_int(name, value)
    for n in lengths:
        require_positive_int("each length", n)
    peaks = {"explicit": [], "tiled": []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for n in lengths:
            for name, peak in _attention_peaks(n, heads, head_dim, block, backward, device).items():
                peaks[name].append(peak)
    finally:
        torch.set_num_threads(threads)
    return peaks


def _attention_peaks(n, heads, head_dim, block, backward, device) -> dict[str, int]:
    from .attention import attention_with_weights  # imported here: the attention sits above
    from .flash import tiled_attention
    from .masks import causal_mask

    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, heads, n, head_dim, generator=g).to(device).requires_grad_(backward)
               for _ in range(3))  # (1, H, N, D_h) each
    mask = causal_mask(n, device=q.device)  # made before the measurement: an input, like q, k, v
    runs = {"explicit": lambda: attention_with_weights(q, k, v, mask)[0],
            "tiled": lambda: tiled_attention(q, k, v, causal=True, block_q=block, block_k=block)}
    peaks = {}
    for name, run in runs.items():
        if backward:
            peaks[name] = peak_memory(lambda run=run: run().sum().backward())
        else:
            with torch.no_grad():
                peaks[name] = peak_memory(run)
    return peaks


def growth_exponent(sizes: Sequence[float], costs: Sequence[float]) -> float:
    """The slope ``p`` of the least-squares line through ``(log n, log cost)``: a cost that
    grows as ``c · n^p`` has exponent ``p`` (2 for a cost in ``N²``, 1 for one in ``N``)."""
    if len(sizes) != len(costs) or len(sizes) < 2:
        raise ValueError(f"need at least 2 sizes and as many costs, got {len(sizes)} sizes and {len(costs)} costs")
    if min(sizes) <= 0 or min(costs) <= 0:
        raise ValueError(f"sizes and costs must be positive to take logarithms, got {list(sizes)} and {list(costs)}")
    x = [math.log(n) for n in sizes]
    y = [math.log(c) for c in costs]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx == 0:
        raise ValueError(f"sizes must not all be equal, got {list(sizes)}")
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sxx


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters of ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
