"""One sandbox per student and chapter, a fresh process in it per graded answer, and the
grader's side of the conversation with them.

The sandbox is bubblewrap (``bwrap``, Debian's ``bubblewrap`` package): a new mount, PID,
network, IPC and (unless the grader is root) user namespace in which only the system's
programs, the Python installation (read-only, also a venv inside the repository), the copies
of the companion prepared for the chapter's exercises (read-only, ``/course/0``, ``/course/1``,
...), an empty, size-limited ``/tmp`` and ``/dev/shm`` exist; every other file system in it is
read-only. The course repository, the instructor notebooks, the grader's working folders, the
other submissions, the folders of ``PYTHONPATH`` and the network are not there.

In it, the runner (:mod:`teaching.sandbox_runner`) imports torch once and then, for each graded
answer, forks a fresh process that runs the cells and serves the check; when the exercise ends,
every process it left is killed and ``/tmp`` and ``/dev/shm`` are emptied. When the grader runs
as root, that process becomes an unprivileged user of its own before it runs anything of the
student's: one user per sandbox running at the same time (:func:`_claim_user`), so no two
students share a per-user limit. A seccomp filter (:func:`seccomp_filter`) refuses, in the whole
sandbox, what would let a student hide memory from the limits or leave something behind: new
namespaces (``unshare``, ``clone`` with a namespace flag, ``setns``), mounts, System V shared
memory, message queues and semaphores (which outlive the process that made them),
``memfd_create``, the kernel's keyrings (``add_key``, ``keyctl``, ``request_key``),
``ptrace``, ``bpf``, ``userfaultfd`` and ``io_uring``.

Limits on CPU time, address space and file size per process are set with ``setrlimit``; the
memory of the whole sandbox is counted by the kernel where the machine lets the grader make a
memory cgroup per sandbox (:class:`_MemoryCgroup`: ``memory.max`` and ``memory.swap.max``,
or cgroup v1's ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``), and watched from
here in any case, with the number of its processes (:class:`_Watch`). The sandbox's processes
are the first the kernel's OOM killer picks (``oom_score_adj`` 1000). Every read and write of a
request has a deadline, and a sandbox that overruns any of them is killed with its whole
process group; the next answer then gets a new sandbox. ``--timeout`` counts from the moment
the runner starts each answer cell, replayed earlier answers included, not from the sandbox's
start-up.

Without bwrap, grading refuses to run unless the instructor passes ``--no-sandbox``, which
runs the student's code as the instructor's user, with the same resource limits but with the
instructor's files in reach.
"""

from __future__ import annotations

import fcntl
import functools
import glob
import os
import platform
import re
import resource
import select
import shutil
import signal
import site
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cloudpickle

from . import wire
from .stubbing import _find, not_allowed_stub, prepare_course_dir, resolve_definition  # noqa: F401 (moved there)

RUNNER = Path(__file__).resolve().parent / "sandbox_runner.py"
MAX_REPLY = 64 * 2**20  # bytes in one reply from the sandbox
PRELOAD = ("numpy", "einops", "matplotlib", "matplotlib.pyplot")  # what the companion imports (not itself)
TAG_RELAYED, TAG_TEMPLATE = 0, 1  # who sent a frame: the exercise's process, or the runner's template
NO_SANDBOX_RISK = ("--no-sandbox runs every submission's code as your user, with your files and the network in "
                   "reach: a submission can read the solutions, change other submissions or the grader, and "
                   "forge its grade. Use it only for code you trust (your own test submissions).")


class AnswerError(Exception):
    """The student's code raised, returned something unreadable, ran too long or crashed."""


class NotConfined(AnswerError):
    """A sandbox with several companion copies whose exercises Landlock cannot confine."""


LANDLOCK_ENV = "TEACHING_SANDBOX_LANDLOCK"  # "0": never Landlock; one sandbox per companion copy


def landlock_wanted() -> bool:
    """Whether the exercises of one sandbox can share it, each confined to its own companion copy
    by Landlock (:func:`sandbox_runner.confine`); else each sandbox mounts one copy only."""
    from .sandbox_runner import landlock_abi  # noqa: PLC0415 (standard library only)

    return os.environ.get(LANDLOCK_ENV, "1") != "0" and landlock_abi() > 0


@dataclass(frozen=True)
class Limits:
    seconds: float = 30.0  # wall clock for each cell of the student's (replayed ones too) and each call of the check
    startup_seconds: float = 120.0  # for the sandbox to start, and for the parameters and setup cells
    total_factor: float = 4.0  # and one exercise's answer and check together: at most this many times `seconds`
    cpu_seconds: int = 120  # CPU time of each process
    memory_bytes: int = 6 * 2**30  # address space (torch reserves a lot of it)
    file_bytes: int = 16 * 2**20  # largest file it may write (its printed output included)
    tmp_bytes: int = 64 * 2**20  # size of its /tmp
    shm_bytes: int = 16 * 2**20  # size of its /dev/shm (its other file systems are read-only)
    resident_bytes: int = 3 * 2**30  # memory of all its processes together (private and shared-memory pages)
    processes: int = 32  # processes at the same time (its threads not counted)
    user: int = 2_900_000_000  # when the grader is root: the first of the users the sandboxes run as, one each


def bwrap_available() -> tuple[bool, str]:
    """Whether bubblewrap is installed and can create a sandbox here, and why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "true"],
                           capture_output=True, text=True, encoding="utf-8")
    if probe.returncode != 0:
        return False, f"bwrap cannot create a sandbox here: {probe.stderr.strip()}"
    return True, ""


def _bwrap_has(option: str) -> bool:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    run = subprocess.run([bwrap, "--help"], capture_output=True, text=True, encoding="utf-8", errors="replace")
    return option in run.stdout + run.stderr


# -- seccomp: what no sandbox may do ------------------------------------------------------------

_ARCHES = {  # AUDIT_ARCH_*, then the system call numbers
    "x86_64": (0xC000003E, {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "add_key": 248, "request_key": 249, "keyctl": 250, "shmget": 29, "memfd_create": 319,
        "ptrace": 101, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "clone": 56, "clone3": 435,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semget": 64, "semop": 65, "semctl": 66,
        "semtimedop": 220}),
    "aarch64": (0xC00000B7, {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "add_key": 217, "request_key": 218, "keyctl": 219, "shmget": 194, "memfd_create": 279,
        "ptrace": 117, "bpf": 280, "userfaultfd": 282, "io_uring_setup": 425, "clone": 220, "clone3": 435,
        "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192,
        "semop": 193}),
}
CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (NEWTIME: clone3 only)
REFUSED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
           "move_mount", "open_tree", "mount_setattr", "add_key", "request_key", "keyctl", "shmget", "memfd_create",
           "ptrace", "bpf", "userfaultfd", "io_uring_setup",
           "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl")  # System V IPC


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The classic-BPF program bwrap installs with ``--seccomp``: the calls in :data:`REFUSED`
    and ``clone`` with a namespace flag fail with EPERM, ``clone3`` (whose flags a filter cannot
    read) with ENOSYS, so that the C library falls back to ``clone``; every call of another
    architecture's numbering (32-bit, x32) fails. ``None`` on a machine whose numbers it lacks."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, nr = arch
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, audit), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
    if machine in (None, "x86_64") and audit == 0xC000003E:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # the x32 numbering
    for name in REFUSED:
        prog += [(jeq, 0, 1, nr[name]), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, nr["clone3"]), (ret, 0, 0, enosys),
             (jeq, 0, 4, nr["clone"]), (ld, 0, 0, 16), (jset, 0, 1, CLONE_NEW_FLAGS), (ret, 0, 0, eperm),
             (ret, 0, 0, allow), (ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


# -- memory the kernel counts ------------------------------------------------------------------

class _MemoryCgroup:
    """A memory cgroup of its own for one sandbox, where this machine lets the grader make one
    (cgroup v2 with the memory controller delegated, or cgroup v1's memory hierarchy): every page
    the sandbox's processes create is counted there, System V and POSIX shared memory, memfds
    and tmpfs files included, swap too, and the kernel stops the sandbox at ``limit``."""

    count = 0

    def __init__(self, limit: int | None):
        self.path: Path | None = None
        self.v2 = False
        if limit is None:  # none wanted
            return
        try:
            parent, self.v2 = self._parent()
            if parent is None:
                return
            _MemoryCgroup.count += 1
            path = parent / f"teaching-sandbox-{os.getpid()}-{_MemoryCgroup.count}"
            path.mkdir()
            self.path = path
            if self.v2:
                (path / "memory.max").write_text(str(limit), encoding="utf-8")
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0", encoding="utf-8")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit), encoding="utf-8")
                if (path / "memory.memsw.limit_in_bytes").exists():  # memory and swap together
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit), encoding="utf-8")
        except OSError:
            self.remove()
            self.path = None

    @staticmethod
    def _parent() -> tuple[Path | None, bool]:
        try:
            with open("/proc/self/cgroup", encoding="utf-8") as f:
                lines = [line.rstrip("\n").split(":", 2) for line in f]
        except OSError:
            return None, False
        root = Path("/sys/fs/cgroup")
        for _, controllers, rel in lines:
            if "memory" in controllers.split(",") and (root / "memory").is_dir():
                path = root / "memory" / rel.lstrip("/")
                return (path if os.access(path, os.W_OK) else None), False
        for hierarchy, _, rel in lines:
            if hierarchy == "0" and (root / "cgroup.controllers").exists():
                path = root / rel.lstrip("/")
                try:
                    delegated = "memory" in (path / "cgroup.subtree_control").read_text(encoding="utf-8").split()
                except OSError:
                    delegated = False
                return (path if delegated and os.access(path, os.W_OK) else None), True
        return None, False

    def join(self) -> None:
        """Called in the sandbox's process before it starts bwrap (no Python objects: after fork)."""
        if self.path is not None:
            fd = os.open(str(self.path / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for memory."""
        if self.path is None:
            return 0
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text(encoding="utf-8").splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(100):  # its last processes may take a moment to be gone
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def memory_counted_by_kernel() -> bool:
    """Whether this machine lets the grader make a memory cgroup per sandbox."""
    group = _MemoryCgroup(2**30)
    try:
        return group.path is not None
    finally:
        group.remove()


# -- one user per sandbox running at the same time (when the grader is root) ------------------

def _claim_user(first: int, slots: int = 4096) -> tuple[int, int | None]:
    """A user id that no other sandbox on this machine has now (``first`` + a free slot),
    held with a lock until :func:`os.close` of the returned descriptor."""
    folder = Path(tempfile.gettempdir()) / f"teaching-sandbox-users-{os.geteuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
        if not folder.is_dir() or folder.is_symlink() or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise OSError(f"{folder} is not the grader's own private folder")
    except OSError:
        return first, None
    for slot in range(slots):
        fd = os.open(folder / f"{slot}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return first + slot, fd
        except BlockingIOError:
            os.close(fd)
    return first, None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _python_paths(hidden: list[Path]) -> list[str]:
    """The folders of the Python installation (its prefixes, standard library and site-packages),
    also when it is a venv inside the repository (``repo/.venv``). Other entries of ``sys.path``
    (``PYTHONPATH``, the working folder) are not: they may hold anything, the course included.
    A folder that holds a hidden one is kept only when it is part of the installation; the
    command then hides that hidden folder under an empty one (:func:`sandbox_command`)."""
    paths = sysconfig.get_paths()
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths),
                  *site.getsitepackages()}
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        candidates.add(site.getusersitepackages())
    keep = []
    for c in sorted(candidates):
        p = Path(c).resolve()
        if not p.is_dir() or any(p == h for h in hidden):
            continue
        keep.append(str(p))
    # drop folders already inside another kept one
    return [p for p in keep if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in keep)]


GRADER_NEEDS = ("cloudpickle",)  # what the runner needs to read the grader's requests (functions by value)


def _requirements(dist) -> list[str]:
    """The names of what ``dist`` requires unconditionally (no extra, markers of this machine)."""
    from packaging.requirements import InvalidRequirement, Requirement  # noqa: PLC0415

    names = []
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


def _companion_requirements() -> list[str]:
    """The companion's own dependencies (``[project] dependencies``, no extra): from its installed
    distribution, or from the repository's ``pyproject.toml`` where it is not installed."""
    from importlib import metadata  # noqa: PLC0415

    try:
        return _requirements(metadata.distribution("attention-course-companion"))
    except metadata.PackageNotFoundError:
        import tomllib  # noqa: PLC0415

        from packaging.requirements import Requirement  # noqa: PLC0415

        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return [Requirement(r).name for r in tomllib.load(f)["project"]["dependencies"]]


@functools.lru_cache(maxsize=1)
def allowed_site_entries() -> dict[str, tuple[str, ...]]:
    """{site-packages folder: the entries in it the sandbox shows}: the files of the companion's
    dependencies and of everything they require, transitively (torch, numpy, matplotlib, einops
    and theirs), and the grader's own (:data:`GRADER_NEEDS`). Every other installed package (the
    test extra's ``transformers``, ``rotary-embedding-torch``) is not in the sandbox at all, so
    no import trick can reach it. The companion itself is each exercise's copy (``/course/i``);
    no ``.pth`` file is shown (nothing runs at the interpreter's start)."""
    from importlib import metadata  # noqa: PLC0415

    todo, seen, entries = [*_companion_requirements(), *GRADER_NEEDS], set(), {}
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen or key == "attention-course-companion":
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        todo += _requirements(dist)
        site_dir = Path(dist.locate_file("")).resolve()
        record = dist.read_text("RECORD") or ""  # path,hash,size per line (faster than dist.files)
        tops = {line.split(",", 1)[0].split("/", 1)[0] for line in record.splitlines() if line}
        tops |= {getattr(dist, "_path", Path("")).name}  # its .dist-info
        if not record:  # no RECORD: its top-level names
            tops |= {t for t in (dist.read_text("top_level.txt") or "").split() if t}
        names = entries.setdefault(str(site_dir), set())
        for top in tops:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            for candidate in (top, f"{top}.py"):
                if (site_dir / candidate).exists():
                    names.add(candidate)
            names |= {p.name for p in site_dir.glob(f"{glob.escape(top)}.*.so")}  # one-file extensions
    return {d: tuple(sorted(n)) for d, n in sorted(entries.items())}


def _site_dirs() -> list[Path]:
    """Every folder where some Python on this machine finds installed packages: this
    installation's site-packages, and the system's (``/usr/lib/python3/dist-packages``, ...),
    which ``sys.path.append`` would otherwise open."""
    found = {Path(p) for p in site.getsitepackages()}
    paths = sysconfig.get_paths()
    found |= {Path(paths[k]) for k in ("purelib", "platlib") if k in paths}
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        found.add(Path(site.getusersitepackages()))
    for pattern in ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages",
                    "/usr/lib64/python3*/*-packages", "/usr/local/lib64/python3*/*-packages"):
        found |= {Path(p) for p in glob.glob(pattern)}
    return sorted({p.resolve() for p in found if p.is_dir()})


def sandbox_command(course_dirs: list[Path], hidden: list[Path], limits: Limits, isolate: bool = True,
                    seccomp_fd: int | None = None) -> list[str]:
    """The command that starts the runner: inside bwrap, or (``isolate=False``) as it is. The
    companion copy ``course_dirs[i]`` is ``/course/i`` in the sandbox; ``seccomp_fd`` is a
    descriptor that holds :func:`seccomp_filter`'s program."""
    python = [sys.executable, "-I", "-B"]
    if not isolate:
        return [*python, str(RUNNER)]
    if os.geteuid() == 0:
        # as root, a user namespace would map the sandbox's user to root outside, who owns every
        # root-only file: instead the runner keeps only the right to change its user, and
        # becomes `limits.user` before it reads or runs anything of the student's
        unshare = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                   "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        unshare = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
        if _bwrap_has("--disable-userns"):  # bubblewrap 0.8: no user namespace inside this one
            unshare.append("--disable-userns")
    cmd = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", *unshare,
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
           "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MKL_NUM_THREADS", "1", "--setenv", "MPLBACKEND", "Agg",
           "--setenv", "GRADING_LOG", "/tmp/student.log",
           "--dev", "/dev", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
           "--proc", "/proc", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    bound = []
    for system in ("/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin"):
        if Path(system).exists():
            cmd += ["--ro-bind", system, system]
            bound.append(Path(system).resolve())
    hidden = sorted({h.resolve() for h in hidden})
    installation = [Path(p) for p in _python_paths(hidden)]
    in_hidden = [p for p in installation if any(_inside(p, h) for h in hidden)]  # a venv in the repository
    # the folders above a bound one are made by bwrap with the host's mode (/root: 0700), which
    # the unprivileged user could not pass through
    above = sorted({a for p in installation for a in p.parents if a != Path("/") and not any(
        _inside(a, b) for b in bound)}, key=lambda a: len(a.parts))
    for a in above:
        cmd += ["--perms", "0755", "--dir", str(a)]
    for path in installation:
        if path not in in_hidden:
            cmd += ["--ro-bind", str(path), str(path)]
            bound.append(path)
    # a hidden folder inside a visible one (the repository under /usr/local) is covered by an
    # empty one; a venv inside the repository is then bound on top of that
    for h in hidden:
        if any(_inside(h, b) and h != b for b in bound):
            cmd += ["--tmpfs", str(h), "--remount-ro", str(h)]
    for path in in_hidden:
        cmd += ["--ro-bind", str(path), str(path)]
    # installed packages: only what the companion needs (allowed_site_entries); each
    # site-packages folder in view is covered by an empty one, and the allowed entries are
    # bound on top of it
    allowed, covered = allowed_site_entries(), []
    for site_dir in _site_dirs():
        if not any(_inside(site_dir, v) for v in [*bound, *in_hidden]):
            continue  # not in view at all
        if any(_inside(site_dir, h) for h in hidden) and not any(_inside(site_dir, p) for p in in_hidden):
            continue  # under a hidden folder's empty cover
        covered.append(site_dir)
        cmd += ["--perms", "0755", "--tmpfs", str(site_dir)]
        for entry in allowed.get(str(site_dir), ()):
            cmd += ["--ro-bind", str(site_dir / entry), str(site_dir / entry)]
        cmd += ["--remount-ro", str(site_dir)]
    import companion  # noqa: PLC0415 (the real one, to hide it under the prepared copy)

    real = Path(companion.__path__[0]).resolve()
    for path in _python_paths(hidden):
        if str(real).startswith(path.rstrip("/") + "/") and not any(_inside(real, c) for c in covered):
            # an installed (not editable) companion outside the covered site-packages
            cmd += ["--tmpfs", str(real), "--remount-ro", str(real)]  # each exercise has its own: /course/i
    cmd += ["--perms", "0755", "--dir", "/course"]
    for i, course_dir in enumerate(course_dirs):
        cmd += ["--ro-bind", str(course_dir), f"/course/{i}"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += ["--perms", "0755", "--dir", "/grader",
            "--ro-bind", str(RUNNER), "/grader/runner.py",
            "--ro-bind", str(RUNNER.with_name("wire.py")), "/grader/wire.py",
            "--remount-ro", "/",  # bwrap's own root, a tmpfs without a size: read-only once built
            "--chdir", "/tmp", *python, "/grader/runner.py"]
    return cmd


def _set_limits(limits: Limits, group: _MemoryCgroup | None):
    def apply():
        os.setsid()
        if group is not None:
            group.join()
        try:  # the first process the kernel's OOM killer picks, before the grader (-999)
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, from ``/proc/PID/task/TID/children``."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="utf-8") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:  # it ended meanwhile
            continue
    return found


def _resident(pid: int) -> int:
    """Bytes of private and shared-memory pages of a process (shared libraries not counted)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        pass
    return total


class _Watch(threading.Thread):
    """Kills a sandbox whose processes together hold more than ``resident_bytes`` or number more
    than ``processes``, or one of whose processes the kernel killed for memory (its cgroup):
    limits per submission, which ``setrlimit`` (per process) is not."""

    def __init__(self, box: Sandbox, every: float = 0.05):
        super().__init__(daemon=True)
        self.box, self.every, self.stop = box, every, threading.Event()

    def run(self):
        limits, pid, group = self.box.limits, self.box.proc.pid, self.box.group
        memory = f"killed for using more than {limits.resident_bytes / 2**20:,.0f} MB of memory (all its processes"
        while not self.stop.wait(self.every):
            pids = _tree(pid)
            why = None
            if len(pids) > limits.processes + 4:  # bwrap, its init, the runner's template and sweeper
                why = f"killed for starting more than {limits.processes} processes"
            elif group.oom_kills():
                why = memory + ", as the kernel counts it: shared memory and files in memory included)"
            elif sum(map(_resident, pids)) > limits.resident_bytes:
                why = memory + ")"
            if why:
                self.box.killed_for = why
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return


class Sandbox:
    """A running sandbox (one student and chapter), the exercise running in it, and the requests
    the grader sends that exercise's process."""

    def __init__(self, course_dirs: list[Path], hidden: list[Path], limits: Limits, isolate: bool = True,
                 workdir: Path | None = None, preload: tuple[str, ...] = (), landlock: bool = True):
        self.limits = limits
        self.dead: str | None = None
        self.killed_for: str | None = None  # set by the watch
        self.flags: list[str] = []  # what the runner's evidence log saw (sandbox_runner.Evidence), for the CSV
        self.over = True  # no exercise is running
        self.end: float | None = None  # the deadline of the running exercise's answer and check together
        self.course_dirs = [Path(c) for c in course_dirs]
        root = isolate and os.geteuid() == 0
        self.user, self._user_lock = _claim_user(limits.user) if root else (None, None)
        self.isolate = isolate
        self.group = _MemoryCgroup(limits.resident_bytes if isolate else None)
        program = seccomp_filter() if isolate else None
        seccomp = None
        if program is not None:
            seccomp, write = os.pipe()
            os.write(write, program)  # far less than a pipe holds
            os.close(write)
        try:
            cmd = sandbox_command(self.course_dirs, hidden, limits, isolate, seccomp)
            env = None
            if not isolate:  # the same clean environment, in a folder of its own
                env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
                       "GRADING_LOG": str(workdir / "student.log")}
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         preexec_fn=_set_limits(limits, self.group), env=env, cwd=workdir, bufsize=0,
                                         pass_fds=() if seccomp is None else (seccomp,))
        except BaseException:
            self._release()
            raise
        finally:
            if seccomp is not None:
                os.close(seccomp)
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.watch = _Watch(self)
        self.watch.start()
        setup = {"user": self.user, "processes": limits.processes * 16,  # tasks of its user (threads count)
                 "isolated": isolate, "clean": ["/tmp", "/dev/shm"] if isolate else [],
                 "log": "/tmp/student.log" if isolate else str(workdir / "student.log"),
                 "preload": [*PRELOAD, *preload],
                 "landlock": isolate and landlock, "confine": isolate and len(self.course_dirs) > 1}
        self._send_raw(cloudpickle.dumps(setup), limits.startup_seconds, "the sandbox did not start")
        ready = self.receive(limits.startup_seconds, f"the sandbox did not start within {limits.startup_seconds:g} s",
                             template=True)
        if ready.get("ready") is not True:
            self._die("a malformed reply")
        self.landlock = ready.get("landlock") if type(ready.get("landlock")) is int else 0
        if setup["confine"] and self.landlock <= 0:  # every copy mounted, none of them fenced off
            self.close()
            raise NotConfined("Landlock is not available in the sandbox")

    # -- exercises -------------------------------------------------------------------------
    def start(self, job: dict, course: int) -> dict:
        """Run one exercise's cells in a fresh process: each cell before the answer within its
        own deadline (the parameters and setup cells: the start-up allowance; the others, the
        student's replayed answers included: ``seconds``), then the answer. Returns the answer's
        reply (``ok``, ``error``, ``names``)."""
        if self.dead:
            raise AnswerError(self.dead)
        if not self.over:
            self.finish()
        self.over, self.end = False, None
        self.flags = []  # this exercise's evidence only (a fresh process, a fresh log)
        self._send_raw(bytes([TAG_TEMPLATE]) + cloudpickle.dumps({"op": "exercise", **job,
                                                                  "course_dir": self._course(course)}))
        for label, _ in job["context_cells"]:
            if label in ("parameters", "setup"):
                seconds, late = self.limits.startup_seconds, f"the {label} cell did not finish within {{:g}} s"
            elif label.startswith("answer"):
                seconds, late = self.limits.seconds, f"your {label}, replayed before this one, took more than {{:g}} s"
            else:
                seconds, late = self.limits.seconds, f"the {label} cell did not finish within {{:g}} s"
            ran = self.receive(seconds, late.format(seconds))
            if ran.get("ran") != label:
                self._die("a malformed reply")
        self.end = time.monotonic() + self.limits.seconds * self.limits.total_factor  # answer and check
        return self.receive(self.limits.seconds, f"your answer cell did not finish within {self.limits.seconds:g} s")

    def _course(self, i: int) -> str:
        return f"/course/{i}" if self.isolate else str(self.course_dirs[i])

    def finish(self) -> None:
        """End the running exercise: its process and everything it left are killed and its files
        removed, and the sandbox is ready for the next one (or dead, if it was not)."""
        if self.dead or self.over:
            return
        self.end = None
        self._send_raw(bytes([TAG_TEMPLATE]) + cloudpickle.dumps({"op": "end"}))
        self.end = time.monotonic() + self.limits.seconds  # for all of it, however many frames come first
        late = f"the sandbox did not end the exercise within {self.limits.seconds:g} s"
        for _ in range(10_000):  # replies it sent that no one asked for are dropped
            try:
                self.receive(self.limits.seconds, late)
            except AnswerError:
                if self.over and not self.dead:
                    return
                raise
        self._die("a malformed reply")

    # -- frames ---------------------------------------------------------------------------
    def _deadline(self, seconds: float | None, late: str | None) -> tuple[float, str]:
        """When a wait ends, and what the row says if it does: the limit that applied, quoted."""
        seconds = seconds or self.limits.seconds
        own = time.monotonic() + seconds
        if self.end is not None and self.end < own:
            if self.over is False and late and late.startswith("the sandbox did not end"):
                return self.end, f"time limit: {late}"
            return self.end, (f"time limit: your answer and the check together took more than "
                              f"{self.limits.seconds * self.limits.total_factor:g} s")
        return own, f"time limit: {late}" if late else f"time limit: no answer within {seconds:g} s"

    def _send_raw(self, payload: bytes, seconds: float | None = None, late: str | None = None) -> None:
        """Write one request, with the same deadline as a reply: a sandbox that stops reading
        (a request larger than the pipe's buffer then blocks) is killed, never waited for."""
        if self.dead:
            raise AnswerError(self.dead)
        data = memoryview(struct.pack(">Q", len(payload)) + payload)
        deadline, why = self._deadline(seconds, late or "the student's process stopped reading (no request taken "
                                       f"within {seconds or self.limits.seconds:g} s)")
        fd = self.proc.stdin.fileno()
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die(why)
            _, ready, _ = select.select([], [fd], [], left)
            if not ready:
                continue
            try:
                data = data[os.write(fd, data[: 1 << 16]):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                self._die(self._why_ended())

    def _send(self, obj, seconds: float | None = None) -> None:
        self._send_raw(bytes([TAG_RELAYED]) + cloudpickle.dumps(obj), seconds)

    def _why_ended(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        if not self.killed_for and self.group.oom_kills():
            self.killed_for = (f"killed for using more than {self.limits.resident_bytes / 2**20:,.0f} MB of memory (all "
                               "its processes, as the kernel counts it: shared memory and files in memory included)")
        return self.killed_for if self.killed_for else \
            "killed for using too much CPU time" if code == -signal.SIGXCPU else \
            "killed for writing too much output" if code == -signal.SIGXFSZ else \
            f"the sandbox ended (exit code {code})" if code is not None else \
            "the sandbox closed its output"

    def _read_exact(self, n: int, deadline: float, late: str) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die(late)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                self._die(self._why_ended())
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def receive(self, seconds: float | None = None, late: str | None = None, template: bool = False):
        """The next reply, read as plain data only (:mod:`teaching.wire`: no pickle). A frame
        of the template that says the exercise's process ended raises :class:`AnswerError`."""
        if self.dead:
            raise AnswerError(self.dead)
        deadline, why = self._deadline(seconds, late)
        (n,) = struct.unpack(">Q", self._read_exact(8, deadline, why))
        if n > MAX_REPLY + 1 or n < 1:
            self._die(f"a reply of {n:,} bytes (more than {MAX_REPLY:,})")
        frame = self._read_exact(n, deadline, why)
        try:
            reply = wire.decode(frame[1:])
        except wire.WireError as err:
            self._die(f"an unreadable reply ({err})")
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool) or frame[0] not in (0, 1):
            self._die("a malformed reply")
        if frame[0] == TAG_TEMPLATE and not template:
            if reply.get("over") is not True:
                self._die("a malformed reply")
            self.over = True
            raise AnswerError(str(reply.get("error", "")) or "the exercise ended")
        if frame[0] == TAG_RELAYED and (template or self.over):
            self._die("a reply from the student's process when none was running")
        self.note_flags(reply.get("flags"))
        return reply

    def note_flags(self, flags) -> None:
        """Keep the evidence each reply carries, added to what earlier replies of the exercise
        carried (a log erased after one call still leaves that call's flags; for each flag, the
        latest count; strings from the student's process: capped)."""
        if isinstance(flags, list) and flags:
            seen = {f.rpartition(" (")[0] or f: f for f in self.flags}
            for f in flags[:20]:
                if isinstance(f, str):
                    seen[f[:200].rpartition(" (")[0] or f[:200]] = f[:200]
            self.flags = list(seen.values())[:20]

    def _die(self, why: str):
        self.dead = why
        self.close()
        raise AnswerError(why)

    def request(self, obj):
        if self.dead:
            raise AnswerError(self.dead)
        if self.over:
            raise AnswerError("the student's process ended")
        self._send(obj)
        reply = self.receive()
        if not reply["ok"]:
            raise AnswerError(str(reply.get("error", "an error"))[:800])
        return reply

    def _release(self) -> None:
        self.group.remove()
        if self._user_lock is not None:
            os.close(self._user_lock)
            self._user_lock = None

    def close(self) -> None:
        if getattr(self, "closed", False):
            return
        self.closed = True
        self.watch.stop.set()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.watch.join(timeout=5)
        self._release()


class Remote:
    """Stands in, in the grader, for a function or object that lives in the sandbox: calling it
    sends the arguments there and brings back the result as data."""

    def __init__(self, box: Sandbox, ref: dict, label: str):
        self._box, self._ref, self._label = box, ref, label

    def __call__(self, *args, **kwargs):
        return remote_value(self._box, self._box.request({"op": "call", **self._ref, "args": args, "kwargs": kwargs})["result"],
                      f"{self._label}(...)")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return remote_value(self._box, self._box.request({"op": "getattr", **self._ref, "attr": attr})["result"],
                      f"{self._label}.{attr}")

    def __repr__(self) -> str:
        return f"<{self._label} from the submission>"


def remote_value(box: Sandbox, encoded, label: str):
    """A value from the sandbox's ``("value", data)`` or a :class:`Remote` for ``("handle", id, ...)``."""
    if isinstance(encoded, tuple) and encoded and encoded[0] == "value" and len(encoded) == 2:
        return encoded[1]
    if isinstance(encoded, tuple) and len(encoded) == 4 and encoded[0] == "handle" and type(encoded[1]) is int:
        return Remote(box, {"handle": encoded[1]}, label)
    raise AnswerError(f"{label}: a malformed value")


