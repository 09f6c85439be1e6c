"""Chapter 1's claims over many seeds (issue #41): the chapter's experiments alone.

Runs every code cell of the chapter before its exercises (the install and parameters cells
aside) with ``seed`` and every ``assert`` removed, and writes
``benchmarks/results/claims/ch01.md``.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch01.py --seeds 40 --first 100
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import chapter_cells, main, notebook_namespace  # noqa: E402


# (quantity, threshold, direction, what the chapter says): value > or < threshold
CLAIMS = [
    ("cnn_acc", 0.85, ">", "the CNN reads most images completely"),
    ("rnn_exact", 0.9, ">", "vanilla RNN: exact captions (>= in the chapter)"),
    ("rnn_token", 0.97, ">", "vanilla RNN: right tokens (>= in the chapter)"),
    ("forced_minus_free", 0, ">", "teacher forcing - free running, all errors (>=)"),
    ("gap_swap", 0.1, "<", "after a swap: forced - free"),
    ("n_other", 0, ">", "first errors that change the structure"),
    ("swap_minus_other", 0, ">", "swaps - other first errors"),
    ("gap_other_minus_swap", 0.3, ">", "gap after other errors - after swaps"),
    ("gru_over_rnn", 0.5, "<", "GRU errors / vanilla RNN errors, same steps"),
    ("gru_minus_rnn", 0.05, "<", "abs(GRU early - RNN full), exact"),
    ("gru_over_control", 0.5, "<", "GRU errors / RNN with the image as h_0"),
    ("moved", 0.3, "<", "training moves the embeddings (share of their length)"),
    ("within", 0, "<", "cosine of the changes within a kind"),
    ("between_minus_within", 0.05, ">", "between - within"),
]


def measure(seed: int) -> dict:
    """The asserted quantities of one run of the chapter's cells with ``seed``."""
    ns = notebook_namespace("01", seed, chapter_cells("01"))
    pooled, gaps, swap, other = ns["pooled"], ns["gaps"], ns["SWAP"], ns["OTHER"]
    return dict(
        cnn_acc=ns["cnn_acc"],
        rnn_exact=ns["rnn_exact"],
        rnn_token=ns["rnn_token"],
        forced_minus_free=ns["forced_all"] - ns["free_all"],
        gap_swap=gaps[swap],
        n_other=pooled[other][0],
        swap_minus_other=pooled[swap][0] - pooled[other][0],
        gap_other_minus_swap=gaps[other] - gaps[swap],
        gru_over_rnn=ns["errors_gru"] / ns["errors_rnn"],
        gru_minus_rnn=abs(ns["gru_exact"] - ns["rnn_exact"]),
        gru_over_control=ns["errors_gru"] / ns["errors_control"],
        moved=ns["moved"],
        within=ns["within"],
        between_minus_within=ns["between"] - ns["within"],
    )


if __name__ == "__main__":
    main("01", measure, CLAIMS)
