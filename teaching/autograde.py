"""Autograde a folder of submissions into a CSV, each submission run in its own sandbox.

    python -m teaching.autograde submissions/ --out grades.csv [--chapters 04 05] [--jobs 2]
    python teaching/autograde.py submissions/ --out grades.csv     # the same

`submissions/<student>/<chapter>.ipynb`, e.g. `submissions/alice/04_masking.ipynb`: one folder
per student (its name is the student's id) holding the chapter notebooks they handed in. File
names as an LMS or a browser leaves them (`04_Masking (1).ipynb`, `s123_04_masking.ipynb`) are
matched to their chapter; a file that matches none is reported in the output and the CSV.

Only the instructor's notebook decides what runs and what is checked: each submission runs in a
bubblewrap sandbox of its own, each graded answer in a fresh process there, and the
instructor's check cell, hidden tests included, runs in the grader's own process on the values
the sandbox sends back (see book/teaching.md). The CSV has one row per student, chapter and graded cell
(`student,chapter,cell,score,max_score,status,flags`) and a `TOTAL` row per student and chapter, for
every student and every chapter graded, whatever a submission does.
"""

from __future__ import annotations

import argparse
import csv
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as `python teaching/autograde.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "teaching"  # noqa: A001

from companion.checks import GRADING_SEED  # noqa: E402
from teaching import archives, course, safe_text  # noqa: E402
from teaching.exercises import read_chapter  # noqa: E402
from teaching.grader import Grader  # noqa: E402
from teaching.sandbox import NO_SANDBOX_RISK, Limits, bwrap_available  # noqa: E402
from teaching.submissions import StudentFiles, collect, collect_folder, id_key, id_problem, refusal, refused, shown_name  # noqa: E402

FIELDS = ["student", "chapter", "cell", "score", "max_score", "status", "flags"]
_graders: dict[str, Grader] = {}


def _grader(chapter: str, workdir: Path, hidden: list[Path], limits: Limits, isolate: bool) -> Grader:
    if chapter not in _graders:
        _graders[chapter] = Grader(read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb"), workdir / chapter, hidden,
                                   limits, isolate)
    return _graders[chapter]


def grade_task(task) -> list[dict]:
    """The rows of one student and chapter. Never raises: a failure of the grader itself is a
    row with the reason, and costs this submission only."""
    student, chapter, path, note, workdir, hidden, limits, isolate = task
    grader = _grader(chapter, workdir, hidden, limits, isolate)
    exercises = grader.chapter.exercises
    rows = []
    try:
        if path is None:
            results = [(e.check_id, 0.0, e.points, "not submitted", "") for e in exercises]
        else:
            results = [(r.cell, r.score, r.max_score, r.status, r.flags) for r in grader.grade(Path(path), student)]
    except Exception as err:  # noqa: BLE001 (a bug of the grader must not cost the class)
        results = [(e.check_id, 0.0, e.points, f"grader error: {type(err).__name__}: {err}", "") for e in exercises]
    for cell, score, max_score, status, flags in results:
        rows.append({"student": student, "chapter": chapter, "cell": cell, "score": score, "max_score": max_score,
                     "status": status, "flags": flags})
    passed = sum(r["status"] == "passed" for r in rows)
    total_status = "not submitted" if path is None else f"{passed} of {len(rows)} checks passed"
    if note:
        total_status += f"; {note}"
    flagged = sum(bool(r["flags"]) for r in rows)
    rows.append({"student": student, "chapter": chapter, "cell": "TOTAL", "score": sum(r["score"] for r in rows),
                 "max_score": sum(r["max_score"] for r in rows), "status": total_status,
                 "flags": f"{flagged} cell(s) flagged: read their flags" if flagged else ""})
    return rows


def failed_rows(task, why: str) -> list[dict]:
    student, chapter = task[0], task[1]
    exercises = read_chapter(course.NOTEBOOKS / f"{chapter}.ipynb").exercises
    rows = [{"student": student, "chapter": chapter, "cell": e.check_id, "score": 0.0, "max_score": e.points,
             "status": why} for e in exercises]
    return rows + [{"student": student, "chapter": chapter, "cell": "TOTAL", "score": 0.0,
                    "max_score": sum(e.points for e in exercises), "status": why}]


def last_for_the_oom_killer() -> bool:
    """Make this process (and the workers it starts) the last the kernel's OOM killer picks; the
    sandboxes are the first (:mod:`teaching.limits`). Lowering it needs root; returns whether it held."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="utf-8") as f:
            f.write("-999")
        return True
    except OSError:
        return False


def _worker_start() -> None:
    """A worker ends with the grader that started it (never one left running without its parent)."""
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # its parent ended before the line above
            os._exit(1)
    except (OSError, AttributeError):
        pass


def run_tasks(tasks: list, jobs: int, work=None, failed=None) -> list[list[dict]]:
    """``work(task)`` for every task in worker processes, ``jobs`` at a time, in task order.

    A worker that dies (killed for memory, a crash of torch) breaks the whole pool, and every
    task still in it with it: those tasks are retried, each alone in a fresh worker, so that only
    the submission that kills its worker again loses its rows, scored 0 with the reason. Each
    worker ends with the grader."""
    work, failed = work or grade_task, failed or failed_rows
    results: list = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_worker_start) as pool:
        futures = [pool.submit(work, t) for t in tasks]
        for i, future in enumerate(futures):
            try:
                results[i] = future.result()
            except Exception:  # noqa: BLE001, S110 (a worker that died: retried alone below)
                pass
    for i, task in enumerate(tasks):
        if results[i] is None:
            try:
                with ProcessPoolExecutor(max_workers=1, initializer=_worker_start) as alone:
                    results[i] = alone.submit(work, task).result()
            except Exception as err:  # noqa: BLE001 (it died again: this submission's rows say so)
                results[i] = failed(task, f"grader error: the grading process died twice ({type(err).__name__}: "
                                          f"{err}); graded alone the second time")
    return results


def autograde(submissions: Path, chapters: list[str] | None = None, timeout: float = 30.0, jobs: int = 1,
              isolate: bool = True, keep: Path | None = None, memory_mb: float | None = None) -> list[dict]:
    """All rows for ``submissions/<student>/<file>.ipynb``, in student and chapter order."""
    known = course.chapters_with_exercises()
    workdir = Path(tempfile.mkdtemp(prefix="grading-")) if keep is None else keep.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        refused_in_class = []
        if submissions.is_file() and submissions.suffix.lower() == ".zip":  # the class in one archive
            try:
                dest, n = workdir / "class", 1
                while dest.exists() or dest.is_symlink():  # --keep into a folder of an earlier run
                    n += 1
                    dest = workdir / f"class-{n}"
                submissions, bad = archives.unpack_class(submissions, dest)
            except archives.ArchiveError as err:
                raise SystemExit(f"{safe_text.cell(str(submissions))}: {err}") from None
            refused_in_class = [refused(name, why) for name, why in sorted(bad.items())]
        students = intake(submissions, workdir, known, refused_in_class)
        if not students:
            raise SystemExit(f"no student folders in {submissions}: expected {submissions}/<student>/<chapter>.ipynb, "
                             f"e.g. {submissions}/alice/04_masking.ipynb (or {submissions}/alice.zip)")
        return _autograde(submissions, students, known, chapters, timeout, jobs, isolate, workdir, memory_mb)
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def intake(submissions: Path, workdir: Path, known: list[str], also: list[StudentFiles] = ()) -> list[StudentFiles]:
    """Every student of ``submissions`` (folders and ``<student>.zip`` archives) and of ``also``
    (the refused folders of a class's archive), one entry per id, each with the notebooks to
    grade or the FILE rows saying why not. Never raises for what a student handed in: each
    failure is that student's row."""
    return _merged(collect(submissions, known) + _archived_students(submissions, workdir / "archives", known)
                   + list(also))


def _archived_students(submissions: Path, staging: Path, known: list[str]) -> list[StudentFiles]:
    """The students who handed in ``submissions/<student>.zip`` instead of a folder, each archive
    unpacked safely (:mod:`teaching.archives`) and graded as the student its name says, whatever
    folders it holds. An archive whose name is no student id, or that is refused or fails in any
    way, is a FILE row with the reason; the run goes on."""
    out = []
    folders = {p.name for p in submissions.iterdir() if p.is_dir()}
    zips = sorted(p for p in submissions.iterdir() if p.suffix.lower() == ".zip" and (p.is_symlink() or not p.is_dir()))
    stems: dict[str, list[str]] = {}  # alice.zip and alice.ZIP: two archives of one id
    for archive in zips:
        stems.setdefault(archive.name[: -len(archive.suffix)], []).append(archive.name)
    for i, archive in enumerate(zips):
        student = archive.name[: -len(archive.suffix)]
        same = sorted(stems[student], key=shown_name)
        if len(same) > 1 and student not in folders and id_problem(student) is None:
            named = ", ".join(shown_name(n) for n in same)
            out.append(refused(student, f"refused: {len(same)} archives give one student id: {named}; none of them "
                                        f"is graded (keep one)"))
            out[-1].unmatched[-1] = (shown_name(archive.name), out[-1].unmatched[-1][1])
            continue
        try:
            out.append(_archived_student(archive, student, folders, staging / f"{i}", known))
        except Exception as err:  # noqa: BLE001 (one student's archive must not end the run)
            out.append(refused(student, f"refused: the archive cannot be read ({type(err).__name__}: {err})"))
    return out


def _archived_student(archive: Path, student: str, folders: set, staging: Path, known: list[str]) -> StudentFiles:
    why = id_problem(student)
    if why is not None:
        return refused(student, why)
    why = refusal(archive)
    if why is None and student in folders:
        why = f"refused: {safe_text.file_name(student)} has both a folder and an archive; only the folder is graded"
    if why is not None:  # the folder (if any) is graded; this FILE row goes with it (_merged)
        return refused(student, why)
    try:
        root = archives.top_folder(archives.unpack(archive, staging / "unpacked"))
    except archives.ArchiveError as err:
        return refused(student, str(err))
    files = collect_folder(root, student, known)
    if not files.chapters and not files.unmatched:
        files.unmatched.append((archive.name, "the archive holds no file in its top folder: nothing graded"))
    return files


def _merged(students: list[StudentFiles]) -> list[StudentFiles]:
    """One entry per student id, in order: a student with a folder and an archive keeps the
    folder's notebooks and the archive's FILE row. Two different names that would be one id
    (``jos\\xe9`` escaped and written out, ``Alice`` and ``alice``, ``ａlice`` and ``alice``:
    :func:`~teaching.submissions.id_key`) are a collision: neither is graded, and each one's FILE
    row names them all."""
    groups: dict[str, list[StudentFiles]] = {}
    for s in students:  # a look-alike refused as no id (аlice, mixed) cannot withhold a real id's grade
        groups.setdefault(id_key(s.student, look_alikes=id_problem(s.source) is None), []).append(s)
    out = []
    for key in sorted(groups):
        group = groups[key]
        sources = sorted({s.source for s in group}, key=shown_name)
        if len(sources) > 1:
            named = ", ".join(shown_name(n) for n in sources)
            by_id: dict[str, StudentFiles] = {}
            for s in group:
                entry = by_id.setdefault(s.student, StudentFiles(s.student, source=s.source))
                why = (f"refused: {len(sources)} folders or archives give one student id: {named}; none of them is "
                       f"graded (rename them apart)")
                if (shown_name(s.source), why) not in entry.unmatched:
                    entry.unmatched.append((shown_name(s.source), why))
            out += [by_id[k] for k in sorted(by_id)]
            continue
        first = group[0]
        for s in group[1:]:
            for ch, path in s.chapters.items():
                first.chapters.setdefault(ch, path)
            first.unmatched.extend(s.unmatched)
        out.append(first)
    return out


def _autograde(submissions, students, known, chapters, timeout, jobs, isolate, workdir, memory_mb) -> list[dict]:
    graded = chapters or [ch for ch in known if any(ch in s.chapters for s in students)]
    limits = Limits(seconds=timeout) if memory_mb is None else Limits(seconds=timeout, resident_bytes=int(memory_mb * 2**20))
    hidden = [course.ROOT.resolve(), course.NOTEBOOKS.resolve(), submissions.resolve(), workdir]
    for ch in graded:  # prepare each chapter's companion copies once, before the workers start
        _grader(ch, workdir, hidden, limits, isolate)
    tasks = [(s.student, ch, s.chapters.get(ch), s.notes.get(ch, ""), workdir, hidden, limits, isolate)
             for s in students for ch in graded]
    per_task = run_tasks(tasks, jobs)
    rows = [row for rows in per_task for row in rows]
    for s in students:
        for name, why in s.unmatched:
            rows.append({"student": s.student, "chapter": name, "cell": "FILE", "score": 0.0, "max_score": 0.0,
                         "status": f"not matched: {why}"})
    return rows


def safe_row(row: dict) -> dict:
    """The row with every string safe for UTF-8, spreadsheets and terminals (:mod:`teaching.safe_text`)."""
    return {k: safe_text.cell(v) for k, v in row.items()}


def write_csv(rows: list[dict], path: Path) -> None:
    """The CSV, complete or not at all: written beside ``path``, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(safe_row(r) for r in rows)
    os.replace(partial, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<chapter>.ipynb")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (default: %(default)s)")
    parser.add_argument("--chapters", nargs="*", help="only these chapters, e.g. 04 05_multihead_attention "
                        "(default: every chapter someone submitted)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds for each cell of the student's (replayed earlier answers too) and each call of a "
                             "check (default: %(default)s)")
    parser.add_argument("--memory", type=float, default=None, metavar="MB",
                        help="memory of all of one answer's processes together (default: 3072)")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time (default: %(default)s)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the grading folder here (the companion copies each exercise sees)")
    parser.add_argument("--notebooks", type=Path, default=None,
                        help="the instructor notebooks to grade against (default: the course's notebooks/); "
                             "a folder of your own private exercises in the same format")
    parser.add_argument("--no-sandbox", action="store_true", help="run students' code WITHOUT a sandbox. " + NO_SANDBOX_RISK)
    args = parser.parse_args(argv)
    if args.no_sandbox:
        print(f"WARNING: {NO_SANDBOX_RISK}", file=sys.stderr)
    else:
        ok, why = bwrap_available()
        if not ok:
            raise SystemExit(f"cannot grade safely: {why}.\nInstall bubblewrap, or pass --no-sandbox if you accept "
                             f"the risk: {NO_SANDBOX_RISK}")
    if args.notebooks:
        course.NOTEBOOKS = args.notebooks.resolve()
    chapters = course.resolve(args.chapters) if args.chapters else None
    # the hidden tests' fresh inputs (companion.checks.fresh_inputs): a new seed for each run,
    # which only the grader's processes see (the sandbox starts with an empty environment)
    os.environ.setdefault(GRADING_SEED, str(secrets.randbits(48)))
    last_for_the_oom_killer()
    t0 = time.perf_counter()
    rows = autograde(args.submissions, chapters, args.timeout, args.jobs, not args.no_sandbox, args.keep, args.memory)
    write_csv(rows, args.out)
    for r in map(safe_row, rows):
        if r["cell"] == "TOTAL":
            print(f"{r['student']:20s} {r['chapter']:28s} {r['score']:g} / {r['max_score']:g}   {r['status']}")
        elif r["cell"] == "FILE":
            print(f"{r['student']:20s} {r['chapter']:28s} {r['status']}", file=sys.stderr)
    graded = sum(r["cell"] == "TOTAL" for r in rows)
    print(f"wrote {args.out}: {graded} student-chapters in {time.perf_counter() - t0:.1f} s")
    errors = sum(r["cell"] not in ("TOTAL", "FILE") and str(r["status"]).startswith("grader error") for r in rows)
    if errors:
        print(f"{errors} cells were scored 0 by a grader error (see their status): check them by hand",
              file=sys.stderr)
        raise SystemExit(3)


if __name__ == "__main__":
    main()
