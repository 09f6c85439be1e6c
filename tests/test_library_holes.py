"""Issue 35, item 4: library code earns no marks.

Each attack answers an exercise with code that is not the student's: a private helper of a
forbidden function, a sibling that computes the same, a torch module or argument no list named,
a kernel under another name. First, each attack is shown to work against the real companion
and torch (so that a 0 is the rule's doing, not a broken attack); then the sandbox's copy of
the companion for that exercise, or the runner's refusals and evidence log, stop or flag it; a
class with the attackers and an honest student is graded, and the honest student keeps full
marks (the instructor's own solutions).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching import course  # noqa: E402
from teaching.exercises import read_chapter  # noqa: E402
from teaching.stubbing import Index, exercise_rule, prepare_course_dir, stubbed_set  # noqa: E402

NAMES = {"02": "02_seq2seq_attention", "04": "04_masking", "05": "05_multihead_attention", "07": "07_transformer",
         "11": "11_positions_and_memory", "12": "12_fast_attention", "03": "03_self_attention",
         "06": "06_positional_encoding", "10": "10_language_model"}

# (chapter, answer cell, its source): each one answers the exercise with library code
ATTACKS = {
    "private-masked-softmax": ("04", "masking_softmax",
                               "from companion.attention import _masked_softmax\n"
                               "def masked_softmax(scores, mask):\n    return _masked_softmax(scores, mask)\n"),
    "sibling-online-softmax": ("04", "masking_softmax",
                               "from companion.flash import online_softmax\n"
                               "def masked_softmax(scores, mask):\n"
                               "    return online_softmax(scores, scores.shape[-1], mask)\n"),
    "private-attention": ("03", "self_plain",
                          "import companion.attention as A\n"
                          "def plain_self_attention(x):\n"
                          "    return A._attention_with_weights(x, x, x, None, 0.0)\n"),
    "namesake-entropy": ("02", "seq2seq_entropy",
                         "from companion.heads import attention_entropy as _entropy\n"
                         "def attention_entropy(weights):\n    return _entropy(weights)\n"),
    "private-tiled-function": ("12", "flash_tiled",
                               "import torch\nfrom companion.flash import _TiledAttention\n"
                               "def tiled_head(q, k, v, block):\n"
                               "    return _TiledAttention.apply(q, k, v, None, True, block, block)\n"
                               "def tiled_head_grads(q, k, v, d_out, block):\n"
                               "    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))\n"
                               "    return torch.autograd.grad(tiled_head(q, k, v, block), (q, k, v), d_out)\n"),
    "sdpa-enable-gqa": ("11", "gqa_heads",
                        "import torch.nn.functional as F\n"
                        "def gqa_attention(q, k, v, mask=None):\n"
                        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)\n"),
    # torch's namesake of what the exercise asks for (aten._masked_softmax: True = masked out)
    "torch-masked-softmax": ("04", "masking_softmax",
                             "import torch\n"
                             "def masked_softmax(scores, mask):\n"
                             "    return torch.ops.aten._masked_softmax(scores, ~mask, None, None).nan_to_num(0.0)\n"),
    # red team round 2, H1: the unfused math op takes enable_gqa too
    "sdpa-math-enable-gqa": ("11", "gqa_heads",
                             "import torch\n"
                             "def gqa_attention(q, k, v, mask=None):\n"
                             "    bias = None if mask is None else torch.zeros(mask.shape).masked_fill(~mask, float('-inf'))\n"
                             "    return torch.ops.aten._scaled_dot_product_attention_math(\n"
                             "        q, k, v, attn_mask=bias, enable_gqa=True)[0]\n"),
    # the CPU's fused kernel groups the heads itself, without the argument
    "flash-cpu-grouped-heads": ("11", "gqa_heads",
                                "import torch\n"
                                "def gqa_attention(q, k, v, mask=None):\n"
                                "    bias = None if mask is None else torch.zeros(mask.shape).masked_fill(~mask, float('-inf'))\n"
                                "    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(\n"
                                "        q, k, v, attn_mask=bias)[0]\n"),
    # red team round 2, H2: FlexAttention's eager path, its front end and its math function
    "flex-attention-eager": ("11", "gqa_heads",
                             "import torch\nimport torch.nn.attention.flex_attention as fa\n"
                             "fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # no torch.compile: eager\n"
                             "def gqa_attention(q, k, v, mask=None):\n"
                             "    def score_mod(s, b, h, i, j):\n"
                             "        return s if mask is None else torch.where(mask[i, j], s, float('-inf'))\n"
                             "    return fa.flex_attention(q, k, v, score_mod=score_mod, enable_gqa=True)\n"),
    "flex-math-attention": ("11", "gqa_heads",
                            "import sys, torch\nimport torch._higher_order_ops.flex_attention\n"
                            "from torch.nn.attention.flex_attention import create_block_mask\n"
                            "flex = sys.modules['torch._higher_order_ops.flex_attention']\n"
                            "def gqa_attention(q, k, v, mask=None):\n"
                            "    n = q.shape[-2]\n"
                            "    def keep(b, h, i, j):\n"
                            "        return torch.ones_like(i, dtype=torch.bool) if mask is None else mask[i, j]\n"
                            "    blocks = create_block_mask(keep, None, None, n, n, device='cpu')\n"
                            "    return flex.math_attention(q, k, v, lambda s, b, h, i, j: s, blocks.as_tuple(),\n"
                            "                               q.shape[-1] ** -0.5, {})[0].to(q.dtype)\n"),
    # red team round 2, H2: an installed package (the test extra's transformers)
    "transformers-repeat-kv": ("11", "gqa_heads",
                               "import torch.nn.functional as F\n"
                               "from transformers.models.llama.modeling_llama import repeat_kv\n"
                               "def gqa_attention(q, k, v, mask=None):\n"
                               "    n = q.shape[1] // k.shape[1]\n"
                               "    return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), attn_mask=mask)\n"),
    # red team round 3, H2: public siblings in other modules that compute what the exercise asks
    # (MultiHeadAttention's ALiBi path was _attention_with_bias; it is now the bias argument of
    # companion.attention._attention_with_weights, which these exercises stub)
    "sibling-attention-with-bias": ("02", "seq2seq_dot",
                                    "import torch\nfrom companion.attention import _attention_with_weights as _aww\n"
                                    "def attend(query, keys, values):\n"
                                    "    c, w = _aww(query[:, None], keys, values, None, 0.0, bias=torch.zeros(()))\n"
                                    "    return c[:, 0], w[:, 0]\n"),
    "sibling-tiled-attention": ("03", "self_plain",
                                "import torch\nfrom companion.flash import tiled_attention as _ta\n"
                                "def plain_self_attention(X):\n"
                                "    eye = torch.eye(X.shape[0], dtype=X.dtype)\n"
                                "    return _ta(X, X, X), _ta(X, X, eye)\n"),
    "sibling-rotation-matrix": ("06", "pe_sinusoidal",
                                "import torch\nfrom companion.positional import rotation_matrix as _rm\n"
                                "def my_sinusoidal(length, d_model, base=10000.0):\n"
                                "    e = torch.tensor([0.0, 1.0], dtype=torch.float64).repeat(d_model // 2)\n"
                                "    return torch.stack([_rm(float(t), d_model, base) @ e for t in range(length)]).float()\n"),
    "sibling-apply-rope": ("06", "pe_rotation",
                           "import torch\nfrom companion.positional import apply_rope as _rope\n"
                           "def shift_matrix(delta, d_model, base=10000.0):\n"
                           "    eye = torch.eye(d_model, dtype=torch.float64)\n"
                           "    rows = _rope(eye[:, None, :], torch.tensor([-float(delta)], dtype=torch.float64), base)[:, 0]\n"
                           "    return rows.T.contiguous()\n"),
}
# what the CSV's status says for an attack that is not refused by name (default: "not allowed in this exercise")
REFUSAL = {"transformers-repeat-kv": "No module named 'transformers'"}


def instructor_answer(chapter: str, answer_id: str) -> str:
    nb = nbformat.read(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == answer_id)


def run_answer(source: str, name: str, chapter: str, *args):
    """``name(*args)`` from an answer cell run after the chapter's setup, with the real companion."""
    ch = read_chapter(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb")
    ns = {"__name__": "__main__", "student_id": ""}
    exec(compile(ch.parameters_source, "<parameters>", "exec"), ns)  # noqa: S102
    exec(compile(ch.setup_source, "<setup>", "exec"), ns)  # noqa: S102
    exec(compile(source.replace("# BEGIN SOLUTION", "").replace("# END SOLUTION", ""), "<answer>", "exec"), ns)  # noqa: S102
    return ns[name](*args)


def _inputs(attack: str):
    g = torch.Generator().manual_seed(1)
    if attack in ("private-masked-softmax", "sibling-online-softmax", "torch-masked-softmax"):
        scores = torch.randn(2, 3, 5, generator=g)
        mask = torch.rand(2, 3, 5, generator=g) > 0.3
        mask[0, 1] = False  # a fully masked row
        return "masked_softmax", (scores, mask)
    if attack in ("private-attention", "sibling-tiled-attention"):
        return "plain_self_attention", (torch.randn(6, 4, generator=g),)
    if attack == "sibling-attention-with-bias":
        return "attend", (torch.randn(2, 8, generator=g), torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 3, generator=g))
    if attack == "sibling-rotation-matrix":
        return "my_sinusoidal", (7, 6)
    if attack == "sibling-apply-rope":
        return "shift_matrix", (3, 6)
    if attack == "namesake-entropy":
        w = torch.softmax(torch.randn(3, 5, generator=g), -1)
        w[0, 0] = 0.0
        return "attention_entropy", (w,)
    if attack == "private-tiled-function":
        q, k, v = (torch.randn(7, 4, generator=g, dtype=torch.float64) for _ in range(3))
        return "tiled_head", (q, k, v, 3)
    q, k, v = torch.randn(2, 4, 5, 3, generator=g), torch.randn(2, 2, 5, 3, generator=g), torch.randn(2, 2, 5, 3, generator=g)
    from companion.masks import causal_mask

    return "gqa_attention", (q, k, v, causal_mask(5))


@pytest.mark.parametrize("attack", ATTACKS)
def test_each_attack_answers_its_exercise_with_the_real_library(attack):
    chapter, answer_id, source = ATTACKS[attack]
    name, args = _inputs(attack)
    got = run_answer(source, name, chapter, *args)
    want = run_answer(instructor_answer(chapter, answer_id), name, chapter, *args)
    got, want = (t[0] if isinstance(t, tuple) else t for t in (got, want))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return Index(ROOT)


def _rule(chapter, answer_id):
    ch = read_chapter(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb")
    ex = next(e for e in ch.exercises if e.answer_id == answer_id)
    return exercise_rule(ch, ex)


@pytest.mark.parametrize(("chapter", "answer_id", "gone"), [
    ("04", "masking_softmax", ["companion.attention._masked_softmax", "companion.attention._attention_with_weights",
                               "companion.flash.online_softmax"]),
    ("03", "self_plain", ["companion.attention._attention_with_weights", "companion.attention._masked_softmax"]),
    ("02", "seq2seq_dot", ["companion.attention._attention_with_weights"]),
    ("02", "seq2seq_entropy", ["companion.heads.attention_entropy"]),
    ("05", "multihead_one_head", ["companion.attention._attention_with_weights",
                                  "companion.multihead.MultiHeadAttention.forward"]),
    ("07", "transformer_decoder", ["companion.models.blocks.DecoderLayer._self_attention",
                                   "companion.models.blocks.DecoderLayer._cross_attention"]),
    ("11", "rope_attention", ["companion.attention._attention_with_weights",
                              "companion.multihead.MultiHeadAttention.forward"]),
    ("12", "flash_tiled", ["companion.flash._TiledAttention.forward", "companion.flash._TiledAttention.backward",
                           "companion.flash._tiled_forward", "companion.flash._tiled_backward",
                           "companion.flash.online_softmax"]),
    ("12", "flash_update", ["companion.flash._tiled_forward", "companion.flash._tile_scores"]),
    # red team round 3, H2: siblings in other modules
    ("02", "seq2seq_dot", ["companion.attention._attention_with_weights", "companion.flash.tiled_attention",
                           "companion.flash._tiled_forward", "companion.multihead.MultiHeadAttention.forward"]),
    ("03", "self_plain", ["companion.attention._attention_with_weights", "companion.flash.tiled_attention",
                          "companion.flash._tiled_forward"]),
    ("04", "masking_softmax", ["companion.attention._attention_with_weights", "companion.flash.tiled_attention"]),
    ("05", "multihead_one_head", ["companion.flash.tiled_attention", "companion.attention._attention_with_weights"]),
    ("05", "multihead_forward", ["companion.flash.tiled_attention", "companion.attention._attention_with_weights"]),
    ("05", "multihead_module", ["companion.flash.tiled_attention", "companion.attention._attention_with_weights"]),
    ("10", "lm_cache", ["companion.flash.tiled_attention", "companion.attention._attention_with_weights"]),
    ("11", "rope_attention", ["companion.flash.tiled_attention", "companion.attention._attention_with_weights"]),
    ("06", "pe_sinusoidal", ["companion.positional.rotation_matrix", "companion.positional.apply_rope",
                             "companion.positional.apply_rope_complex"]),
    ("06", "pe_rotation", ["companion.positional.apply_rope", "companion.positional.apply_rope_complex",
                           "companion.positional._rope_angles"]),
])
def test_helpers_siblings_and_namesakes_are_stubbed(index, chapter, answer_id, gone):
    not_allowed, names, setup = _rule(chapter, answer_id)
    stubbed = stubbed_set(index, not_allowed, names, setup)
    assert set(gone) <= set(stubbed), sorted(set(gone) - set(stubbed))


def test_a_class_keeps_its_name_and_loses_every_method(index):
    stubbed = stubbed_set(index, ("companion.flash.tiled_attention",), ())
    methods = {k for k, d in index.defs.items() if d.cls == "companion.flash._TiledAttention"}
    assert methods and methods <= set(stubbed)


def test_public_tool_kit_and_checks_stay(index):
    """What the chapter's setup imports keeps working: tile_update in the tiled exercise (the
    honest answer uses it), and checks that only raise are never stubbed."""
    not_allowed, names, setup = _rule("12", "flash_tiled")
    stubbed = stubbed_set(index, not_allowed, names, setup)
    for kept in ("companion.flash.tile_update", "companion.flash._finite", "companion.attention.masked_softmax",
                 "companion.attention._check_attention_args", "companion.masks.causal_mask"):
        assert kept not in stubbed, kept


PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import companion
assert companion.__file__.startswith(sys.argv[1]), companion.__file__
out = {}
for dotted, call in json.loads(sys.argv[2]).items():
    try:
        exec(call, {})
        out[dotted] = "ran"
    except RuntimeError as err:
        out[dotted] = "refused" if "not allowed in this exercise" in str(err) else f"failed: {err}"
    except Exception as err:
        out[dotted] = f"failed: {type(err).__name__}: {err}"
print(json.dumps(out))
"""


def _probe(course_dir: Path, calls: dict) -> dict:
    run = subprocess.run([sys.executable, "-I", "-c", PROBE, str(course_dir), json.dumps(calls)], capture_output=True,
                         text=True, encoding="utf-8", timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_copy_refuses_the_attacks_and_runs_the_tool_kit(tmp_path):
    course_dir = prepare_course_dir(tmp_path / "c", *_rule("04", "masking_softmax"))
    s = "import torch\nscores = torch.randn(2, 4)\nmask = torch.rand(2, 4) > 0.5\n"
    got = _probe(course_dir, {
        "_masked_softmax": s + "from companion.attention import _masked_softmax\n_masked_softmax(scores, mask)",
        "online_softmax": s + "from companion.flash import online_softmax\nonline_softmax(scores, 4, mask)",
        "attention_with_weights": s + "from companion.attention import attention_with_weights\n"
                                      "attention_with_weights(scores, scores, scores)",
        "causal_mask": "from companion.masks import causal_mask\nassert causal_mask(3).sum() == 6",
        "real_token_mask": "from companion.masks import real_token_mask\nassert real_token_mask([2, 1]).sum() == 3",
    })
    assert got == {"_masked_softmax": "refused", "online_softmax": "refused", "attention_with_weights": "refused",
                   "causal_mask": "ran", "real_token_mask": "ran"}, got


@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(NAMES))
def test_every_exercise_setup_runs_with_its_stubbed_copy(chapter, tmp_path):
    """The setup and context cells each exercise's sandbox runs before the answer still run."""
    ch = read_chapter(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb")
    for i, ex in enumerate(ch.exercises):
        not_allowed, names, sources = exercise_rule(ch, ex)
        course_dir = prepare_course_dir(tmp_path / f"c{i}", not_allowed, names, sources)
        code = "\n".join([ch.parameters_source, "student_id = ''", *sources])
        got = _probe(course_dir, {"setup": code})
        assert got == {"setup": "ran"}, (ex.answer_id, got)


# -- what torch does: refused under every name, or flagged with the evidence ----------------------------

TORCH_PROBE = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
import torch, torch.nn.functional as F
names = runner.capability_names(sys.argv[2].split(",") if sys.argv[2] else [])  # as the runner does
for dotted in names:
    if "(" not in dotted:
        runner.refuse_everywhere(torch, dotted)
runner.refuse_kernels(torch, names)
evidence = runner.Evidence(torch, names)
x = torch.randn(2, 5, 8)
def decoder_layer_alias():
    torch.nn.modules.TransformerDecoderLayer(8, 2, 16, batch_first=True)(x, x)
def decoder_layer_inside_transformer():
    t = torch.nn.Transformer(8, 2, 1, 1, 16, batch_first=True)
    t.decoder.layers[0](x, x)
def decoder_layer_reloaded():
    import importlib
    fresh = importlib.reload(importlib.import_module("torch.nn.modules.transformer"))
    fresh.TransformerDecoderLayer(8, 2, 16, batch_first=True).eval()(x, x)
def native_mha():
    w, b = torch.randn(24, 8), torch.zeros(24)
    torch.ops.aten._native_multi_head_attention(x, x, x, 8, 2, w, b, torch.randn(8, 8), torch.zeros(8))
def sdpa_reloaded_functional():
    import importlib
    importlib.reload(F).scaled_dot_product_attention(x, x, x)
def sdpa_through_torch_C():
    torch._C._nn.scaled_dot_product_attention(x, x, x)
def sdpa_gqa():
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
def sdpa_gqa_overload():
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    torch.ops.aten.scaled_dot_product_attention.default(q, k, k, attn_mask=None, enable_gqa=True)
def sdpa_gqa_packet():
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    torch.ops.aten.scaled_dot_product_attention(q, k, k, enable_gqa=True)
def cross_entropy():
    F.cross_entropy(torch.randn(3, 5), torch.tensor([0, 2, 4]))
    F.binary_cross_entropy(torch.rand(4), torch.rand(4))
def entr():
    torch.special.entr(torch.rand(4))
def sdpa_plain():
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    F.scaled_dot_product_attention(q, k, k)
def _gqa():
    return torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
def sdpa_math_gqa():
    q, k = _gqa()
    torch.ops.aten._scaled_dot_product_attention_math(q, k, k, enable_gqa=True)
def sdpa_math_plain():
    q, _ = _gqa()
    torch.ops.aten._scaled_dot_product_attention_math(q, q, q)
def flash_grouped():
    q, k = _gqa()
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, k)
def flash_grouped_unwatched():  # below torch function modes, tensors that skip ADInplaceOrView
    with torch._C.DisableTorchFunction(), torch.inference_mode():
        q, k = _gqa()
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, k)
def flash_grouped_no_torch_function():
    with torch._C.DisableTorchFunction():
        q, k = _gqa()
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, k)
def sdpa_math_gqa_no_torch_function():
    with torch._C.DisableTorchFunction():
        q, k = _gqa()
        torch.ops.aten._scaled_dot_product_attention_math(q, k, k, enable_gqa=True)
def flash_same_heads():
    q, _ = _gqa()
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)
def flex_eager():
    import torch.nn.attention.flex_attention as fa
    fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    q, k = _gqa()
    fa.flex_attention(q, k, k, enable_gqa=True)
def flex_math():
    import torch._higher_order_ops.flex_attention
    from torch.nn.attention.flex_attention import create_block_mask
    q, k = _gqa()
    blocks = create_block_mask(lambda b, h, i, j: i >= j, None, None, 5, 5, device="cpu")
    sys.modules["torch._higher_order_ops.flex_attention"].math_attention(
        q, k, k, lambda s, b, h, i, j: s, blocks.as_tuple(), 0.35, {})
# red team round 3, H1: torch's other implementations of a refused capability
rows = torch.randn(3, 8)
probs = torch.softmax(torch.randn(3, 5), -1)
def ln_group_norm():
    F.group_norm(rows.reshape(-1, 1, 8), 1)
def ln_rms_norm():
    F.rms_norm(rows - rows.mean(-1, keepdim=True), (8,))
def ln_instance_norm():
    F.instance_norm(rows[:, None, :])
def ln_batch_norm():
    F.batch_norm(rows.T, None, None, training=True)
def ln_refs():
    import torch._refs as refs
    refs.native_layer_norm(rows, (8,), None, None, 1e-5)
def ent_xlogy():
    -torch.special.xlogy(probs, probs).sum(-1)
def ent_xlogy_method():
    probs.xlogy(probs)
def ent_refs():
    import torch._refs.special as rs
    rs.entr(probs)
def mha_need_weights():
    eye = torch.eye(8)
    t = rows[:, None, :]
    F.multi_head_attention_forward(t, t, t, 8, 1, torch.cat([eye, eye, eye]), None, None, None, False, 0.0,
                                   eye, None, training=False, need_weights=True)
def ao_mha():
    import torch.ao.nn.quantizable as qnn
    t = rows[:, None, :]
    qnn.MultiheadAttention(8, 2).eval()(t, t, t, need_weights=False)
def ao_mha_reloaded():
    import importlib
    fresh = importlib.reload(importlib.import_module("torch.ao.nn.quantizable.modules.activation"))
    t = rows[:, None, :]
    fresh.MultiheadAttention(8, 2).eval()(t, t, t, need_weights=False)
for call in sys.argv[3].split(","):
    evidence.flags.clear()
    try:
        with evidence:
            globals()[call]()
        result = "ran"
    except RuntimeError as err:
        result = "refused" if "not allowed in this exercise" in str(err) else "failed: " + str(err)[:200]
    print(call, result, "|", "; ".join(evidence.report()))
"""


def torch_probe(names: list[str], calls: list[str]) -> dict[str, tuple[str, str]]:
    from teaching.sandbox import RUNNER

    run = subprocess.run([sys.executable, "-c", TORCH_PROBE, str(RUNNER), ",".join(names), ",".join(calls)],
                         capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = {}
    for line in run.stdout.splitlines():
        head, _, flags = line.partition(" | ")
        call, _, result = head.partition(" ")
        out[call] = (result, flags)
    return out


def _names(chapter, answer_id):
    ch = read_chapter(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb")
    return [n for n in next(e for e in ch.exercises if e.answer_id == answer_id).not_allowed if n.startswith("torch.")]


def test_torch_decoder_layers_under_any_name_are_refused_or_flagged():
    got = torch_probe(_names("07", "transformer_decoder"),
                      ["decoder_layer_alias", "decoder_layer_inside_transformer", "decoder_layer_reloaded"])
    assert got["decoder_layer_alias"][0] == "refused", got
    assert got["decoder_layer_inside_transformer"][0] == "refused", got
    # a class re-executed from torch's source is a new class no refusal reaches: its forward is flagged
    result, flags = got["decoder_layer_reloaded"]
    assert result == "refused" or "TransformerDecoderLayer.forward" in flags, got


def test_fused_attention_kernels_are_refused_and_flagged():
    got = torch_probe(_names("05", "multihead_module"), ["native_mha", "sdpa_through_torch_C", "sdpa_reloaded_functional"])
    assert got["sdpa_through_torch_C"][0] == "refused", got  # the same function object, under another name
    result, flags = got["native_mha"]  # a kernel refused at the dispatcher, and its call on record
    assert result == "refused" and "_native_multi_head_attention" in flags, got
    assert got["sdpa_reloaded_functional"][0] != "ran", got  # torch cannot run its functional.py twice


def test_enable_gqa_is_refused_where_the_exercise_asks_to_repeat_the_heads():
    got = torch_probe(_names("11", "gqa_heads"), ["sdpa_gqa", "sdpa_plain"])
    assert got["sdpa_gqa"][0] == "refused" and "enable_gqa" in got["sdpa_gqa"][1], got
    assert got["sdpa_plain"] == ("ran", ""), got  # the statement allows scaled_dot_product_attention itself


def test_enable_gqa_is_refused_through_the_op_and_its_overload():
    """Red team H2: ``torch.ops.aten.scaled_dot_product_attention.default`` is named
    ``scaled_dot_product_attention.default``; the rule goes by the op's own name."""
    got = torch_probe(_names("11", "gqa_heads"), ["sdpa_gqa_overload", "sdpa_gqa_packet", "sdpa_plain"])
    for call in ("sdpa_gqa_overload", "sdpa_gqa_packet"):
        assert got[call][0] == "refused" and "enable_gqa" in got[call][1], got
    assert got["sdpa_plain"] == ("ran", ""), got


def test_enable_gqa_is_refused_in_every_op_of_the_family():
    """Red team round 2, H1: the unfused math op (``_scaled_dot_product_attention_math``) takes
    ``enable_gqa`` too, and the CPU's fused kernel groups the heads without being asked. The rule
    on ``scaled_dot_product_attention(enable_gqa=True)`` holds for every op named
    ``_scaled_dot_product_*``: the argument, and inputs with fewer key heads than query heads
    (refused at the dispatcher too, below the modes a student can remove)."""
    got = torch_probe(_names("11", "gqa_heads"), ["sdpa_math_gqa", "flash_grouped", "flash_grouped_no_torch_function",
                                                  "sdpa_math_gqa_no_torch_function", "flash_grouped_unwatched",
                                                  "sdpa_math_plain", "flash_same_heads", "sdpa_plain"])
    assert got["sdpa_math_gqa"][0] == "refused" and "enable_gqa" in got["sdpa_math_gqa"][1], got
    assert got["flash_grouped"][0] == "refused" and "enable_gqa" in got["flash_grouped"][1], got
    for call in ("flash_grouped_no_torch_function", "sdpa_math_gqa_no_torch_function", "flash_grouped_unwatched"):
        assert got[call][0] == "refused", got
    for call in ("sdpa_math_plain", "flash_same_heads", "sdpa_plain"):  # what the statement allows
        assert got[call] == ("ran", ""), got


def test_flex_attention_is_refused_where_sdpa_is_named():
    """Red team round 2, H2: FlexAttention's eager path (its front end without torch.compile,
    its higher-order op, its ``math_attention``) answers an attention exercise; it is refused
    wherever a rule names ``scaled_dot_product_attention``, with an argument or without."""
    calls = ["flex_eager", "flex_math"]
    assert torch_probe([], calls) == {c: ("ran", "") for c in calls}  # the attacks work
    for chapter, answer_id in (("11", "gqa_heads"), ("03", "self_plain")):
        got = torch_probe(_names(chapter, answer_id), calls)
        assert all(got[c][0] == "refused" for c in calls), (answer_id, got)


def test_the_sdpa_family_is_refused_by_name_where_sdpa_is():
    """Every aten op named ``_scaled_dot_product_*`` is refused at the dispatcher where
    ``scaled_dot_product_attention`` is (a family by its name, not a list), and flagged."""
    import importlib.util

    from teaching.sandbox import RUNNER

    spec = importlib.util.spec_from_file_location("runner_for_family", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    ops = {op.partition(".")[0] for op, _ in runner.family_kernels(torch, runner.SDPA)}
    every = {n.partition("::")[2].partition(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith(("aten::_scaled_dot_product_", "aten::scaled_dot_product_attention"))}
    on_cpu = {n for n in every if any(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{n}", k)
                                      for k in ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd"))}
    assert {"_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu"} <= on_cpu <= ops, \
        sorted(on_cpu - ops)
    got = torch_probe(_names("03", "self_plain"), ["sdpa_math_plain", "flash_same_heads", "flash_grouped_unwatched"])
    assert all(result == "refused" for result, _ in got.values()), got
    assert "_scaled_dot_product_flash_attention_for_cpu" in got["flash_same_heads"][1], got


def test_other_implementations_of_layer_norm_are_refused():
    """Red team round 3, H1: group norm with one group, RMS norm of the centred rows, instance
    and batch norm, and torch._refs' layer norm all compute a layer norm."""
    calls = ["ln_group_norm", "ln_rms_norm", "ln_instance_norm", "ln_batch_norm", "ln_refs"]
    got = torch_probe(_names("07", "transformer_layernorm"), calls)
    assert all(got[c][0] == "refused" for c in calls), got
    unrefused = torch_probe([], calls)  # the attacks run where nothing is named
    assert all(unrefused[c][0] == "ran" for c in calls), unrefused


def test_other_implementations_of_entropy_are_refused():
    calls = ["ent_xlogy", "ent_xlogy_method", "ent_refs"]
    got = torch_probe(_names("02", "seq2seq_entropy"), calls)
    assert all(got[c][0] == "refused" for c in calls), got
    assert all(r == "ran" for r, _ in torch_probe([], calls).values())


def test_naming_sdpa_refuses_multi_head_attention_too():
    """Chapter 3 names SDPA only: torch's multi-head attention (need_weights=True takes its
    explicit path, no SDPA) and the quantizable one in torch.ao are refused there too."""
    got = torch_probe(_names("03", "self_plain"), ["mha_need_weights", "ao_mha"])
    assert all(result == "refused" for result, _ in got.values()), got
    got = torch_probe(_names("05", "multihead_forward"), ["ao_mha", "ao_mha_reloaded"])
    assert got["ao_mha"][0] == "refused", got
    # a class re-executed from torch.ao's source: a new class, flagged by the forward hook
    result, flags = got["ao_mha_reloaded"]
    assert result == "refused" or "MultiheadAttention.forward" in flags, got
    assert all(r == "ran" for r, _ in torch_probe([], ["mha_need_weights", "ao_mha"]).values())


def test_torch_namesakes_of_the_answer_are_refused():
    """As the companion's namesakes are stubbed, torch's are refused: chapter 4 asks for
    ``masked_softmax``, so ``aten._masked_softmax`` (and only it) refuses in that exercise."""
    probe = r"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
kept = runner.refuse_namesakes(torch, sys.argv[2].split(","))
s, m = torch.randn(2, 5), torch.rand(2, 5) > 0.5
for name, call in (("_masked_softmax", lambda: torch.ops.aten._masked_softmax(s, ~m, None, None)),
                   ("softmax", lambda: torch.softmax(s.masked_fill(~m, float("-inf")), -1))):
    try:
        call()
        print(name, "ran")
    except RuntimeError as err:
        print(name, "refused" if "not allowed in this exercise" in str(err) else err)
"""
    from teaching.sandbox import RUNNER

    def run(names):
        out = subprocess.run([sys.executable, "-c", probe, str(RUNNER), names], capture_output=True, text=True,
                             encoding="utf-8", timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return dict(line.split(" ", 1) for line in out.stdout.splitlines())

    assert run(",".join(_rule("04", "masking_softmax")[1])) == {"_masked_softmax": "refused", "softmax": "ran"}
    assert run("attend,_") == {"_masked_softmax": "ran", "softmax": "ran"}


def test_a_rule_reads_a_positional_argument_too():
    """An op that takes the argument by position is judged on it all the same (the op's schema
    or the function's signature says where it is)."""
    import importlib.util

    from teaching.sandbox import RUNNER

    spec = importlib.util.spec_from_file_location("runner_for_test", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)

    def op(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False):
        return query

    assert runner._argument(op, "is_causal", (1, 2, 3, None, 0.0, True), {}) is True
    assert runner._argument(op, "is_causal", (1, 2, 3), {"is_causal": True}) is True
    assert not runner._argument(op, "is_causal", (1, 2, 3), {})
    schema_op = torch.ops.aten.scaled_dot_product_attention.default
    assert runner._argument(schema_op, "is_causal", (1, 2, 3, None, 0.0, True), {}) is True
    assert runner._argument(schema_op, "enable_gqa", (1, 2, 3, None, 0.0, False), {"enable_gqa": True}) is True


def test_cross_entropy_is_not_an_entropy_flag():
    """Red team L2: the entropy family watches torch.special.entr by its exact name, not any
    function whose name contains ``entr``. (Since red team 7, chapter 2's entropy exercise also
    names F.cross_entropy itself, whose soft targets compute an entropy: that refusal is
    tests/test_round7_holes.py's; here it is left out, to watch the name match alone.)"""
    cross_entropy = "torch.nn.functional.cross_entropy"
    names = _names("02", "seq2seq_entropy")
    assert cross_entropy in names  # the exercise's own list refuses it (red team 7, y1)
    got = torch_probe([n for n in names if n != cross_entropy], ["cross_entropy", "entr"])
    assert got["cross_entropy"] == ("ran", ""), got
    assert got["entr"][0] == "refused" or "entr" in got["entr"][1], got


def test_what_the_exercise_allows_is_not_flagged():
    """Chapter 7's decoder forbids torch's decoder layer, not scaled_dot_product_attention (the
    companion's MultiHeadAttention, which the honest answer uses, calls it)."""
    got = torch_probe(_names("07", "transformer_decoder"), ["sdpa_plain"])
    assert got["sdpa_plain"] == ("ran", ""), got


def test_nothing_is_refused_or_flagged_where_nothing_is_forbidden():
    got = torch_probe([], ["decoder_layer_alias", "native_mha", "sdpa_gqa"])
    assert all(v == ("ran", "") for v in got.values()), got


@needs_bwrap
def test_only_the_companions_dependencies_are_installed_in_the_sandbox():
    """Red team round 2, H2: an installed package (the test extra's transformers) answered an
    exercise. The sandbox shows only the companion's dependencies and theirs: the rest of
    site-packages, and the system's dist-packages, are not there to import, whatever the path."""
    from teaching.sandbox import Limits, allowed_site_entries, sandbox_command

    cmd = sandbox_command([ROOT / "companion"], [ROOT.resolve()], Limits())
    assert cmd[-1] == "/grader/runner.py"
    probe = ("import importlib, sys, os\nsys.path += ['/usr/lib/python3/dist-packages']\nout = {}\n"
             "for m in ['torch', 'numpy', 'matplotlib.pyplot', 'einops', 'transformers', 'rotary_embedding_torch',"
             " 'nbformat', 'pytest']:\n"
             "    try:\n        importlib.import_module(m)\n        out[m] = 'ok'\n"
             "    except ImportError:\n        out[m] = 'missing'\n"
             "site = [p for p in sys.path if p.endswith('-packages') and os.path.isdir(p)]\n"
             "out['files'] = sorted(e for p in site for e in os.listdir(p))\nprint(out)\n")
    run = subprocess.run([*cmd[:-1], "-c", probe], capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = eval(run.stdout.strip().splitlines()[-1])  # noqa: S307 (our own probe's dict)
    for needed in ("torch", "numpy", "matplotlib.pyplot", "einops"):
        assert got[needed] == "ok", got
    for other in ("transformers", "rotary_embedding_torch", "nbformat", "pytest"):
        assert got[other] == "missing", got
    allowed = {e for entries in allowed_site_entries().values() for e in entries}
    assert set(got["files"]) <= allowed, sorted(set(got["files"]) - allowed)
    assert not any(e.startswith("transformers") or e.endswith(".pth") for e in got["files"]), got["files"]


# -- a class graded: the attackers score 0 on their exercise, the honest student full marks -------------

@needs_bwrap
@pytest.mark.slow
def test_a_class_of_library_attackers_and_an_honest_student(tmp_path):
    subs = tmp_path / "subs"
    chapters = sorted({c for c, _, _ in ATTACKS.values()})
    for student in ("honest", *ATTACKS):
        for chapter in chapters:
            nb = nbformat.read(ROOT / "notebooks" / f"{NAMES[chapter]}.ipynb", as_version=4)
            if student in ATTACKS and ATTACKS[student][0] == chapter:
                _, answer_id, source = ATTACKS[student]
                next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == answer_id).source = source
            elif student != "honest":
                continue
            (subs / student).mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, subs / student / f"{NAMES[chapter]}.ipynb")
    out = tmp_path / "grades.csv"
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--chapters", *chapters, "--timeout", "30", "--jobs", "2"],
                         capture_output=True, text=True, timeout=3000, cwd=tmp_path, encoding="utf-8", errors="replace")
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for chapter in chapters:
        cells = course.graded_cells(NAMES[chapter])
        honest = {r["cell"]: float(r["score"]) for r in rows if r["student"] == "honest" and r["chapter"] == NAMES[chapter]}
        assert honest == {**cells, "TOTAL": math.fsum(cells.values())}, [r for r in rows if r["student"] == "honest"]
        assert not any(r["flags"] for r in rows if r["student"] == "honest"), "an honest answer was flagged"
    for student, (_, answer_id, _) in ATTACKS.items():
        row = next(r for r in rows if r["student"] == student and r["cell"] == f"{answer_id}_check")
        assert float(row["score"]) == 0.0, row
        assert REFUSAL.get(student, "not allowed in this exercise") in row["status"], row
