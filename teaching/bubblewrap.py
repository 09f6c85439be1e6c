"""The command that starts a sandbox: bubblewrap (``bwrap``, Debian's ``bubblewrap`` package).

A new mount, PID, network, IPC and (unless the grader is root) user namespace in which only the
system's programs, the Python installation (read-only, also a venv inside the repository) with
only the companion's dependencies installed (:func:`allowed_site_entries`), the copies of the
companion prepared for the chapter's exercises (read-only, ``/course/0``, ``/course/1``, ...),
an empty, size-limited ``/tmp`` and ``/dev/shm`` exist; every other file system in it is
read-only. The course repository, the instructor notebooks, the grader's working folders, the
other submissions, the folders of ``PYTHONPATH``, every other installed package and the network
are not there.

A seccomp filter (:func:`seccomp_filter`) refuses, in the whole sandbox, what would let a
student hide memory from the limits or leave something behind: new namespaces (``unshare``,
``clone`` with a namespace flag, ``setns``), mounts, System V shared memory, message queues and
semaphores (which outlive the process that made them), ``memfd_create``, the kernel's keyrings
(``add_key``, ``keyctl``, ``request_key``), ``ptrace``, ``bpf``, ``userfaultfd`` and ``io_uring``.
"""

from __future__ import annotations

import functools
import glob
import os
import platform
import re
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

from .limits import Limits

RUNNER = Path(__file__).resolve().parent / "sandbox_runner.py"


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
        from packaging.requirements import Requirement  # noqa: PLC0415

        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
        try:
            import tomllib  # noqa: PLC0415 (Python 3.11)

            lines = tomllib.loads(text)["project"]["dependencies"]
        except ModuleNotFoundError:  # Python 3.10: the list's quoted strings
            block = text.partition("\ndependencies = [")[2].partition("\n]")[0]
            lines = re.findall(r'^\s*"([^"]+)"', block, flags=re.M)
        return [Requirement(r).name for r in lines]


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


def _torch_dir(relative: str) -> Path | None:
    """The folder ``relative`` inside torch's package folder, where there is one."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / relative).is_dir():
            return (Path(folder) / relative).resolve()
    return None


def _torch_onnx_dir() -> Path | None:
    """torch's ``onnx`` folder (torch.onnx), where there is one: the sandbox covers it with an
    empty one, so that code that removes the runner's refusal still finds nothing to import."""
    return _torch_dir("onnx")


def _torch_inductor_passes_dir() -> Path | None:
    """torch's ``_inductor/fx_passes`` folder (its fuse_attention patterns are attention in plain
    ops; sandbox_runner.refuse_inductor_passes): covered like :func:`_torch_onnx_dir`'s."""
    return _torch_dir("_inductor/fx_passes")


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
    # torch.onnx and torch._inductor.fx_passes are refused in every exercise
    # (sandbox_runner.refuse_onnx, refuse_inductor_passes): not even on disk
    for refused in (_torch_onnx_dir(), _torch_inductor_passes_dir()):
        if refused is not None and any(_inside(refused, v) for v in [*bound, *covered]):
            cmd += ["--tmpfs", str(refused), "--remount-ro", str(refused)]
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
