"""Issue 35, red team round 4: each hole as the red team's own attack (``tests/attacks``).

The fast tests run a chapter's check cells here, in this process, as the grader does (the
instructor's check, the student's names bound to what the answer cell made), with the attack
answering its exercises and the instructor's answers elsewhere; or they ask the stubbing rule
and torch's refusals what the attack needs. The slow test grades the attacks with the sandbox,
beside an honest student who keeps full marks.
"""

from __future__ import annotations

import ast
import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from attack_kit import ATTACKS, NOTEBOOKS, attack, notebook, write_submission
from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching.exercises import read_chapter  # noqa: E402
from teaching.grader import memory_limit  # noqa: E402
from teaching.stubbing import Index, exercise_rule, stubbed_set  # noqa: E402



def run_checks(chapter: str, answers: dict[str, str]) -> dict[str, str]:
    """{check id: "passed" or why not}: the chapter's exercises in order, each answer cell the
    attack's or the instructor's, then its check, all in one namespace (the real companion)."""
    ch = read_chapter(notebook(chapter))
    ns = {"__name__": "__main__", "student_id": "mallory"}
    exec(compile(ch.parameters_source, "<parameters>", "exec"), ns)  # noqa: S102
    ns["student_id"] = "mallory"
    exec(compile(ch.setup_source, "<setup>", "exec"), ns)  # noqa: S102
    out = {}
    for ex in ch.exercises:
        for src in ex.context:
            exec(compile(src, "<context>", "exec"), ns)  # noqa: S102
        source = answers.get(ex.answer_id, ex.instructor_answer)
        exec(compile(source, f"<answer {ex.answer_id}>", "exec"), ns)  # noqa: S102
        try:
            with memory_limit():
                exec(compile(ex.check_source, f"<check {ex.check_id}>", "exec"), dict(ns))  # noqa: S102
            out[ex.check_id] = "passed"
        except Exception as err:  # noqa: BLE001
            out[ex.check_id] = f"{type(err).__name__}: {str(err)[:300]}"
    return out


# -- H1: zip() over a student's value stops at the shorter one ------------------------------------

def _zips_without_strict(source: str) -> list[str]:
    return [ast.unparse(n)[:80] for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "zip"
            and not any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in n.keywords)]


def test_no_check_cell_zips_without_strict():
    """An answer that returns () makes ``for a, b in zip(answer, reference)`` check nothing."""
    found = []
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
                found += [f"{path.name}: {z}" for z in _zips_without_strict(cell.source)]
    assert not found, found


@pytest.mark.parametrize(("chapter", "path", "cells"), [
    ("10", "a1_zip_truncation/ch10_answers.py", ["lm_targets_check"]),
    ("12", "a1_zip_truncation/ch12_answers.py", ["flash_update_check", "flash_tiled_check"]),
])
def test_an_empty_result_fails_the_check(chapter, path, cells):
    got = run_checks(chapter, attack(path))
    for cell in cells:
        assert got[cell] != "passed", got
    assert all(v == "passed" for k, v in got.items() if k not in cells), got


@pytest.mark.parametrize("chapter", ["10", "12", "13"])
def test_the_instructors_answers_pass_every_changed_check(chapter):
    got = run_checks(chapter, {})
    assert all(v == "passed" for v in got.values()), got


# -- H5 and L1: arithmetic and .tolist() on a huge student value, in the grader's process --------------

def test_a_broadcast_reply_fails_on_its_shape_before_any_arithmetic():
    got = run_checks("12", attack("c1_grader_side_broadcast/ch12_answers.py"))
    assert got["flash_update_check"].startswith("AssertionError: l has shape (16384, 1)"), got


@pytest.mark.parametrize(("chapter", "cell", "answer", "want"), [
    ("12", "flash_merge_check", "flash_merge", "l has shape (4096, 1)"),
    ("13", "dist_merge_check", "dist_merge", "l has shape (4096, 1)"),
])
def test_other_merges_check_the_shape_first(chapter, cell, answer, want):
    got = run_checks(chapter, {answer: answer_source(answer)})
    assert got[cell].startswith("AssertionError: " + want), got


def answer_source(answer: str) -> str:
    return {"flash_merge": "def merge_partial(m1, l1, m2, l2):\n"
                           "    return torch.maximum(m1, m2), torch.ones(4096, 1)\n",
            "dist_merge": "def ring_merge(m, l, acc, s, v):\n"
                          "    return m, torch.ones(4096, 1), torch.ones(1, 4096)\n"}[answer]


def test_a_huge_reply_is_not_turned_into_a_list():
    got = run_checks("10", attack("f_failed/ch10_answers.py"))
    assert got["lm_targets_check"].startswith("AssertionError: inputs has shape (4194304, 1)"), got


def test_an_error_message_shows_a_few_entries_of_a_huge_value():
    from companion.checks import check_equal

    with pytest.raises(AssertionError) as err:
        check_equal([[0]] * 10**6, [[1]], name="inputs")
    assert len(str(err.value)) < 400, len(str(err.value))


def test_a_runaway_check_raises_instead_of_taking_the_machine():
    with pytest.raises((MemoryError, RuntimeError)), memory_limit(2**30):
        torch.empty(2**29)  # 2 GiB asked for (never written: without the limit it costs nothing)
    assert torch.ones(2**12, 2**12).sum() == 2**24  # the limit is gone again


# -- H3, H4, M1, M2, M3: what each exercise's companion copy lacks ----------------------------------

RING = [f"companion.distributed.ring.{n}" for n in ("simulated_ring_attention", "ring_attention", "ring_step",
                                                   "block_partial", "merge_partials", "finish")]


@pytest.fixture(scope="module")
def index():
    return Index(ROOT)


def _stubbed(index, chapter, answer_id):
    ch = read_chapter(notebook(chapter))
    ex = next(e for e in ch.exercises if e.answer_id == answer_id)
    return set(stubbed_set(index, *exercise_rule(ch, ex)))


@pytest.mark.parametrize(("chapter", "answer_id", "gone"), [
    ("10", "lm_gpt", ["companion.models.gpt.GPT._hidden", "companion.models.gpt.GPT._step",
                      "companion.models.gpt.GPT._start"]),  # H3
    ("12", "flash_tiled", RING), ("12", "flash_update", RING),  # H4
    ("02", "seq2seq_dot", RING), ("03", "self_plain", RING), ("04", "masking_softmax", RING),
    ("05", "multihead_one_head", RING), ("05", "multihead_forward", RING), ("05", "multihead_module", RING),
    ("10", "lm_cache", RING), ("11", "rope_attention", RING), ("11", "gqa_heads", RING),
    ("11", "rope_apply", ["companion.positional.rotation_matrix", "companion.positional._rotate_pairs"]),  # M1
    ("06", "pe_sinusoidal", ["companion.positional._rope_table"]),  # M2
    ("09", "capstone_greedy", ["companion.decoding.sample_decode"]),  # M3
])
def test_the_attacks_library_code_is_stubbed(index, chapter, answer_id, gone):
    assert set(gone) <= _stubbed(index, chapter, answer_id), sorted(set(gone) - _stubbed(index, chapter, answer_id))


# -- H2: torch's own layers ----------------------------------------------------------------------

PROBE = r"""
import importlib.util, runpy, sys
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
import torch
from torch import nn
names = runner.capability_names(sys.argv[2].split(",") if sys.argv[2] else [])
for dotted in names:
    if "(" not in dotted:
        runner.refuse_everywhere(torch, dotted)
kept = runner.refuse_kernels(torch, names)
from companion.models.blocks import EncoderLayer
layer = EncoderLayer(8, 2, 16, dropout=0.0).eval()
x = torch.randn(2, 5, 8)
ns = {"torch": torch, "nn": nn}
exec(runpy.run_path(sys.argv[3])["ANSWERS"]["transformer_encoder"], ns)
try:
    ns["encoder_layer_forward"](layer, x)
    print("ran")
except RuntimeError as err:
    print("refused" if "not allowed in this exercise" in str(err) else "failed: " + str(err)[:200])
"""


@pytest.mark.parametrize(("chapter", "answer_id"), [("07", "transformer_encoder"), ("10", "lm_gpt"),
                                                   ("10", "lm_cache"), ("12", "flash_tiled")])
def test_torch_encoder_layer_is_refused(chapter, answer_id):
    from teaching.sandbox import RUNNER

    ch = read_chapter(notebook(chapter))
    ex = next(e for e in ch.exercises if e.answer_id == answer_id)
    names = [n for n in ex.not_allowed if n.startswith("torch.")]

    def probe(refused):
        run = subprocess.run([sys.executable, "-c", PROBE, str(RUNNER), ",".join(refused),
                              str(ATTACKS / "a2_torch_encoder_layer" / "ch07_answers.py")],
                             capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout.strip().splitlines()[-1]

    assert probe(names) == "refused"
    assert probe([]) == "ran"  # the attack works where nothing is refused


# -- every attack, graded in the sandbox beside an honest student ------------------------------------

GRADED = {  # chapter -> {student: (attack file, the checks it must score 0 on)}
    "06": {"a6": ("a6_unstubbed_private_helpers/ch06_answers.py", ["pe_sinusoidal_check"])},
    "07": {"a2": ("a2_torch_encoder_layer/ch07_answers.py", ["transformer_encoder_check"])},
    "09": {"a7": ("a7_sample_decode_greedy/ch09_answers.py", ["capstone_greedy_check"])},
    "10": {"a1": ("a1_zip_truncation/ch10_answers.py", ["lm_targets_check"]),
           "a2": ("a2_torch_encoder_layer/ch10_answers.py", ["lm_gpt_check"]),
           "f": ("f_failed/ch10_answers.py", ["lm_targets_check"])},
    "11": {"a3": ("a3_rope_by_rotation_matrix/ch11_answers.py", ["rope_apply_check"])},
    "12": {"a1": ("a1_zip_truncation/ch12_answers.py", ["flash_update_check", "flash_tiled_check"]),
           "a5": ("a5_ring_for_tiled/ch12_answers.py", ["flash_tiled_check"]),
           "c1": ("c1_grader_side_broadcast/ch12_answers.py", ["flash_update_check"])},
}


@pytest.fixture(scope="module")
def graded_attacks(tmp_path_factory):
    """{(student, chapter, cell): (score, max_score, status)} of one autograde run of the
    whole class: every attack of every chapter in GRADED beside an honest student who hands
    in all those chapters. One run instead of one per chapter saves a grader start per
    chapter; each student-chapter is graded in its own sandbox either way."""
    subs = tmp_path_factory.mktemp("round4") / "subs"
    for chapter in sorted(GRADED):
        for student, (file, _) in {**GRADED[chapter], "honest": (None, [])}.items():
            write_submission(subs, student, chapter, file)
    out = subs.parent / "grades.csv"
    run = subprocess.run([sys.executable, "-m", "teaching.autograde", str(subs), "--out", str(out),
                          "--chapters", *sorted(GRADED), "--jobs", "2"], capture_output=True, text=True,
                         encoding="utf-8", timeout=1800, cwd=ROOT)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return {(r["student"], r["chapter"], r["cell"]): (float(r["score"]), float(r["max_score"]), r["status"])
            for r in rows}


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(GRADED))
def test_the_attacks_score_nothing_when_graded(chapter, graded_attacks):
    name = notebook(chapter).stem
    score = {(s, c): v for (s, ch, c), v in graded_attacks.items() if ch == name}
    for student, (_, cells) in GRADED[chapter].items():
        for cell in cells:
            assert score[(student, cell)][0] == 0, (student, cell, score[(student, cell)])
    honest = [v for (s, c), v in score.items() if s == "honest" and c == "TOTAL"]
    assert honest and honest[0][0] == honest[0][1], [(c, v) for (s, c), v in score.items() if s == "honest"]
