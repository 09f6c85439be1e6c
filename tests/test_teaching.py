"""Homework: the exercises' format, and autograding proven end to end for every chapter.

For every chapter with exercises, one autograde run (teaching/autograde.py, the command the
teaching guide documents) grades three submissions: the instructor notebook (full marks),
the untouched student edition (zero on every graded cell) and two planted ones: in the first
one answer is wrong and one raises, in the second one returns NaN and one loops forever,
and every other answer is right; chapters 2, 5, 7 and 10 have a third, with a wrong assembly in
the exercise that builds a training step or a layer (★★★). Each planted mistake costs exactly
its own cell's points, the right answers keep theirs, and grading finishes.
"""

import csv
import html
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching import course  # noqa: E402

CHAPTERS = course.chapters_with_exercises()
HAVE_NBGRADER = importlib.util.find_spec("nbgrader") is not None
needs_nbgrader = pytest.mark.skipif(not HAVE_NBGRADER, reason="nbgrader is not installed (pip install -r requirements.txt)")

def _from_solution(chapter, grade_id, old, new):
    """(grade_id, the instructor's solution with ``old`` replaced by ``new``): a planted mistake in
    an exercise whose answer is a whole model or training step, too long to copy here."""
    for c in nbformat.read(course.NOTEBOOKS / f"{chapter}.ipynb", as_version=4).cells:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            text = c.source
            assert text.count(old) == 1, f"{chapter}/{grade_id}: {old!r} should occur once in the solution"
            return grade_id, text.replace(old, new)
    raise KeyError(f"{chapter} has no cell {grade_id!r}")


# Per chapter: the solution cell (grade_id) whose source a planted submission replaces, for
# each kind of mistake. The check cell of solution `x` is `x_check`. "build" (the exercises
# that assemble a model or a training step) is planted in a submission of its own.
PLANTS = {
    "01_rnn_captioning": {
        "wrong": ("rnn_teacher", "def teacher_forcing_pair(tokens):\n    return tokens[:, 1:], tokens[:, :-1]  # swapped\n"),
        "nan": ("rnn_accuracy", "def token_accuracy(pred, target, pad_id=0):\n"
                "    real = (target != pad_id).float()\n    return (real.sum() * 0 / 0).item()  # 0/0 in floating point: NaN\n"),
        "raise": ("rnn_step", "def rnn_step(cell, x, h, b_v=None):\n    return torch.tanh(x @ cell.W_hx.weight + h)  # shape error\n"),
        "loop": ("rnn_predict", "predicted_cell_params = 20608\nwhile True:\n    pass\n"),
    },
    "02_seq2seq_attention": {
        "wrong": ("seq2seq_dot", "def attend(query, keys, values):\n    w = torch.softmax((keys @ query[:, :, None])[:, :, 0], dim=-1)\n"
                  "    return (w[:, None, :] @ values)[:, 0], w  # forgot the 1/sqrt(D)\n"),
        "nan": ("seq2seq_entropy", "def attention_entropy(weights):\n    return -(weights * torch.log(weights)).sum(-1)  # 0 log 0: NaN\n"),
        "raise": ("seq2seq_additive", "def additive_scores(attn, query, keys):\n"
                  "    return attn.w(torch.tanh(attn.W_q(keys) + attn.W_k(query)))  # swapped: a shape error\n"),
        "loop": ("seq2seq_variance", "predicted_var_raw = 256\nwhile True:\n    pass\n"),
        "build": _from_solution("02_seq2seq_attention", "seq2seq_train_step",
                                "    optimizer.zero_grad()  # 1. forget the last step's gradients\n",
                                "    # no optimizer.zero_grad(): the gradients of the steps pile up\n"),
    },
    "03_self_attention": {
        "wrong": ("self_window", "def window_mask(n, radius):\n    i = torch.arange(n)\n"
                  "    return (i[:, None] - i[None, :]).abs() < radius  # off by one\n"),
        "nan": ("self_plain", "def plain_self_attention(X):\n    w = torch.softmax(X @ X.T / 0.0, dim=-1)  # inf - inf = NaN\n"
                "    return w @ X, w\n"),
        "raise": ("self_graph", "def edge_mask(n, edges):\n    mask = torch.eye(n, dtype=torch.bool)\n"
                  "    for a, b in edges:\n        mask[a, b, 0] = True  # IndexError\n    return mask\n"),
        "loop": ("self_pixels", "predicted_tokens = 64\nwhile True:\n    pass\n"),
    },
    "04_masking": {
        "wrong": ("masking_causal", "def my_causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).triu()  # transposed\n"),
        "nan": ("masking_softmax", "def masked_softmax(scores, mask):\n"
                "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)  # NaN on fully masked rows\n"),
        "raise": ("masking_left", "def left_real_token_mask(lengths, max_len):\n    return torch.arange(max_len)[lengths]  # IndexError\n"),
        "loop": ("masking_predict", "predicted_shape = (3, 1, 5, 5)\nwhile True:\n    pass\n"),
    },
    "05_multihead_attention": {
        "wrong": ("multihead_split", "def split_heads(x, num_heads):\n"
                  "    return rearrange(x, 'b n (d h) -> b h n d', h=num_heads)  # wrong column order\n"),
        "nan": ("multihead_one_head", "def one_head(x, w_q, w_k, w_v):\n"
                "    n = x.shape[0]\n    return torch.full((n, w_v.shape[1]), float('nan')), torch.full((n, n), float('nan'))\n"),
        "raise": ("multihead_params", "predicted_params_1_head = int('sixteen thousand')\n"),
        "loop": ("multihead_forward", "def multihead_forward(mha, x):\n    while True:\n        pass\n"),
        "build": _from_solution("05_multihead_attention", "multihead_module", "/ math.sqrt(q.shape[-1])",
                                "/ math.sqrt(query.shape[-1])  # scaled by sqrt(D), not sqrt(D_H)"),
    },
    "06_positional_encoding": {
        "wrong": ("pe_sinusoidal", "def my_sinusoidal(length, d_model, base=10000.0):\n"
                  "    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)\n"
                  "    angles = torch.arange(length, dtype=torch.float64)[:, None] * omega\n"
                  "    return torch.stack([angles.cos(), angles.sin()], -1).flatten(1).float()  # cos and sin swapped\n"),
        "nan": ("pe_similarity", "def pe_similarity(k, d_model, base=10000.0):\n    return float('nan')\n"),
        "raise": ("pe_rotation", "def shift_matrix(delta, d_model, base=10000.0):\n"
                  "    return torch.linalg.inv(torch.zeros(d_model, d_model))  # singular: raises\n"),
        "loop": ("pe_norm", "predicted_norm_squared = 8\nwhile True:\n    pass\n"),
    },
    "07_transformer": {
        "wrong": ("transformer_layernorm", "def my_layer_norm(x, weight, bias, eps=1e-5):\n    mu = x.mean(-1, keepdim=True)\n"
                  "    return weight * (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) + bias  # unbiased variance\n"),
        "nan": ("transformer_beam", "def beam_step(scores, logp):\n    B, k, V = logp.shape\n"
                "    new_scores, flat = (scores[..., None] + logp).reshape(B, k * V).topk(k, dim=-1)\n"
                "    return new_scores * float('nan'), flat // V, flat % V\n"),
        "raise": ("transformer_encoder", "def encoder_layer_forward(layer, x, mask=None):\n"
                  "    return layer.ffn(layer.self_attn(x, mask=mask))  # a tuple into a Linear: TypeError\n"),
        "loop": ("transformer_predict", "predicted_encoder_params = 3280\nwhile True:\n    pass\n"),
        "build": _from_solution("07_transformer", "transformer_decoder", "self.self_attn(h, mask=mask)[0]",
                                "self.self_attn(h)[0]  # no causal mask: every token sees the later ones"),
    },
    "08_vit_vs_cnn": {
        "wrong": ("vit_conv", "def linear_weight_from_conv(conv):\n"
                  "    return conv.weight.flatten(1)  # columns in (c p1 p2) order, not patchify's (p1 p2 c)\n"),
        "nan": ("vit_shift", "def flip_rate(classify, images, dx, dy=0):\n    return float('nan')\n"),
        "raise": ("vit_patchify", "def my_patchify(images, patch_size):\n"
                  "    return images.unfold(2, patch_size)  # unfold needs a step: TypeError\n"),
        "loop": ("vit_predict", "predicted_tokens = 64\nwhile True:\n    pass\n"),
    },
    "09_capstone_captioning": {
        "wrong": ("capstone_patches", "def object_patches(mask, patch_size):\n    H, W = mask.shape\n    p = patch_size\n"
                  "    return mask.reshape(H // p, p, W // p, p).any(3).any(1).T.flatten()  # column by column\n"),
        "nan": ("capstone_step", "def next_word_logits(model, images, prefix):\n"
                "    return torch.full((images.shape[0], model.config.vocab_size), float('nan'))\n"),
        "raise": ("capstone_greedy", "def greedy_caption(model, images, max_len, bos_id=1, eos_id=2, pad_id=0):\n"
                  "    return model.step(bos_id, model.start(images))[0]  # an int as prev: raises\n"),
        "loop": ("capstone_predict", "predicted_memory_shape = (5, 64, 32)\nwhile True:\n    pass\n"),
    },
    "10_language_model": {
        "wrong": ("lm_targets", "def shift_targets(ids, pad_id):\n    return ids[:, 1:], ids[:, :-1]  # swapped\n"),
        "nan": ("lm_bits", "def bits_per_char(nats_per_token, n_tokens, n_chars):\n    return float('nan')\n"),
        "raise": ("lm_merge", "def bpe_merge(ids, pair, new_id):\n    return ids[pair]  # a tuple as a list index: TypeError\n"),
        "loop": ("lm_sampling", "def sampling_probs(logits, temperature, k):\n    while True:\n        pass\n"),
        "build": _from_solution("10_language_model", "lm_gpt", "x = x + layer.ffn(layer.norm2(x))",
                                "x = layer.ffn(layer.norm2(x))  # no residual around the FFN"),
    },
    "11_positions_and_memory": {
        "wrong": ("rope_apply", "def my_rope(x, positions, base=10000.0):\n    d = x.shape[-1]\n"
                  "    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)\n"
                  "    a = positions.double()[:, None] * omega\n    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)\n"
                  "    e, o = x[..., 0::2], x[..., 1::2]\n"
                  "    return torch.stack([e * c + o * s, -e * s + o * c], -1).flatten(-2)  # turned the other way\n"),
        "nan": ("alibi_mask", "def my_alibi_mask(num_heads, n):\n    return torch.full((num_heads, n, n), float('nan'))\n"),
        "raise": ("gqa_heads", "def gqa_attention(q, k, v, mask=None):\n"
                  "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # 4 query heads, 2 key heads: raises\n"),
        "loop": ("kv_cache", "predicted_cache_bytes = 4294967296\nwhile True:\n    pass\n"),
    },
    "12_fast_attention": {
        "wrong": ("flash_skipped", "def skipped_tiles(n, block):\n    t = n // block\n"
                  "    return t * (t - 1) // 2  # floor: forgets the last, partial tile\n"),
        "nan": ("flash_update", "def update(m, l, acc, scores, v):\n    m_new = torch.maximum(m, scores.amax(-1))\n"
                "    rescale = torch.exp(m - m_new)  # -inf - (-inf) = NaN on rows that saw no key yet\n"
                "    p = torch.exp(scores - m_new[:, None])\n"
                "    return m_new, rescale * l + p.sum(-1), rescale[:, None] * acc + p @ v\n"),
        "raise": ("flash_merge", "def merge_partial(m1, l1, m2, l2):\n    return torch.maximum(m1, m2, l1)  # TypeError\n"),
        "loop": ("flash_recompute", "def recompute_weights(scores, lse):\n    while True:\n        pass\n"),
        "build": _from_solution("12_fast_attention", "flash_tiled",
                                "            s = s.masked_fill(keys > queries, float(\"-inf\"))  # causal\n",
                                "            # no causal mask inside the diagonal tiles\n"),
    },
    "13_attention_across_devices": {
        "wrong": ("dist_schedule", "def busy(world_size):\n    r = torch.arange(world_size)[:, None]\n"
                  "    t = torch.arange(world_size)[None, :]\n"
                  "    return t < r  # forgets step 0, each rank's own (diagonal) block\n"),
        "nan": ("dist_merge", "def ring_merge(m, l, acc, s, v):\n    nan = torch.full_like(m, float('nan'))\n"
                "    return nan, nan, acc * float('nan')\n"),
        "raise": ("dist_heads", "def qkv_shard(w_qkv, world_size, rank):\n"
                  "    return w_qkv.chunk(world_size, dim=2)[rank]  # no dim 2: IndexError\n"),
        "loop": ("dist_bytes", "def ring_forward_bytes(batch, heads, length, head_dim, world_size):\n"
                 "    while True:\n        pass\n"),
    },
}


def cells(chapter):
    return nbformat.read(course.NOTEBOOKS / f"{chapter}.ipynb", as_version=4).cells


def book_cells(chapter):
    """The chapter as the book reads it: the stored plain-Markdown exercises turned into
    sphinx-exercise's directives by book/_ext/exercise_markdown.py (tests/test_notebook_rendering.py
    checks the stored form)."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import exercise_markdown

    data = nbformat.read(course.NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
    return exercise_markdown.to_myst(data, exercise_markdown.book_url(exercise_markdown.read_config(ROOT)))["cells"]


def source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


# --- the exercises' format (no nbgrader needed) ---------------------------------------------

def test_the_chapters_with_exercises():
    assert {"01_rnn_captioning", "02_seq2seq_attention", "03_self_attention", "04_masking",
            "05_multihead_attention", "06_positional_encoding"} <= set(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercise_format(chapter):
    cs = book_cells(chapter)
    text = [source(c) for c in cs]
    labels = [m for t in text for m in re.findall(r"```\{exercise\}.*\n:label: (\S+)", t)]
    assert 3 <= len(labels) <= 6, f"{chapter}: {len(labels)} exercises, expected 3 to 6"
    heading = next(i for i, t in enumerate(text) if re.search(r"^## Exercises$", t, re.M))
    assert all(i > heading for i, t in enumerate(text) if "{exercise}" in t), "exercises sit under '## Exercises'"
    setup = next(c for c in cs[heading:] if c["cell_type"] == "code")
    assert not meta(setup) and "import" in source(setup), "the section opens with a cell that imports what it uses"
    assert any("parameters" in c["metadata"].get("tags", []) for c in cs[:heading]), "grading keeps the parameters cell"
    starts = [re.search(r"\{solution-start\} (\S+)\n:class: dropdown", t) for t in text if "{solution-start}" in t]
    assert all(starts) and sorted(m.group(1) for m in starts) == sorted(labels), "one dropdown solution per exercise"
    assert sum("{solution-end}" in t for t in text) == len(starts)
    ids = [meta(c)["grade_id"] for c in cs if meta(c)]
    assert len(ids) == len(set(ids)), "grade_ids must be unique"
    for i, c in enumerate(cs):
        m, t = meta(c), source(c)
        if "BEGIN SOLUTION" in t:
            assert m.get("solution"), f"{chapter} cell {i}: a solution region outside a solution cell"
            mark = "#" if c["cell_type"] == "code" else "%"
            assert f"{mark} BEGIN SOLUTION" in t and f"{mark} END SOLUTION" in t
        if "BEGIN HIDDEN TESTS" in t:
            assert m.get("grade") and not m.get("solution"), f"{chapter} cell {i}: hidden tests outside a test cell"
            assert "### BEGIN HIDDEN TESTS" in t and "### END HIDDEN TESTS" in t
        if m.get("solution") and c["cell_type"] == "code":
            assert "BEGIN SOLUTION" in t, f"{chapter} cell {i}: solution cells mark their solution region"
        if m.get("grade") and c["cell_type"] == "code":
            assert m["points"] > 0 and m["grade_id"].endswith("_check") and m.get("locked")
            solution_id = m["grade_id"].removesuffix("_check")
            assert solution_id in ids[: ids.index(m["grade_id"])], f"{m['grade_id']} follows its solution cell"
    assert len(course.graded_cells(chapter)) >= 4, "four graded cells: one per planted mistake in the CI test"


# --- autograding, end to end ----------------------------------------------------------------

# Two planted submissions per chapter, so that each has right answers next to its mistakes, and
# a third for the chapters with a "build" plant (chapters 2, 5, 7 and 10).
PLANTED = {"planted-a": ("wrong", "raise"), "planted-b": ("nan", "loop"), "planted-c": ("build",)}
KINDS = ("wrong", "raise", "nan", "loop")  # every chapter plants these
BUILD_CHAPTERS = ("02_seq2seq_attention", "05_multihead_attention", "07_transformer", "10_language_model",
                  "12_fast_attention")


def planted_kinds(chapter, who):
    """The mistakes planted in ``who``'s submission of ``chapter`` (none: no submission)."""
    return tuple(k for k in PLANTED[who] if k in PLANTS[chapter])


def plant(chapter, instructor: Path, dest: Path, kinds):
    nb = nbformat.read(instructor, as_version=4)
    by_id = {meta(c).get("grade_id"): c for c in nb["cells"] if meta(c)}
    for solution_id, code in (PLANTS[chapter][kind] for kind in kinds):
        assert meta(by_id[solution_id]).get("solution"), solution_id
        by_id[solution_id]["source"] = code
    nbformat.write(nb, dest)


@pytest.fixture(scope="module")
def grades(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("homework")
    subs = tmp / "submissions"
    for who in ("instructor", "untouched", *PLANTED):
        (subs / who).mkdir(parents=True)
    course.generate_student_notebooks(CHAPTERS, subs / "untouched", tmp / "generate")
    for ch in CHAPTERS:
        (subs / "instructor" / f"{ch}.ipynb").write_text((course.NOTEBOOKS / f"{ch}.ipynb").read_text(encoding="utf-8"), encoding="utf-8")
        for who in PLANTED:
            if planted_kinds(ch, who):
                plant(ch, course.NOTEBOOKS / f"{ch}.ipynb", subs / who / f"{ch}.ipynb", planted_kinds(ch, who))
    out = tmp / "grades.csv"
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--timeout", "10", "--jobs", "2"],
                         capture_output=True, text=True, timeout=1800, encoding="utf-8")
    seconds = time.perf_counter() - t0
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"autograded {len(CHAPTERS)} chapters x {2 + len(PLANTED)} submissions in {seconds:.0f} s")
    with open(out, encoding="utf-8") as f:
        scores = {(r["student"], r["chapter"], r["cell"]): (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)}
    return scores, None


def test_every_chapter_with_exercises_has_planted_mistakes():
    assert sorted(PLANTS) == CHAPTERS, "add the new chapter's planted mistakes to PLANTS"
    for chapter, plants in PLANTS.items():
        assert set(KINDS) <= set(plants) <= {*KINDS, "build"}, chapter
    assert sorted(ch for ch in PLANTS if "build" in PLANTS[ch]) == sorted(BUILD_CHAPTERS)


def test_every_part_of_the_book_has_an_exercise_that_builds():
    """Issue 15: each part (RNNs to attention, attention as a layer, Transformers, the capstone)
    has a graded exercise rated ★★★ that assembles a model or a training step, and every
    exercise carries its difficulty, one to three stars."""
    parts = {"02_seq2seq_attention": ("01", "02"), "05_multihead_attention": ("03", "04", "05", "06"),
             "07_transformer": ("07", "08"), "09_capstone_captioning": ("09",),
             "10_language_model": ("10", "11", "12")}
    for part in parts.values():
        built = [ch for ch in CHAPTERS if ch[:2] in part and any(
            "(★★★, " in source(c) and "points)" in source(c) for c in cells(ch))]
        assert built, f"no ★★★ graded exercise in chapters {part}"
    for ch in CHAPTERS:
        for c in cells(ch):
            if c["metadata"].get("exercise", {}).get("label"):
                assert re.search(r"\((★{1,3}), (\d+ points|ungraded;)", source(c)), (ch, source(c)[:80])
    for chapter in BUILD_CHAPTERS:  # the planted wrong assembly targets a ★★★ exercise
        cs = cells(chapter)
        answer = next(i for i, c in enumerate(cs) if meta(c).get("grade_id") == PLANTS[chapter]["build"][0])
        exercise = next(source(c) for c in reversed(cs[:answer]) if c["metadata"].get("exercise", {}).get("label"))
        assert "(★★★, " in exercise, exercise[:80]


@needs_nbgrader
@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_instructor_notebook_gets_full_marks(grades, chapter):
    grades, _ = grades
    for cell, points in course.graded_cells(chapter).items():
        assert grades["instructor", chapter, cell] == (points, points), cell
    total = sum(course.graded_cells(chapter).values())
    assert grades["instructor", chapter, "TOTAL"] == (total, total)


@needs_nbgrader
@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_untouched_student_notebook_gets_zero(grades, chapter):
    grades, _ = grades
    for cell, points in course.graded_cells(chapter).items():
        assert grades["untouched", chapter, cell] == (0, points), cell


@needs_nbgrader
@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_planted_mistake_costs_its_own_cell_only(grades, chapter):
    grades, _ = grades
    assert sorted(k for who in PLANTED for k in planted_kinds(chapter, who)) == sorted(PLANTS[chapter])
    points = course.graded_cells(chapter)
    for who in PLANTED:
        kinds = planted_kinds(chapter, who)
        if not kinds:
            continue
        planted = {f"{PLANTS[chapter][kind][0]}_check": kind for kind in kinds}
        assert len(planted) == len(kinds) < len(points), "each planted submission keeps right answers"
        for cell, pts in points.items():
            expected = 0 if cell in planted else pts
            assert grades[who, chapter, cell] == (expected, pts), f"{who}: {cell} ({planted.get(cell, 'right answer')})"
        total = sum(points.values())
        assert grades[who, chapter, "TOTAL"] == (total - sum(points[c] for c in planted), total)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_grading_runs_the_exercises_not_the_chapter(chapter):
    """The grader runs the parameters cell and the Exercises section, nothing before it: the
    chapter's training would cost a minute per student, and the section imports all it uses."""
    from teaching.exercises import read_chapter

    graded = read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb")
    cs = cells(chapter)
    heading = next(i for i, c in enumerate(cs) if c["cell_type"] == "markdown" and re.search(r"^## Exercises$", source(c), re.M))
    before = {source(c) for c in cs[:heading] if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", [])}
    runs = [graded.setup_source, *[s for e in graded.exercises for s in (*e.context, e.instructor_answer, e.check_source)]]
    assert not before & set(runs), "no cell of the chapter before the Exercises section runs when grading"
    assert [e.check_id for e in graded.exercises] == list(course.graded_cells(chapter))


# --- the student edition of the book --------------------------------------------------------

def regions(text, begin, end):
    """The lines strictly between each ``begin`` line and its ``end`` line."""
    out, inside = [], False
    for line in text.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside:
            out.append(line)
    return out


def normalise(text):
    return " ".join(text.split())


def fragments(line, markdown):
    """What a leaked line would look like in the built HTML: a code line as it is; prose
    without its math and markup (runs of plain words, which survive rendering)."""
    if not markdown:
        return [normalise(line)] if len(line.strip()) >= 12 else []
    plain = re.sub(r"\$[^$]*\$|`[^`]*`|[*_{}\\]", "|", line)
    return [normalise(run) for run in plain.split("|") if len(run.strip()) >= 20]


def secrets(chapter):
    """Every solution body and hidden test of a chapter's instructor notebook, as fragments (less
    the lines that also appear outside the solutions, e.g. an import another page shows too)."""
    src = ROOT / "_build" / "student-book" / "src"  # what the student book is built from: fair game
    visible = "\n".join([source(c) for nb in sorted((src / "notebooks").glob("*.ipynb"))
                         for c in nbformat.read(nb, as_version=4).cells]
                        + [page.read_text(encoding="utf-8") for page in sorted(src.rglob("*.md"))])
    found = set()
    for c in cells(chapter):
        text, markdown = source(c), c["cell_type"] == "markdown"
        lines = regions(text, "BEGIN SOLUTION", "END SOLUTION") + regions(text, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
        for line in lines:
            found.update(f for f in fragments(line, markdown) if f not in normalise(visible))
    return found


def site_text(html_dir: Path) -> str:
    """All the text of a built site: HTML without its tags (syntax highlighting splits code
    into spans), and every other text file (search index, scripts) as it is."""
    parts = []
    for path in html_dir.rglob("*"):
        if not path.is_file() or path.suffix in {".png", ".jpg", ".svg", ".woff", ".woff2", ".ttf", ".eot", ".ico"}:
            continue
        raw = path.read_bytes().decode("utf-8", errors="ignore")
        parts.append(html.unescape(re.sub(r"<[^>]+>", "", raw)) if path.suffix == ".html" else raw)
    return normalise("\n".join(parts))


@pytest.fixture(scope="module")
def student_book():
    out = ROOT / "_build" / "student-book"
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "student_book.py"), "--out", str(out), "-W"],
                         capture_output=True, text=True, timeout=1800, encoding="utf-8")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(f"student book built in {time.perf_counter() - t0:.0f} s")
    return out / "_build" / "html"


@needs_nbgrader
@pytest.mark.slow
def test_student_book_leaks_no_solution_and_no_hidden_test(student_book):
    assert not (student_book / "_sources").exists(), "html_copy_source must be off"
    assert not list(student_book.rglob("*.ipynb")), "no notebook downloads"
    text = site_text(student_book)
    assert "download" not in text.lower() or "btn-download" not in text, "no download button"
    for chapter in CHAPTERS:
        page = (student_book / "notebooks" / f"{chapter}.html").read_text(encoding="utf-8")
        assert "YOUR CODE HERE" not in page and "BEGIN SOLUTION" not in page and "HIDDEN TESTS" not in page
        # the search sees code: every exercise's visible check is on the page
        for c in cells(chapter):
            if meta(c).get("grade") and c["cell_type"] == "code":
                first = normalise(source(c).splitlines()[-1])
                assert first in text, f"{chapter}: the visible check {first!r} should be in the student book"
        leaks = sorted(s for s in secrets(chapter) if s in text)
        assert not leaks, f"{chapter}: solutions or hidden tests leak into the student book: {leaks[:5]}"
        assert len(secrets(chapter)) >= 20, f"{chapter}: too few secrets found; is the grep looking at the right text?"


def test_leak_grep_sees_through_syntax_highlighting(tmp_path):
    (tmp_path / "page.html").write_text('<pre><span class="n">weights</span> <span class="o">=</span> '
                                        '<span class="n">torch</span><span class="o">.</span>softmax(x &amp; y)</pre>', encoding="utf-8")
    assert "weights = torch.softmax(x & y)" in site_text(tmp_path)
    assert fragments("a blocked weight falls like $e^{-c}$ but never reaches 0 while it is representable", True) == [
        "a blocked weight falls like", "but never reaches 0 while it is representable"]


@needs_nbgrader
@pytest.mark.slow
def test_leak_grep_finds_the_solutions_in_the_instructor_edition(student_book, tmp_path):
    """The control: the same grep on the instructor notebook rendered to HTML finds its secrets."""
    chapter = "04_masking"
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(course.NOTEBOOKS / f"{chapter}.ipynb"),
                    "--output-dir", str(tmp_path)], check=True, capture_output=True)
    text = site_text(tmp_path)
    found = [s for s in secrets(chapter) if s in text]
    assert len(found) >= 0.9 * len(secrets(chapter)), sorted(set(secrets(chapter)) - set(found))[:10]
