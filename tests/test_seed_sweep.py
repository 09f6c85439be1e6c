"""``benchmarks/seed_sweep.py`` runs a chapter with another seed: the seed reaches the kernel,
and a claim that fails for that seed is reported as a failure with its message."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import seed_sweep  # noqa: E402


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('scale = "cpu"\nseed = 0', metadata={"tags": ["parameters"]})
    claim = nbformat.v4.new_code_cell('assert seed != 3, f"seed {seed} breaks the claim"\nprint(scale, seed)')
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"), params, claim]
    nbformat.write(nb, path)
    return path


def test_the_seed_is_injected_after_the_parameters_cell(tmp_path):
    nb = nbformat.read(_notebook(tmp_path / "ch.ipynb"), as_version=4)
    out = seed_sweep.with_parameters(nb, seed=7, scale="cpu")
    assert [c.source for c in out.cells[1:3]] == ['scale = "cpu"\nseed = 0', "seed = 7\nscale = 'cpu'"]
    assert out.cells[2].metadata["tags"] == ["injected-parameters"]


def test_a_notebook_without_parameters_is_refused(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("seed = 0")]
    try:
        seed_sweep.with_parameters(nb, seed=1)
    except ValueError as error:
        assert "parameters" in str(error)
    else:
        raise AssertionError("no error for a notebook without a parameters cell")


def test_a_seed_that_breaks_a_claim_fails_with_its_message(tmp_path):
    path = _notebook(tmp_path / "ch.ipynb")
    ok, _, message = seed_sweep.run_one(path, 2, tmp_path, "cpu", timeout=60)
    assert ok and message == ""
    executed = nbformat.read(tmp_path / "ch_seed2.ipynb", as_version=4)
    assert executed.cells[3].outputs[0]["text"] == "cpu 2\n"
    ok, _, message = seed_sweep.run_one(path, 3, tmp_path, "cpu", timeout=60)
    assert not ok and "AssertionError" in message and "seed 3 breaks the claim" in message
