"""Chapter 8's claims over many seeds (issue #41): the ViT-vs-CNN experiments alone.

Runs the chapter's own cells (imports, sizes, the 24 training runs on digits, the accuracy
table, the shift test and the class-token comparison) with ``seed`` and every ``assert``
removed, and writes ``benchmarks/results/claims/ch08.md``. Each chapter run already trains
three seeds (``seed``, ``seed + 1``, ``seed + 2``); the claims are about those three together,
so a sweep over ``seed`` measures the chapter as a reader runs it.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch08.py --seeds 40 --first 100
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

# The chapter's code cells that the experiment runs, each named by a piece of its source.
CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "images, labels = load_digits_tensors()",  # the digits (the sizes cell checks shapes)
    'if scale == "gpu":\n    vit_size',
    "def loss_fn(",
    "def stats(",
    'print(\n    f"share of test answers',
    "n_pool = sizes[-1]",
]

# (quantity, threshold, direction, what the chapter says): value > or < threshold
CLAIMS = [
    ("cnn_beats_vit", 0, ">", "every size: worst CNN run - best ViT run"),
    ("gap_shrinks", 0.05, ">", "accuracy gap, smallest - largest training set"),
    ("gap_largest", 0.05, ">", "accuracy gap at the largest training set"),
    ("cnn_ceiling", 0.95, ">", "worst CNN run at the largest training set"),
    ("flip_1px_lead", 0.2, ">", "worst seed: ViT - CNN flip rate at 1 pixel"),
    ("flip_patch", 0.5, ">", "worst seed: ViT flip rate at p pixels"),
    ("flip_patch_lead", 0.3, ">", "worst seed: ViT - CNN flip rate at p pixels"),
    ("carried_drop", 0.3, ">", "worst seed: ViT at p pixels - with positions carried"),
    ("cnn_flip_mean", 0, ">", "mean CNN flip rate at 1 pixel"),
    ("pool_worst", 0.7, ">", "worst run of mean pooling and class token"),
]


def measure(seed: int) -> dict:
    """The asserted quantities of one run of the chapter's cells with ``seed``."""
    ns = notebook_namespace("08", seed, CELLS)
    stats, sizes, seeds, results = ns["stats"], ns["sizes"], ns["seeds"], ns["results"]
    gaps, carried, big = ns["gaps"], ns["carried"], sizes[-1]
    flips = {s: (results["CNN", big, s][1:], results["ViT", big, s][1:]) for s in seeds}
    return dict(
        cnn_beats_vit=min(stats("CNN", n)[1] - stats("ViT", n)[2] for n in sizes),
        gap_shrinks=gaps[0] - gaps[-1],
        gap_largest=gaps[-1],
        cnn_ceiling=stats("CNN", big)[1],
        flip_1px_lead=min(v[0] - c[0] for c, v in flips.values()),
        flip_patch=min(v[1] for _, v in flips.values()),
        flip_patch_lead=min(v[1] - c[1] for c, v in flips.values()),
        carried_drop=min(flips[s][1][1] - carried[s] for s in seeds),
        cnn_flip_mean=stats("CNN", big, 1)[0],
        pool_worst=min(ns["pool_acc"].values()),
    )


if __name__ == "__main__":
    main("08", measure, CLAIMS)
