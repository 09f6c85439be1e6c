"""Chapter 9's claims over many seeds (issue #41): the capstone's experiments alone.

Runs the chapter's own cells (imports, sizes, data, chapter 1's CNN + RNN, the Transformer
captioner's training and decoding, the comparison table, the attention measurements, and the
untrained model of exercise 5) for each seed, with every ``assert`` removed, and writes
``benchmarks/results/claims/ch09.md``. (The Transformer's cells need chapter 1's captioner:
its parameter count is printed beside the Transformer's.)

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch09.py --seeds 40 --first 100
    PYTHONPATH=$PWD python benchmarks/claims/ch09.py --report   # the cached seeds only
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402


# The chapter's code cells that the experiment runs, each named by a piece of its source.
CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "# Sizes for each scale",
    "data = make_shapes(cfg",
    "def factor_loss(",
    "torch.manual_seed(seed)\nconfig = CaptionerConfig(",
    "hist = train(\n    model,",
    "def forward_flops(",
    "W = predict(",
    "m0, m1 = mass[..., 0][relational]",
    "# Everything the exercises use",
    "ex_model = TransformerCaptioner(CaptionerConfig(vocab_size=len(CAPTION_VOCAB)))",
]


# (quantity, threshold, direction, what the chapter says): value > or < threshold
CLAIMS = [
    ("tf_exact", 0.85, ">", "Transformer: exact captions"),
    ("tf_token", 0.95, ">", "Transformer: right tokens"),
    ("beam_gain", -1e-4, ">", "beam 3 - greedy, mean log-prob"),
    ("word_rate", 0.5, ">", "colour/shape words with > 1/2 on their object"),
    ("named_over_uniform", 2, ">", "that mass / uniform attention's"),
    ("named_over_other", 2.5, ">", "two shapes: named / other object"),
    ("second_gain", 0.03, ">", "relation words: 2nd object - its uniform share"),
    ("second_over_first", 0, ">", "relation words: 2nd object - 1st object"),
    ("untrained_entropy", 0.95, ">", "untrained: row entropy / log N"),
    ("untrained_gap", 0.05, "<", "untrained: abs(mass on named - share)"),
    ("rnn_exact", 0.9, ">", "chapter 1's CNN + RNN: exact captions"),
    ("rnn_token", 0.97, ">", "chapter 1's CNN + RNN: right tokens"),
    ("exact_gap", -0.12, ">", "Transformer - RNN, exact (close)"),
    ("token_gap", -0.05, ">", "Transformer - RNN, tokens (close)"),
]
# printed by the chapter, no longer asserted (issue #41): the first failed on a seed outside
# 0-11, the second came within a point of failing (seed 101)
PRINTED = [
    ("on_named", 0.5, ">", "printed only: mean mass of colour/shape words on their object"),
    ("exact_gap", 0, "<", "printed only: Transformer - RNN, exact (does not beat it)"),
]


def measure(seed: int) -> dict:
    """The asserted quantities of one run of the chapter's cells with ``seed``."""
    ns = notebook_namespace("09", seed, CELLS)
    on_named, content, two = ns["on_named"], ns["content"], ns["two"]
    row = dict(
        tf_exact=ns["tf_exact"],
        tf_token=ns["tf_token"],
        beam_gain=(ns["beams"][3].log_prob.mean() - ns["greedy"].log_prob.mean()).item(),
        word_rate=ns["word_rate"],
        on_named=on_named[content].mean().item(),
        named_over_uniform=(on_named[content].mean() / ns["uniform"].mean()).item(),
        named_over_other=(on_named[two].mean() / ns["on_other"][two].mean()).item(),
        second_gain=(ns["m1"].mean() - ns["s1"].mean()).item(),
        second_over_first=(ns["m1"].mean() - ns["m0"].mean()).item(),
        untrained_entropy=ns["ex_entropy"] / math.log(16),
        untrained_gap=abs(ns["ex_on"].mean() - ns["ex_uniform"].mean()).item(),
        rnn_exact=ns["rnn_exact"],
        rnn_token=ns["rnn_token"],
        exact_gap=ns["tf_exact"] - ns["rnn_exact"],
        token_gap=ns["tf_token"] - ns["rnn_token"],
    )
    return row


NOTES = """
**A sweep cut short, not the 40 seeds issue #41 asks for.** Measured 2026-12-07, 12:30-13:26
UTC, on the course's 2-core machine shared with other jobs (load 13 to 30; a seed took 13 to
15 minutes instead of about 90 s). The same chapter, executed as a notebook for seeds 0, 1
and 53432 (nbclient, 12:48-12:57 UTC before the last change and again from 13:21 after it),
printed: mean mass on the named object 0.64, 0.71, 0.70 (uniform attention 0.22 each);
Transformer - CNN + RNN exact captions -2.2, -5.1, -3.3 points. Seed 101's -0.8 points is
why the chapter no longer asserts that the Transformer stays behind. The mean mass is no
longer asserted above one half because it fell below on a seed outside 0-11 (issue #41).
Still to do: `--seeds 40 --first 100` on a quiet machine, then check that every asserted
threshold sits below the 2nd percentile.
"""


if __name__ == "__main__":
    main("09", measure, CLAIMS + PRINTED, notes=NOTES)
