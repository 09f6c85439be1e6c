"""The exercises that build (issue 15): a training step (chapter 2), a multi-head attention
module (chapter 5) and a decoder layer (chapter 7). Their check cells, hidden tests included,
pass the instructor's solution and fail each of the mistakes a student is likely to make,
run here in-process (the grader runs the same check on the values its sandbox sends back;
tests/test_teaching.py grades one planted mistake per exercise end to end)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching.exercises import read_chapter  # noqa: E402

# (chapter, answer grade_id) -> [(text of the solution, what a mistaken student writes, the mistake)]
MISTAKES = {
    ("02_seq2seq_attention", "seq2seq_train_step"): [
        ("    optimizer.zero_grad()  #", "    pass  #", "no zero_grad: the gradients pile up"),
        ("    optimizer.step()  #", "    pass  #", "no optimizer step"),
        ("clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), 1e9)",
         "no clipping"),
        ("    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # 5. clip\n"
         "    optimizer.step()",
         "    optimizer.step()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
         "clipping after the step"),
        ("sequence_loss(logits, tgt[:, 1:])",
         "torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())",
         "the padding counted in the loss"),
        ("    loss.backward()  #", "    (2 * loss).backward()  #", "a gradient of the wrong loss"),
        ("clip_grad_norm_(model.parameters(), max_norm)",
         "clip_grad_value_(model.parameters(), max_norm)", "clipping each value, not the norm"),
    ],
    ("05_multihead_attention", "multihead_module"): [
        ("/ math.sqrt(q.shape[-1])", "/ math.sqrt(query.shape[-1])", "scaled by sqrt(D), not sqrt(D_H)"),
        ("v = rearrange(self.w_v(value)", "v = rearrange(self.w_v(key)", "the keys as values"),
        ("scores.masked_fill(~mask,", "scores.masked_fill(mask,", "PyTorch's mask convention"),
        ("mine.bias.copy_(b)", "pass", "biases not copied"),
        ("w_q, w_k, w_v = mha.in_proj_weight.chunk(3)", "w_k, w_q, w_v = mha.in_proj_weight.chunk(3)",
         "W^Q and W^K swapped"),
        ("mine.weight.copy_(w)", "mine.weight.copy_(w.T)", "weights transposed"),
        ('"b h n d -> b n (h d)"', '"b h n d -> b n (d h)"', "heads merged in the wrong order"),
        ("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)", "softmax over the queries"),
    ],
    ("07_transformer", "transformer_decoder"): [
        ("self.self_attn(h, mask=mask)[0]", "self.self_attn(h)[0]", "no causal mask"),
        ("self.cross_attn(h, memory, memory, mask=memory_mask)[0]", "self.cross_attn(h, memory, memory)[0]",
         "the memory's padding ignored"),
        ("self.cross_attn(h, memory, memory, mask=memory_mask)[0]",
         "self.self_attn(h, memory, memory, mask=memory_mask)[0]", "cross-attention with the wrong weights"),
        ("y = y + block(norm(y))", "y = norm(y + block(y))", "pre-norm written as post-norm"),
        ("y = norm(y + block(y))", "y = y + block(norm(y))", "post-norm written as pre-norm"),
        ("torch.relu(self.linear1(h))", "torch.nn.functional.gelu(self.linear1(h))", "GELU, not ReLU"),
        ("causal_mask(y.shape[1], device=y.device)", "causal_mask(y.shape[1], device=y.device).T",
         "the mask transposed: tokens see the future"),
    ],
}


def chapter_parts(chapter: str, answer_id: str):
    ch = read_chapter(ROOT / "notebooks" / f"{chapter}.ipynb")
    ex = next(e for e in ch.exercises if e.answer_id == answer_id)
    return ch.parameters_source, ch.setup_source, ex


def run(chapter: str, answer_id: str, answer: str) -> None:
    params, setup, ex = chapter_parts(chapter, answer_id)
    ns: dict = {"__name__": "__exercise__"}
    for src in (params, setup, *ex.context, answer, ex.check_source):
        exec(compile(src, f"<{chapter}>", "exec"), ns)  # noqa: S102 (the course's own cells)


@pytest.mark.parametrize("key", list(MISTAKES), ids=lambda k: k[1])
def test_the_instructor_solution_passes(key, capsys):
    run(*key, chapter_parts(*key)[2].instructor_answer)
    assert "correct" in capsys.readouterr().out


CASES = [(key, old, new, why) for key, mistakes in MISTAKES.items() for old, new, why in mistakes]


@pytest.mark.parametrize(("key", "old", "new", "why"), CASES, ids=[f"{c[0][1]}: {c[3]}" for c in CASES])
def test_a_mistake_fails_the_check(key, old, new, why):
    answer = chapter_parts(*key)[2].instructor_answer
    assert answer.count(old) == 1, f"{old!r} should occur once in the solution of {key[1]}"
    with pytest.raises(Exception):  # noqa: B017 (any error, as in the grader, scores 0)
        run(*key, answer.replace(old, new))


def test_the_build_exercises_are_graded_and_rated_three_stars():
    for chapter, answer_id in MISTAKES:
        _, _, ex = chapter_parts(chapter, answer_id)
        assert ex.points == 4 and ex.not_allowed, answer_id
        nb = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
        texts = [c.source for c in nb.cells if "label" in c.metadata.get("exercise", {})]
        assert texts[-1].startswith("**Exercise 6: ") and "(★★★, 4 points)" in texts[-1], chapter
