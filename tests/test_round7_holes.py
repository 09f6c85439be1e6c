"""Red team round 7: each fixed hole as the red team's own attack (``tests/attacks``, y*).

The fast tests ask torch's refusals (``teaching/sandbox_runner.py``) in a fresh process what
each attack needs, and the stubbing rule (``teaching/stubbing.py``) what each exercise's
companion copy lacks; the slow test grades the attacks with the sandbox, beside an honest
student who keeps full marks. Not planted (documented in ``book/teaching.md``): y12, y14, y16
(torch's source re-executed) and y7 (flash_tiled's check compares values only).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import nbformat
import pytest
from conftest import needs_bwrap

from attack_kit import PROBE_LOOP, ROOT, RUNNER, notebook, run_probe, write_submission

sys.path.insert(0, str(ROOT))
from teaching.exercises import read_chapter  # noqa: E402
from teaching.stubbing import Index, exercise_rule, stubbed_set  # noqa: E402



# A fresh process refuses what ``refused`` names (as sandbox_runner.exercise does), and
# torch._inductor's pattern passes where ``passes`` is set, then runs each probe: "ran",
# "refused" (the refusal's message) or "failed: ..." (anything else).
PROBE = r"""
import importlib.util, json, math, sys, warnings
warnings.simplefilter("ignore")
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
import torch
import torch.nn.functional as F
setup = json.loads(sys.argv[2])
if setup.get("load_passes"):
    import torch._inductor.fx_passes.fuse_attention  # loaded before the refusal
names = runner.capability_names(setup.get("refused", []))
originals = [runner.refuse_everywhere(torch, d) for d in names if "(" not in d]
kept = runner.refuse_kernels(torch, names, [o for o in originals if o is not None])
if setup.get("passes"):
    kept += getattr(runner, "refuse_inductor_passes", lambda torch: [])(torch)  # (none before round 7)
x = torch.randn(6, 8, dtype=torch.double)
q, k, v = torch.randn(3, 2, 5, 4, dtype=torch.double).unbind(0)
causal = torch.zeros(5, 5, dtype=torch.double).masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
a = torch.softmax(torch.randn(3, 7, dtype=torch.double), -1)
entropy = -(a * a.log()).sum(-1)


def close(out, want):
    assert torch.allclose(out, want, atol=1e-6), "a different result"


def sfdp(number):
    from torch._inductor.fx_passes import fuse_attention
    if number == 1:
        close(fuse_attention._sfdp_pattern_1(q, k, v, 2.0), torch.softmax(q @ k.mT / 2, -1) @ v)
    else:
        close(fuse_attention._sfdp_pattern_5(q, k, v, causal, 2.0), torch.softmax(q @ k.mT / 2 + causal, -1) @ v)


def layer_norm_by(out):
    close(out, (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt())


calls = {
    # y8, y9, y10: torch._inductor's attention patterns
    "sfdp_pattern_1": lambda: sfdp(1),
    "sfdp_pattern_5": lambda: sfdp(5),
    "import_passes": lambda: __import__("torch._inductor.fx_passes.fuse_attention"),
    # what is not refused of torch._inductor (torch._dynamo loads its config and utils)
    "import_dynamo": lambda: __import__("torch._dynamo"),
    "inductor_config": lambda: __import__("torch._inductor.config"),
    # y11: layer norm's private helper in torch._refs
    "refs_normalize": lambda: layer_norm_by(torch._refs._normalize(x, [-1], 1e-5)[0]),
    # y1: cross entropy of soft targets, a against itself, is a's entropy
    "soft_cross_entropy": lambda: close(F.cross_entropy(a.log(), a, reduction="none"), entropy),
    "cross_entropy_loss_op": lambda: close(torch._C._nn.cross_entropy_loss(a.log(), a, None, 0), entropy),
    "cross_entropy_module": lambda: close(torch.nn.CrossEntropyLoss(reduction="none")(a.log(), a), entropy),
    # what every exercise keeps
    "softmax_attention": lambda: close(torch.softmax(q @ k.mT / 2, -1) @ v, (q @ k.mT / 2).softmax(-1) @ v),
    "entropy_by_hand": lambda: close(-torch.where(a > 0, a * a.log(), 0).sum(-1), entropy),
}
""" + PROBE_LOOP


def probe(calls, **setup) -> dict[str, str]:
    return run_probe(PROBE, calls, **setup)


PASSES = ["sfdp_pattern_1", "sfdp_pattern_5", "import_passes"]
CROSS_ENTROPY = ["soft_cross_entropy", "cross_entropy_loss_op", "cross_entropy_module"]
KEPT = ["import_dynamo", "inductor_config", "softmax_attention", "entropy_by_hand"]


def test_the_attacks_compute_where_nothing_is_refused():
    """The probes are real attacks: with no refusal each computes what it claims."""
    calls = [*PASSES, "refs_normalize", *CROSS_ENTROPY, *KEPT]
    assert probe(calls) == {c: "ran" for c in calls}


@pytest.mark.parametrize("load_passes", [False, True])
def test_torch_inductors_pattern_passes_are_refused_in_every_exercise(load_passes):
    """y8, y9, y10: ``torch._inductor.fx_passes`` (fuse_attention's ``_sfdp_pattern_*``) cannot be
    imported, with no not_allowed at all, even where it was loaded before the refusal; the rest
    of torch._inductor (what ``import torch._dynamo`` loads) still imports."""
    got = probe([*PASSES, *KEPT], passes=True, load_passes=load_passes)
    assert got == {**{c: "refused" for c in PASSES}, **{c: "ran" for c in KEPT}}


def test_the_refusal_says_why():
    run = subprocess.run([sys.executable, "-c", PROBE.split("x = torch.randn")[0]
                          + "from torch._inductor.fx_passes.fuse_attention import _sfdp_pattern_5",
                          str(RUNNER), json.dumps({"passes": True})],
                         capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=ROOT)
    assert run.returncode != 0
    assert "ImportError: torch._inductor.fx_passes is not allowed in a graded answer" in run.stderr, run.stderr[-2000:]


def test_the_sandbox_covers_torch_inductors_pattern_passes():
    """Code that removes the runner's import refusal finds an empty folder."""
    from teaching import bubblewrap
    from teaching.limits import Limits

    passes = getattr(bubblewrap, "_torch_inductor_passes_dir", lambda: None)()
    assert passes is not None and (passes / "fuse_attention.py").is_file()
    cmd = bubblewrap.sandbox_command([ROOT / "companion"], [], Limits())
    assert any(cmd[i:i + 4] == ["--tmpfs", str(passes), "--remount-ro", str(passes)] for i in range(len(cmd)))


@pytest.mark.parametrize("named", ["torch.nn.functional.layer_norm", "torch.layer_norm"])
def test_refs_normalize_goes_with_layer_norm(named):
    """y11 (chapter 7's transformer_layernorm): ``torch._refs._normalize``, layer norm without its
    affine step, is refused with layer norm's family; not where entropy is refused."""
    assert probe(["refs_normalize", "softmax_attention"], refused=[named]) == {
        "refs_normalize": "refused", "softmax_attention": "ran"}
    assert probe(["refs_normalize"], refused=["torch.special.entr"]) == {"refs_normalize": "ran"}


def test_cross_entropy_is_refused_by_every_name():
    """y1 (chapter 2's seq2seq_entropy): soft-target cross entropy, by ``F.cross_entropy``, by its
    aten op ``torch._C._nn.cross_entropy_loss`` and by ``nn.CrossEntropyLoss``."""
    got = probe([*CROSS_ENTROPY, "entropy_by_hand"], refused=["torch.nn.functional.cross_entropy"])
    assert got == {**{c: "refused" for c in CROSS_ENTROPY}, "entropy_by_hand": "ran"}


# -- y1, y6, y15: the exercises' not_allowed and statements ----------------------------------------

NAMED = {  # (chapter, answer) -> what its not_allowed and its statement now name
    ("02", "seq2seq_entropy"): ["torch.nn.functional.cross_entropy"],  # y1
    ("09", "capstone_step"): ["companion.models.transformer.Decoder.forward"],  # y6
    ("12", "flash_update"): ["companion.flash.merge_stats", "companion.flash.softmax_stats"],  # y15
}


def _exercise(chapter: str, answer_id: str):
    ch = read_chapter(notebook(chapter))
    return ch, next(e for e in ch.exercises if e.answer_id == answer_id)


@pytest.mark.parametrize(("chapter", "answer_id"), list(NAMED))
def test_the_exercise_names_what_the_attack_used(chapter, answer_id):
    """In not_allowed, and in the statement the student reads; the instructor's answer uses none."""
    _, ex = _exercise(chapter, answer_id)
    names = NAMED[(chapter, answer_id)]
    assert set(names) <= set(ex.not_allowed), ex.not_allowed
    cells = nbformat.read(notebook(chapter), as_version=4).cells
    i = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == answer_id)
    statement = next(c.source for c in reversed(cells[:i]) if c.cell_type == "markdown" and "Not allowed" in c.source)
    assert all(f"`{n}`" in statement for n in names), statement
    assert not any(n.rpartition(".")[2] in ex.instructor_answer for n in names)


@pytest.mark.parametrize(("chapter", "answer_id"), [("09", "capstone_step"), ("12", "flash_update")])
def test_the_companion_copy_lacks_what_the_attack_used(chapter, answer_id):
    """y6 and y15: the exercise's companion copy stubs them, though the setup imports them."""
    ch, ex = _exercise(chapter, answer_id)
    stubbed = stubbed_set(Index(ROOT), *exercise_rule(ch, ex))
    gone = NAMED[(chapter, answer_id)]
    assert set(gone) <= set(stubbed), sorted(set(gone) - set(stubbed))


# -- every fixed attack, graded in the sandbox beside an honest student ------------------------------

GRADED = {  # student -> (chapter, attack file, the checks it must score 0 on)
    "y1": ("02", "y1_entropy_cross_entropy/ch02_answers.py", ["seq2seq_entropy_check"]),
    "y6": ("09", "y6_capstone_step_by_decoder/ch09_answers.py", ["capstone_step_check"]),
    "y8": ("12", "y8_flash_tiled_inductor_pattern/ch12_answers.py", ["flash_tiled_check"]),
    "y9": ("11", "y9_rope_attention_inductor_pattern/ch11_answers.py", ["rope_attention_check"]),
    "y10": ("05", "y10_multihead_forward_inductor_pattern/ch05_answers.py", ["multihead_forward_check"]),
    "y11": ("07", "y11_layer_norm_refs_normalize/ch07_answers.py", ["transformer_layernorm_check"]),
    "y15": ("12", "y15_flash_update_by_merge_stats/ch12_answers.py", ["flash_update_check"]),
}


@needs_bwrap
@pytest.mark.slow
def test_the_attacks_score_nothing_when_graded(tmp_path):
    subs = tmp_path / "subs"
    chapters = sorted({ch for ch, _, _ in GRADED.values()})
    for student, (chapter, file, _) in GRADED.items():
        write_submission(subs, student, chapter, file)
    for chapter in chapters:
        write_submission(subs, "honest", chapter, None)
    out = tmp_path / "grades.csv"
    run = subprocess.run([sys.executable, "-m", "teaching.autograde", str(subs), "--out", str(out),
                          "--chapters", *chapters, "--jobs", "1"], capture_output=True, text=True,
                         encoding="utf-8", timeout=3000, cwd=ROOT)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    score = {(r["student"], r["cell"]): (float(r["score"]), float(r["max_score"]), r["status"]) for r in rows}
    for student, (_, _, cells) in GRADED.items():
        for cell in cells:
            got = score[(student, cell)]  # refused, not merely wrong
            assert got[0] == 0 and "not allowed" in got[2], (student, cell, got)
    honest = [(r["chapter"], r["score"], r["max_score"]) for r in rows if r["student"] == "honest" and r["cell"] == "TOTAL"]
    assert len(honest) == len(chapters) and all(s == m for _, s, m in honest), honest
