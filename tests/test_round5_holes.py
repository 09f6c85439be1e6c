"""Issue 35, red team round 5: each hole as the red team's own attack (``tests/attacks``, b* and m*).

The fast tests ask the stubbing rule (the allow-list of ``teaching/stubbing.py``) and torch's
refusals (``teaching/sandbox_runner.py``) what each attack needs; the slow test grades the
attacks with the sandbox, beside an honest student who keeps full marks.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from attack_kit import NOTEBOOKS, notebook, write_submission
from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching.exercises import read_chapter  # noqa: E402
from teaching.stubbing import Index, exercise_rule, imported_names, protected_set, stubbed_set  # noqa: E402



@pytest.fixture(scope="module")
def index():
    return Index(ROOT)


def _stubbed(index, chapter, answer_id):
    ch = read_chapter(notebook(chapter))
    ex = next(e for e in ch.exercises if e.answer_id == answer_id)
    return stubbed_set(index, *exercise_rule(ch, ex))


# -- H1, H2, H3, M1, L1: what each exercise's companion copy lacks --------------------------------

@pytest.mark.parametrize(("chapter", "answer_id", "gone"), [
    ("10", "lm_sampling", ["companion.sampling._top_k", "companion.sampling._sample_next"]),  # H1
    ("02", "seq2seq_entropy", ["companion.sampling.entropy"]),  # H2
    ("12", "flash_merge", ["companion.flash.tile_update"]),  # H3
    ("06", "pe_similarity", ["companion.positional.sinusoidal_encoding"]),  # M1
    ("13", "dist_merge", ["companion.flash.merge_stats"]),  # L1
])
def test_the_attacks_library_code_is_stubbed(index, chapter, answer_id, gone):
    stubbed = _stubbed(index, chapter, answer_id)
    assert set(gone) <= set(stubbed), sorted(set(gone) - set(stubbed))


def _reached(index, sources) -> set[str]:
    """Every companion definition the imports of ``sources`` name, and their refs, transitively."""
    todo = [index.resolve(n) for n in imported_names(sources)]
    seen = set()
    while todo:
        key = todo.pop()
        if key not in index.defs or key in seen:
            continue
        seen.add(key)
        todo += index.defs[key].refs
        todo += [k for k, d in index.defs.items() if d.cls == key]
        if index.defs[key].cls:
            todo.append(index.defs[key].cls)
    return seen


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_only_what_the_setup_imports_keeps_its_body(index, path):
    """The allow-list: a public companion function that neither the setup and context cells
    import nor what they import reaches is stubbed, in every exercise (``sampling.entropy`` in
    chapter 2)."""
    ch = read_chapter(path)
    for ex in ch.exercises:
        rule = exercise_rule(ch, ex)
        stubbed = stubbed_set(index, *rule)
        reached = _reached(index, rule[2])
        whole = {k for k, d in index.defs.items() if k not in stubbed and d.cls is None and not d.private
                 and not isinstance(d.node, __import__("ast").ClassDef)}
        loose = sorted(k for k in whole - reached if not k.startswith(("companion.checks.", "companion._validate.",
                                                                        "companion.plotting.",
                                                                        "companion.data.")))
        assert not loose, (ex.answer_id, loose)


def _written(index, name: str, statement: str) -> bool:
    """Whether the statement writes ``name`` in code: in full, or as its own (or its class's) name."""
    written = {w for code in re.findall(r"`([^`]+)`", statement) for w in re.findall(r"[\w.]+", code)}
    qualname = index.defs[index.resolve(name)].qualname
    short = {qualname, qualname.split(".")[0]}
    return name in written or any(w in short or w.endswith(tuple("." + s for s in short)) for w in written)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_what_the_setup_imports_and_is_not_allowed_is_written_in_the_statement(index, path):
    """Issue 35 item 10: the public companion names of an exercise's ``not_allowed`` that its
    setup and context cells import (or reach: the allow-list would keep them) are written in
    its statement (``companion.flash.tile_update`` in chapter 12's first exercise); the rest of
    the companion is covered by the one rule the book states (``book/teaching.md``)."""
    ch = read_chapter(path)
    cells = nbformat.read(path, as_version=4).cells
    missing = []
    for ex in ch.exercises:
        names = [n for n in ex.not_allowed if n.startswith("companion.") and not index.defs[index.resolve(n)].private]
        reached = protected_set(index, exercise_rule(ch, ex)[2], ())
        i = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == ex.answer_id)
        statement = next(c.source for c in reversed(cells[:i])
                         if c.cell_type == "markdown" and c.source.startswith("**Exercise"))
        missing += [f"{ex.answer_id}: {n}" for n in names
                    if index.resolve(n) in reached and not _written(index, n, statement)]
    assert not missing, missing


# -- M2, M3: a nested tensor's kernels -------------------------------------------------------------

NESTED = r"""
import importlib.util, sys, warnings
warnings.simplefilter("ignore")
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
import torch
names = runner.capability_names(sys.argv[2].split(",") if sys.argv[2] else [])
for dotted in names:
    if "(" not in dotted:
        runner.refuse_everywhere(torch, dotted)
kept = runner.refuse_kernels(torch, names)
x = torch.randn(2, 5, 8)
nt = torch.nested.nested_tensor(list(x))
W, b, Wo, bo = torch.randn(24, 8), torch.randn(24), torch.randn(8, 8), torch.randn(8)
calls = {
    "native_layer_norm": lambda: torch.ops.aten.native_layer_norm(nt, [8], torch.ones(8), torch.zeros(8), 1e-5),
    "native_mha": lambda: torch.ops.aten._native_multi_head_attention(nt, nt, nt, 8, 2, W, b, Wo, bo,
                                                                     need_weights=False),
    "encoder_layer_fwd": lambda: torch.ops.aten._transformer_encoder_layer_fwd(
        nt, 8, 2, W, b, Wo, bo, True, False, 1e-5, torch.ones(8), torch.zeros(8), torch.ones(8), torch.zeros(8),
        torch.randn(16, 8), torch.zeros(16), torch.randn(8, 16), torch.zeros(8)),
}
for name in sys.argv[3].split(","):
    try:
        calls[name]()
        print(name, "ran")
    except RuntimeError as err:
        print(name, "refused" if "not allowed in this exercise" in str(err) else "failed: " + str(err)[:200])
"""


@pytest.mark.parametrize(("refused", "calls"), [
    (["torch.nn.functional.layer_norm"], ["native_layer_norm"]),  # M2: chapter 7's transformer_layernorm
    (["torch.nn.functional.multi_head_attention_forward"], ["native_mha"]),  # M3: chapter 5
    (["torch.nn.TransformerEncoderLayer"], ["native_mha", "encoder_layer_fwd"]),  # chapter 7's layers
])
def test_a_nested_tensor_kernel_is_refused_too(refused, calls):
    from teaching.sandbox import RUNNER

    def probe(names):
        run = subprocess.run([sys.executable, "-c", NESTED, str(RUNNER), ",".join(names), ",".join(calls)],
                             capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-3000:]
        return dict(line.split(" ", 1) for line in run.stdout.strip().splitlines())

    assert probe(refused) == {c: "refused" for c in calls}
    assert probe([]) == {c: "ran" for c in calls}  # the attack computes where nothing is refused


# -- every attack, graded in the sandbox beside an honest student ------------------------------------

GRADED = {  # chapter -> {student: (attack file, the checks it must score 0 on)}
    "02": {"b2": ("b2_sampling_entropy_sibling/ch02_answers.py", ["seq2seq_entropy_check"])},
    "06": {"m1": ("m1_pe_similarity_by_encoding/ch06_answers.py", ["pe_similarity_check"])},
    "07": {"m2": ("m2_nested_layer_norm/ch07_answers.py", ["transformer_layernorm_check"])},
    "10": {"b1": ("b1_kept_private_top_k/ch10_answers.py", ["lm_sampling_check"])},
    "12": {"b3": ("b3_tile_update_for_merge/ch12_answers.py", ["flash_merge_check"])},
}


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(GRADED))
def test_the_attacks_score_nothing_when_graded(chapter, tmp_path):
    subs = tmp_path / "subs"
    for student, (file, _) in {**GRADED[chapter], "honest": (None, [])}.items():
        write_submission(subs, student, chapter, file)
    out = tmp_path / "grades.csv"
    run = subprocess.run([sys.executable, "-m", "teaching.autograde", str(subs), "--out", str(out),
                          "--chapters", chapter, "--jobs", "1"], capture_output=True, text=True,
                         encoding="utf-8", timeout=1200, cwd=ROOT)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    score = {(r["student"], r["cell"]): (float(r["score"]), float(r["max_score"]), r["status"]) for r in rows}
    for student, (_, cells) in GRADED[chapter].items():
        for cell in cells:
            assert score[(student, cell)][0] == 0, (student, cell, score[(student, cell)])
    honest = [v for (s, c), v in score.items() if s == "honest" and c == "TOTAL"]
    assert honest and honest[0][0] == honest[0][1], [r for r in rows if r["student"] == "honest"]
