"""Batch across devices: data parallelism with ``DistributedDataParallel`` (Li et al. 2020).

Every rank holds the whole model and a ``1/P`` slice of each global batch. During the backward
pass DDP groups the gradients into buckets. It starts an all-reduce of each bucket as soon as
all its gradients are ready, so communication overlaps with the rest of the backward pass. The
gradients are averaged over the ``P`` ranks by the time ``backward()`` returns. With equal
slices, the mean of the ranks' mean losses is the global batch's mean loss, so every rank takes the step one process
would take on the global batch, and the weights stay equal to it (to rounding).

Gradient accumulation splits a batch in time instead of across ranks: ``k`` micro-batches, each
loss divided by ``k``, gradients summed, one step. Under DDP every backward pass all-reduces,
unless it runs inside ``model.no_sync()``: then only the last micro-batch's does, and the
gradients of all ``k`` are reduced at once (``k`` times fewer bytes).

The all-reduces DDP issues are counted by a communication hook (:func:`counting_hook`), which
sees each bucket of gradients DDP hands to the network.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from .._validate import require_positive_int
from ..models.gpt import GPT, GPTConfig
from .launch import CommLog, launch, rank_device

SMALL_GPT = {"vocab_size": 32, "context": 16, "d_model": 32, "num_heads": 4, "num_layers": 2}


def counting_hook(log: CommLog, bucket):  # no annotations: DDP checks them as objects
    """A DDP communication hook: count the bucket in ``log``, all-reduce it, divide by ``P``
    (what DDP's default hook does)."""
    buffer, world = bucket.buffer(), dist.get_world_size()
    log.record("all_reduce", "backward", buffer, world)
    work = dist.all_reduce(buffer, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(world))


def make_batches(steps: int, global_batch: int, context: int, vocab_size: int, seed: int) -> torch.Tensor:
    """Random token windows ``(steps, global_batch, context + 1)``: inputs ``[..., :-1]``,
    next-token targets ``[..., 1:]``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab_size, (steps, global_batch, context + 1), generator=g)


def train_steps(model, batches: torch.Tensor, lr: float = 0.1, accumulate: int = 1, sync=None) -> list[float]:
    """SGD on ``batches (steps, B, T + 1)``: each step's batch in ``accumulate`` micro-batches
    (each loss ``/ accumulate``), one optimiser step. ``sync(i)`` gives the context for
    micro-batch ``i`` (DDP's ``no_sync`` or nothing). Returns each step's loss."""
    require_positive_int("accumulate", accumulate)
    if batches.shape[1] % accumulate:
        raise ValueError(f"accumulate={accumulate} must divide the batch of {batches.shape[1]}")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        total = 0.0
        for i, micro in enumerate(batch.chunk(accumulate)):
            with (sync(i) if sync is not None else nullcontext()):
                loss = _loss(model, micro) / accumulate
                loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses


def _loss(model, micro):
    """Mean next-token cross-entropy, through ``model``'s own forward (DDP's hooks run)."""
    logits = model(micro[:, :-1])  # (b, T, V)
    return F.cross_entropy(logits.flatten(0, 1), micro[:, 1:].flatten())


def single_process(batches: torch.Tensor, seed: int, config: dict | None = None, lr: float = 0.1,
                   accumulate: int = 1) -> dict[str, torch.Tensor]:
    """One process on the global batches: the reference the ranks must match."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**(config or SMALL_GPT)))
    train_steps(model, batches, lr, accumulate)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _ddp_rank(rank, world_size, batches, seed, config, lr, accumulate, no_sync):
    device = rank_device()
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = GPT(GPTConfig(**config)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
    log = CommLog()
    ddp.register_comm_hook(log, counting_hook)
    local = batches.chunk(world_size, dim=1)[rank].to(device)  # (steps, B/P, T + 1): this rank's slice
    sync = (lambda i: ddp.no_sync() if i < accumulate - 1 else nullcontext()) if no_sync else None
    losses = train_steps(ddp, local, lr, accumulate, sync)
    return {"state": model.state_dict(), "losses": losses, "log": log.summary(),
            "parameters": sum(p.numel() for p in model.parameters())}


def data_parallel_training(world_size: int, batches: torch.Tensor, seed: int, *, config: dict | None = None,
                           lr: float = 0.1, accumulate: int = 1, no_sync: bool = False, timeout: float = 60.0,
                           scale: str = "cpu") -> list[dict]:
    """Train chapter 10's GPT with DDP on ``world_size`` processes, each on its ``1/P`` slice
    of every global batch. Each rank returns its ``state`` (weights), ``losses``, the number of
    ``parameters`` and the :class:`~companion.distributed.launch.CommLog` summary of DDP's all-reduces."""
    require_positive_int("world_size", world_size)
    if batches.shape[1] % (world_size * accumulate):
        raise ValueError(f"the global batch of {batches.shape[1]} must split into world_size={world_size} "
                         f"slices of accumulate={accumulate} micro-batches")
    return launch(_ddp_rank, world_size, (batches, seed, config or SMALL_GPT, lr, accumulate, no_sync),
                  timeout=timeout, scale=scale)


def ddp_bytes(parameters: int, world_size: int, accumulate: int = 1, no_sync: bool = False,
              bytes_per_element: int = 4) -> dict:
    """Per optimiser step: DDP all-reduces every gradient once per backward pass (``k`` passes
    with ``accumulate=k``, one with ``no_sync``): payload ``passes · parameters`` numbers, each
    rank sending ``2 (P - 1) / P`` of it."""
    passes = 1 if no_sync else accumulate
    payload = passes * parameters * bytes_per_element
    return {"payload": payload, "sent": 2 * (world_size - 1) * payload // world_size}
