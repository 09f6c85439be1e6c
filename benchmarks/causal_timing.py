"""Chapter 12's causal timing, two ways, on the same inputs: the old way (three separate
``measure`` calls, 0.5 s of CPU time each, ratio of their medians) and the chapter's way
(``time_in_rounds``, 15 rounds, ``median_ratio``). For each, how far ``is_causal / no mask``
lies from the share of tiles the kernel computes (the chapter asserts < 0.15 at N >= 1024).

    PYTHONPATH=$PWD nice python benchmarks/causal_timing.py --repeats 12

Writes ``benchmarks/results/ch12_causal_timing_cpu.md``. Run it beside other work to see
what a busy machine does to each way.
"""

from __future__ import annotations

import argparse
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from companion.flash import causal_tiles
from companion.masks import causal_mask
from companion.profiling import measure, median_ratio, time_in_rounds

OUT = Path(__file__).resolve().parent / "results" / "ch12_causal_timing_cpu.md"


def share(n: int) -> float:  # the chapter's kernel_tiles: torch's CPU flash kernel's tiles
    b_q = 256 if n >= 768 else 64 if n >= 192 else 32
    computed, skipped = causal_tiles(n, n, b_q, 512)
    return computed / (computed + skipped)


def one(n: int, seed: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 4, n, 64, generator=g) for _ in range(3))
    mask = causal_mask(n)
    sdpa = F.scaled_dot_product_attention
    calls = {"no mask": lambda: sdpa(q, k, v), "is_causal": lambda: sdpa(q, k, v, is_causal=True),
             "mask tensor": lambda: sdpa(q, k, v, attn_mask=mask)}
    times = time_in_rounds(calls, rounds=15, cpu_time=True)
    old = {name: measure(f, cpu_time=True, min_run_time=0.5).median for name, f in calls.items()}
    return {"rounds": abs(median_ratio(times, "is_causal", "no mask") - share(n)),
            "separate": abs(old["is_causal"] / old["no mask"] - share(n)),
            "rounds_mask": median_ratio(times, "mask tensor", "is_causal"),
            "separate_mask": old["mask tensor"] / old["is_causal"],
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {1024: [], 2048: []}
    for seed in range(args.repeats):
        for n in rows:
            rows[n].append(one(n, seed))
            print(n, seed, {k: round(v, 3) for k, v in rows[n][-1].items()}, flush=True)
    lines = [
        "# Chapter 12: is_causal / no mask against the tile share, timed two ways",
        "",
        f"Written by `benchmarks/causal_timing.py --repeats {args.repeats}` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, one thread, CPU time, torch "
        f"{torch.__version__}. *Separate*: three `measure` calls (0.5 s each), ratio of medians "
        "(the chapter before 2026-12-07). *Rounds*: `time_in_rounds` (15 rounds), `median_ratio` "
        "(the chapter now). The chapter asserts an error < 0.15 and mask tensor / is_causal > 1.",
        "",
        "| N | way | error: median | error: worst | mask / is_causal: lowest | load average |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for n, runs in rows.items():
        load = f"{min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}"
        for way in ("separate", "rounds"):
            errors = [r[way] for r in runs]
            lines.append(f"| {n} | {way} | {statistics.median(errors):.3f} | {max(errors):.3f} | "
                         f"{min(r[way + '_mask'] for r in runs):.2f} | {load} |")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
