"""What one sandbox may use, and who stops it when it uses more.

Limits on CPU time, address space and file size per process are set with ``setrlimit``
(:func:`_set_limits`, in the sandbox's first process before it starts bwrap); the memory of the
whole sandbox is counted by the kernel where the machine lets the grader make a memory cgroup
per sandbox (:class:`_MemoryCgroup`: ``memory.max`` and ``memory.swap.max``, or cgroup v1's
``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``), and watched from the grader in
any case, with the number of its processes (:class:`_Watch`). The sandbox's processes are the
first the kernel's OOM killer picks (``oom_score_adj`` 1000). When the grader runs as root, each
sandbox running at the same time has a user of its own (:func:`_claim_user`), so no two students
share a per-user limit.
"""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass(frozen=True)
class Limits:
    seconds: float = 30.0  # wall clock for each cell of the student's (replayed ones too) and each call of the check
    startup_seconds: float = 120.0  # for the sandbox to start, and for the parameters and setup cells
    total_factor: float = 4.0  # and one exercise's answer and check together: at most this many times `seconds`
    # the student's cells of one chapter (answers and their replays) together: at most this many
    # times `seconds` per exercise of the chapter (the sum of the answer cells' own limits)
    chapter_factor: float = 1.0
    cpu_seconds: int = 120  # CPU time of each process
    memory_bytes: int = 6 * 2**30  # address space (torch reserves a lot of it)
    file_bytes: int = 16 * 2**20  # largest file it may write (its printed output included)
    tmp_bytes: int = 64 * 2**20  # size of its /tmp
    shm_bytes: int = 16 * 2**20  # size of its /dev/shm (its other file systems are read-only)
    resident_bytes: int = 3 * 2**30  # memory of all its processes together (private and shared-memory pages)
    processes: int = 32  # processes at the same time (its threads not counted)
    user: int = 2_900_000_000  # when the grader is root: the first of the users the sandboxes run as, one each


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
