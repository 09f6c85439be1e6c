"""How fast is this machine, against the quiet 2-core machine the chapter budgets were set on?

Machines of CI's kind differ up to 2x in speed, so a chapter's wall time means little alone.
This runs a fixed small workload of the kind the chapters run (a small model trained with Adam:
matrix products plus Python and dispatcher overhead) on one thread and reports the median CPU
time of several repeats. CPU time, not wall time, so that other programs on the machine change
it little: it measures the machine, not its load. ``speed_factor()`` divides it by the reference median stored in
``benchmarks/results/calibration.json``: 1.0 on the reference machine, 2.0 on one that takes
twice as long. ``tests/test_chapter_budget.py`` divides each chapter's build time by it.

    python benchmarks/calibration.py            # print this machine's median and factor
    python benchmarks/calibration.py --record   # store it as the reference (quiet machine only)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

REFERENCE = Path(__file__).resolve().parent / "results" / "calibration.json"


def workload(steps: int = 150) -> float:
    """CPU seconds to train a 3-layer MLP (width 128) for ``steps`` Adam steps on a batch of 64."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=generator)
    y = torch.randint(0, 10, (64,), generator=generator)
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.process_time()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.process_time() - start


def median_seconds(repeats: int = 9) -> float:
    """The median of ``repeats`` runs of :func:`workload` (after one warm-up), on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        workload(20)
        return statistics.median(workload() for _ in range(repeats))
    finally:
        torch.set_num_threads(threads)


def speed_factor(seconds: float | None = None) -> float:
    """This machine's workload time over the reference machine's (> 1: slower than it)."""
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))["median_seconds"]
    return (median_seconds() if seconds is None else seconds) / reference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="store this machine's median as the reference")
    args = parser.parse_args()
    seconds = median_seconds()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"workload median: {seconds:.3f} s (load average {load:.1f})")
    if args.record:
        REFERENCE.write_text(json.dumps({"median_seconds": round(seconds, 4), "load_average": round(load, 2),
                                         "torch": torch.__version__, "cpus": os.cpu_count()}, indent=1) + "\n",
                             encoding="utf-8")
        print(f"recorded in {REFERENCE}")
    elif REFERENCE.exists():
        print(f"speed factor against the reference: {speed_factor(seconds):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
