"""Chapter 2's sampling claims over 40 seeds (issue #41): the cells on the 1/sqrt(D) scale.

``ch02.py`` runs the whole chapter (its four trainings take minutes a seed on a loaded
machine); this script runs only the cells that draw random queries and keys (the variance of
q·k, its moments at d = 64, the softmax's saturation, and exercise 5's entropies), so that
these claims get 40 seeds. Writes ``benchmarks/results/claims/ch02_scaling.md``.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch02_scaling.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402
from ch02 import CLAIMS as ALL_CLAIMS, sampling_quantities  # noqa: E402

CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "g = torch.Generator().manual_seed(seed)\ndims = ",
    "d = 64\nq, k = torch.randn(50_000",
    "D, N, trials = 512, 16, 2000",
    "ex_entropy = {}",
]
QUANTITIES = [
    "var_raw_err", "var_scaled_err", "dot_mean", "dot_var_err", "square_mean_err",
    "square_var_err", "negative_err", "top_raw", "top_scaled", "norm_ratio",
    "ex_raw_1024", "ex_scaled_1024", "ex_scaled_spread",
]
CLAIMS = [c for c in ALL_CLAIMS if c[0] in QUANTITIES]


def measure(seed: int) -> dict:
    """The sampling cells' asserted quantities with ``seed``."""
    return sampling_quantities(notebook_namespace("02", seed, CELLS))


NOTES = """
Swept 2026-12-07, 17:01-17:14 UTC, on the course's 2-core machine shared with other jobs
(load average 13 to 15), so the times are far above a quiet machine's.
"""

if __name__ == "__main__":
    main("02_scaling", measure, CLAIMS, notes=NOTES)
