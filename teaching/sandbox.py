"""One throw-away sandbox per graded answer, and the grader's side of the conversation with it.

The sandbox is bubblewrap (``bwrap``, Debian's ``bubblewrap`` package): a new mount, PID,
network, IPC and (unless the grader is root) user namespace in which only the system's
programs, the Python installation (read-only, also a venv inside the repository), a copy of
the companion prepared for the exercise (read-only), an empty, size-limited ``/tmp`` and
``/dev/shm`` exist; every other file system in it is read-only. The course repository, the
instructor notebooks, the grader's working folders, the other submissions, the folders of
``PYTHONPATH`` and the network are not there. When the grader runs as root, the runner
becomes the unprivileged ``Limits.user`` before it runs anything of the student's. Limits on
CPU time, address space and file size per process are set with ``setrlimit`` before it
starts; the memory and the number of processes of the whole sandbox are watched from here
(:class:`_Watch`); every read and write of a request has a deadline, and a sandbox that
overruns any of them is killed with its whole process group. ``--timeout`` counts from the
moment the runner starts the answer cell, not from the sandbox's start-up.

Without bwrap, grading refuses to run unless the instructor passes ``--no-sandbox``, which
runs the student's code as the instructor's user, with the same resource limits but with the
instructor's files in reach.
"""

from __future__ import annotations

import os
import resource
import select
import shutil
import signal
import site
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cloudpickle

from . import wire
from .stubbing import _find, not_allowed_stub, prepare_course_dir, resolve_definition  # noqa: F401 (moved there)

RUNNER = Path(__file__).resolve().parent / "sandbox_runner.py"
MAX_REPLY = 64 * 2**20  # bytes in one reply from the sandbox
NO_SANDBOX_RISK = ("--no-sandbox runs every submission's code as your user, with your files and the network in "
                   "reach: a submission can read the solutions, change other submissions or the grader, and "
                   "forge its grade. Use it only for code you trust (your own test submissions).")


class AnswerError(Exception):
    """The student's code raised, returned something unreadable, ran too long or crashed."""


@dataclass(frozen=True)
class Limits:
    seconds: float = 30.0  # wall clock for the answer cell and, separately, for each call of the check
    startup_seconds: float = 120.0  # for the sandbox to start and run the cells before the answer (not counted above)
    total_factor: float = 4.0  # and all of one exercise together: at most this many times `seconds`
    cpu_seconds: int = 120  # CPU time of the whole sandbox
    memory_bytes: int = 6 * 2**30  # address space (torch reserves a lot of it)
    file_bytes: int = 16 * 2**20  # largest file it may write (its printed output included)
    tmp_bytes: int = 64 * 2**20  # size of its /tmp
    shm_bytes: int = 16 * 2**20  # size of its /dev/shm (its other file systems are read-only)
    resident_bytes: int = 3 * 2**30  # memory of all its processes together (private and shared-memory pages)
    processes: int = 32  # processes at the same time (its threads not counted)
    user: int = 65534  # the unprivileged user it runs as when the grader is root (nobody)


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


def sandbox_command(course_dir: Path, hidden: list[Path], limits: Limits, isolate: bool = True) -> list[str]:
    """The command that starts the runner: inside bwrap, or (``isolate=False``) as it is."""
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
        unshare = ["--unshare-all", "--cap-drop", "ALL"]
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
    import companion  # noqa: PLC0415 (the real one, to hide it under the prepared copy)

    real = Path(companion.__path__[0]).resolve()
    for path in _python_paths(hidden):
        if str(real).startswith(path.rstrip("/") + "/"):  # an installed (not editable) companion
            cmd += ["--ro-bind", str(course_dir / "companion"), str(real)]
    cmd += ["--ro-bind", str(course_dir), "/course", "--perms", "0755", "--dir", "/grader",
            "--ro-bind", str(RUNNER), "/grader/runner.py",
            "--ro-bind", str(RUNNER.with_name("wire.py")), "/grader/wire.py",
            "--remount-ro", "/",  # bwrap's own root, a tmpfs without a size: read-only once built
            "--chdir", "/tmp", *python, "/grader/runner.py"]
    return cmd


def _set_limits(limits: Limits):
    def apply():
        os.setsid()
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
    than ``processes``: a limit per submission, which ``setrlimit`` (per process) is not."""

    def __init__(self, box: Sandbox, every: float = 0.05):
        super().__init__(daemon=True)
        self.box, self.every, self.stop = box, every, threading.Event()

    def run(self):
        limits, pid = self.box.limits, self.box.proc.pid
        while not self.stop.wait(self.every):
            pids = _tree(pid)
            why = None
            if len(pids) > limits.processes + 2:  # bwrap and its init inside
                why = f"killed for starting more than {limits.processes} processes"
            elif sum(map(_resident, pids)) > limits.resident_bytes:
                why = f"killed for using more than {limits.resident_bytes / 2**30:g} GB of memory (all its processes)"
            if why:
                self.box.killed_for = why
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return


class Sandbox:
    """A running student process (one answer), and the requests the grader sends it."""

    def __init__(self, job: dict, course_dir: Path, hidden: list[Path], limits: Limits, isolate: bool = True,
                 workdir: Path | None = None):
        self.limits = limits
        self.dead: str | None = None
        self.killed_for: str | None = None  # set by the watch
        self.flags: list[str] = []  # what the runner's evidence log saw (sandbox_runner.Evidence), for the CSV
        self.end = time.monotonic() + limits.startup_seconds  # until the answer starts; then for the exercise
        cmd = sandbox_command(course_dir, hidden, limits, isolate)
        env = None
        if not isolate:  # the same clean environment, in a folder of its own
            env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
                   "GRADING_LOG": str(workdir / "student.log")}
            job = {**job, "course_dir": str(course_dir)}
        job = {**job, "user": limits.user if isolate and os.geteuid() == 0 else None,
               "processes": limits.processes * 16}  # tasks of its user (threads count), a backstop for the watch
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     preexec_fn=_set_limits(limits), env=env, cwd=workdir, bufsize=0)
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.watch = _Watch(self)
        self.watch.start()
        self._send(job, limits.startup_seconds)
        # the runner says when the answer cell starts: --timeout counts from there, so a slow
        # start (bwrap, importing torch, the setup cells on a busy machine) costs no one their points
        started = self.receive(limits.startup_seconds, "time limit: the sandbox did not start and run the cells "
                                                       f"before the answer within {limits.startup_seconds:g} s")
        if started.get("started") is not True:
            self._die("a malformed reply")
        self.end = time.monotonic() + limits.seconds * limits.total_factor  # for the whole exercise

    # -- frames ---------------------------------------------------------------------------
    def _send(self, obj, seconds: float | None = None) -> None:
        """Write one request, with the same deadline as a reply: a sandbox that stops reading
        (a request larger than the pipe's buffer then blocks) is killed, never waited for."""
        payload = cloudpickle.dumps(obj)
        data = memoryview(struct.pack(">Q", len(payload)) + payload)
        deadline = min(time.monotonic() + (seconds or self.limits.seconds), self.end)
        fd = self.proc.stdin.fileno()
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die(f"time limit: the student's process stopped reading (no request taken within "
                          f"{self.limits.seconds:g} s)")
            _, ready, _ = select.select([], [fd], [], left)
            if not ready:
                continue
            try:
                data = data[os.write(fd, data[: 1 << 16]):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                self._die("the student's process ended (it exited or crashed)")

    def _read_exact(self, n: int, deadline: float, late: str | None = None) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                self._die(late if late else f"time limit: no answer within {self.limits.seconds:g} s"
                          if time.monotonic() < self.end
                          else f"time limit: the exercise took more than {self.limits.seconds * self.limits.total_factor:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                try:
                    code = self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                why = self.killed_for if self.killed_for else \
                    "killed for using too much CPU time" if code == -signal.SIGXCPU else \
                    "killed for writing too much output" if code == -signal.SIGXFSZ else \
                    f"the student's process ended (exit code {code})" if code is not None else \
                    "the student's process closed its output"
                self._die(why)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def receive(self, seconds: float | None = None, late: str | None = None):
        """The next reply, read as plain data only (:mod:`teaching.wire`: no pickle)."""
        if self.dead:
            raise AnswerError(self.dead)
        deadline = min(time.monotonic() + (seconds or self.limits.seconds), self.end)
        (n,) = struct.unpack(">Q", self._read_exact(8, deadline, late))
        if n > MAX_REPLY:
            self._die(f"a reply of {n:,} bytes (more than {MAX_REPLY:,})")
        payload = self._read_exact(n, deadline, late)
        try:
            reply = wire.decode(payload)
        except wire.WireError as err:
            self._die(f"an unreadable reply ({err})")
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self._die("a malformed reply")
        self.note_flags(reply.get("flags"))
        return reply

    def note_flags(self, flags) -> None:
        """Keep the evidence the latest reply carries (the runner's log is cumulative; strings
        from the student's process: capped)."""
        if isinstance(flags, list) and flags:
            self.flags = [f[:200] for f in flags[:20] if isinstance(f, str)]

    def _die(self, why: str):
        self.dead = why
        self.close()
        raise AnswerError(why)

    def request(self, obj):
        if self.dead:
            raise AnswerError(self.dead)
        self._send(obj)
        reply = self.receive()
        if not reply["ok"]:
            raise AnswerError(str(reply.get("error", "an error"))[:800])
        return reply

    def close(self) -> None:
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


class Remote:
    """Stands in, in the grader, for a function or object that lives in the sandbox: calling it
    sends the arguments there and brings back the result as data."""

    def __init__(self, box: Sandbox, ref: dict, label: str):
        self._box, self._ref, self._label = box, ref, label

    def __call__(self, *args, **kwargs):
        return decode(self._box, self._box.request({"op": "call", **self._ref, "args": args, "kwargs": kwargs})["result"],
                      f"{self._label}(...)")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return decode(self._box, self._box.request({"op": "getattr", **self._ref, "attr": attr})["result"],
                      f"{self._label}.{attr}")

    def __repr__(self) -> str:
        return f"<{self._label} from the submission>"


def decode(box: Sandbox, encoded, label: str):
    """A value from the sandbox's ``("value", data)`` or a :class:`Remote` for ``("handle", id, ...)``."""
    if isinstance(encoded, tuple) and encoded and encoded[0] == "value" and len(encoded) == 2:
        return encoded[1]
    if isinstance(encoded, tuple) and len(encoded) == 4 and encoded[0] == "handle" and type(encoded[1]) is int:
        return Remote(box, {"handle": encoded[1]}, label)
    raise AnswerError(f"{label}: a malformed value")


