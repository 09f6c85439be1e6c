"""Submissions as .zip archives (teaching.archives): unpacked safely or refused with the reason."""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import needs_bwrap

from teaching import archives, safe_text
from teaching.archives import ArchiveError, unpack

ROOT = Path(__file__).resolve().parents[1]


def make_zip(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def symlink_entry(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16  # as `zip --symlinks` writes a link
    return info, target.encode()


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_an_honest_archive_of_a_folder_unpacks(tmp_path):
    z = make_zip(tmp_path / "alice.zip", [("alice/", b""), ("alice/04_masking.ipynb", b"{}"),
                                          ("alice/notes/a.txt", b"hi")])
    dest = unpack(z, tmp_path / "out")
    assert files_under(dest) == ["alice", "alice/04_masking.ipynb", "alice/notes", "alice/notes/a.txt"]
    assert archives.top_folder(dest) == dest / "alice"
    assert (dest / "alice" / "04_masking.ipynb").read_bytes() == b"{}"


@pytest.mark.parametrize(("name", "why"), [
    ("../evil.ipynb", "leads out"),
    ("alice/../../evil.ipynb", "leads out"),
    ("..\\evil.ipynb", "leads out"),  # a Windows separator
    ("/tmp/evil.ipynb", "absolute path"),
    ("C:/evil.ipynb", "absolute path"),
])
def test_zip_slip_is_refused_and_nothing_is_written(tmp_path, name, why):
    z = make_zip(tmp_path / "evil.zip", [("ok.ipynb", b"{}"), (name, b"x")])
    with pytest.raises(ArchiveError, match=why):
        unpack(z, tmp_path / "box" / "out")
    assert not (tmp_path / "box" / "out").exists()  # judged before anything is written
    assert not (tmp_path / "evil.ipynb").exists() and not (tmp_path / "box" / "evil.ipynb").exists()


def test_a_symbolic_link_entry_is_refused(tmp_path):
    secret = tmp_path / "instructor.ipynb"
    secret.write_text("the solutions", encoding="utf-8")
    z = make_zip(tmp_path / "link.zip", [symlink_entry("04_masking.ipynb", str(secret))])
    with pytest.raises(ArchiveError, match="symbolic link"):
        unpack(z, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_zip_bomb_stops_at_the_cap(tmp_path):
    z = make_zip(tmp_path / "bomb.zip", [("a.ipynb", bytes(8 * 2**20))])
    assert z.stat().st_size < 100_000  # 8 MiB of zeros, a few kB packed
    with pytest.raises(ArchiveError, match="zip bomb"):
        unpack(z, tmp_path / "out", max_bytes=2**20)
    assert not (tmp_path / "out").exists()


def test_too_many_entries_are_refused(tmp_path):
    z = make_zip(tmp_path / "many.zip", [(f"f{i}.txt", b"") for i in range(11)])
    with pytest.raises(ArchiveError, match="11 entries"):
        unpack(z, tmp_path / "out", max_files=10)


def test_not_a_zip_is_refused(tmp_path):
    (tmp_path / "fake.zip").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ArchiveError, match="not a readable zip"):
        unpack(tmp_path / "fake.zip", tmp_path / "out")


def latin1_zip(path: Path, entries, monkeypatch) -> Path:
    """An old archiver's archive: the names' bytes in Latin-1, without the UTF-8 flag."""
    monkeypatch.setattr(zipfile.ZipInfo, "_encodeFilenameFlags",
                        lambda self: (self.filename.encode("latin-1"), self.flag_bits & ~0x800))
    make_zip(path, entries)
    monkeypatch.undo()
    return path


def test_a_latin1_name_keeps_its_bytes_and_is_shown_escaped(tmp_path, monkeypatch):
    z = latin1_zip(tmp_path / "latin.zip", [("caf\xe9.ipynb", b"{}")], monkeypatch)
    dest = unpack(z, tmp_path / "out")
    assert os.listdir(os.fsencode(dest)) == [b"caf\xe9.ipynb"]  # as a folder of that name would hold it
    (name,) = os.listdir(dest)
    assert safe_text.file_name(name) == "caf\\xe9.ipynb"
    safe_text.file_name(name).encode("utf-8")  # valid UTF-8 wherever the grader shows it


@needs_bwrap
@pytest.mark.slow
def test_the_grader_takes_archives_and_refuses_evil_ones(tmp_path):
    instructor = (ROOT / "notebooks" / "04_masking.ipynb").read_bytes()
    subs = tmp_path / "subs"
    subs.mkdir()
    make_zip(subs / "zipped.zip", [("zipped/", b""), ("zipped/04_masking.ipynb", instructor)])
    make_zip(subs / "slipper.zip", [("04_masking.ipynb", instructor), ("../../04_masking.ipynb", instructor)])
    make_zip(subs / "linker.zip", [symlink_entry("04_masking.ipynb", str(ROOT / "notebooks" / "04_masking.ipynb"))])
    make_zip(subs / "bomber.zip", [("04_masking.ipynb", bytes(600 * 2**20))])
    (subs / "folder").mkdir()
    (subs / "folder" / "04_masking.ipynb").write_bytes(instructor)
    out = tmp_path / "grades.csv"
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(subs), "--out", str(out),
                          "--chapters", "04", "--timeout", "30", "--jobs", "2"], capture_output=True, text=True,
                         timeout=900, cwd=tmp_path, encoding="utf-8", errors="replace")
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    total = {r["student"]: float(r["score"]) for r in rows if r["cell"] == "TOTAL"}
    files = {r["student"]: r["status"] for r in rows if r["cell"] == "FILE"}
    assert total == {"bomber": 0.0, "folder": 9.0, "linker": 0.0, "slipper": 0.0, "zipped": 9.0}, rows
    assert "leads out" in files["slipper"] and "symbolic link" in files["linker"] and "zip bomb" in files["bomber"]
    assert not (tmp_path / "04_masking.ipynb").exists()
    assert sorted(p.name for p in subs.iterdir()) == ["bomber.zip", "folder", "linker.zip", "slipper.zip",
                                                       "zipped.zip"]


def test_a_class_in_one_archive_grades_like_its_folder(tmp_path):
    """``autograde class.zip``: the archive of the submissions folder, unpacked first (no sandbox
    needed to see it refuse a bad one)."""
    z = make_zip(tmp_path / "class.zip", [("subs/alice/04_masking.ipynb", b"{}"), ("../x", b"")])
    run = subprocess.run([sys.executable, str(ROOT / "teaching" / "autograde.py"), str(z), "--out",
                          str(tmp_path / "g.csv"), "--no-sandbox"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, encoding="utf-8", errors="replace")
    assert run.returncode != 0 and "leads out" in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "g.csv").exists() and not (tmp_path / "x").exists()
