"""Chapter 9's claims on a seed nobody tried (issue #41).

A threshold fitted to the seeds that were swept fails on others. This test runs chapter 9's
experiments (its own cells, through ``benchmarks/claims/ch09.py``, asserts removed) with a
seed drawn at random above 1,000 and checks every quantity against the chapter's claim. The
seed is printed in the failure message; ``CLAIMS_SEED=N`` reruns it. About 90 s on a 2-core
CPU, so it is marked slow.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "claims"))
import ch09  # noqa: E402


def fresh_seed() -> int:
    """CLAIMS_SEED if set, else a seed above 1,000 that no sweep fixed in advance."""
    if "CLAIMS_SEED" in os.environ:
        return int(os.environ["CLAIMS_SEED"])
    return random.SystemRandom().randrange(1_001, 1_000_000)


def failed_claims(row: dict, claims) -> list[str]:
    """The claims ``(quantity, threshold, direction, what)`` that ``row`` breaks."""
    out = []
    for quantity, threshold, direction, what in claims:
        value = row[quantity]
        ok = value > threshold if direction == ">" else value < threshold
        if not ok:
            out.append(f"{what}: {quantity} = {value:.4g}, claimed {direction} {threshold:g}")
    return out


def test_failed_claims_names_each_broken_claim():
    claims = [("a", 0.5, ">", "A"), ("b", 0.1, "<", "B")]
    assert failed_claims({"a": 0.6, "b": 0.05}, claims) == []
    assert failed_claims({"a": 0.5, "b": 0.2}, claims) == [
        "A: a = 0.5, claimed > 0.5",
        "B: b = 0.2, claimed < 0.1",
    ]


# Chapter 9's thresholds were measured over 5 seeds only (benchmarks/results/claims/ch09.md),
# and the fresh-clone CI run of 2026-12-07 drew a seed where one failed: shown as xfail, with
# the seed and the claim in its message, until the 40-seed sweep of issue #41 settles them.
@pytest.mark.slow
@pytest.mark.xfail(reason="chapter 9's claims are measured over 5 seeds only (issue #41)", strict=False)
def test_chapter9_claims_hold_for_a_fresh_seed():
    seed = fresh_seed()
    row = ch09.measure(seed)
    failed = failed_claims(row, ch09.CLAIMS)
    assert not failed, f"chapter 9, seed {seed} (rerun with CLAIMS_SEED={seed}): {failed}"
