"""The grader's parts, fast: the exercises read from the instructor notebooks, the companion
copies in which the functions an exercise asks for are not allowed, and the names an answer binds."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from teaching import course  # noqa: E402
from teaching.exercises import bound_names, read_chapter  # noqa: E402
from teaching.sandbox import prepare_course_dir  # noqa: E402

CHAPTERS = course.chapters_with_exercises()


def test_bound_names():
    src = "def f(x):\n    y = 1\na, (b, c) = 1, (2, 3)\nimport numpy as np\nclass K:\n    z = 2\nn: int = 3\n"
    assert bound_names(src) == ("f", "a", "b", "c", "np", "K", "n")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_graded_check_has_its_answer_and_names(chapter):
    ch = read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb")
    assert [e.check_id for e in ch.exercises] == list(course.graded_cells(chapter))
    assert ch.setup_source.lstrip().startswith(("#", "import", "from"))
    for ex in ch.exercises:
        assert ex.names, f"{ex.answer_id} defines no name for its check to use"
        assert ex.check_id == f"{ex.answer_id}_check"
        assert any(name in ex.check_source for name in ex.names), f"{ex.check_id} uses none of {ex.names}"


PROBE = """
import importlib, inspect, sys
for copy, names in CASES:
    for mod in [m for m in sys.modules if m == "companion" or m.startswith("companion.")]:
        del sys.modules[mod]
    sys.path.insert(0, copy)
    import companion
    assert companion.__file__.startswith(copy), companion.__file__
    for dotted in names:
        parts = dotted.split(".")
        for k in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
                break
            except ImportError:
                continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        src = inspect.getsource(obj)
        assert "not allowed in this exercise" in src and src.count(chr(10)) <= 3, src
    sys.path.remove(copy)
print("ok")
"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_not_allowed_names_exist_and_have_no_body_in_the_exercise_copy(chapter, tmp_path):
    ch = read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb")
    cases = []
    for i, ex in enumerate(ch.exercises):
        ours = [n for n in ex.not_allowed if n.startswith("companion.")]
        if ours:
            cases.append((str(prepare_course_dir(tmp_path / f"c{i}", tuple(ours))), ours))
    run = subprocess.run([sys.executable, "-I", "-c", f"CASES = {cases!r}\n{PROBE}"], capture_output=True, text=True, encoding="utf-8")
    assert run.stdout.strip() == "ok", run.stderr[-2000:]


def test_torch_names_are_real():
    import importlib

    for chapter in CHAPTERS:
        for ex in read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb").exercises:
            for dotted in ex.not_allowed:
                if dotted.startswith("torch."):
                    dotted = dotted.partition("(")[0]  # an argument rule: f(arg=True)
                    module, _, attr = dotted.rpartition(".")
                    assert hasattr(importlib.import_module(module), attr), dotted


def _dies_for_mallory(task):
    """A grading task whose worker dies (as one killed for memory would) for the student mallory."""
    import os

    if task[0] == "mallory":
        os._exit(9)
    return [{"student": task[0], "cell": "TOTAL", "score": 1.0, "status": "passed"}]


def _failed(task, why):
    return [{"student": task[0], "cell": "TOTAL", "score": 0.0, "status": why}]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_worker_that_dies_costs_only_its_own_submission(jobs):
    from teaching.autograde import run_tasks

    tasks = [(s,) for s in ("alice", "bob", "mallory", "carol", "dave")]
    rows = [r for rs in run_tasks(tasks, jobs, _dies_for_mallory, _failed) for r in rs]
    assert [r["student"] for r in rows] == ["alice", "bob", "mallory", "carol", "dave"]
    assert {r["student"]: r["score"] for r in rows} == {"alice": 1.0, "bob": 1.0, "mallory": 0.0, "carol": 1.0,
                                                        "dave": 1.0}
    assert "grader error" in rows[2]["status"] and "died twice" in rows[2]["status"]


def _message(header, body: bytes) -> bytes:
    import json
    import struct

    h = json.dumps(header).encode()
    return struct.pack(">Q", len(h)) + h + body


def test_a_reply_cannot_amplify_shared_bytes():
    """A reply whose tensors all point at the same bytes would need copies * bytes to decode."""
    from teaching import wire

    mb = 2**20
    node = {"$": "tensor", "dtype": "uint8", "shape": [mb], "offset": 0, "nbytes": mb}
    with pytest.raises(wire.WireError, match="overlap|order|unused"):
        wire.decode(_message({"$": "tuple", "v": [node] * 1000}, bytes(mb)))
    with pytest.raises(wire.WireError):  # bytes no tensor uses
        wire.decode(_message(node, bytes(2 * mb)))
    with pytest.raises(wire.WireError, match="header"):  # a header too large to decode safely
        wire.decode(_message([[] for _ in range(wire.MAX_HEADER // 2)], b""))


def test_honest_replies_round_trip():
    import torch

    from teaching import wire

    value = {"a": (torch.arange(6.0).reshape(2, 3), [torch.ones(2, dtype=torch.bool), torch.empty(0)]),
             "b": [1, 2.5, float("nan"), "x", None, torch.Size([2, 3]), torch.float16, 2**70, 1 + 2j],
             "c": torch.arange(4, dtype=torch.int64)[::2]}
    back = wire.decode(wire.encode(value))
    assert torch.equal(back["a"][0], value["a"][0]) and torch.equal(back["a"][1][0], value["a"][1][0])
    assert torch.equal(back["c"], torch.tensor([0, 2])) and back["b"][5] == torch.Size([2, 3])
    assert back["b"][7] == 2**70 and back["b"][8] == 1 + 2j and back["b"][2] != back["b"][2]


KERNEL_PROBE = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
runner.refuse_kernels(torch, sys.argv[2:])
q, w, b = torch.randn(2, 3, 4), torch.randn(12, 4), torch.randn(12)
calls = {
    "torch._native_multi_head_attention": lambda: torch._native_multi_head_attention(q, q, q, 4, 2, w, b, w[:4], b[:4]),
    "torch.ops.aten._native_multi_head_attention":
        lambda: torch.ops.aten._native_multi_head_attention(q, q, q, 4, 2, w, b, w[:4], b[:4]),
    "torch._C._nn.scaled_dot_product_attention": lambda: torch._C._nn.scaled_dot_product_attention(q, q, q),
    "torch.ops.aten._scaled_dot_product_attention_math": lambda: torch.ops.aten._scaled_dot_product_attention_math(q, q, q),
    "torch.ops.aten.native_layer_norm": lambda: torch.ops.aten.native_layer_norm(q, [4], None, None, 1e-5),
    "torch.nn.LayerNorm": lambda: torch.nn.LayerNorm(4)(q),
}
for name, call in calls.items():
    try:
        call()
        print(name, "ran")
    except RuntimeError as err:
        print(name, "refused" if "not allowed in this exercise" in str(err) else "failed")
assert (q @ q.transpose(1, 2)).softmax(-1).shape == (2, 3, 3)  # the plain operations still work
"""


def test_not_allowed_kernels_are_refused_under_their_aliases():
    from teaching.sandbox import RUNNER

    names = ["torch._native_multi_head_attention", "torch.nn.functional.scaled_dot_product_attention",
             "torch.nn.functional.layer_norm", "torch.layer_norm"]
    run = subprocess.run([sys.executable, "-c", KERNEL_PROBE, str(RUNNER), *names], capture_output=True, text=True, encoding="utf-8")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines and all(line.endswith("refused") for line in lines), run.stdout
    run = subprocess.run([sys.executable, "-c", KERNEL_PROBE, str(RUNNER)], capture_output=True, text=True, encoding="utf-8")
    assert all(line.endswith("ran") for line in run.stdout.splitlines()), run.stdout  # not refused by default
