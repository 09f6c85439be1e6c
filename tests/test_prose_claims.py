"""The drift check (``tools/prose_claims.py``): a number range that the prose attributes to
seeds or runs must be asserted by a cell of its notebook (or link a dated results file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_prose_claims():
    # Loaded from its file, not by putting tools/ on sys.path: there tools/exercise_markdown.py
    # would hide the book's extension of the same name from test_translations' Sphinx run.
    spec = importlib.util.spec_from_file_location(
        "prose_claims", ROOT / "tools" / "prose_claims.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["prose_claims"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


prose_claims = _load_prose_claims()


def _key(claim):
    return claim.notebook, " ".join(claim.text.split())


def test_every_range_the_prose_attributes_to_seeds_is_asserted():
    untied = sorted(_key(c) for c in prose_claims.all_claims() if not c.tied_by)
    assert not untied, (
        "the prose states these ranges about seeds or runs, and no cell asserts them "
        f"(assert both ends, print the number instead, or link benchmarks/results/): {untied}")


def _notebook(tmp_path, markdown, code):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown),
                                         nbformat.v4.new_code_cell(code)])
    path = tmp_path / "01_demo.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(("code", "tie"), [
    ("print(acc)", ""),  # printed, never asserted: the drift the check exists for
    ("assert 0.07 <= acc <= 0.22", "assert"),  # a percentage range asserted as fractions
    ("assert 7 <= 100 * acc <= 22", "assert"),
    ("check_range(acc, 0.07, 0.22)", "assert"),
    ("assert 0.07 <= acc", ""),  # one end only
    ("assert 0.07 <= acc <= 0.25", ""),  # the prose says 22 %, the code 25 %: drift
])
def test_a_planted_range_is_tied_only_by_an_assert_of_both_ends(tmp_path, code, tie):
    path = _notebook(tmp_path, "Most trees are wrong (the seeds 0 to 5 give 7 % to 22 % right).", code)
    (claim,) = prose_claims.claims(path)
    assert (claim.text, claim.percent, claim.tied_by) == ("7 % to 22 %", True, tie)


def test_seed_numbers_chapters_and_math_are_not_claims(tmp_path):
    path = _notebook(tmp_path, "Run seeds 0 to 5 of chapters 4 to 6; the run gives $1 - 2$ here.", "x = 1")
    assert prose_claims.claims(path) == []


def test_a_range_linked_to_a_results_file_is_tied(tmp_path):
    md = "Over seeds 0 to 11 the gain is 2 to 9 times ([sweep, December 2026](../benchmarks/results/x.md))."
    (claim,) = prose_claims.claims(_notebook(tmp_path, md, "x = 1"))
    assert claim.tied_by == "results file"


def test_a_list_introduced_by_a_sentence_about_seeds_inherits_it(tmp_path):
    md = "Running the chapter with `seed` = 0 to 5:\n\n* the entropy is 88 to 98 % of uniform.\n"
    (claim,) = prose_claims.claims(_notebook(tmp_path, md, "assert h > 0.8"))
    assert (claim.text, claim.tied_by) == ("88 to 98 %", "")
