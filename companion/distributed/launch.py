"""Start ``P`` processes that talk through ``torch.distributed``, and count what they send.

``launch(fn, world_size, args)`` runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh
Python processes (``forkserver``, or ``spawn`` where there is none: each imports ``fn`` from
its module, so ``fn`` must live in a module, never in a notebook cell). Each process joins one
process group through a file in a fresh temporary directory (a ``FileStore``: no socket
listens for the rendezvous; the directory is removed afterwards), with

- the ``gloo`` backend and the CPU, or
- ``nccl`` and GPU ``cuda:rank``, only when ``scale="gpu"``, the course's device policy
  (:func:`companion.device.default_device`) gives CUDA and there is one GPU per rank.

Under gloo each rank sets ``GLOO_SOCKET_IFNAME`` to the loopback interface (``lo`` on Linux,
``lo0`` on macOS) before it joins, so gloo's data connections stay on this machine too;
otherwise gloo binds them to the address the host name resolves to.

What each rank returns comes back to the caller as a list, rank 0 first. Every group is
destroyed and every process joined, also on error: when a rank raises or dies, the others
are stopped and :class:`RankFailed` names the rank that failed first. A collective that
waits longer than ``timeout`` seconds fails instead of hanging.

:class:`CommLog` counts the collectives that the course's code calls (calls and the bytes
handed in), through the wrappers :func:`all_reduce` and :class:`RingPass`.
"""

from __future__ import annotations

import io
import os
import queue as queue_module
import shutil
import socket
import tempfile
import time
import traceback
from collections import Counter
from datetime import timedelta
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._validate import require_number, require_positive_int
from ..device import SCALES, default_device

LOOPBACK = "127.0.0.1"


class RankFailed(RuntimeError):
    """A rank raised, died or timed out; ``rank`` is the one that failed first."""

    def __init__(self, message: str, rank: int | None):
        super().__init__(message)
        self.rank = rank


def free_port() -> int:
    """A TCP port on the loopback address that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), or
    ``None`` where the system does not list one."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def choose_backend(world_size: int, scale: str = "cpu") -> str:
    """``"nccl"`` when ``scale="gpu"``, the device policy gives CUDA and every rank has a GPU
    of its own; ``"gloo"`` (on the CPU) otherwise."""
    require_positive_int("world_size", world_size)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    device = default_device(scale)
    if (scale == "gpu" and device.type == "cuda" and dist.is_nccl_available()
            and torch.cuda.device_count() >= world_size):
        return "nccl"
    return "gloo"


def rank_device() -> torch.device:
    """The device of this rank: ``cuda:rank`` under NCCL, the CPU under gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", dist.get_rank())
    return torch.device("cpu")


def _context():
    """``forkserver`` where the system has it: one server process imports torch and the course
    once, and each launch forks its ranks from it in a fraction of a second (``spawn`` imports
    torch again in every rank, seconds each). ``spawn`` elsewhere. Both start clean processes
    that import ``fn`` by name, never a copy of the caller's state."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # torch._dynamo: DistributedDataParallel imports it when built (seconds, in every rank)
        ctx.set_forkserver_preload(["companion.distributed", "torch._dynamo"])
        return ctx
    return mp.get_context("spawn")


def _peer_error(err: BaseException) -> bool:
    """True for the errors a rank gets because *another* rank went away."""
    text = str(err)
    return isinstance(err, getattr(dist, "DistError", ())) or any(
        s in text for s in ("Connection closed by peer", "Connection reset", "Broken pipe", "Timed out"))


def _rank_main(rank, world_size, store, backend, timeout, fn, args, results):
    """One process: join the group, run ``fn``, send back its result (or the error), leave."""
    if backend == "gloo":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))  # share the cores
        interface = loopback_interface()
        if interface is not None:  # gloo's connections on the loopback interface only
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout))
        if backend == "nccl":
            torch.cuda.set_device(rank)
        out = fn(rank, world_size, *args)
        buffer = io.BytesIO()
        torch.save(_to_cpu(out), buffer)  # bytes, not shared memory: the process may exit first
        results.put(("ok", rank, buffer.getvalue()))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, then re-raised
        results.put(("error", rank, _peer_error(err), f"{type(err).__name__}: {err}",
                     "".join(traceback.format_exception(err))))
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def launch(fn, world_size: int, args: tuple = (), *, timeout: float = 60.0, scale: str = "cpu") -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; return their results.

    ``fn`` must be importable (defined in a module). Raises :class:`RankFailed` naming the rank
    that failed (its traceback included) when a rank raises or dies, or when the whole run
    takes longer than ``timeout`` seconds; the other ranks are stopped, none is left behind."""
    require_positive_int("world_size", world_size)
    require_number("timeout", timeout, 0, strict=True)
    if not callable(fn) or "<locals>" in getattr(fn, "__qualname__", "<locals>") \
            or getattr(fn, "__module__", "__main__") == "__main__":
        raise TypeError(f"fn must be a function defined at the top of a module (spawn imports it), got {fn!r}")
    backend = choose_backend(world_size, scale)
    ctx = _context()
    results = ctx.Queue()
    folder = tempfile.mkdtemp(prefix="companion-rendezvous-")
    store = os.path.join(folder, "store")  # the FileStore: created by the ranks, removed below
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, store, backend, timeout, fn, args, results),
                         daemon=True) for r in range(world_size)]
    done, errors = {}, {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while True:
            _drain(results, done, errors)
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if errors or dead:
                break
            if len(done) == world_size:
                return [torch.load(io.BytesIO(done[r]), weights_only=True) for r in range(world_size)]
            if time.monotonic() > deadline:
                raise RankFailed(f"the {world_size} ranks did not finish within timeout={timeout} s "
                                 f"(finished: {sorted(done)})", None)
            wait([p.sentinel for p in procs if p.exitcode is None] + [results._reader], timeout=0.1)
        # A rank failed: give the others a moment to notice, then stop them.
        _stop(procs, grace=2.0)
        _drain(results, done, errors)
        raise _failure(procs, errors, world_size)
    finally:
        _stop(procs, grace=0.0)
        results.close()
        shutil.rmtree(folder, ignore_errors=True)


def _drain(results, done, errors) -> None:
    while True:
        try:
            message = results.get_nowait()
        except queue_module.Empty:
            return
        if message[0] == "ok":
            done[message[1]] = message[2]
        else:
            errors[message[1]] = message[2:]


def _stop(procs, grace: float) -> None:
    """Join every process; terminate (then kill) those still running after ``grace`` s."""
    end = time.monotonic() + grace
    for p in procs:
        if p.pid is not None:
            p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()


def _failure(procs, errors, world_size) -> RankFailed:
    """The error naming the rank that failed: one that raised an error of its own, else one
    that died without a word, else one that stopped because its peers went away."""
    own = [r for r, (peer, _, _) in sorted(errors.items()) if not peer]
    silent = [r for r, p in enumerate(procs) if r not in errors and p.exitcode not in (None, 0)]
    rank = (own or silent or sorted(errors) or [None])[0]
    others = sorted(r for r in range(world_size) if r != rank)
    if rank in errors:
        _, error, trace = errors[rank]
        return RankFailed(f"rank {rank} of {world_size} raised {error}; ranks {others} were stopped.\n"
                          f"Its traceback:\n{trace.rstrip()}", rank)
    code = procs[rank].exitcode if rank is not None else None
    return RankFailed(f"rank {rank} of {world_size} died (exit code {code}) without reporting an error; "
                      f"ranks {others} were stopped.", rank)


# --- counting what is sent -------------------------------------------------------------------

class CommLog:
    """Counts the collectives called through :func:`~companion.distributed.launch.all_reduce` and
    :class:`~companion.distributed.launch.RingPass`:
    it counts ``calls[(op, phase)]`` and ``payload[(op, phase)]``, the bytes of the tensors
    handed to the collective. ``sent[(op, phase)]``, the bytes this rank puts on the wire, is
    counted only for point-to-point sends (the tensor's bytes). For an all-reduce it is
    *derived*, not counted: ``2 (P - 1) / P · n`` for ``n`` bytes over ``P`` ranks, what the
    ring algorithm sends from each rank (a reduce-scatter then an all-gather, ``P - 1``
    chunks of ``n / P`` each). NCCL may choose a tree algorithm instead, and then the bytes
    on the wire differ.
    """

    def __init__(self):
        self.calls, self.payload, self.sent = Counter(), Counter(), Counter()

    def record(self, op: str, phase: str, tensor: torch.Tensor, world_size: int) -> None:
        n = tensor.numel() * tensor.element_size()
        self.calls[op, phase] += 1
        self.payload[op, phase] += n
        self.sent[op, phase] += 2 * (world_size - 1) * n // world_size if op == "all_reduce" else n

    def summary(self) -> dict:
        """Plain dict ``{"op/phase": (calls, payload bytes, sent bytes)}``."""
        return {f"{op}/{phase}": (self.calls[op, phase], self.payload[op, phase], self.sent[op, phase])
                for op, phase in sorted(self.calls)}


def all_reduce(tensor: torch.Tensor, log: CommLog | None = None, phase: str = "forward") -> torch.Tensor:
    """``dist.all_reduce`` (sum, in place) on the default group, counted in ``log``."""
    world = dist.get_world_size()
    if log is not None:
        log.record("all_reduce", phase, tensor, world)
    if world > 1:
        dist.all_reduce(tensor)
    return tensor


class RingPass:
    """One step of a ring, started: ``send`` goes to rank ``r + 1`` while a tensor of the same
    shape arrives from rank ``r - 1`` (mod ``P``). Compute on what you hold meanwhile, then
    ``wait()`` returns what arrived (Ring Attention hides the transfer behind the compute)."""

    def __init__(self, send: torch.Tensor, log: CommLog | None = None, phase: str = "forward"):
        rank, world = dist.get_rank(), dist.get_world_size()
        self.received, self.ops = send, []
        if world > 1:
            if log is not None:
                log.record("send", phase, send, world)
            self.received = torch.empty_like(send)
            self.ops = [dist.isend(send.contiguous(), (rank + 1) % world),
                        dist.irecv(self.received, (rank - 1) % world)]

    def wait(self) -> torch.Tensor:
        for op in self.ops:
            op.wait()
        return self.received


def fail_on_rank(rank: int, world_size: int, failing_rank: int, how: str = "raise") -> int:
    """A rank function to watch a failure: every rank joins an all-reduce, except
    ``failing_rank``, which first raises a ``ValueError`` (``how="raise"``) or dies without a
    word (``how="exit"``, exit code 3). The others would wait for it until the timeout; :func:`launch`
    stops them and names the rank."""
    if rank == failing_rank:
        if how == "exit":
            os._exit(3)
        raise ValueError(f"rank {rank} fails on purpose")
    return int(all_reduce(torch.ones(1)).item())


def own_tcp_addresses(rank: int, world_size: int) -> list[tuple[str, str]]:
    """A rank function (Linux only) to see where the group's sockets are: after an all-reduce,
    this process's TCP sockets as ``(local address, state)`` pairs, from ``/proc/self/fd`` and
    ``/proc/self/net/tcp`` and ``tcp6``; the address is hex as the kernel writes it, the
    state ``"0A"`` means listening."""
    all_reduce(torch.ones(1))
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/self/net/{table}", encoding="utf-8") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    found.append((fields[1].rsplit(":", 1)[0], fields[3]))
    dist.barrier()
    return found
