"""One training loop for every model of the course, and evaluation helpers.

``train`` moves the model and the data to the device once, shuffles with a
seeded generator, steps Adam, clips gradients, and shows a progress bar
(``companion.progress``: a widget in Jupyter, plain text without ipywidgets). The loss
is read back to the CPU (``.item()``, a device sync) only every ``log_every`` steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_float, require_int, require_number, require_positive_int, require_seed, require_tensor
from .device import default_device
from .progress import tqdm


@dataclass
class History:
    """What a training run leaves behind: the logged ``steps`` and mean ``losses``
    over each logging interval, the wall-clock ``seconds``, and, when the run clips
    gradients, ``grad_norms``: the total gradient norm ``‖g‖`` of every step *before*
    clipping (clipping acted on the steps where it exceeds ``clip``)."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    grad_norms: list[float] = field(default_factory=list)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``targets (B, T)``,
    ignoring positions where the target is ``pad_id``:
    ``Σ_{real t} -log softmax(logits_t)[y_t] / #real``.

    A batch whose every target is padding has nothing to learn: its loss is 0 (with a
    zero gradient), not the NaN of 0 / 0. No value is read back from the device.
    """
    require_float("logits", logits)
    require_tensor("targets", targets)
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer token ids, got dtype {targets.dtype}")
    require_int("pad_id", pad_id)
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits must be (B, T, V) and targets (B, T), got logits {tuple(logits.shape)} "
                         f"and targets {tuple(targets.shape)}")
    if targets.device.type == "cpu" and targets.numel():  # no device sync on an accelerator
        real = targets[targets != pad_id]
        if real.numel() and (int(real.min()) < 0 or int(real.max()) >= logits.shape[-1]):
            raise ValueError(f"targets must be token ids in [0, V={logits.shape[-1]}) (or pad_id={pad_id}), "
                             f"got range [{int(real.min())}, {int(real.max())}]")
    total = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id,
                            reduction="sum")  # (B*T, V) vs (B*T,) -> summed over the real targets
    count = (targets != pad_id).sum().clamp(min=1)  # 0 real targets: 0 / 1 = 0, not 0 / 0
    return total / count


def train(model: nn.Module, loss_fn: Callable[..., torch.Tensor], data: Sequence[torch.Tensor], *, steps: int,
          batch_size: int = 64, lr: float = 3e-3, seed: int = 0, device: torch.device | str | None = None,
          clip: float | None = 1.0, log_every: int = 50, progress: bool = True, desc: str = "training",
          params=None, warmup: int = 0, compile_model: bool | str = False,
          lr_min: float | None = None, on_log: Callable[[int, nn.Module], None] | None = None) -> History:
    """Train ``model`` for ``steps`` minibatch steps of Adam.

    ``data`` is a sequence of tensors with the same first dimension (examples);
    each step draws ``batch_size`` rows of each (one shuffled pass after
    another) and calls ``loss_fn(model, *rows)``, which returns a scalar loss.
    ``params`` restricts what is optimised (default: all of ``model``).
    ``warmup``: the learning rate grows linearly from ``lr / warmup`` to ``lr`` over the
    first ``warmup`` steps, then stays (0: constant); :func:`lr_at` gives its value at
    every step. ``lr_min``: after the warmup the rate falls along a half cosine from ``lr`` to
    ``lr_min`` at the last step (``None``: it stays at ``lr``). ``clip``: the gradient is rescaled to norm ``clip`` on steps where its total
    norm is larger, ``g <- g · min(1, clip / ‖g‖)`` (``None``: never); the norms before
    clipping are kept in ``History.grad_norms``. On CUDA the forward pass runs
    under autocast (:func:`mixed_precision`: bfloat16 where the GPU has it, else float16 with a
    gradient scaler). ``compile_model=True`` (or a mode such as ``"reduce-overhead"``, CUDA
    graphs) trains through ``torch.compile(model)`` (it shares the model's parameters): worth it
    on a GPU for long runs, off by default because compiling takes longer than the CPU-scale
    runs of the chapters.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model, *rows), got {type(loss_fn).__name__}")
    require_positive_int("steps", steps)
    require_number("lr", lr, 0.0, strict=True)
    require_seed("seed", seed)
    # clip <= 0 or NaN would scale every gradient by a negative or NaN factor (ascent, or NaN weights)
    require_number("clip", clip, 0.0, strict=True, allow_none=True)
    require_positive_int("batch_size", batch_size)
    require_positive_int("log_every", log_every)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0 (steps), got {warmup!r}")
    require_number("lr_min", lr_min, 0.0, allow_none=True)
    if on_log is not None and not callable(on_log):
        raise TypeError(f"on_log must be callable as on_log(step, model), got {type(on_log).__name__}")
    data = list(data)
    if not data:
        raise ValueError("data must hold at least one tensor")
    for i, x in enumerate(data):
        require_tensor(f"data[{i}]", x)
    n = data[0].shape[0] if data[0].dim() else 0
    if any(x.dim() == 0 or x.shape[0] != n for x in data):
        raise ValueError(f"all data tensors need the same number of examples, got {[tuple(x.shape) for x in data]}")
    if n == 0:
        raise ValueError(f"data holds no examples (first dimension 0), got shapes {[tuple(x.shape) for x in data]}")
    device = _device(device)
    model.to(device)
    if compile_model not in (False, True, "default", "reduce-overhead", "max-autotune"):
        raise ValueError(f"compile_model must be False, True or a torch.compile mode ('reduce-overhead', "
                         f"'max-autotune'), got {compile_model!r}")
    if compile_model:
        step_model = torch.compile(model, mode=None if compile_model is True else compile_model)
    else:
        step_model = model
    data = [x.to(device) for x in data]  # once
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters() if params is None else params, lr=lr)
    # LambdaLR multiplies lr by the factor of its step counter s = 0, 1, ...: optimiser step s + 1
    fraction = None if lr_min is None else lr_min / lr
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(min(s + 1, steps), 1.0, warmup, steps, fraction))
    amp_dtype = mixed_precision(device)
    autocast = torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None)
    # float16 needs its loss scaled so that small gradients do not underflow; bfloat16 does not
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    history = History()
    running = torch.zeros((), device=device)
    grad_norms = []  # ‖g‖ before clipping, one 0-d tensor per step: read back once, at the end
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
        if step == 1 and not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
            raise ValueError(f"loss_fn must return a scalar tensor that depends on the model's parameters, got "
                             f"{type(loss).__name__}{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # as loss.backward() when the scaler is off
        if clip is not None:
            scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
            grad_norms.append(nn.utils.clip_grad_norm_(model.parameters(), clip).detach())
        scaler.step(opt)  # skips the step if a scaled gradient overflowed
        scaler.update()
        sched.step()
        running += loss.detach()
        if step % log_every == 0 or step == steps:
            k = log_every if step % log_every == 0 else step % log_every
            mean = running.item() / k  # the only sync with the device
            history.steps.append(step)
            history.losses.append(mean)
            bar.set_postfix(loss=f"{mean:.4f}")
            running.zero_()
            if on_log is not None:
                on_log(step, model)
                model.train()
    model.eval()
    history.seconds = time.perf_counter() - start
    history.grad_norms = torch.stack(grad_norms).tolist() if grad_norms else []
    return history


def lr_at(step: int, lr: float, warmup: int = 0, total: int | None = None, lr_min: float | None = None) -> float:
    """The learning rate of optimiser step ``step`` (1, 2, ...) under :func:`train`'s schedule,
    **linear warmup, then constant**:

        lr_at(step) = lr · min(1, step / warmup)      (lr for every step when warmup = 0)

    or, with ``lr_min`` and the run's ``total`` steps, linear warmup then a half cosine down
    to ``lr_min`` at step ``total`` (nanoGPT's schedule)::

        lr_at(step) = lr_min + (lr - lr_min) · (1 + cos(π · (step - warmup) / (total - warmup))) / 2

    Step 1 uses ``lr / warmup``, step ``warmup`` and every later step the full ``lr``.
    A small first rate keeps the first updates, made while Adam's moment estimates rest
    on a handful of gradients and a post-norm model's gradients are largest, from
    throwing the weights far; Vaswani et al. (2017) warm up for 4,000 steps.
    """
    require_positive_int("step", step)
    require_number("lr", lr, 0.0, strict=True)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0 (steps), got {warmup!r}")
    if warmup and step <= warmup:
        return lr * step / warmup
    if lr_min is None:
        return lr
    require_number("lr_min", lr_min, 0.0)
    require_positive_int("total", total)
    if step > total:
        raise ValueError(f"step={step} is past the run's total={total} steps")
    if total <= warmup:
        return lr
    progress = (step - warmup) / (total - warmup)  # 0 -> 1 over the decay
    return lr_min + (lr - lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))


def mixed_precision(device: torch.device) -> torch.dtype | None:
    """The autocast dtype for training on ``device``: bfloat16 on a CUDA GPU of compute
    capability 8.0 or newer (A100, H100), float16 on an older one (Colab's T4, 7.5), None
    (full float32) elsewhere."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    major, _ = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if major >= 8 else torch.float16


def _device(device) -> torch.device:
    if device is None:
        return default_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a device such as 'cpu' or 'cuda', got {device!r}") from err


def predict(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Apply ``fn`` to ``tensors`` in chunks of ``batch_size`` rows under
    ``torch.inference_mode()`` and concatenate the results (dim 0)."""
    require_positive_int("batch_size", batch_size)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not tensors:
        raise TypeError("predict needs at least one input tensor after fn")
    for i, x in enumerate(tensors):
        require_tensor(f"tensors[{i}]", x)
    n = tensors[0].shape[0] if tensors[0].dim() else 0
    if n == 0:
        raise ValueError(f"the inputs hold no rows (first dimension 0), got shapes {[tuple(x.shape) for x in tensors]}")
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
    if target.shape[0] == 0:
        raise ValueError("pred and target hold no sequences (B = 0): an accuracy over nothing is not a number")
    if pred.is_floating_point() or pred.is_complex():
        raise TypeError(f"pred must hold token ids, got dtype {pred.dtype} (take logits.argmax(-1) first)")
    T = target.shape[1]
    pred = F.pad(pred, (0, max(0, T - pred.shape[1])), value=pad_id)[:, :T].to(target.device)  # (B, T)
    real = target != pad_id  # (B, T)
    right = (pred == target) | ~real  # (B, T)
    exact = right.all(dim=1).float().mean().item()
    token = ((pred == target) & real).sum().item() / max(int(real.sum()), 1)
    return exact, token
