"""Which submitted file is which chapter, whatever an LMS or a browser did to its name.

``04_masking.ipynb``, ``04_Masking.ipynb``, ``04_masking (1).ipynb``, ``s1234567_04_masking.ipynb``
and ``Masking.ipynb`` are all chapter 4. A file that matches no chapter, or several, is
reported, never silently dropped.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import safe_text

COPY_SUFFIX = re.compile(r"(\s*\(\d+\)|\s*-\s*copy(\s*\d+)?|\s+copy(\s*\d+)?)$", re.I)


def normalise(stem: str) -> str:
    """Lower case, copy suffixes (`` (1)``, ``-copy``) removed, runs of spaces, dots and hyphens as ``_``."""
    stem = stem.strip()
    while COPY_SUFFIX.search(stem):
        stem = COPY_SUFFIX.sub("", stem)
    return re.sub(r"[\s.\-]+", "_", stem.lower()).strip("_")


def copy_number(stem: str) -> int:
    """The number a browser or LMS appended (``name (2)`` -> 2; none -> 0): later uploads count higher."""
    m = re.search(r"\((\d+)\)\s*$", stem)
    return int(m.group(1)) if m else 0


def match_chapter(filename: str, chapters: list[str]) -> list[str]:
    """The chapters a submitted file name can mean (one, or none, or several when ambiguous)."""
    stem = normalise(Path(filename).stem)
    exact = [ch for ch in chapters if ch == stem or re.search(rf"(^|_){re.escape(ch)}($|_)", stem)]
    if exact:
        return exact
    tokens = stem.split("_")
    numbers = {int(t) for t in tokens if t.isdigit() and len(t) <= 2}
    found = []
    for ch in chapters:
        number, _, slug = ch.partition("_")
        words = slug.split("_")
        has_words = all(w in tokens for w in words)
        if has_words and (not numbers or int(number) in numbers):
            found.append(ch)
        elif int(number) in numbers and any(w in tokens for w in words):
            found.append(ch)
    return found


@dataclass
class StudentFiles:
    student: str
    chapters: dict[str, Path] = field(default_factory=dict)  # chapter -> the file graded
    notes: dict[str, str] = field(default_factory=dict)  # chapter -> what else was found
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # (file name, why)


MAX_NOTEBOOK = 64 * 2**20  # bytes of one submitted notebook


def refusal(path: Path) -> str | None:
    """Why ``path`` is not a submission's own file (a link, a device, ...), or None when it is.

    Archives keep symbolic links, and a link to the instructor's notebook or to a classmate's
    would otherwise score their marks; a hard link shares another file the same way."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "refused: a symbolic link (only regular files of the student's folder are graded)"
    if not stat.S_ISREG(st.st_mode):
        return "refused: not a regular file (a device, a pipe or a socket)"
    return None


def read_regular(path: Path) -> bytes:
    """The bytes of a submitted file, read without following a link; raises ValueError for
    anything but a regular file of at most ``MAX_NOTEBOOK`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise ValueError(f"cannot open it without following links ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        data = f.read(MAX_NOTEBOOK + 1)
    if len(data) > MAX_NOTEBOOK:
        raise ValueError(f"larger than {MAX_NOTEBOOK:,} bytes")
    return data


def _inode_names(submissions: Path) -> dict[tuple[int, int], list[Path]]:
    """The regular files of every student folder, by (device, inode): hard links share one."""
    names: dict[tuple[int, int], list[Path]] = {}
    for folder in submissions.iterdir():
        if folder.is_dir() and not folder.is_symlink():
            for path in folder.iterdir():
                st = path.lstat()
                if stat.S_ISREG(st.st_mode):
                    names.setdefault((st.st_dev, st.st_ino), []).append(path)
    return names


def collect(submissions: Path, chapters: list[str]) -> list[StudentFiles]:
    """Every student folder of ``submissions`` and the chapter each of its notebooks is. Links
    and other files that are not the student's own are listed as refused, never read: a
    symbolic link, and a hard link whose other name is outside the submissions (the
    instructor's notebook). A file hard-linked between two students' folders is graded for
    both, as a copy would be, and the TOTAL row of each names the other."""
    out = []
    names = _inode_names(submissions)
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = StudentFiles(safe_text.file_name(folder.name))  # the id, valid UTF-8 whatever the name's bytes
        out.append(files)
        if folder.is_symlink():
            files.unmatched.append((folder.name, "refused: the student's folder is a symbolic link"))
            continue
        candidates: dict[str, list[Path]] = {}
        for path in sorted(folder.iterdir()):
            if path.name.startswith(".") or (path.is_dir() and not path.is_symlink()):
                continue
            why = refusal(path)
            st = path.lstat()
            if why is None and st.st_nlink > len(names[st.st_dev, st.st_ino]):
                why = "refused: a hard link to a file outside the submissions (only the student's own files are graded)"
            if why is not None:
                files.unmatched.append((path.name, why))
                continue
            if path.suffix.lower() != ".ipynb":
                files.unmatched.append((path.name, "not a notebook (.ipynb)"))
                continue
            matches = match_chapter(path.name, chapters)
            if len(matches) == 1:
                candidates.setdefault(matches[0], []).append(path)
            elif not matches:
                files.unmatched.append((path.name, f"matches no chapter ({', '.join(chapters)})"))
            else:
                files.unmatched.append((path.name, f"matches several chapters: {', '.join(matches)}"))
        for ch, paths in candidates.items():
            paths.sort(key=lambda p: (copy_number(p.stem), p.stat().st_mtime, p.name))
            files.chapters[ch] = paths[-1]
            if len(paths) > 1:
                files.notes[ch] = f"graded {paths[-1].name}, the latest of {len(paths)} files: " + \
                    ", ".join(p.name for p in paths[:-1]) + " not graded"
            st = paths[-1].lstat()
            shared = sorted({q.parent.name for q in names[st.st_dev, st.st_ino]} - {folder.name})
            if shared:
                note = f"the same file as {', '.join(shared)}'s (a hard link)"
                files.notes[ch] = f"{files.notes[ch]}; {note}" if ch in files.notes else note
    return out
