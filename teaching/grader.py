"""Grade one submission of one chapter: the checks run here, the student's code in sandboxes.

One sandbox (:mod:`teaching.sandbox`) per submission imports torch once; for each graded
exercise (in the instructor notebook's order):

1. a fresh process in it runs the chapter's parameters and setup cells, the student's earlier
   answers that ran, and this exercise's answer, each cell within its own deadline, with the
   companion functions the exercise asks the student to write replaced by "not allowed" stubs;
2. here, in the grader's own process, which never executes student code, the instructor's
   check cell runs (hidden tests included) with the real ``companion.checks``; the names the
   answer defines are stand-ins: data values sent over as data, functions as
   :class:`~teaching.sandbox.Remote` objects that call into the sandbox and bring back data;
3. the exercise scores its points if the check ran to the end, else 0 with the reason; then
   that process and everything it left are gone. A sandbox that was killed (a time limit, its
   memory) costs only the exercise it was killed in: the next one gets a new sandbox.

Before each check, torch's global generator is seeded with :data:`CHECK_SEED`: a check's
fixed inputs do not depend on which students or checks ran before it in the same worker.

The student's id (the name of their folder) goes into the parameters cell as ``student_id``,
so exercises with per-student variants check each student's own numbers.
"""

from __future__ import annotations

import ast
import contextlib
import io
import resource
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .exercises import Chapter, Exercise, answer_sources
from .sandbox import AnswerError, Limits, NotConfined, Remote, Sandbox, landlock_wanted, prepare_course_dir, remote_value
from .stubbing import exercise_rule

CHECK_SEED = 0  # torch's global generator is seeded with it before each check runs
# While a check runs, the grader's process may map at most this much more memory than it had
# (RLIMIT_AS, soft limit): a check whose arithmetic on a student's value runs away (an N x N
# broadcast) fails with a MemoryError, which is that student's error row, not the grader's end.
CHECK_MEMORY_BYTES = 4 * 2**30


def _mapped_bytes() -> int:
    """The address space this process maps now (``VmSize``), 0 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def memory_limit(extra: int = CHECK_MEMORY_BYTES):
    """The soft RLIMIT_AS of this process at what it maps now plus ``extra``, restored after."""
    mapped = _mapped_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if not mapped:
        yield
        return
    limit = mapped + extra if hard == resource.RLIM_INFINITY else min(mapped + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@dataclass
class Result:
    cell: str  # the check cell's grade_id
    score: float
    max_score: float
    status: str  # "passed", or why not
    flags: str = ""  # evidence for the instructor (fused torch kernels, torch modules): see sandbox_runner.Evidence


def parameters_source(chapter: Chapter, student_id: str, seed: int | None = None) -> str:
    """The chapter's parameters cell with the student's id (and a seed) set after it, as papermill does."""
    lines = [chapter.parameters_source, "", "# injected by the grader", f"student_id = {student_id!r}"]
    if seed is not None:
        lines.append(f"seed = {int(seed)!r}")
    return "\n".join(lines)


def setup_imports(source: str) -> tuple[str, ...]:
    """The modules the setup cells import, other than the companion (which each exercise imports
    from its own copy): the sandbox imports them once, before any exercise."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    found = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        found += [n for n in names if n.split(".")[0] != "companion" and n not in found]
    return tuple(found)


def flag_text(box: Sandbox | None) -> str:
    """The CSV's ``flags`` for one exercise: what the sandbox's evidence log saw, or nothing."""
    return "; ".join(box.flags) if box is not None else ""


class Grader:
    """Grades submissions of one chapter; holds the prepared companion copies, reused across students."""

    def __init__(self, chapter: Chapter, workdir: Path, hidden: list[Path], limits: Limits | None = None,
                 isolate: bool = True):
        self.chapter, self.workdir, self.hidden, self.isolate = chapter, workdir, hidden, isolate
        self.limits = limits or Limits()
        self.preload = setup_imports(chapter.setup_source)
        self.course_dirs = {}
        # every copy in one sandbox only where Landlock keeps each exercise to its own (or there
        # is no sandbox: then nothing is out of reach anyway)
        self.shared = not isolate or landlock_wanted()
        for ex in chapter.exercises:
            key = exercise_rule(chapter, ex)  # teaching/stubbing.py: what this exercise's companion lacks
            if key not in self.course_dirs:
                self.course_dirs[key] = prepare_course_dir(workdir / f"course-{len(self.course_dirs)}", *key)

    def course_dir(self, ex: Exercise) -> Path:
        return self.course_dirs[exercise_rule(self.chapter, ex)]

    def course_index(self, ex: Exercise) -> int:
        """Which of the sandbox's companion copies (``/course/i``) the exercise sees."""
        return list(self.course_dirs.values()).index(self.course_dir(ex))

    def grade(self, submission: Path, student_id: str) -> list[Result]:
        """One :class:`Result` per graded exercise of the chapter, whatever the submission does."""
        chapter = self.chapter
        try:
            answers = answer_sources(submission, chapter)
        except ValueError as err:
            return [Result(e.check_id, 0.0, e.points, f"unreadable submission: {err}") for e in chapter.exercises]
        params = parameters_source(chapter, student_id)
        trusted = {"__name__": "__check__"}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(params, "<parameters>", "exec"), trusted)  # noqa: S102 (instructor code)
            exec(compile(chapter.setup_source, "<setup>", "exec"), trusted)  # noqa: S102
        results, ran = [], []
        # one budget for the student's answer cells of the whole chapter, replays included
        total = self.limits.seconds * self.limits.chapter_factor * len(chapter.exercises)
        left = total
        with tempfile.TemporaryDirectory(dir=self.workdir, prefix="run-") as tmp:
            box, box_key = None, None
            try:
                for ex in chapter.exercises:
                    if ex.answer_id not in answers:
                        results.append(Result(ex.check_id, 0.0, ex.points,
                                              f"no answer cell {ex.answer_id!r} in the submission"))
                        continue
                    if left <= 0:
                        results.append(Result(ex.check_id, 0.0, ex.points,
                                              f"your code: time limit: your answer cells in this chapter, replayed "
                                              f"ones included, took more than {total:g} s in all (the sum of their "
                                              f"limits); this exercise was not run"))
                        continue
                    # Landlock: one sandbox with every copy, each exercise confined to its own;
                    # else one sandbox per copy, which mounts that copy only
                    key = None if self.shared else self.course_index(ex)
                    if box is None or box.dead or box_key != key:  # the first exercise, a killed one, another copy
                        if box is not None:
                            box.close()
                        box = None
                        try:
                            box = self._sandbox(ex, Path(tmp))
                        except AnswerError as err:
                            results.append(Result(ex.check_id, 0.0, ex.points, f"your code: {err}"[:800]))
                            continue
                        key = None if self.shared else self.course_index(ex)
                        box_key = key
                    index = self.course_index(ex) if key is None else 0
                    box.budget, box.budget_total = left, total
                    result, answer_ran = self._grade_one(box, ex, answers, ran, params, trusted, index)
                    left = box.budget
                    results.append(result)
                    if answer_ran:
                        ran.append(ex.answer_id)
            finally:
                if box is not None:
                    box.close()
        return results

    def _sandbox(self, ex: Exercise, tmp: Path) -> Sandbox:
        """A sandbox for ``ex``: every copy (Landlock confines each exercise to its own), or
        only ``ex``'s copy where Landlock is not there (:func:`teaching.sandbox.landlock_wanted`)."""
        if self.shared:
            try:
                return Sandbox(list(self.course_dirs.values()), self.hidden, self.limits, self.isolate, tmp,
                               self.preload, landlock=True)
            except NotConfined:
                self.shared = False  # from now on: one copy per sandbox
        return Sandbox([self.course_dir(ex)], self.hidden, self.limits, self.isolate, tmp, self.preload,
                       landlock=landlock_wanted())

    def _context(self, ex: Exercise, answers: dict, ran: list) -> list[tuple[str, str]]:
        """The cells the sandbox runs before ``ex``'s answer: for each exercise up to it, the
        instructor's context cells and, for the earlier ones, the student's answer if it ran."""
        cells = []
        for other in self.chapter.exercises:
            cells += [(f"context of {other.answer_id}", src) for src in other.context]
            if other is ex:
                return cells
            if other.answer_id in ran:
                cells.append((f"answer {other.answer_id}", answers[other.answer_id]))
        raise ValueError(f"{ex.answer_id} is not an exercise of {self.chapter.name}")

    def _grade_one(self, box: Sandbox, ex: Exercise, answers: dict, ran: list, params: str,
                   trusted: dict, index: int | None = None) -> tuple[Result, bool]:
        """The result of one exercise, and whether its answer cell ran without an error (then
        the later exercises' processes run it too, before their own answer, each time within the
        answer's own time limit)."""
        job = {
            "context_cells": [("parameters", params), ("setup", self.chapter.setup_source),
                              *self._context(ex, answers, ran)],
            "answer_id": ex.answer_id,
            "answer_source": answers[ex.answer_id],
            "names": list(ex.names),
            "torch_not_allowed": [n for n in ex.not_allowed if n.startswith("torch.")],
        }
        answer_error = ""
        try:
            first = box.start(job, self.course_index(ex) if index is None else index)
            if not first["ok"]:
                answer_error = f"the answer cell raised {first.get('error', '')}; "
            names = first.get("names")
            namespace = dict(trusted)
            for name in ex.names:
                encoded = names.get(name, ("missing",)) if isinstance(names, dict) else ("missing",)
                if encoded == ("callable",):
                    namespace[name] = Remote(box, {"name": name}, name)
                elif encoded == ("missing",) or not isinstance(encoded, tuple):
                    namespace.pop(name, None)  # the check then fails with a NameError naming it
                else:
                    namespace[name] = remote_value(box, encoded, name)
            # the check's own random inputs are the same whatever ran before in this worker
            # (other students, earlier checks that stopped half-way); the hidden fresh
            # ones come from the grading seed (companion.checks.fresh_rng)
            torch.manual_seed(CHECK_SEED)
            with contextlib.redirect_stdout(io.StringIO()):
                for src in ex.context:  # the instructor's, e.g. the student's variant
                    exec(compile(src, f"<context of {ex.answer_id}>", "exec"), trusted)  # noqa: S102
                namespace.update({k: v for k, v in trusted.items() if k not in ex.names})
                with memory_limit():  # a runaway check is this student's error, not the grader's OOM
                    exec(compile(ex.check_source, f"<check {ex.check_id}>", "exec"), namespace)  # noqa: S102
            return Result(ex.check_id, ex.points, ex.points, "passed", flag_text(box)), not answer_error
        except AnswerError as err:
            return Result(ex.check_id, 0.0, ex.points, f"{answer_error}your code: {err}"[:800], flag_text(box)), False
        except AssertionError as err:
            why = str(err) or "an assertion of the check failed"
            return (Result(ex.check_id, 0.0, ex.points, f"{answer_error}wrong: {why}"[:800], flag_text(box)),
                    not answer_error)
        except Exception as err:  # noqa: BLE001 (NameError for a missing answer, TypeError, MemoryError, ...)
            return (Result(ex.check_id, 0.0, ex.points, f"{answer_error}check failed: {type(err).__name__}: {str(err)[:800]}"[:800],
                           flag_text(box)),
                    not answer_error)
        finally:
            try:
                box.finish()  # its process and everything it left are gone; or the sandbox is dead
            except AnswerError:
                pass
