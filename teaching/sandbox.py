"""One sandbox per student and chapter, a fresh process in it per graded answer, and the
grader's side of the conversation with them (the process protocol).

The sandbox is started by the command of :mod:`teaching.bubblewrap` (what exists in it, the
seccomp filter) within the limits of :mod:`teaching.limits` (per process, per sandbox, the
watch that kills it); the companion copy each exercise sees is :mod:`teaching.stubbing`'s.

In it, the runner (:mod:`teaching.sandbox_runner`) imports torch once and then, for each graded
answer, forks a fresh process that runs the cells and serves the check; when the exercise ends,
every process it left is killed and ``/tmp`` and ``/dev/shm`` are emptied. When the grader runs
as root, that process becomes an unprivileged user of its own before it runs anything of the
student's: one user per sandbox running at the same time.

Frames go both ways as an 8-byte length and the payload; the grader reads every reply as plain
data (:mod:`teaching.wire`: no pickle). Every read and write of a request has a deadline, and a
sandbox that overruns any of them is killed with its whole process group; the next answer then
gets a new sandbox. The message says which deadline applied, with its number of seconds (the
start-up allowance, a replayed answer's, the answer's own, or the answer and check together).
``--timeout`` counts from the moment the runner starts each answer cell, replayed earlier
answers included, not from the sandbox's start-up. The student's answer cells of one chapter,
replays included, also share one budget (:attr:`Sandbox.budget`, set by the grader: the sum of
the answer cells' own limits): replays cannot make a chapter hold a job slot for minutes.

Without bwrap, grading refuses to run unless the instructor passes ``--no-sandbox``, which
runs the student's code as the instructor's user, with the same resource limits but with the
instructor's files in reach.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import time
from pathlib import Path

import cloudpickle

from . import wire
from .bubblewrap import (  # noqa: F401 (the command: also imported from here)
    REFUSED,
    RUNNER,
    allowed_site_entries,
    bwrap_available,
    sandbox_command,
    seccomp_filter,
)
from .limits import (  # noqa: F401 (the limits: also imported from here)
    Limits,
    _claim_user,
    _MemoryCgroup,
    _set_limits,
    _Watch,
    memory_counted_by_kernel,
)
from .stubbing import _find, not_allowed_stub, prepare_course_dir, resolve_definition  # noqa: F401 (moved there)

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
        # seconds left to the student's cells of the whole chapter (answers and their replays),
        # and its total for the message: set by the grader (None: no such budget)
        self.budget: float | None = None
        self.budget_total: float = 0.0
        self._charging = False  # whether the wait now is a student's cell's (it counts against the budget)
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
            self._charging = label.startswith("answer")
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
        self._charging = True
        try:
            return self.receive(self.limits.seconds, f"your answer cell did not finish within {self.limits.seconds:g} s")
        finally:
            self._charging = False

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
        now = time.monotonic()
        own = now + seconds
        if self._charging and self.budget is not None and now + self.budget < own and \
                (self.end is None or now + self.budget < self.end):
            return now + max(self.budget, 0.0), (f"time limit: your answer cells in this chapter, replayed ones "
                                                 f"included, took more than {self.budget_total:g} s in all")
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
        began = time.monotonic()
        try:
            (n,) = struct.unpack(">Q", self._read_exact(8, deadline, why))
            if n > MAX_REPLY + 1 or n < 1:
                self._die(f"a reply of {n:,} bytes (more than {MAX_REPLY:,})")
            frame = self._read_exact(n, deadline, why)
        finally:
            if self._charging and self.budget is not None:
                self.budget -= time.monotonic() - began
        try:
            reply = wire.decode(frame[1:])
        except Exception as err:  # noqa: BLE001 (whatever decoding raises is the sender's fault, never the grader's)
            self._die(f"an unreadable reply ({err})"[:400])
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


