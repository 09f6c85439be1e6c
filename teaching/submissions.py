"""Which submitted file is which chapter, whatever an LMS or a browser did to its name.

``04_masking.ipynb``, ``04_Masking.ipynb``, ``04_masking (1).ipynb``, ``s1234567_04_masking.ipynb``
and ``Masking.ipynb`` are all chapter 4. A file that matches no chapter, or several, is
reported, never silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

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


def collect(submissions: Path, chapters: list[str]) -> list[StudentFiles]:
    """Every student folder of ``submissions`` and the chapter each of its notebooks is."""
    out = []
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = StudentFiles(folder.name)
        candidates: dict[str, list[Path]] = {}
        for path in sorted(folder.iterdir()):
            if not path.is_file() or path.name.startswith("."):
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
        out.append(files)
    return out
