"""One training loop for every model of the course, and evaluation helpers.

``train`` moves the model and the data to the device once, shuffles with a
seeded generator, steps Adam, clips gradients, and shows a progress bar
(``companion.progress``: a widget in Jupyter, plain text without ipywidgets). The loss
is read back to the CPU (``.item()``, a device sync) only every ``log_every`` steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_positive_int, require_tensor
from .device import default_device
from .progress import tqdm


@dataclass
class History:
    """What a training run leaves behind: the logged ``steps`` and mean ``losses``
    over each logging interval, and the wall-clock ``seconds``."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``targets (B, T)``,
    ignoring positions where the target is ``pad_id``."""
    require_tensor("logits", logits)
    require_tensor("targets", targets)
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits must be (B, T, V) and targets (B, T), got logits {tuple(logits.shape)} "
                         f"and targets {tuple(targets.shape)}")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)  # (B*T, V) vs (B*T,)


def train(model: nn.Module, loss_fn: Callable[..., torch.Tensor], data: Sequence[torch.Tensor], *, steps: int,
          batch_size: int = 64, lr: float = 3e-3, seed: int = 0, device: torch.device | str | None = None,
          clip: float | None = 1.0, log_every: int = 50, progress: bool = True, desc: str = "training",
          params=None, warmup: int = 0, compile_model: bool = False) -> History:
    """Train ``model`` for ``steps`` minibatch steps of Adam.

    ``data`` is a sequence of tensors with the same first dimension (examples);
    each step draws ``batch_size`` rows of each (one shuffled pass after
    another) and calls ``loss_fn(model, *rows)``, which returns a scalar loss.
    ``params`` restricts what is optimised (default: all of ``model``).
    ``warmup``: the learning rate grows linearly from ``lr / warmup`` to ``lr`` over the
    first ``warmup`` steps, then stays (0: constant). On CUDA the forward pass runs
    under bf16 autocast. ``compile_model=True`` trains through ``torch.compile(model)``
    (it shares the model's parameters): worth it on a GPU for long runs, off by default
    because compiling takes longer than the CPU-scale runs of the chapters.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    require_positive_int("steps", steps)
    require_positive_int("batch_size", batch_size)
    require_positive_int("log_every", log_every)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0 (steps), got {warmup!r}")
    data = list(data)
    if not data:
        raise ValueError("data must hold at least one tensor")
    for i, x in enumerate(data):
        require_tensor(f"data[{i}]", x)
    n = data[0].shape[0]
    if any(x.shape[0] != n for x in data):
        raise ValueError(f"all data tensors need the same number of examples, got {[tuple(x.shape) for x in data]}")
    device = torch.device(device) if device is not None else default_device()
    model.to(device)
    step_model = torch.compile(model) if compile_model else model
    data = [x.to(device) for x in data]  # once
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters() if params is None else params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    history = History()
    running = torch.zeros((), device=device)
    order, pos = torch.randperm(n, generator=g).to(device), 0
    model.train()
    start = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, mininterval=0.5)
    for step in bar:
        if pos + batch_size > n:
            order, pos = torch.randperm(n, generator=g).to(device), 0
        idx = order[pos: pos + batch_size]
        pos += batch_size
        with autocast:
            loss = loss_fn(step_model, *(x[idx] for x in data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        running += loss.detach()
        if step % log_every == 0 or step == steps:
            k = log_every if step % log_every == 0 else step % log_every
            mean = running.item() / k  # the only sync with the device
            history.steps.append(step)
            history.losses.append(mean)
            bar.set_postfix(loss=f"{mean:.4f}")
            running.zero_()
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def predict(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Apply ``fn`` to ``tensors`` in chunks of ``batch_size`` rows under
    ``torch.inference_mode()`` and concatenate the results (dim 0)."""
    require_positive_int("batch_size", batch_size)
    n = tensors[0].shape[0]
    outs = []
    with torch.inference_mode():
        for i in range(0, n, batch_size):
            outs.append(fn(*(x[i: i + batch_size] for x in tensors)))
    width = max(o.shape[1] for o in outs) if outs[0].dim() > 1 else None
    if width is not None:  # decoders stop early: pad chunks to a common length
        outs = [F.pad(o, (0, width - o.shape[1])) if o.dim() == 2 else o for o in outs]
    return torch.cat(outs, dim=0)


def sequence_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = 0) -> tuple[float, float]:
    """``(exact, token)`` accuracy of predicted ids ``pred (B, T')`` against
    ``target (B, T)``. Positions where the target is ``pad_id`` are ignored;
    ``pred`` is cut or padded to ``T``. ``exact``: the share of rows right at
    every position; ``token``: the share of right positions."""
    require_tensor("pred", pred)
    require_tensor("target", target)
    if pred.dim() != 2 or target.dim() != 2 or pred.shape[0] != target.shape[0]:
        raise ValueError(f"pred and target must be (B, T) with the same B, got pred {tuple(pred.shape)} "
                         f"and target {tuple(target.shape)}")
    T = target.shape[1]
    pred = F.pad(pred, (0, max(0, T - pred.shape[1])), value=pad_id)[:, :T].to(target.device)  # (B, T)
    real = target != pad_id  # (B, T)
    right = (pred == target) | ~real  # (B, T)
    exact = right.all(dim=1).float().mean().item()
    token = ((pred == target) & real).sum().item() / max(int(real.sum()), 1)
    return exact, token
