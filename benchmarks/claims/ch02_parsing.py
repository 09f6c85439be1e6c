"""Chapter 2's parsing claims over 40 seeds (issue #41): the expression parser alone.

``ch02.py`` runs the whole chapter (four trainings a seed); this script runs only the cells
the parsing experiment needs (imports, sizes, the loss, the expressions, the parser's
training and evaluation), so that its claims get 40 seeds. It measures the held-out exact
match, the exact match for each number of operators, and the two ways of saying "the
longest expressions are parsed worse": against the held-out average (which contains the
longest ones themselves) and, paired on one model, against the shortest held-out ones.
Writes ``benchmarks/results/claims/ch02_parsing.md``.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch02_parsing.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "# Sizes for each scale",
    "def seq2seq_loss(",
    "from companion.data import make_expressions",
    "parse_hist = train(",
    "longer = make_expressions(",
]
CLAIMS = [
    ("parse_exact", 0.85, ">", "parsing: held-out exact"),
    ("longest_behind", 0, ">", "parsing: all - the longest expressions, exact (the earlier claim, not asserted)"),
    ("shortest_ahead", 0, ">", "parsing: the shortest - the longest held-out expressions, exact (printed, not asserted)"),
    ("longer_exact", 0.5, "<", "parsing: longer than any seen, exact"),
]


def measure(seed: int) -> dict:
    """The parsing cells' asserted quantities with ``seed``."""
    ns = notebook_namespace("02", seed, CELLS)
    by_ops, top = ns["by_ops"], ns["max_ops"]
    return dict(
        parse_exact=ns["parse_exact"],
        longest_behind=ns["parse_exact"] - by_ops[top],
        shortest_ahead=by_ops[min(by_ops)] - by_ops[top],
        longer_exact=ns["longer_exact"],
        by_ops=[by_ops[k] for k in sorted(by_ops)],
    )


NOTES = """
`by_ops` in the .jsonl lists the exact match for 2, 3, ... operators.

History (issue #41): with the parser's earlier 300 training steps, 40 seeds showed the held-out
exact match below the asserted 0.85 on seeds 33 (0.849) and 35 (0.790): a threshold fitted to
the 14 seeds swept before. The longest-against-average claim held on all 40 but with a 2nd
percentile of +0.008 (worst +0.0027), the average partly being the longest expressions
themselves. So the experiment was widened, not the claim weakened: the parser trains 450
steps (seeds 33 and 35 then reach 0.97 and 0.99). Trained that long, some seeds parse every
held-out expression right (seed 1: 1.0 for 2, 3 and 4 operators), so no order between the sizes
holds for every seed: the chapter prints the rate for each number of operators and asserts only
the overall rate and the failure on longer expressions. The table above is for 450 steps,
swept 2026-12-07 20:33-21:03 UTC, two processes on the 2-core machine shared with other jobs
(load 5 to 12).
"""

if __name__ == "__main__":
    main("02_parsing", measure, CLAIMS, notes=NOTES)
