"""Which submitted file is which chapter, whatever an LMS or a browser did to its name.

``04_masking.ipynb``, ``04_Masking.ipynb``, ``04_masking (1).ipynb``, ``s1234567_04_masking.ipynb``
and ``Masking.ipynb`` are all chapter 4. A file that matches no chapter, or several, is
reported, never silently dropped.
"""

from __future__ import annotations

import json
import os
import re
import stat
import unicodedata
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


def is_checkpoint(filename: str) -> bool:
    """Whether ``filename`` is a copy Jupyter saved by itself (``04_masking-checkpoint.ipynb``),
    which is graded only when the student handed in nothing else for its chapter."""
    stem = Path(filename).stem
    while COPY_SUFFIX.search(stem):
        stem = COPY_SUFFIX.sub("", stem)
    return stem.lower().rstrip().endswith("checkpoint")


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
    source: str = ""  # the folder or archive name the id came from, exactly (see shown_name)


MAX_NOTEBOOK = 16 * 2**20  # bytes of one submitted notebook, checked before it is parsed
MAX_CELLS = 2000  # cells of one submitted notebook (the course's have fewer than 200)
MAX_JSON_VALUES = 500_000  # JSON values of one notebook (objects, arrays, strings, numbers, ...)
MAX_ID = 100  # characters of a student id (an e-mail address fits)
MAX_COPIES = 20  # files of one student for one chapter: past it, none is read


def shown_name(name: str) -> str:
    """A file or folder name shown so that two different names never look the same: its bytes
    as Python writes them (``b'jos\\xe9'`` for the Latin-1 byte, ``b'jos\\\\xe9'`` for a backslash)."""
    return repr(os.fsencode(name))


def readable_name(name: str) -> str:
    """A refused id as a reader can read it: its characters in quotes, controls and bytes that
    are not UTF-8 escaped, and when it is not ASCII its escapes too (``'аlice' (\\u0430lice)``),
    so that a look-alike letter shows."""
    text = safe_text.escape_controls(safe_text.file_name(name))
    return f"'{text}'" if text.isascii() else f"'{text}' ({text.encode('ascii', 'backslashreplace').decode()})"


LMS_SUFFIX = re.compile(r"_\d+_assignsubmission_[a-z]+_?$")  # Moodle's: Name Surname_12345_assignsubmission_file_


def id_problem(name: str) -> str | None:
    """Why the folder or archive name ``name`` cannot be a student's id, or None when it can.

    An id is one plain name: not empty, not ``.`` or ``..``, no separator (``/``, ``\\``), no
    control or format character (newline, NUL, a right-to-left override), no space or dot at its
    ends (Windows drops them, so ``alice.`` would be ``alice``), no dot first (a hidden name), at
    most :data:`MAX_ID` characters, and letters of one alphabet among those that look alike
    (Latin, Cyrillic, Greek, ...: ``аlice`` with a Cyrillic ``а`` is refused), Moodle's suffix
    (``_12345_assignsubmission_file_``, :data:`LMS_SUFFIX`) left out of that count. Bytes that are
    not UTF-8 (an old archiver's Latin-1) are allowed: the id shows them escaped
    (``jos\\xe9``), and :func:`id_key` finds the names that would look the same."""
    shown = readable_name(name)
    if name in ("", ".", ".."):
        return f"refused: {shown} is not a student id (empty, '.' or '..')"
    if "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        return f"refused: the student id {shown} holds a path separator"
    text = safe_text.file_name(name)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") for ch in name.encode(
            "utf-8", "surrogateescape").decode("utf-8", "replace")):
        return f"refused: the student id {shown} holds a control or format character"
    if any(ord(ch) in _INVISIBLE for ch in name):
        return f"refused: the student id {shown} holds an invisible or blank character (a look-alike of another id?)"
    if name != name.strip() or name.endswith(".") or unicodedata.category(name[0])[0] == "Z" or \
            unicodedata.category(name[-1])[0] == "Z":
        return f"refused: the student id {shown} begins or ends with a space or ends with a dot"
    if name.startswith("."):
        return f"refused: the student id {shown} begins with a dot (a hidden name)"
    if len(text) > MAX_ID:
        return f"refused: the student id {shown[:80]}... is longer than {MAX_ID} characters"
    scripts = {unicodedata.name(ch, "").split(" ")[0] for ch in LMS_SUFFIX.sub("", text) if ch.isalpha()} \
        & _LOOK_ALIKE_SCRIPTS
    if len(scripts) > 1:
        return (f"refused: the student id {shown} mixes {' and '.join(sorted(s.title() for s in scripts))} letters "
                f"(a look-alike of another id?)")
    return None


_LOOK_ALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"}
# characters that show nothing, or a blank, in most fonts: the combining grapheme joiner, the
# Hangul fillers, the Khmer inherent vowels, the braille blank, the variation selectors
_INVISIBLE = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, *range(0x180B, 0x1810),
              *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
# a small table of letters that look like Latin ones (Cyrillic, Greek, IPA, small capitals):
# not Unicode's whole confusables list, the ones an id is likely to be forged with
_SKELETON = str.maketrans(
    "\u0430\u0432\u0435\u0456\u0458\u043a\u043c\u043d\u043e\u0440\u0441\u0442\u0443\u0445\u0455\u0501\u04bb"
    "\u03b1\u03b2\u03b5\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7\u0251\u0261\u0131\u0269\u0237"
    "\u1d00\u0299\u1d04\u1d05\u1d07\ua730\u0262\u029c\u026a\u1d0a\u1d0b\u029f\u1d0d\u0274\u1d0f\u1d18"
    "\u0280\ua731\u1d1b\u1d1c\u1d20\u1d21\u028f\u1d22",
    "abeijkmhopctyxsdh"
    "abeikvoptuxagiij"
    "abcdefghijklmnoprstuvwyz")


def id_key(student: str, look_alikes: bool = True) -> str:
    """What two ids must differ in to be two students: not only case (``Alice``, ``alice``: one
    folder on a case-insensitive file system), nor Unicode compatibility forms (``ａlice``,
    ``alice``; a composed or decomposed ``é``), nor anything the CSV writes alike (an escape
    ``jos\\xe9`` against the bytes it escapes, ``=x`` against ``'=x``), nor letters of a small
    table that look Latin (:data:`_SKELETON`: ``ѕ1234567`` in Cyrillic, ``ɑlice``, ``ᴀʟɪᴄᴇ``). The
    table is left out (``look_alikes=False``) for a name already refused as no id, which must not
    withhold the grade of the id it imitates."""
    key = unicodedata.normalize("NFKC", safe_text.cell(student)).casefold()
    return key.translate(_SKELETON) if look_alikes else key


class _TooBig(ValueError):
    pass


def _counter(start: int, limit: int):
    """Hooks for :func:`json.loads` that count the objects and numbers decoded on top of
    ``start`` and stop the decoding past ``limit``."""
    count = start

    def counted(make):
        def hook(value):
            nonlocal count
            count += 1
            if count > limit:
                raise _TooBig(f"more than {limit:,} JSON values")
            return make(value)
        return hook
    return {"object_pairs_hook": counted(dict), "parse_int": counted(int), "parse_float": counted(float),
            "parse_constant": counted(lambda name: {"NaN": float("nan"), "Infinity": float("inf"),
                                                    "-Infinity": float("-inf")}[name])}


def notebook_problem(data: bytes) -> str | None:
    """Why the bytes ``data`` of a submitted notebook are too large to be parsed, or None.

    The size is checked first. Then the JSON values are counted: the strings, arrays, ``true``,
    ``false`` and ``null`` by their bytes (at most), the objects and numbers while decoding,
    which stops past :data:`MAX_JSON_VALUES`. Then the cells are counted (a version-3
    notebook's in all its ``worksheets`` too). Only then may nbformat
    parse and validate it, which takes seconds and a lot of memory for a million values. JSON
    that does not decode is no problem here: reading the notebook says why later."""
    if len(data) > MAX_NOTEBOOK:
        return f"larger than {MAX_NOTEBOOK:,} bytes"
    rough = data.count(b'"') // 2 + sum(data.count(word) for word in (b"[", b"true", b"false", b"null"))
    if rough > MAX_JSON_VALUES:
        return f"more than {MAX_JSON_VALUES:,} JSON values"
    try:
        nb = json.loads(data, **_counter(rough, MAX_JSON_VALUES))
    except _TooBig as err:
        return str(err)
    except Exception:  # noqa: BLE001 (not JSON, or nested too deep: unreadable, said later)
        return None
    if not isinstance(nb, dict):
        return None
    cells = len(nb["cells"]) if isinstance(nb.get("cells"), list) else 0
    worksheets = nb.get("worksheets")  # nbformat 3 keeps its cells in worksheets
    for sheet in worksheets if isinstance(worksheets, list) else []:
        if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list):
            cells += len(sheet["cells"])
    if cells > MAX_CELLS:
        return f"{cells:,} cells, more than the {MAX_CELLS:,} allowed"
    return None


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
    anything but a regular file of at most ``MAX_NOTEBOOK`` bytes, or a notebook with too many
    cells or JSON values (:func:`notebook_problem`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise ValueError(f"cannot open it without following links ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_NOTEBOOK:
            raise ValueError(f"larger than {MAX_NOTEBOOK:,} bytes")
        data = f.read(MAX_NOTEBOOK + 1)
    why = notebook_problem(data)
    if why is not None:
        raise ValueError(why)
    return data


def _inode_names(folders: list[Path]) -> dict[tuple[int, int], list[Path]]:
    """The regular files of every student folder, by (device, inode): hard links share one."""
    names: dict[tuple[int, int], list[Path]] = {}
    for folder in folders:
        try:
            if not folder.is_dir() or folder.is_symlink():
                continue
            for path in folder.iterdir():
                st = path.lstat()
                if stat.S_ISREG(st.st_mode):
                    names.setdefault((st.st_dev, st.st_ino), []).append(path)
        except OSError:  # an unreadable folder: collect_folder says so in its own row
            continue
    return names


def refused(name: str, why: str, source: str | None = None) -> StudentFiles:
    """A student entry that is only a FILE row saying why ``name`` is not graded."""
    return StudentFiles(safe_text.file_name(name), unmatched=[(name, why)],
                        source=name if source is None else source)


def collect(submissions: Path, chapters: list[str]) -> list[StudentFiles]:
    """Every student folder of ``submissions`` and the chapter each of its notebooks is. Links
    and other files that are not the student's own are listed as refused, never read: a
    symbolic link, and a hard link whose other name is outside the submissions (the
    instructor's notebook). A file hard-linked between two students' folders is graded for
    both, as a copy would be, and the TOTAL row of each names the other. A folder whose name is
    no student id (:func:`id_problem`), or that cannot be read, is a FILE row with the reason."""
    out = []
    folders = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    names = _inode_names(folders)
    for folder in folders:
        why = id_problem(folder.name)
        if why is not None:
            out.append(refused(folder.name, why))
            continue
        out.append(collect_folder(folder, folder.name, chapters, names))
    return out


def collect_folder(folder: Path, student: str, chapters: list[str],
                   names: dict | None = None) -> StudentFiles:
    """The notebooks of one student's ``folder`` (see :func:`collect`), graded as ``student``
    whatever the folder is called. Never raises: any failure is a FILE row with the reason."""
    names = _inode_names([folder]) if names is None else names
    files = StudentFiles(safe_text.file_name(student), source=student)
    try:
        _collect_folder(files, folder, chapters, names)
    except Exception as err:  # noqa: BLE001 (one student's odd folder must not end the run)
        files.chapters.clear()
        files.notes.clear()
        files.unmatched.append((safe_text.file_name(folder.name),
                                f"refused: the folder cannot be read ({type(err).__name__}: {err})"))
    return files


def _collect_folder(files: StudentFiles, folder: Path, chapters: list[str], names: dict) -> None:
    if folder.is_symlink():
        files.unmatched.append((folder.name, "refused: the student's folder is a symbolic link"))
        return
    candidates: dict[str, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "__MACOSX")):  # .ipynb_checkpoints, an archiver's: never read
            continue
        if path.is_dir() and not path.is_symlink():  # a row, so that nothing disappears silently
            files.unmatched.append((path.name, "a folder inside the student's folder: not searched, nothing in it "
                                               "is graded (hand in the notebooks at the top of the folder)"))
            continue
        why = refusal(path)
        st = path.lstat()
        if why is None and st.st_nlink > len(names.get((st.st_dev, st.st_ino), [path])):
            why = "refused: a hard link to a file outside the submissions (only the student's own files are graded)"
        if why is not None:
            files.unmatched.append((path.name, why))
            continue
        if path.suffix.lower() != ".ipynb":
            files.unmatched.append((path.name, "not a notebook (.ipynb)"))
            continue
        matches = match_chapter(path.name, chapters)
        if len(matches) > 1:
            files.unmatched.append((path.name, f"matches several chapters: {', '.join(matches)}"))
            continue
        if not matches:
            files.unmatched.append((path.name, f"matches no chapter ({', '.join(chapters)})"))
            continue
        candidates.setdefault(matches[0], []).append(path)
    for ch in list(candidates):
        if len(candidates[ch]) > MAX_COPIES:  # counted before any is read: reading costs time
            paths = candidates.pop(ch)
            files.unmatched.append((ch, f"refused: {len(paths):,} files for this chapter, more than the "
                                        f"{MAX_COPIES} allowed; none of them is read or graded (hand in one)"))
            continue
        readable = []
        for path in candidates[ch]:
            try:  # the size and cells capped before anything parses it (read_regular)
                read_regular(path)
            except ValueError as err:
                files.unmatched.append((path.name, f"refused: {err}; not graded"))
                continue
            readable.append(path)
        if readable:
            candidates[ch] = readable
        else:
            del candidates[ch]
    for ch, paths in candidates.items():
        paths.sort(key=lambda p: (not is_checkpoint(p.name), copy_number(p.stem), p.stat().st_mtime, p.name))
        files.chapters[ch] = paths[-1]
        if len(paths) > 1:
            files.notes[ch] = f"graded {paths[-1].name}, the latest of {len(paths)} files (Jupyter's checkpoints " \
                              f"last): " + ", ".join(p.name for p in paths[:-1]) + " not graded"
        st = paths[-1].lstat()
        shared = sorted({q.parent.name for q in names.get((st.st_dev, st.st_ino), [])} - {folder.name})
        if shared:
            note = f"the same file as {', '.join(shared)}'s (a hard link)"
            files.notes[ch] = f"{files.notes[ch]}; {note}" if ch in files.notes else note
