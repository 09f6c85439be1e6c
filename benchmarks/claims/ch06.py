"""Chapter 6's claims over many seeds (issue #41): the cells whose claims rest on random
weights or data.

Runs the chapter's imports, the two lines of verse through a random attention layer (with
and without positions) and the order classifier's training, with ``seed`` and every
``assert`` removed, and writes ``benchmarks/results/claims/ch06.md``. The chapter's other
claims are about fixed tables (sinusoidal and binary encodings, their distances, rotations
and least-squares fits): the same for every seed, so exact.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch06.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    'line_a = list("',
    "PINYIN = dict(",
    "N_SEQ, V_DIG = 8, 10",
]

# (quantity, threshold, direction, what the chapter says): value > or < threshold
CLAIMS = [
    ("same_char_gap", 1e-5, "<", "no positions: a character's output, line A - line B"),
    ("pooled_gap", 1e-5, "<", "no positions: mean output, line A - line B"),
    ("pooled_gap_pe", 1e-3, ">", "with positions: mean output, line A - line B"),
    ("gap_max", 1e-5, "<", "no positions: largest per-character gap"),
    ("gap_pe_min", 1e-2, ">", "with positions: smallest per-character gap"),
    ("none_over_majority", 0.05, "<", "no positions: accuracy - the majority label's"),
    ("sinusoidal", 0.85, ">", "sinusoidal positions: accuracy"),
    ("learned", 0.85, ">", "learned positions: accuracy"),
]


def measure(seed: int) -> dict:
    """The asserted quantities of one run of the chapter's cells with ``seed``."""
    ns = notebook_namespace("06", seed, CELLS)
    acc = ns["accuracy"]
    return dict(
        same_char_gap=ns["same_char_gap"],
        pooled_gap=ns["pooled_gap"],
        pooled_gap_pe=float(ns["pooled_gap_pe"]),
        gap_max=float(max(ns["gap"])),
        gap_pe_min=float(min(ns["gap_pe"])),
        none_over_majority=acc["none"] - ns["majority"],
        sinusoidal=acc["sinusoidal"],
        learned=acc["learned"],
    )


# exact assertions (no randomness: identities, shapes, counts, fixed tables), not measured
EXACT = [
    'the two lines hold the same characters',
    'position / length is not a position code',
    'binary and sinusoidal codes: steps and distances (fixed tables)',
    'frequencies, static dimensions (fixed tables)',
    '3-D curves: distances and collisions',
    'smallest distances by base',
    'cosine similarities by base',
    'out-of-range shares by base',
    'rotations (float64)',
    'least-squares fits of a shift',
    "the table's dtype (exercise check)",
    'exercise 5: distances and similarities by base',
]


NOTES = """
Swept 2026-12-07, 16:14-16:45 UTC, on the course's 2-core machine shared with other jobs
(load average 10 to 17), so the times are far above a quiet machine's.
"""

if __name__ == "__main__":
    main("06", measure, CLAIMS, notes=NOTES, exact=EXACT)
