"""Chapter 5's claims over many seeds (issue #41): the coreference experiment alone.

Runs the chapter's own cells (imports, data, the PronounReader's training, the head
measurements) for each seed and writes ``benchmarks/results/claims/ch05.md``.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch05.py --seeds 40
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import main, notebook_namespace  # noqa: E402

CELLS = [
    "companion.seed_everything(seed)\ndevice",  # the imports cell
    "coref_train = make_coreference(",
    "class PronounReader(",
    "def head_stats(model):",
]

CLAIMS = [
    ("first_noun", 0.4, ">", "referent is the first noun (low end)"),
    ("first_noun", 0.6, "<", "referent is the first noun (high end)"),
    ("coref_acc", 0.95, ">", "test sentences answered correctly"),
    ("n_seen", 2000, "<", "different training sentences"),
    ("test_seen", 0.9, ">", "share of test sentences also in training"),
    ("some_head", 0.35, ">", "a last-layer head puts > 1/2 on the referent"),
    ("best_ref_most", 1 / 3, ">", "the best head alone puts > 1/2 on it"),
    ("ref_ratio", 1.5, ">", "a last-layer head: referent / other noun"),
    ("max_prop", 0.2, ">", "the most attentive head's weight on the property word"),
    ("offset_share", 0.25, "<", "largest share of a preferred offset"),
    ("before", 0.05, "<", "before training: a head puts > 1/2 on the referent"),
]


def measure(seed: int) -> dict:
    ns = notebook_namespace("05", seed, CELLS)
    stats, before, props = ns["stats"], ns["before"], ns["props"]
    return dict(
        first_noun=ns["first_noun"],
        coref_acc=ns["coref_acc"],
        n_seen=len(ns["seen"]),
        test_seen=len(ns["test_sentences"] & ns["seen"]) / len(ns["test_sentences"]),
        some_head=ns["some_head"],
        best_ref_most=ns["best"]["ref_most"],
        ref_ratio=max(r["ref"] / r["other"] for r in ns["last_rows"]),
        max_prop=max(props),
        prop_spread=max(props) - min(props),
        offset_share=max(r["offset_share"] for r in stats),
        before=max(r["ref_most"] for r in before),
    )


NOTES = """
Measured on a 2-core machine shared with other jobs (load average 15 to 27), so the
times are far above a quiet machine's.

The claims' thresholds before issue #41 were fitted to seeds 1 to 11: the spread of the
property word's share between heads was claimed above 0.2, a last-layer head's
referent/other ratio above 2, the most attentive head's weight on the property word above 0.3
and the share of sentences where a last-layer head puts most weight on the referent above 0.5.
Each fell below at a seed of this sweep. The chapter now claims 1.5, 0.2 and 0.35 for the last
three, below the 2nd percentile. The spread is no longer asserted, only printed: over these 40
seeds its smallest value was 0.169 and its 2nd percentile 0.19 (median 0.355), yet
tests/test_claims_fresh_seeds.py drew seed 349716, where it was 0.09. Its tail is longer
than 40 seeds show. The other thresholds were kept.
"""

if __name__ == "__main__":
    main("05", measure, CLAIMS, notes=NOTES)
