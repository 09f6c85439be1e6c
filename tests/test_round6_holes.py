"""Issue 35, red team round 6: each hole as the red team's own attack (``tests/attacks``, x*).

The fast tests ask torch's refusals (``teaching/sandbox_runner.py``) in a fresh process what
each attack needs; the slow test grades the attacks with the sandbox, beside an honest student
who keeps full marks.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
from conftest import needs_bwrap

from attack_kit import NOTEBOOKS, PROBE_LOOP, ROOT, run_probe, write_submission

sys.path.insert(0, str(ROOT))
from teaching.exercises import read_chapter  # noqa: E402



# A fresh process refuses what an exercise's not_allowed names (as sandbox_runner.exercise does),
# then runs each probe: "ran", "refused" (the refusal's message) or "failed: ..." (anything else).
PROBE = r"""
import importlib.util, json, sys, warnings
warnings.simplefilter("ignore")
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
import torch
A = torch.ops.aten
setup = json.loads(sys.argv[2])
if setup.get("load_onnx"):
    import torch.onnx.ops  # loaded before the refusal (as if something in the template had)
names = runner.capability_names(setup.get("refused", []))
originals = [runner.refuse_everywhere(torch, d) for d in names if "(" not in d]
try:
    kept = runner.refuse_kernels(torch, names, [o for o in originals if o is not None])
except TypeError:  # a runner before round 6 (to watch these tests fail there)
    kept = runner.refuse_kernels(torch, names)
kept += runner.refuse_namesakes(torch, setup.get("answers", []))
if setup.get("onnx") and hasattr(runner, "refuse_onnx"):  # (before round 6: nothing refuses it)
    kept += runner.refuse_onnx(torch)
x = torch.randn(6, 8, dtype=torch.double)
w, b = torch.ones(8, dtype=torch.double), torch.zeros(8, dtype=torch.double)
rows = x.T.contiguous()
stats = torch.zeros(6, dtype=torch.double), torch.ones(6, dtype=torch.double)


def reference():  # layer norm written out
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()


def layer_norm_by(out):
    assert torch.allclose(out, reference(), atol=1e-6), "not layer norm"


def onnx_attention():
    q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
    out = torch.onnx.ops.attention(q, k, v, torch.zeros(4, 4))[0]
    assert torch.allclose(out, torch.softmax(q @ k.mT / 8 ** 0.5, -1) @ v, atol=1e-5)


def onnx_impl():
    from torch.onnx.ops import _impl
    q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
    _impl.ONNX_ATEN_DECOMP_TABLE[torch.ops.onnx.Attention.opset23](q, k, v, torch.zeros(4, 4))


def onnx_op():  # the custom op, registered before the refusal
    q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
    torch.ops.onnx.Attention.opset23(q, k, v, torch.zeros(4, 4))


def safe_softmax():
    s = torch.randn(2, 4).masked_fill(torch.tensor([[True] * 4, [False, True, True, False]]), float("-inf"))
    assert A._safe_softmax(s, -1)[0].abs().sum() == 0


def decomposition(op):
    from torch._decomp import decomposition_table
    return decomposition_table[op]


calls = {
    # X1: training-mode batch norm of x transposed to (d, M) is layer norm, and its siblings
    "batch_norm_with_update": lambda: layer_norm_by(A._batch_norm_with_update(rows, None, None, *stats, 0.1,
                                                                              1e-5)[0].T),
    "batch_norm_no_update": lambda: A._batch_norm_no_update(rows, None, None, *stats, 0.1, 1e-5),
    "native_batch_norm_legit": lambda: layer_norm_by(A._native_batch_norm_legit(rows, None, None, *stats, True,
                                                                                0.1, 1e-5)[0].T),
    "batch_norm_update_stats": lambda: A.batch_norm_update_stats(rows, *stats, 0.1),
    "group_norm_one_group": lambda: layer_norm_by(A.native_group_norm(x[:, :, None], None, None, 6, 8, 1, 1,
                                                                      1e-5)[0][..., 0]),
    "fused_rms_norm": lambda: A._fused_rms_norm(x, [8], w, 1e-5),
    # X2: the decomposition table's Python layer norm, and batch norm's
    "table_layer_norm": lambda: layer_norm_by(decomposition(A.native_layer_norm.default)(x, [8], w, b, 1e-5)[0]),
    "table_batch_norm": lambda: decomposition(A._native_batch_norm_legit.default)(rows, None, None, *stats, True,
                                                                                   0.1, 1e-5),
    "decompositions_module": lambda: __import__("torch._decomp.decompositions", fromlist=["_"])
        ._native_batch_norm_legit(rows, None, None, *stats, True, 0.1, 1e-5),
    "inductor_layer_norm": lambda: layer_norm_by(__import__("torch._inductor.decomposition", fromlist=["_"])
        .decompositions[A.native_layer_norm.default](x, [8], w, b, 1e-5)[0]),
    # X3: the decomposition table's Python entr
    "table_entr": lambda: decomposition(A.special_entr.default)(x.abs()),
    # X4 to X8: torch.onnx
    "import_onnx": lambda: __import__("torch.onnx.ops"),
    "onnx_attention": onnx_attention,
    "onnx_impl": onnx_impl,
    "onnx_op": onnx_op,
    # masked_softmax's namesake
    "safe_softmax": safe_softmax,
    # what every exercise keeps
    "softmax": lambda: torch.softmax(x, -1) @ x.T,
    "layer_norm_by_hand": lambda: layer_norm_by(reference()),
}
""" + PROBE_LOOP


def probe(calls, **setup) -> dict[str, str]:
    return run_probe(PROBE, calls, **setup)


NORMS = ["batch_norm_with_update", "batch_norm_no_update", "native_batch_norm_legit", "batch_norm_update_stats",
         "group_norm_one_group", "fused_rms_norm", "table_layer_norm", "table_batch_norm", "decompositions_module",
         "inductor_layer_norm"]
ONNX = ["import_onnx", "onnx_attention", "onnx_impl"]


@pytest.mark.parametrize("named", ["torch.nn.functional.layer_norm", "torch.layer_norm"])
def test_layer_norms_whole_family_and_its_python_decompositions_are_refused(named):
    """X1 and X2 (chapter 7's transformer_layernorm): every normalisation op (found by name),
    and torch's Python implementations of them in the decomposition tables and modules."""
    got = probe([*NORMS, "table_entr", "softmax", "layer_norm_by_hand"], refused=[named])
    assert got == {**{c: "refused" for c in NORMS}, "table_entr": "ran", "softmax": "ran",
                   "layer_norm_by_hand": "ran"}


def test_entrs_python_decomposition_is_refused():
    """X3 (chapter 2's seq2seq_entropy): ``decomposition_table[aten.special_entr.default]``."""
    got = probe(["table_entr", "table_layer_norm", "softmax"], refused=["torch.special.entr"])
    assert got == {"table_entr": "refused", "table_layer_norm": "ran", "softmax": "ran"}


def test_the_attacks_compute_where_nothing_is_refused():
    """The probes are real attacks: with no refusal each computes (layer norm to 1e-6)."""
    calls = [*NORMS, "table_entr", *ONNX, "safe_softmax"]
    assert probe(calls) == {c: "ran" for c in calls}


def test_torch_onnx_is_refused_in_every_exercise():
    """X4 to X8: ``import torch.onnx`` (its ops, its plain functions) raises, with no
    not_allowed at all; loaded before the refusal, its modules go and its ops refuse."""
    assert probe(ONNX, onnx=True) == {c: "refused" for c in ONNX}
    got = probe([*ONNX, "onnx_op"], onnx=True, load_onnx=True)
    assert got == {c: "refused" for c in [*ONNX, "onnx_op"]}


def test_safe_softmax_goes_with_masked_softmax():
    """Low: ``aten._safe_softmax`` (0 on a fully blocked row) where the answer is ``masked_softmax``."""
    assert probe(["safe_softmax", "softmax"], answers=["masked_softmax"]) == {"safe_softmax": "refused",
                                                                             "softmax": "ran"}
    assert probe(["safe_softmax"], answers=["attend"]) == {"safe_softmax": "ran"}


def test_the_sandbox_covers_torchs_onnx_folder():
    """Code that removes the runner's import refusal finds an empty folder."""
    from teaching.bubblewrap import _torch_onnx_dir, sandbox_command
    from teaching.limits import Limits

    onnx = _torch_onnx_dir()
    assert onnx is not None and (onnx / "ops").is_dir()
    cmd = sandbox_command([ROOT / "companion"], [], Limits())
    assert any(cmd[i:i + 4] == ["--tmpfs", str(onnx), "--remount-ro", str(onnx)] for i in range(len(cmd)))


def test_no_setup_answer_or_companion_code_names_torch_onnx():
    """The companion and every chapter's parameters, setup and answer cells never name torch.onnx
    (the sandbox refuses it in every exercise)."""
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "companion").rglob("*.py")
             if "onnx" in p.read_text(encoding="utf-8")]
    for path in NOTEBOOKS:
        ch = read_chapter(path)
        sources = {"parameters": ch.parameters_source, "setup": ch.setup_source}
        for ex in ch.exercises:
            sources |= {ex.answer_id: ex.instructor_answer, **{f"{ex.answer_id} context": c for c in ex.context}}
        named += [f"{path.name}: {label}" for label, source in sources.items() if "onnx" in source]
    assert not named, named


# -- every attack, graded in the sandbox beside an honest student ------------------------------------

GRADED = {  # student -> (chapter, attack file, the checks it must score 0 on)
    "x1": ("07", "x1_batch_norm_with_update/ch07_answers.py", ["transformer_layernorm_check"]),
    "x2": ("07", "x2_decomp_table_layer_norm/ch07_answers.py", ["transformer_layernorm_check"]),
    "x3": ("02", "x3_decomp_table_entr/ch02_answers.py", ["seq2seq_entropy_check"]),
    "x4": ("11", "x4_onnx_ops_ch11/ch11_answers.py", ["rope_apply_check", "rope_attention_check"]),
    "x5": ("05", "x5_onnx_attention_ch05/ch05_answers.py", ["multihead_forward_check"]),
    "x6": ("12", "x6_onnx_attention_flash_tiled/ch12_answers.py", ["flash_tiled_check"]),
    "x7": ("11", "x7_onnx_attention_gqa/ch11_answers.py", ["gqa_heads_check"]),
    "x8": ("02", "x8_onnx_attention_weights/ch02_answers.py", ["seq2seq_dot_check"]),
}


@needs_bwrap
@pytest.mark.slow
def test_the_attacks_score_nothing_when_graded(tmp_path):
    subs = tmp_path / "subs"
    chapters = sorted({ch for ch, _, _ in GRADED.values()})
    students = {**{s: [(ch, f)] for s, (ch, f, _) in GRADED.items()}, "honest": [(ch, None) for ch in chapters]}
    for student, files in students.items():
        for chapter, file in files:
            write_submission(subs, student, chapter, file)
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
            got = score[(student, cell)]  # refused, not merely absent
            assert got[0] == 0 and "not allowed" in got[2], (student, cell, got)
    honest = [(r["chapter"], r["score"], r["max_score"]) for r in rows if r["student"] == "honest" and r["cell"] == "TOTAL"]
    assert len(honest) == len(chapters) and all(s == m for _, s, m in honest), honest
