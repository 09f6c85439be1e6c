"""Submissions handed in as ``.zip`` archives, unpacked safely.

An LMS often hands out a class's submissions as one archive, or one archive per student. What an
archive holds is the student's choice, so :func:`unpack` refuses the whole archive, with a
reason, when any entry is not a plain file or folder inside it: an absolute path, a ``..``, a
symbolic link (or any other special file), a name longer than the file system allows
(:data:`MAX_NAME` bytes, :data:`MAX_PATH` bytes in all, :data:`MAX_DEPTH` folders deep), a file
and a folder of one name, more than ``max_files`` entries, or more than ``max_bytes`` once
unpacked (counted while unpacking, whatever sizes the archive declares, so a zip bomb stops at
the cap). Any other failure (a corrupt or truncated stream, a compression or "version needed"
this Python cannot read, an error of the file system) is an :class:`ArchiveError` too, with the
original error named: :func:`unpack` raises nothing else. Names that are not UTF-8 (old
archivers write Latin-1 or cp437) keep their bytes on disk, as a folder of such names would;
the grader shows them escaped (:func:`teaching.safe_text.file_name`). Each file unpacked keeps
its entry's date as its modification time. Nothing is written outside ``dest``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import zipfile
from pathlib import Path

from . import safe_text

MAX_FILES = 2000  # entries of one archive
MAX_CLASS_FILES = 100_000  # entries of one class's archive
MAX_BYTES = 256 * 2**20  # bytes of one archive once unpacked (12 chapters at the 16 MB cap fit)
MAX_NAME = 255  # bytes of one file or folder name (most file systems' limit)
MAX_PATH = 1024  # bytes of an entry's whole path
MAX_DEPTH = 32  # folders an entry may lie in
_CHUNK = 1 << 20


class ArchiveError(ValueError):
    """An archive refused: its message says why."""


def _entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name as the archiver wrote it: UTF-8 when it is, else its bytes kept
    (``surrogateescape``), so that :func:`safe_text.file_name` can escape them."""
    if info.flag_bits & 0x800:  # the archive says UTF-8: zipfile decoded it so
        return info.filename
    raw = info.filename.encode("cp437")  # zipfile's decoding of a name without the flag
    return raw.decode("utf-8", "surrogateescape")


def _parts(name: str, windows: bool = True) -> list[str]:
    """The folders and file name of an entry; raises ArchiveError for a path that leaves ``dest``.
    ``windows``: a ``\\`` is a separator too and ``c:`` a drive (one student's archive); in a
    class's archive the path is split at ``/`` only (:func:`unpack_class`)."""
    shown = safe_text.cell(name)
    unified = name.replace("\\", "/") if windows else name  # archivers on Windows write either separator
    if unified.startswith("/") or (windows and len(unified) > 1 and unified[1] == ":"):
        raise ArchiveError(f"refused archive: the entry {shown!r} is an absolute path")
    parts = [p for p in unified.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"refused archive: the entry {shown!r} leads out of the archive's folder (..)")
    sizes = [len(os.fsencode(p)) for p in parts]
    if len(parts) > MAX_DEPTH or sum(sizes) + len(parts) > MAX_PATH or any(n > MAX_NAME for n in sizes):
        raise ArchiveError(f"refused archive: the entry {shown[:100]!r}... is too long or too deep ({len(parts)} "
                           f"parts, {sum(sizes) + len(parts):,} bytes; at most {MAX_DEPTH} parts of {MAX_NAME} "
                           f"bytes, {MAX_PATH} in all)")
    return parts


def unpack(archive: Path, dest: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Path:
    """Unpack ``archive`` into the new folder ``dest`` and return ``dest``, or raise
    :class:`ArchiveError` (then ``dest`` is removed) for an archive that is not a plain tree of
    files and folders within the caps."""
    dest.mkdir(parents=True)
    try:
        _unpack(archive, dest, max_files, max_bytes)
    except ArchiveError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except Exception as err:  # noqa: BLE001 (whatever an archive does, it is refused with the reason)
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveError(f"refused archive: it cannot be unpacked ({type(err).__name__}: "
                           f"{safe_text.cell(str(err))[:300]})") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _open(archive: Path, max_files: int) -> zipfile.ZipFile:
    try:
        zf = zipfile.ZipFile(archive)
    except Exception as err:  # noqa: BLE001 (BadZipFile, OSError, NotImplementedError, ...)
        raise ArchiveError(f"refused archive: not a readable zip file ({type(err).__name__}: "
                           f"{safe_text.cell(str(err))[:300]})") from None
    if len(zf.infolist()) > max_files:
        zf.close()
        raise ArchiveError(f"refused archive: {len(zf.infolist())} entries, more than the {max_files} allowed")
    return zf


def _unpack(archive: Path, dest: Path, max_files: int, max_bytes: int) -> None:
    with _open(archive, max_files) as zf:
        _write(zf, _plan(zf.infolist()), dest, max_bytes)


def _plan(entries: list[zipfile.ZipInfo], skip: int = 0,
          windows: bool = True) -> list[tuple[zipfile.ZipInfo, list[str], bool]]:
    """(entry, its parts, whether it is a folder) for every entry, the first ``skip`` parts
    left out; raises ArchiveError for the first entry that is not a plain file or folder inside
    the archive's folder."""
    plan, seen = [], set()
    for info in entries:  # every entry judged before anything is written
        name = _entry_name(info)
        parts = _parts(name, windows)[skip:]
        mode = info.external_attr >> 16
        shown = safe_text.cell(name)
        if stat.S_ISLNK(mode):
            raise ArchiveError(f"refused archive: the entry {shown!r} is a symbolic link")
        kind = stat.S_IFMT(mode)  # 0 when the archiver wrote no file type (zipfile's writestr)
        is_dir = info.is_dir() or kind == stat.S_IFDIR
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise ArchiveError(f"refused archive: the entry {shown!r} is not a regular file")
        if info.flag_bits & 0x1:
            raise ArchiveError(f"refused archive: the entry {shown!r} is encrypted")
        if not parts:
            continue
        key = tuple(parts)
        if key in seen and not is_dir:
            raise ArchiveError(f"refused archive: two entries named {safe_text.cell('/'.join(parts))!r}")
        seen.add(key)
        plan.append((info, parts, is_dir))
    files = {tuple(parts) for _, parts, is_dir in plan if not is_dir}
    for _, parts, _ in plan:  # a file and a folder of one name: a/b as a file and a/b/c
        for n in range(1, len(parts)):
            if tuple(parts[:n]) in files:
                raise ArchiveError(f"refused archive: {safe_text.cell('/'.join(parts[:n]))!r} is both a file and "
                                   f"a folder")
    dirs = {tuple(parts) for _, parts, is_dir in plan if is_dir}
    if files & dirs:
        raise ArchiveError(f"refused archive: {safe_text.cell('/'.join(min(files & dirs)))!r} is both a file and "
                           f"a folder")
    return plan


def _write(zf: zipfile.ZipFile, plan: list, dest: Path, max_bytes: int) -> None:
    total = 0
    for info, parts, is_dir in plan:
        folder = dest.joinpath(*(parts if is_dir else parts[:-1]))
        folder.mkdir(parents=True, exist_ok=True)
        if is_dir:
            continue
        target = folder / parts[-1]
        if target.is_dir():
            raise ArchiveError(f"refused archive: {safe_text.cell('/'.join(parts))!r} is both a file and a folder")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            try:
                with zf.open(info) as src:
                    while chunk := src.read(_CHUNK):
                        total += len(chunk)
                        if total > max_bytes:
                            raise ArchiveError(f"refused archive: more than {max_bytes:,} bytes once unpacked "
                                               f"(a zip bomb?)")
                        out.write(chunk)
            except ArchiveError:
                raise
            except Exception as err:  # noqa: BLE001 (zlib.error, EOFError, NotImplementedError, ...)
                raise ArchiveError(f"refused archive: the entry {safe_text.cell('/'.join(parts))!r} cannot be "
                                   f"read ({type(err).__name__}: {safe_text.cell(str(err))[:300]})") from None
        _set_date(target, info)


def _set_date(target: Path, info: zipfile.ZipInfo) -> None:
    """The unpacked file's modification time is its entry's date in the archive (local time, as
    zip stores it), so that "the latest copy" means the latest saved, not the last unpacked."""
    with contextlib.suppress(ValueError, OverflowError, OSError):
        when = time.mktime((*info.date_time, 0, 0, -1))
        os.utime(target, (when, when), follow_symlinks=False)


def _class_parts(info: zipfile.ZipInfo) -> list[str]:
    """An entry's parts in a class's archive: split at ``/`` only (a ``\\`` or ``:`` is part
    of a name); an absolute entry's first part keeps its ``/`` (``/alice``), so it is no folder
    of the archive's and never one student's."""
    name = _entry_name(info)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/"):
        parts = ["/" + (parts[0] if parts else ""), *parts[1:]]
    return parts


def _ignored(name: str) -> bool:
    return name != ".." and name.startswith((".", "__MACOSX"))


def _no_folder(name: str) -> str | None:
    """Why the top part ``name`` of a class archive's entry is no student's folder, or None: it
    holds a ``/`` (an absolute entry), a ``\\`` or a ``:`` (a separator or drive on Windows)."""
    if any(ch in name for ch in "/\\:"):
        return (f"refused: the folder name {safe_text.cell(name)!r} holds a '/', '\\' or ':' (an absolute path, a "
                f"separator or a drive on Windows), so it is no student id; nothing of it is unpacked or graded")
    return None


def _wrapper(entries: list[tuple[zipfile.ZipInfo, list[str]]]) -> str | None:
    """The archive's one top folder of student folders, or None when its top folders are the
    students' own. A top folder wraps the class when it is the only one (loose files beside it,
    a README, are allowed; a folder refused by :func:`_no_folder` is no folder) and it holds no
    notebook of its own: ``class/alice/04.ipynb`` and an entry ``class/`` for the folder
    itself, while ``alice/04_masking.ipynb`` is one student."""
    folders = {parts[0] for info, parts in entries if len(parts) > 1 or info.is_dir()}
    if len(folders) != 1:
        return None
    (top,) = folders
    own = any(len(parts) == 2 and parts[0] == top and not info.is_dir() and parts[1].lower().endswith(".ipynb")
              for info, parts in entries)
    return None if own else top


def _remove_inside(dest: Path, target: Path) -> None:
    """Remove ``target``, a student's folder or file, only when it lies strictly inside ``dest``
    once every link and ``..`` of its folder is resolved: the clean-up never leaves ``dest``."""
    home, real = dest.resolve(), target.parent.resolve() / target.name
    if target.name in ("", ".", "..") or home not in real.parents:
        return
    if real.is_dir() and not real.is_symlink():
        shutil.rmtree(real)
    elif real.exists() or real.is_symlink():
        real.unlink()


def unpack_class(archive: Path, dest: Path, max_files: int = MAX_CLASS_FILES,
                 max_bytes: int = MAX_BYTES) -> tuple[Path, dict[str, str]]:
    """Unpack a whole class's archive into the new folder ``dest``: the folder of student
    folders (inside every single wrapping folder, ``Downloads/class/``, :func:`_wrapper`, else
    ``dest``) and ``{folder name: why}`` for each student folder (or loose file) refused. Paths
    are split at ``/`` only. Each student's entries are judged and unpacked on their own, with
    :func:`unpack`'s rules and caps, so one student's bad entry refuses that student only; a top
    folder whose name holds a ``\\`` or ``:``, and an absolute entry (``/alice/x``, grouped as
    ``/alice``), is refused on its own (:func:`_no_folder`). Raises :class:`ArchiveError` only
    for what is no student's: an unreadable archive, too many entries, an entry whose top part
    is ``..`` or that leads out of the wrapping folder. Nothing is written or removed outside
    ``dest``."""
    dest.mkdir(parents=True)
    try:
        with _open(archive, max_files) as zf:
            entries = []
            for info in zf.infolist():
                parts = _class_parts(info)
                if not parts:
                    continue  # an empty name ("."): nothing to unpack
                if parts[0] == "..":
                    _plan([info], windows=False)  # an entry of no student's: refuses the archive with the reason
                if _no_folder(parts[0]) or not _ignored(parts[0]):  # __MACOSX/, .DS_Store: an archiver's
                    entries.append((info, parts))
            refused = {}
            wrappers: list[str] = []  # Downloads/class/alice/...: each single wrapping folder unwrapped
            while True:
                for _, parts in entries:  # x:y/, /alice/: refused on its own, never a classmate's
                    if _no_folder(parts[0]):
                        refused[parts[0]] = _no_folder(parts[0])
                entries = [(info, parts) for info, parts in entries if not _no_folder(parts[0])]
                top = _wrapper(entries)
                if top is None:
                    break
                inside = []
                for info, parts in entries:
                    if parts[0] != top:  # a loose file beside the class's folder: no student's
                        if parts[-1].lower().endswith((".ipynb", ".zip")):
                            where = "/".join([*wrappers, parts[0]])
                            refused[where] = (f"refused: {safe_text.cell(where)!r} is a loose file beside the "
                                              f"class's folder {safe_text.cell('/'.join([*wrappers, top]))!r}, "
                                              f"no student's; not graded")
                        continue
                    if len(parts) == 1:
                        continue  # the entry of the top folder itself
                    if parts[1] == "..":
                        _plan([info], windows=False)  # class/../x: refuses the archive with the reason
                    inside.append((info, parts[1:]))
                wrappers.append(top)
                entries = inside
            groups: dict[str, list] = {}
            for info, parts in entries:
                groups.setdefault(parts[0], []).append(info)
            root = dest.joinpath(*wrappers)
            root.mkdir(parents=True, exist_ok=True)
            for student, infos in groups.items():
                try:
                    _write(zf, _plan(infos, skip=len(wrappers), windows=False), root, max_bytes)
                except Exception as err:  # noqa: BLE001 (this student's entries only)
                    why = str(err) if isinstance(err, ArchiveError) else \
                        f"refused archive: it cannot be unpacked ({type(err).__name__}: {safe_text.cell(str(err))[:300]})"
                    refused[student] = why
                    with contextlib.suppress(Exception):
                        _remove_inside(dest, root / student)
    except Exception as err:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(err, ArchiveError):
            raise
        raise ArchiveError(f"refused archive: it cannot be unpacked ({type(err).__name__}: "
                           f"{safe_text.cell(str(err))[:300]})") from None
    return root, refused


def top_folder(dest: Path) -> Path:
    """``dest``, or the one folder it holds when it holds nothing else (an archive of a folder)."""
    inside = [p for p in dest.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if len(inside) == 1 and inside[0].is_dir() and not inside[0].is_symlink():
        return inside[0]
    return dest
