"""Chapter 12's claims over many seeds (issue #41): every experiment of the chapter.

Runs every code cell of the chapter before its exercises (the install and parameters cells
aside) with ``seed`` and every ``assert`` removed, and writes
``benchmarks/results/claims/ch12.md``. Nothing in the chapter is trained: its claims rest on
random inputs (rounding errors), on memory peaks (the same for every seed) and on CPU
timings (the machine more than the seed).

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch12.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import chapter_cells, main, notebook_namespace  # noqa: E402

LENGTHS = [128, 256, 512, 1024]  # the memory cell's N
CACHE = [1024, 2048, 4096]  # the decoding cell's cache lengths

# (quantity, threshold, direction, what the chapter says): value > or < threshold
CLAIMS = [
    ("tiled_err64", 1e-12, "<", "tiled = explicit, output and gradients, float64 (last mask)"),
    ("tiled_over_rounding", 1.01, "<", "bfloat16: tiled's error / rounding once"),
    ("per_n2", 2, ">", "explicit peak at N = 1024, in N² float32"),
    ("slope_explicit", 1.8, ">", "memory slope, explicit (low end)"),
    ("slope_explicit", 2.2, "<", "memory slope, explicit (high end)"),
    ("slope_tiled", 0.8, ">", "memory slope, tiled (low end)"),
    ("slope_tiled", 1.2, "<", "memory slope, tiled (high end)"),
    ("peak_ratio", 0.25, "<", "peak at N = 1024: tiled / explicit"),
    ("sdpa_err", 1e-4, "<", "every SDPA backend that runs - explicit"),
    ("causal_ratio_err", 0.15, "<", "timing, N = 2048: abs(is_causal / no mask - tile share)"),
    ("mask_over_causal", 1, ">", "timing, N = 2048: mask tensor / is_causal"),
    ("cache_growth", 0.8, ">", "decoding: peak memory's growth with the cache (low end)"),
    ("cache_growth", 1.2, "<", "decoding: peak memory's growth with the cache (high end)"),
]


def measure(seed: int) -> dict:
    """The asserted quantities of one run of the chapter's cells with ``seed``."""
    from companion.profiling import growth_exponent

    # cells whose names a later cell reuses: the float64 check's err, the backends' runs
    tiled = "def qkv(n_q, n_k"
    backends = "from torch.nn.attention import SDPBackend"
    keep = {tiled: ["err"], backends: ["runs"]}
    ns = notebook_namespace("12", seed, chapter_cells("12"), keep=keep)
    peaks, errors, ms = ns["peaks"], ns["errors"], ns["ms"]
    return dict(
        tiled_err64=ns[f"err@{tiled}"],
        tiled_over_rounding=errors["tiled, float32 statistics"]
        / errors["exact, rounded once to bfloat16"],
        per_n2=ns["per_n2"],
        slope_explicit=growth_exponent(LENGTHS, peaks["explicit"]),
        slope_tiled=growth_exponent(LENGTHS, peaks["tiled"]),
        peak_ratio=peaks["tiled"][-1] / peaks["explicit"][-1],
        sdpa_err=max(ns[f"runs@{backends}"].values()),
        causal_ratio_err=abs(ns["ratio"] - ns["share"]),
        mask_over_causal=ns["mask_ratio"],
        cache_growth=growth_exponent(CACHE, ns["rows"]),
    )


# exact assertions (no randomness: identities, shapes, counts, fixed tables), not measured
EXACT = [
    'online softmax statistics',
    'masked weights without NaN',
    'tiles skipped by the causal mask',
    'HBM byte counts',
    'which SDPA backends run on the CPU',
    'ALiBi slopes',
]


NOTES = """
Swept again 2026-12-07, 22:36-22:48 UTC, after the timing cell moved to rounds
(`time_in_rounds`, `median_ratio`), on the course's 2-core machine beside a red team and the
grader's tests (load average 3 to 4). The sweep before it (16:32-17:27 UTC, load 10 to 18,
separate medians) had a worst `causal_ratio_err` of 0.122, and the platform's CI of c9b57c5
failed in this chapter's timing cell. The memory peaks are the same for every seed.

The timing claims at N = 1024 and 2048 are asserted in a loop; the table has N = 2048 only.
The float64 check of the tiled attention is asserted in a loop over masks; the table has
the last mask only.
"""

if __name__ == "__main__":
    main("12", measure, CLAIMS, notes=NOTES, exact=EXACT)
