"""The intake holes of issue 35 (items 1, 2, 5 and 8), each planted in a class.

Intake is everything before a student's code runs: the student ids taken from folder and
archive names, the archives unpacked, the notebooks found and read. Each attack below is a
student's input that used to replace a classmate's submission, drop a classmate's row, end
the whole run without ``grades.csv`` or cost the grader minutes and gigabytes. The fast tests
call the intake itself (:func:`teaching.autograde.intake`); the class-level one grades a small
class with the documented command on a one-exercise chapter of the instructor's own (the
unsandboxed path: no attacker's code runs, their inputs are refused before that), and checks
that every classmate keeps the exact grade and that the CSV is complete.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_archives import make_zip  # noqa: E402
from test_grading import private_exercise  # noqa: E402

from teaching import autograde, safe_text, submissions  # noqa: E402
from teaching.archives import ArchiveError, unpack  # noqa: E402
from teaching.exercises import answer_sources, read_chapter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "90_double"
KNOWN = [CHAPTER, "04_masking"]
RIGHT, WRONG = "def double(x):\n    return x + x\n", "def double(x):\n    return x\n"


def notebook(tmp: Path, body: str) -> bytes:
    """The bytes of a submission of the one-exercise chapter with ``body`` as its answer."""
    path = tmp / "instructor" / f"{CHAPTER}.ipynb"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        private_exercise(path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[3].source = body
    for i, cell in enumerate(nb.cells):  # the same bytes in every run: the fuzz is reproducible
        cell.id = f"cell-{i}"
    return nbformat.writes(nb).encode("utf-8")


def many_cells(n: int = 700_000) -> bytes:
    """A notebook of ``n`` empty cells (issue 35: 63 MB and 700,000 cells cost 96 s, 1.3 GB)."""
    cells = ",".join(['{"cell_type":"raw","metadata":{},"source":""}'] * n)
    return f'{{"cells":[{cells}],"metadata":{{}},"nbformat":4,"nbformat_minor":5}}'.encode()


def with_version_needed(data: bytes, version: int) -> bytes:
    """The archive with every central-directory entry saying it needs zip ``version`` (159: 15.9)."""
    out, at = bytearray(data), 0
    while (at := out.find(b"PK\x01\x02", at)) >= 0:
        out[at + 6:at + 8] = version.to_bytes(2, "little")
        at += 4
    return bytes(out)


def corrupt_deflate(path: Path, name: str, data: bytes) -> Path:
    """An archive whose one entry's deflate stream is garbage (a reserved block type)."""
    make_zip(path, [(name, data)])
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start:start + 16] = b"\xff" * 16
    path.write_bytes(bytes(raw))
    return path


# -- item 2: archives that used to raise something else than ArchiveError ----------------------

BAD_ARCHIVES = {
    "long-name": lambda p: make_zip(p, [("a" * 300 + ".ipynb", b"{}")]),
    "deep": lambda p: make_zip(p, [("d/" * 2100 + "04_masking.ipynb", b"{}")]),
    "file-and-folder": lambda p: make_zip(p, [("x", b""), ("x/04_masking.ipynb", b"{}")]),
    "folder-and-file": lambda p: make_zip(p, [("x/04_masking.ipynb", b"{}"), ("x", b"")]),
    "corrupt-deflate": lambda p: corrupt_deflate(p, "04_masking.ipynb", bytes(range(256)) * 64),
    "version-15.9": lambda p: p.write_bytes(with_version_needed(make_zip(p, [("04_masking.ipynb", b"{}")]).read_bytes(),
                                                                159)),
    "truncated": lambda p: p.write_bytes(make_zip(p, [("04_masking.ipynb", bytes(range(256)) * 64)]).read_bytes()[:-30]),
}


@pytest.mark.parametrize("kind", sorted(BAD_ARCHIVES))
def test_every_bad_archive_is_refused_with_an_archive_error(tmp_path, kind):
    path = tmp_path / "bad.zip"
    BAD_ARCHIVES[kind](path)
    with pytest.raises(ArchiveError, match="refused archive"):
        unpack(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def intake(subs: Path, tmp: Path) -> dict[str, submissions.StudentFiles]:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    students = autograde.intake(subs, work, KNOWN)
    by_id = {s.student: s for s in students}
    assert len(by_id) == len(students), [s.student for s in students]
    return by_id


def reasons(entry: submissions.StudentFiles) -> str:
    return " | ".join(why for _, why in entry.unmatched)


def test_each_bad_archive_is_its_students_row_and_the_class_is_read(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for kind, make in BAD_ARCHIVES.items():
        make(subs / f"{kind}.zip")
    (subs / "honest").mkdir()
    (subs / "honest" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    make_zip(subs / "zipped.zip", [(f"zipped/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    students = intake(subs, tmp_path)
    assert set(students) == {*BAD_ARCHIVES, "honest", "zipped"}
    for kind in BAD_ARCHIVES:
        assert students[kind].chapters == {} and "refused archive" in reasons(students[kind]), kind
    assert "too long or too deep" in reasons(students["long-name"]) + reasons(students["deep"])
    assert "both a file and a folder" in reasons(students["file-and-folder"])
    assert "both a file and a folder" in reasons(students["folder-and-file"])
    assert "error" in reasons(students["corrupt-deflate"])  # zlib.error, named
    assert "version 15.9" in reasons(students["version-15.9"])
    for honest in ("honest", "zipped"):
        assert list(students[honest].chapters) == [CHAPTER] and not students[honest].unmatched


# -- item 1: an archive supplies its own student's submission, never a classmate's ---------------

def test_an_archive_named_dot_dot_zip_cannot_replace_a_classmate(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    make_zip(subs / "alice.zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    make_zip(subs / "..zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    make_zip(subs / "...zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    make_zip(subs / "mallory.zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    students = intake(subs, tmp_path)
    assert set(students) == {".", "..", "alice", "mallory"}
    graded = students["alice"].chapters[CHAPTER]
    assert answer_sources(graded, read_chapter(tmp_path / "instructor" / f"{CHAPTER}.ipynb"))["double"] == RIGHT
    assert "not a student id" in reasons(students["."]) and students["."].chapters == {}
    assert "not a student id" in reasons(students[".."]) and students[".."].chapters == {}
    # mallory's archive holds a folder called alice: it is still mallory's own submission
    graded = students["mallory"].chapters[CHAPTER]
    assert answer_sources(graded, read_chapter(tmp_path / "instructor" / f"{CHAPTER}.ipynb"))["double"] == WRONG


@pytest.mark.parametrize("name", ["al\nice", "al\x1b[2Jice", "\u202eecila", "alice\u200b", "alice.", "alice ",
                                  " alice", "alice\u3000", "a\\lice", "x" * 101, "\u0430lice",
                                  "\u03b1lice"])
def test_a_folder_whose_name_is_no_id_is_refused_with_a_row(tmp_path, name):
    subs = tmp_path / "subs"
    (subs / name).mkdir(parents=True)
    (subs / name / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    (subs / "alice").mkdir()
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    students = autograde.intake(subs, tmp_path, KNOWN)
    assert [s.student for s in students if s.chapters] == ["alice"], [(s.student, s.unmatched) for s in students]
    assert len(students) == 2
    bad = next(s for s in students if s.student != "alice")
    assert bad.chapters == {} and "refused" in reasons(bad)


def test_a_class_archive_maps_its_folders_to_ids_validated_the_same_way(tmp_path):
    z = make_zip(tmp_path / "class.zip", [(f"subs/alice/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT)),
                                          (f"subs/al\nice/{CHAPTER}.ipynb", notebook(tmp_path, WRONG)),
                                          (f"subs/alice./{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    from teaching import archives  # noqa: PLC0415
    subs, bad = archives.unpack_class(z, tmp_path / "class")
    assert bad == {}
    students = intake(subs, tmp_path)
    assert [s for s in students if students[s].chapters] == ["alice"]
    assert len(students) == 3 and all("refused" in reasons(students[s]) for s in students if s != "alice")


def test_one_students_bad_entries_in_a_class_archive_refuse_that_student_only(tmp_path):
    from teaching import archives  # noqa: PLC0415
    z = make_zip(tmp_path / "class.zip", [
        (f"subs/alice/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT)),
        (f"subs/mallory/{CHAPTER}.ipynb", notebook(tmp_path, WRONG)), ("subs/mallory/../../../x", b"x"),
        ("subs/deep/" + "d/" * 2100 + "x", b""), ("subs/both/x", b""), ("subs/both/x/y", b""),
        ("subs/" + "n" * 300 + f"/{CHAPTER}.ipynb", b"{}"), ("__MACOSX/subs/._alice", b""),
        ("subs/bob.zip", make_zip(tmp_path / "bob.zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))]).read_bytes()),
    ])
    root, bad = archives.unpack_class(z, tmp_path / "class")
    assert root == tmp_path / "class" / "subs"
    assert sorted(bad) == ["both", "deep", "mallory", "n" * 300]
    assert "leads out" in bad["mallory"] and "too long or too deep" in bad["deep"] + bad["n" * 300]
    assert sorted(p.name for p in root.iterdir()) == ["alice", "bob.zip"]  # nothing of theirs is left
    assert not (tmp_path / "x").exists() and not (tmp_path / "class" / "x").exists()
    students = autograde.intake(root, tmp_path / "work", KNOWN, [submissions.refused(n, w) for n, w in bad.items()])
    assert [s.student for s in students if s.chapters] == ["alice", "bob"]
    assert len(students) == 6 and all(s.unmatched for s in students if not s.chapters)


def test_an_entry_of_no_students_refuses_the_class_archive(tmp_path):
    from teaching import archives  # noqa: PLC0415
    z = make_zip(tmp_path / "class.zip", [(f"subs/alice/{CHAPTER}.ipynb", b"{}"), ("../x", b"")])
    with pytest.raises(ArchiveError, match="leads out"):
        archives.unpack_class(z, tmp_path / "class")
    assert not (tmp_path / "class").exists() and not (tmp_path / "x").exists()


# -- item 5: two names that would be one id ----------------------------------------------------

@pytest.mark.parametrize(("first", "second"), [
    (b"jos\xe9", b"jos\\xe9"),  # Latin-1 bytes and the escape the grader shows for them
    (b"alice", "\uff41lice".encode()),  # a full-width a
    (b"Alice", b"alice"),  # one folder on a case-insensitive file system
    ("jos\u00e9".encode(), "jose\u0301".encode()),  # composed and decomposed
    (b"=x", b"'=x"),  # one cell in the CSV, which quotes a formula
    ("stra\u00dfe".encode(), b"STRASSE"),  # casefolded alike
])
def test_two_names_of_one_id_are_both_refused_and_both_named(tmp_path, first, second):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in (first, second):
        folder = Path(os.fsdecode(os.fsencode(subs) + b"/" + name))
        folder.mkdir()
        (folder / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    (subs / "bob").mkdir()
    (subs / "bob" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    students = autograde.intake(subs, tmp_path, KNOWN)
    assert [s.student for s in students if s.chapters] == ["bob"]
    rows = [(s.student, name, why) for s in students if s.student != "bob" for name, why in s.unmatched]
    named = {name for _, name, _ in rows}
    assert named == {repr(first), repr(second)}, rows  # both named, each row naming both
    assert all(repr(first) in why and repr(second) in why and "refused" in why for _, _, why in rows), rows


@pytest.mark.parametrize("name", ["alice", "Jos\u00e9", "jos\udce9", "\u5f20\u4f1f", "Zhang Wei", "o'brien",
                                  "s1234567", "\u0391\u03b8\u03b7\u03bd\u03ac", "x" * 100])
def test_honest_ids_are_ids(name):
    assert submissions.id_problem(name) is None


def test_archives_named_like_hidden_or_look_alike_ids_are_refused_with_a_row(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in (".alice", "\u0430lice", "alice\u202e", "alice."):
        make_zip(subs / f"{name}.zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    make_zip(subs / "alice.zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    students = intake(subs, tmp_path)
    assert [s for s in students if students[s].chapters] == ["alice"]
    assert len(students) == 5 and all("refused" in reasons(students[s]) for s in students if s != "alice")


def test_a_folder_and_an_archive_of_one_student_are_no_collision(tmp_path):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    make_zip(subs / "alice.zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    students = intake(subs, tmp_path)
    assert list(students) == ["alice"] and list(students["alice"].chapters) == [CHAPTER]
    assert "only the folder is graded" in reasons(students["alice"])


# -- item 8: a notebook too large to parse -----------------------------------------------------

def test_a_notebook_of_700000_cells_is_refused_before_nbformat_parses_it(tmp_path, monkeypatch):
    data = many_cells()
    assert len(data) > 30 * 2**20 and len(data) < submissions.MAX_NOTEBOOK * 4
    subs = tmp_path / "subs"
    (subs / "mallory").mkdir(parents=True)
    (subs / "mallory" / f"{CHAPTER}.ipynb").write_bytes(data)
    (subs / "eve").mkdir()
    (subs / "eve" / f"{CHAPTER}.ipynb").write_bytes(json.dumps(json.loads(many_cells(3000))).encode())
    (subs / "alice").mkdir()
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    ch = read_chapter(tmp_path / "instructor" / f"{CHAPTER}.ipynb")

    def no_parse(*args, **kwargs):
        raise AssertionError("nbformat parsed a notebook over the caps")
    monkeypatch.setattr(nbformat, "reads", no_parse)
    students = intake(subs, tmp_path)
    assert students["mallory"].chapters == {} and "larger than" in reasons(students["mallory"])
    assert students["eve"].chapters == {} and "3,000 cells, more than the 2,000" in reasons(students["eve"])
    assert list(students["alice"].chapters) == [CHAPTER]
    for student in ("mallory", "eve"):  # and the grader itself refuses it the same way
        with pytest.raises(ValueError, match="larger than|cells, more than"):
            answer_sources(subs / student / f"{CHAPTER}.ipynb", ch)


@pytest.mark.parametrize("value", [b"{}", b"0", b"1.5", b"NaN", b'""', b"[]", b"true", b"null"])
def test_the_json_values_are_counted_before_nbformat_parses(value):
    # under the size cap, one cell whose metadata holds millions of values: nbformat took 16 s
    # and 220 MB for 8 million numbers on a loaded machine; the count stops decoding early
    n = (submissions.MAX_NOTEBOOK - 200) // (len(value) + 1)
    data = b'{"cells":[{"cell_type":"raw","source":"","metadata":{"x":[' + b",".join([value] * n) + b"]}}]}"
    assert len(data) <= submissions.MAX_NOTEBOOK and n > 2 * submissions.MAX_JSON_VALUES
    t0 = time.process_time()
    assert submissions.notebook_problem(data) == "more than 500,000 JSON values"
    assert time.process_time() - t0 < 5  # about 0.2 s: nothing past the cap is decoded


def test_the_course_notebooks_are_within_the_caps():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert submissions.notebook_problem(path.read_bytes()) is None, path.name


# -- item 2: a fuzz of mutated archives -------------------------------------------------------

def seed_archives(tmp: Path) -> list[bytes]:
    """Honest archives of every shape an LMS hands out (a folder, flat, stored, deflated, with
    a folder entry and a Latin-1 name), the mutants' parents."""
    nb = notebook(tmp, RIGHT)
    out = []
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        for entries in ([(f"s/{CHAPTER}.ipynb", nb), ("s/notes.txt", b"hello")], [(f"{CHAPTER}.ipynb", nb)],
                        [("s/", b""), (f"s/{CHAPTER} (1).ipynb", nb), ("s/sub/x.txt", b"x" * 500)]):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", method) as zf:
                for name, data in entries:
                    zf.writestr(name, data)
                info = zipfile.ZipInfo("caf\u00e9.txt")
                zf.writestr(info, b"latin")
            out.append(buf.getvalue())
    return out


def mutants(parents: list[bytes], n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        data = bytearray(rng.choice(parents))
        kind = rng.random()
        if kind < 0.75:  # a few bytes changed
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind < 0.8:  # a central-directory field an archiver may write anything into
            at = rng.choice([m.start() for m in re.finditer(b"PK\x01\x02", data)])
            field = at + rng.choice([4, 5, 8, 9, 12, 13, 14, 15, 36, 37, 38, 39, 40, 41])
            data[field] = rng.randrange(256)
        elif kind < 0.85:  # truncated
            del data[rng.randrange(len(data)):]
        elif kind < 0.95:  # a run of bytes replaced, in a header more often than not
            at = rng.choice([data.find(b"PK\x01\x02"), data.find(b"PK\x03\x04"), rng.randrange(len(data))])
            start = max(at, 0) + rng.randrange(4, 46)
            data[start:start + 8] = bytes(rng.randrange(256) for _ in range(8))
        else:  # two archives spliced
            other = rng.choice(parents)
            data = data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]
        yield bytes(data)


def fuzz(tmp: Path, n: int, seed: int) -> None:
    subs = tmp / "subs"
    subs.mkdir()
    unpacked = 0
    for i, data in enumerate(mutants(seed_archives(tmp), n, seed)):
        (subs / f"m{i:05d}.zip").write_bytes(data)
        try:  # unpacking raises ArchiveError or nothing
            unpack(subs / f"m{i:05d}.zip", tmp / "unpacked" / str(i))
            unpacked += 1
        except ArchiveError:
            assert not (tmp / "unpacked" / str(i)).exists()
    assert 0 < unpacked < 0.8 * n
    (subs / "honest").mkdir()
    (subs / "honest" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp, RIGHT))
    students = autograde.intake(subs, tmp / "work", KNOWN)  # raises nothing, whatever the archives
    ids = [s.student for s in students]
    assert ids == ["honest", *(f"m{i:05d}" for i in range(n))]
    for s in students:  # each one graded, or a FILE row that says why not
        assert s.chapters or s.unmatched, s.student
        assert set(s.chapters) <= set(KNOWN)
    assert list(students[0].chapters) == [CHAPTER] and not students[0].unmatched
    refused = sum(not s.chapters for s in students)
    assert 0.2 * n < refused < n  # the mutants refused and the ones still readable graded


def test_a_fuzz_of_mutated_archives_raises_nothing(tmp_path):
    fuzz(tmp_path, 300, seed=35)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_a_fuzz_of_thousands_of_mutated_archives_raises_nothing(tmp_path, seed):
    fuzz(tmp_path, 3000, seed=seed)


# -- the class: every attack graded together with honest students -------------------------------

def plant_class(tmp: Path) -> Path:
    subs = tmp / "subs"
    subs.mkdir()
    for name, body in (("honest", RIGHT), ("wrong", WRONG), ("carol", RIGHT)):
        (subs / name).mkdir()
        (subs / name / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp, body))
    make_zip(subs / "alice.zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp, RIGHT))])
    make_zip(subs / "..zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp, WRONG))])  # item 1
    make_zip(subs / "...zip", [(f"{CHAPTER}.ipynb", notebook(tmp, WRONG))])
    make_zip(subs / "bob.zip", [(f"carol/{CHAPTER}.ipynb", notebook(tmp, WRONG))])
    for kind, make in BAD_ARCHIVES.items():  # item 2
        make(subs / f"{kind}.zip")
    for name in (b"jos\xe9", b"jos\\xe9"):  # item 5
        folder = Path(os.fsdecode(os.fsencode(subs) + b"/" + name))
        folder.mkdir()
        (folder / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp, RIGHT))
    (subs / "al\nice").mkdir()
    (subs / "al\nice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp, WRONG))
    (subs / "frank").mkdir()  # item 8
    (subs / "frank" / f"{CHAPTER}.ipynb").write_bytes(many_cells())
    return subs


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    subs = plant_class(tmp)
    (tmp / "private").mkdir()
    private_exercise(tmp / "private" / f"{CHAPTER}.ipynb")
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out",
                          str(tmp / "g.csv"), "--notebooks", str(tmp / "private"), "--no-sandbox", "--jobs", "2"],
                         capture_output=True, text=True, cwd=tmp, timeout=900, encoding="utf-8", errors="replace")
    seconds = time.perf_counter() - t0
    assert (tmp / "g.csv").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(tmp / "g.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, run, seconds


def total(rows, student):
    (row,) = [r for r in rows if r["student"] == student and r["cell"] == "TOTAL"]
    return float(row["score"]), float(row["max_score"])


def files(rows, student):
    return " | ".join(f"{r['chapter']}: {r['status']}" for r in rows if r["student"] == student and r["cell"] == "FILE")


@pytest.mark.slow
def test_the_class_keeps_its_exact_grades(graded_class):
    rows, run, _ = graded_class
    assert run.returncode == 0, run.stderr[-3000:]
    assert total(rows, "honest") == (5, 5) and total(rows, "alice") == (5, 5) and total(rows, "carol") == (5, 5)
    assert total(rows, "wrong") == (0, 5) and total(rows, "bob") == (0, 5)  # bob's archive graded as bob's
    assert not files(rows, "honest") and not files(rows, "alice") and not files(rows, "carol")


@pytest.mark.slow
def test_the_csv_is_complete(graded_class):
    rows, _, _ = graded_class
    students = {r["student"] for r in rows}
    expected = {"honest", "wrong", "carol", "alice", "bob", ".", "..", "frank", "al\\nice", "jos\\xe9", *BAD_ARCHIVES}
    assert students == expected, students ^ expected
    for s in students:  # a TOTAL row for every id, and its checks
        assert total(rows, s)[1] == 5, s
        assert [r["cell"] for r in rows if r["student"] == s and r["cell"] not in ("TOTAL", "FILE")] == ["double_check"]


@pytest.mark.slow
@pytest.mark.parametrize(("student", "why"), [
    (".", "not a student id"), ("..", "not a student id"),
    ("long-name", "too long"), ("deep", "too deep"), ("file-and-folder", "both a file and a folder"),
    ("folder-and-file", "both a file and a folder"), ("corrupt-deflate", "cannot be read"),
    ("version-15.9", "version 15.9"), ("truncated", "refused archive"),
    ("jos\\xe9", "folders or archives give one student id"), ("al\\nice", "control or format character"),
    ("frank", "larger than"),
])
def test_each_attack_scores_zero_with_its_reason(graded_class, student, why):
    rows, _, _ = graded_class
    assert total(rows, student)[0] == 0, student
    assert why in files(rows, student), files(rows, student)


@pytest.mark.slow
def test_both_colliding_names_are_named(graded_class):
    rows, _, _ = graded_class
    named = sorted(r["chapter"] for r in rows if r["student"] == "jos\\xe9" and r["cell"] == "FILE")
    assert named == sorted([repr(b"jos\xe9"), repr(b"jos\\xe9")])


def test_the_guide_states_the_caps_the_code_keeps():
    from teaching import archives  # noqa: PLC0415
    text = " ".join((ROOT / "book" / "teaching.md").read_text(encoding="utf-8").split())
    for claim in (f"{submissions.MAX_NOTEBOOK // 2**20} MB is refused before it is parsed",
                  f"more than {submissions.MAX_JSON_VALUES:,} JSON values", f"more than {submissions.MAX_CELLS:,} cells",
                  f"more than {submissions.MAX_ID} characters", f"({archives.MAX_NAME} bytes a name, "
                  f"{archives.MAX_PATH} bytes in all, {archives.MAX_DEPTH} folders deep)",
                  f"more than {archives.MAX_FILES} entries or more than {archives.MAX_BYTES // 2**20} MB"):
        assert claim in text, claim


# -- red team round 1: H1, a class archive made the normal way ---------------------------------

def graded_answer(tmp: Path, path: Path) -> str:
    return answer_sources(path, read_chapter(tmp / "instructor" / f"{CHAPTER}.ipynb"))["double"]


def class_entries(tmp: Path, top: str) -> list[tuple[str, bytes]]:
    return [(f"{top}alice/{CHAPTER}.ipynb", notebook(tmp, RIGHT)), (f"{top}bob/{CHAPTER}.ipynb", notebook(tmp, WRONG)),
            (f"{top}carol/{CHAPTER}.ipynb", notebook(tmp, RIGHT))]


@pytest.mark.parametrize("shape", ["folder-entry", "readme-beside", "folder-entries-everywhere", "no-top-folder",
                                   "make_archive"])
def test_a_class_archive_made_the_normal_way_grades_every_student(tmp_path, shape):
    from teaching import archives  # noqa: PLC0415
    z = tmp_path / "class.zip"
    if shape == "folder-entry":  # zip -r class.zip class writes "class/" first
        make_zip(z, [("class/", b""), *class_entries(tmp_path, "class/")])
    elif shape == "readme-beside":
        make_zip(z, [*class_entries(tmp_path, "class/"), ("README.txt", b"the class of 2026")])
    elif shape == "folder-entries-everywhere":  # macOS Finder: every folder has its entry
        make_zip(z, [("class/", b""), ("class/alice/", b""), ("class/bob/", b""), ("class/carol/", b""),
                     *class_entries(tmp_path, "class/"), ("__MACOSX/class/._alice", b"")])
    elif shape == "no-top-folder":
        make_zip(z, [*class_entries(tmp_path, ""), ("README.txt", b"x")])
    else:
        import shutil  # noqa: PLC0415
        for name, data in class_entries(tmp_path, "tree/class/"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(data)
        z = Path(shutil.make_archive(str(tmp_path / "class"), "zip", tmp_path / "tree", "class"))
    root, bad = archives.unpack_class(z, tmp_path / "unpacked")
    assert bad == {}
    students = intake(root, tmp_path)
    assert sorted(students) == ["alice", "bob", "carol"], {k: reasons(v) for k, v in students.items()}
    for name, body in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        assert list(students[name].chapters) == [CHAPTER] and not students[name].unmatched, name
        assert graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body, name


def test_a_class_archive_of_one_student_folder_is_that_student(tmp_path):
    from teaching import archives  # noqa: PLC0415
    z = make_zip(tmp_path / "class.zip", [("alice/", b""), (f"alice/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    root, bad = archives.unpack_class(z, tmp_path / "unpacked")
    students = intake(root, tmp_path)
    assert bad == {} and list(students) == ["alice"] and list(students["alice"].chapters) == [CHAPTER]


def test_a_loose_notebook_beside_the_class_folder_is_a_row_not_a_student_lost(tmp_path):
    from teaching import archives  # noqa: PLC0415
    z = make_zip(tmp_path / "class.zip", [*class_entries(tmp_path, "class/"), (f"{CHAPTER}.ipynb", b"{}")])
    root, bad = archives.unpack_class(z, tmp_path / "unpacked")
    assert list(bad) == [f"{CHAPTER}.ipynb"] and "loose file" in bad[f"{CHAPTER}.ipynb"]
    students = intake(root, tmp_path)
    assert sorted(students) == ["alice", "bob", "carol"]


def run_cli(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    (tmp / "private").mkdir(exist_ok=True)
    if not (tmp / "private" / f"{CHAPTER}.ipynb").exists():
        private_exercise(tmp / "private" / f"{CHAPTER}.ipynb")
    out = tmp / "g.csv"
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), *args, "--out", str(out),
                          "--notebooks", str(tmp / "private"), "--no-sandbox"],
                         capture_output=True, text=True, cwd=tmp, timeout=900, encoding="utf-8", errors="replace")
    if not out.exists():
        return run, []
    with open(out, encoding="utf-8", newline="") as f:
        return run, list(csv.DictReader(f))


@pytest.mark.slow
def test_the_class_archive_with_its_folder_entry_keeps_the_exact_grades(tmp_path):
    z = make_zip(tmp_path / "class.zip", [("class/", b""), *class_entries(tmp_path, "class/"), ("README.txt", b"x")])
    run, rows = run_cli(tmp_path, str(z), "--chapters", CHAPTER)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {r["student"] for r in rows} == {"alice", "bob", "carol"}
    assert total(rows, "alice") == (5, 5) and total(rows, "bob") == (0, 5) and total(rows, "carol") == (5, 5)
    assert not any(r["cell"] == "FILE" for r in rows)


# -- red team round 1: H2, alice.zip and alice.ZIP ----------------------------------------------

def test_two_archives_of_one_id_are_both_refused_and_both_named(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    make_zip(subs / "alice.zip", [(f"alice/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    make_zip(subs / "alice.ZIP", [(f"{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    make_zip(subs / "bob.Zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    (subs / "carol").mkdir()
    (subs / "carol" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, WRONG))
    students = intake(subs, tmp_path)
    assert sorted(students) == ["alice", "bob", "carol"]
    assert students["alice"].chapters == {}
    rows = students["alice"].unmatched
    assert sorted(name for name, _ in rows) == [repr(b"alice.ZIP"), repr(b"alice.zip")], rows
    assert all(repr(b"alice.ZIP") in why and repr(b"alice.zip") in why and "refused" in why for _, why in rows)
    for name, body in (("bob", RIGHT), ("carol", WRONG)):  # the classmates keep their own
        assert not students[name].unmatched and graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body


def test_two_archives_of_one_id_beside_its_folder_grade_the_folder(tmp_path):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    make_zip(subs / "alice.zip", [(f"{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    make_zip(subs / "alice.ZIP", [(f"{CHAPTER}.ipynb", notebook(tmp_path, WRONG))])
    students = intake(subs, tmp_path)
    assert list(students) == ["alice"]
    assert graded_answer(tmp_path, students["alice"].chapters[CHAPTER]) == RIGHT
    assert reasons(students["alice"]).count("only the folder is graded") == 2


# -- red team round 1: H3, nothing outside the unpack folder -------------------------------------

@pytest.mark.parametrize("entries", [
    [("../precious/x.ipynb", b"{}"), ("../class/x.ipynb", b"{}")],
    [("class/../precious/x.ipynb", b"{}"), ("class/alice/x.ipynb", b"{}")],
    [("class/", b""), ("class/../class/x", b""), ("class/alice/x.ipynb", b"{}")],
    [("./../precious/x", b"")],
])
def test_a_class_archive_leading_out_writes_and_removes_nothing_outside(tmp_path, entries):
    from teaching import archives  # noqa: PLC0415
    keep = tmp_path / "keep"
    (keep / "precious").mkdir(parents=True)
    (keep / "precious" / "grades-2025.csv").write_text("x", encoding="utf-8")
    z = make_zip(tmp_path / "class.zip", entries)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ArchiveError, match="refused archive"):
        archives.unpack_class(z, keep / "class")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_the_clean_up_of_a_refused_student_removes_nothing_outside_dest(tmp_path):
    from teaching import archives  # noqa: PLC0415
    (tmp_path / "precious").mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "alice").mkdir()
    for target in (tmp_path / "dest" / ".." / "precious", tmp_path / "dest" / "..", tmp_path / "dest"):
        archives._remove_inside(tmp_path / "dest", target)
    assert (tmp_path / "precious").is_dir() and (tmp_path / "dest").is_dir()
    archives._remove_inside(tmp_path / "dest", tmp_path / "dest" / "alice")
    assert not (tmp_path / "dest" / "alice").exists()


@pytest.mark.slow
def test_the_class_archive_leading_out_stops_the_run_cleanly(tmp_path):
    keep = tmp_path / "keep"
    (keep / "precious").mkdir(parents=True)
    (keep / "precious" / "grades-2025.csv").write_text("x", encoding="utf-8")
    z = make_zip(tmp_path / "class.zip", [("../precious/x.ipynb", b"{}"), ("../class/x.ipynb", b"{}")])
    run, rows = run_cli(tmp_path, str(z), "--chapters", CHAPTER, "--keep", str(keep))
    assert run.returncode not in (0, 3) and "leads out" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert (keep / "precious" / "grades-2025.csv").read_text(encoding="utf-8") == "x" and rows == []


# -- red team round 1: M3, a version-3 notebook's cells ------------------------------------------

def v3_notebook(cells_per_sheet: list[int]) -> bytes:
    sheets = ",".join('{"cells":[' + ",".join(['{"cell_type":"raw","source":""}'] * n) + '],"metadata":{}}'
                      for n in cells_per_sheet)
    return ('{"metadata":{},"nbformat":3,"nbformat_minor":0,"worksheets":[' + sheets + "]}").encode()


def test_a_version_3_notebook_counts_the_cells_of_its_worksheets(tmp_path, monkeypatch):
    assert submissions.notebook_problem(v3_notebook([95_000])) == "95,000 cells, more than the 2,000 allowed"
    assert submissions.notebook_problem(v3_notebook([1500, 1500])) == "3,000 cells, more than the 2,000 allowed"
    assert submissions.notebook_problem(v3_notebook([1000, 1000])) is None
    subs = tmp_path / "subs"
    (subs / "mallory").mkdir(parents=True)
    (subs / "mallory" / f"{CHAPTER}.ipynb").write_bytes(v3_notebook([95_000]))
    (subs / "alice").mkdir()
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    monkeypatch.setattr(nbformat, "reads", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed")))
    students = intake(subs, tmp_path)
    assert students["mallory"].chapters == {} and "95,000 cells" in reasons(students["mallory"])
    assert list(students["alice"].chapters) == [CHAPTER] and not students["alice"].unmatched


# -- red team round 1: M2, the latest copy in an archive -----------------------------------------

def test_the_latest_copy_in_an_archive_is_the_latest_saved_and_not_a_checkpoint(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    with zipfile.ZipFile(subs / "carol.zip", "w") as zf:  # the newer first: unpacked first, older on disk
        zf.writestr(zipfile.ZipInfo(f"{CHAPTER}.ipynb", (2026, 12, 4, 10, 0, 0)), notebook(tmp_path, RIGHT))
        zf.writestr(zipfile.ZipInfo(f"{CHAPTER}-checkpoint.ipynb", (2026, 11, 1, 9, 0, 0)), notebook(tmp_path, WRONG))
    with zipfile.ZipFile(subs / "dave.zip", "w") as zf:  # a checkpoint newer than the notebook
        zf.writestr(zipfile.ZipInfo(f"{CHAPTER}.ipynb", (2026, 11, 1, 9, 0, 0)), notebook(tmp_path, RIGHT))
        zf.writestr(zipfile.ZipInfo(f"{CHAPTER}-checkpoint.ipynb", (2026, 12, 4, 9, 0, 0)), notebook(tmp_path, WRONG))
    with zipfile.ZipFile(subs / "erin.zip", "w") as zf:  # two hand-made copies: the later saved wins
        zf.writestr(zipfile.ZipInfo(f"{CHAPTER}.ipynb", (2026, 12, 4, 11, 0, 0)), notebook(tmp_path, RIGHT))
        zf.writestr(zipfile.ZipInfo(f"final_{CHAPTER}.ipynb", (2026, 12, 1, 9, 0, 0)), notebook(tmp_path, WRONG))
    (subs / "bob").mkdir()
    (subs / "bob" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, WRONG))
    students = intake(subs, tmp_path)
    for name, body in (("carol", RIGHT), ("dave", RIGHT), ("erin", RIGHT), ("bob", WRONG)):
        assert graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body, (name, students[name].notes)
    assert f"graded {CHAPTER}.ipynb, the latest of 2 files" in students["carol"].notes[CHAPTER]
    assert time.localtime(students["erin"].chapters[CHAPTER].stat().st_mtime)[:4] == (2026, 12, 4, 11)


# -- red team round 1: M4, many copies of one chapter ---------------------------------------------

def test_more_copies_of_one_chapter_than_the_cap_are_one_row_and_never_read(tmp_path, monkeypatch):
    from teaching import archives  # noqa: PLC0415
    subs = tmp_path / "subs"
    subs.mkdir()
    n = submissions.MAX_COPIES + 1
    make_zip(subs / "mallory.zip", [(f"{CHAPTER} ({k}).ipynb", notebook(tmp_path, WRONG)) for k in range(n)])
    make_zip(subs / "trent.zip", [(f"{CHAPTER} ({k}).ipynb", notebook(tmp_path, RIGHT))
                                  for k in range(submissions.MAX_COPIES)])
    (subs / "alice").mkdir()
    (subs / "alice" / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    read = []
    real_read = submissions.read_regular
    monkeypatch.setattr(submissions, "read_regular", lambda path: read.append(path.parent.parent.name) or real_read(path))
    students = intake(subs, tmp_path)
    assert students["mallory"].chapters == {} and len(students["mallory"].unmatched) == 1
    assert f"{n} files for this chapter, more than the {submissions.MAX_COPIES} allowed" in reasons(students["mallory"])
    assert graded_answer(tmp_path, students["trent"].chapters[CHAPTER]) == RIGHT  # 20 copies are fine
    assert graded_answer(tmp_path, students["alice"].chapters[CHAPTER]) == RIGHT
    assert "0" not in read  # mallory's archive was unpacked into archives/0: none of its files read
    assert archives.MAX_BYTES >= 12 * submissions.MAX_NOTEBOOK  # a student's every chapter at its cap fits


# -- red team round 1: M5, non-Latin names in Moodle's folder layout -----------------------------

def test_moodle_folders_of_non_latin_names_are_graded_and_refusals_are_readable(tmp_path):
    subs = tmp_path / "subs"
    honest = ["\u0418\u0432\u0430\u043d \u041f\u0435\u0442\u0440\u043e\u0432_12345_assignsubmission_file_",
              "\u0391\u03b8\u03b7\u03bd\u03ac_12346_assignsubmission_file_", "Alice Smith_12347_assignsubmission_file_",
              "\u5f20\u4f1f_12348_assignsubmission_file"]
    mixed = "\u0418\u0432\u0430\u043d Petrov_12349_assignsubmission_file_"  # two alphabets in the name itself
    for name in (*honest, mixed):
        (subs / name).mkdir(parents=True)
        (subs / name / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    students = intake(subs, tmp_path)
    assert sorted(s for s in students if students[s].chapters) == sorted(honest)
    why = reasons(students[mixed])
    assert students[mixed].chapters == {} and "mixes Cyrillic and Latin letters" in why
    assert "b'" not in why and "'\u0418\u0432\u0430\u043d Petrov_12349" in why and "\\u0418" in why, why


# -- red team round 1: M1, invisible and look-alike ids ------------------------------------------

@pytest.mark.parametrize("name", ["alice\u034f", "alice\ufe0f", "alice\U000e0100", "alice\u2800", "\u2800", "\u3164",
                                  "al\u115fice", "alice\uffa0"])
def test_an_id_with_an_invisible_or_blank_character_is_refused(name):
    assert "invisible or blank" in (submissions.id_problem(name) or ""), name


@pytest.mark.parametrize(("forged", "real"), [("\u04551234567", "s1234567"), ("\u0251lice", "alice"),
                                               ("\u1d00\u029f\u026a\u1d04\u1d07", "alice"),
                                               ("\u0430\u0441\u0435", "ace")])
def test_a_one_alphabet_look_alike_collides_with_the_id_it_forges(tmp_path, forged, real):
    assert submissions.id_problem(forged) is None  # one alphabet: only the collision catches it
    subs = tmp_path / "subs"
    for name in (forged, real, "bob"):
        (subs / name).mkdir(parents=True)
        (subs / name / f"{CHAPTER}.ipynb").write_bytes(notebook(tmp_path, RIGHT))
    students = autograde.intake(subs, tmp_path, KNOWN)
    assert [s.student for s in students if s.chapters] == ["bob"]
    rows = [why for s in students if s.student != "bob" for _, why in s.unmatched]
    assert len(rows) == 2 and all("give one student id" in why for why in rows), rows


# -- red team round 2: K1-K3, a class archive's top folders ------------------------------------

def unpack_and_intake(tmp: Path, entries: list[tuple[str, bytes]]) -> tuple[dict, dict]:
    from teaching import archives  # noqa: PLC0415
    root, bad = archives.unpack_class(make_zip(tmp / "class.zip", entries), tmp / "unpacked")
    work = tmp / "work"
    work.mkdir()
    students = autograde.intake(root, work, KNOWN, [submissions.refused(n, w) for n, w in sorted(bad.items())])
    return {s.student: s for s in students}, bad


@pytest.mark.parametrize("attacker", ["alice\\04_masking.ipynb/x", f"alice\\{CHAPTER}.ipynb/x", "alice\\evil/link",
                                      "alice\\" + "d/" * 40 + "x"])
def test_k1_a_backslash_in_a_folder_name_is_that_folders_row_never_a_classmates(tmp_path, attacker):
    students, bad = unpack_and_intake(tmp_path, [*class_entries(tmp_path, ""), (attacker, b"x")])
    top = attacker.split("/")[0]
    assert sorted(students) == sorted(["alice", "bob", "carol", safe_text.file_name(top)]), sorted(students)
    for name, body in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        assert not students[name].unmatched and graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body
    assert list(bad) == [top] and "no student id" in bad[top]  # the attacker's folder, named


@pytest.mark.parametrize("attacker", ["x:y", "c:", "C:\\precious", "..\\precious", "/precious", "/alice"])
@pytest.mark.parametrize("wrap", ["", "class/"])
def test_k2_a_colon_or_an_absolute_entry_is_that_folders_row_and_the_class_is_graded(tmp_path, attacker, wrap):
    keep = tmp_path / "keep"
    (keep / "precious").mkdir(parents=True)
    (keep / "precious" / "x").write_text("x", encoding="utf-8")
    entry = f"{attacker}/{CHAPTER}.ipynb" if attacker.startswith("/") else f"{wrap}{attacker}/{CHAPTER}.ipynb"
    students, bad = unpack_and_intake(tmp_path, [*class_entries(tmp_path, wrap), (entry, notebook(tmp_path, WRONG))])
    for name, body in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        assert not students[name].unmatched and graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body
    assert list(bad) == [attacker] and "no student id" in bad[attacker], bad
    assert students[safe_text.file_name(attacker)].chapters == {}
    assert len(students) == 4
    assert [p.name for p in (keep / "precious").iterdir()] == ["x"] and not (tmp_path / "precious").exists()


@pytest.mark.parametrize("wrap", ["Downloads/class/", "home/me/Downloads/class/"])
def test_k3_a_class_wrapped_in_several_folders_grades_every_student(tmp_path, wrap):
    students, bad = unpack_and_intake(tmp_path, [(wrap, b""), *class_entries(tmp_path, wrap),
                                                 (wrap.split("/")[0] + "/README.txt", b"x"),
                                                 ("README.txt", b"x")])
    assert bad == {} and sorted(students) == ["alice", "bob", "carol"], (bad, sorted(students))
    for name, body in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        assert not students[name].unmatched and graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body


def test_k3_a_loose_archive_in_a_wrapper_and_a_sub_folder_are_rows(tmp_path):
    students, bad = unpack_and_intake(tmp_path, [*class_entries(tmp_path, "Downloads/class/"),
                                                 ("Downloads/eve.zip", b"PK"),
                                                 (f"Downloads/class/dave/hw/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    assert list(bad) == ["Downloads/eve.zip"] and "loose file" in bad["Downloads/eve.zip"]
    assert students["dave"].chapters == {} and [n for n, _ in students["dave"].unmatched] == ["hw"]
    assert "a folder inside the student's folder" in reasons(students["dave"])
    for name, body in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        assert not students[name].unmatched and graded_answer(tmp_path, students[name].chapters[CHAPTER]) == body


def test_k4_a_wrapper_with_a_loose_notebook_is_one_student_whose_sub_folders_are_rows(tmp_path):
    students, bad = unpack_and_intake(tmp_path, [*class_entries(tmp_path, "class/"), (f"class/{CHAPTER}.ipynb", b"{}")])
    assert bad == {} and list(students) == ["class"]
    assert sorted(n for n, _ in students["class"].unmatched) == ["alice", "bob", "carol"]


@pytest.mark.slow
def test_k1_k2_k3_the_class_keeps_its_exact_grades_and_the_csv_is_complete(tmp_path):
    wrap = "Downloads/class/"
    z = make_zip(tmp_path / "class.zip", [*class_entries(tmp_path, wrap), (f"{wrap}alice\\{CHAPTER}.ipynb/x", b"x"),
                                          (f"{wrap}x:y/{CHAPTER}.ipynb", notebook(tmp_path, RIGHT))])
    run, rows = run_cli(tmp_path, str(z), "--chapters", CHAPTER)
    assert run.returncode == 0, run.stderr[-3000:]
    attacker = safe_text.file_name(f"alice\\{CHAPTER}.ipynb")
    assert {r["student"] for r in rows} == {"alice", "bob", "carol", attacker, "x:y"}
    assert total(rows, "alice") == (5, 5) and total(rows, "bob") == (0, 5) and total(rows, "carol") == (5, 5)
    assert not files(rows, "alice") and not files(rows, "bob") and not files(rows, "carol")
    assert total(rows, attacker)[0] == 0 and "no student id" in files(rows, attacker)
    assert total(rows, "x:y")[0] == 0 and "no student id" in files(rows, "x:y")


@pytest.mark.slow
def test_keep_into_a_folder_that_already_holds_class_grades_the_class(tmp_path):
    z = make_zip(tmp_path / "class.zip", class_entries(tmp_path, "class/"))
    (tmp_path / "keep" / "class").mkdir(parents=True)
    run, rows = run_cli(tmp_path, str(z), "--chapters", CHAPTER, "--keep", str(tmp_path / "keep"))
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert total(rows, "alice") == (5, 5) and total(rows, "bob") == (0, 5) and total(rows, "carol") == (5, 5)
