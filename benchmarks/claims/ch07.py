"""Chapter 7's training claims over many seeds (issue #41): pre-norm against post-norm.

Runs the chapter's own cells (imports, the task, ``fit``, the pre-/post-norm runs and the
clipping statistics), without the chapter's main 600-step model, and writes
``benchmarks/results/claims/ch07.md``. The cell trains the seeds ``seed`` and ``seed + 1``, so
the sweep steps ``seed`` by 2: 20 runs of the cell, 40 seeds.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch07.py --seeds 20
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "train_set = make_sequence_task(n_train",  # the task and make_model
    "def fit(\n",  # loss_fn, exact_match, fit
    "norm_seeds = [",  # pre-norm against post-norm at lr 3e-2, no warmup
    'print("gradient norms before clipping',  # how often clipping acted
]

CLAIMS = [
    ("gap", 0.3, ">", "post-norm's held-out loss minus pre-norm's, per seed"),
    ("post_over_blind", 0.8, ">", "post-norm's loss / the blind guess's"),
    ("first_clip", 4.5, "<", "the first step where clipping acts (every run)"),
    ("post_clipped", 0.2, "<", "post-norm: share of steps clipped"),
]


def measure(seed: int) -> dict:
    ns = notebook_namespace("07", seed, CELLS)
    final, blind, runs = ns["final"], ns["blind"], ns["norm_runs"]
    seeds = ns["norm_seeds"]
    first, post_clipped = [], []
    for (nf, _s), h in runs.items():
        acted = [i + 1 for i, g in enumerate(h.grad_norms) if g > 1.0]
        first.append(acted[0] if acted else 10**6)
        if not nf:
            post_clipped.append(len(acted) / len(h.grad_norms))
    return dict(
        gap=[final[False, s] - final[True, s] for s in seeds],
        post_over_blind=[final[False, s] / blind for s in seeds],
        pre=[final[True, s] for s in seeds],
        post=[final[False, s] for s in seeds],
        first_clip=first,
        post_clipped=post_clipped,
    )


NOTES = """
Measured on a 2-core machine shared with other jobs (load average 15 to 27), so the
times are far above a quiet machine's.

Before issue #41 the chapter claimed a gap above 0.5 nats per token and post-norm above 90 %
of the blind guess's loss; the second fell below at a seed of this sweep, and the first did at
a seed outside 0 to 11 (the issue). The chapter now claims 0.3 and 80 %, below the 2nd
percentile. Not swept here (each needs a 600-step model or more runs per seed than this
machine allowed): the main model's claims, the run without clipping (it asserts the same gap
and ratio at the cell's seed), the warmup runs and the positional-encoding runs.
"""

if __name__ == "__main__":
    main("07", measure, CLAIMS, notes=NOTES, stride=2)
