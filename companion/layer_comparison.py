"""Three ways to mix a sequence: recurrence, convolution, self-attention.

Vaswani et al. (2017, Table 1) compare one layer of each for ``n`` tokens of size ``d``
(kernel size ``k``), in :data:`TABLE_1`:

====================  =================  =====================  ============================
layer                 cost per layer     sequential operations  maximum path length
====================  =================  =====================  ============================
self-attention        O(n² d)            O(1)                   O(1)
recurrent             O(n d²)            O(n)                   O(n)
convolutional         O(k n d²)          O(1)                   O(log_k n) dilated, O(n/k)
====================  =================  =====================  ============================

The three layers below map ``(B, N, D)`` to ``(B, N, D)`` so that they can be timed and
differentiated the same way: :func:`time_layer` times one forward pass, and
:func:`gradient_path` measures how strongly output ``t`` depends on input 0,
``‖∂y_t / ∂x_0‖``, the "path length" of the table seen through the gradient.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from ._validate import require_float, require_number, require_positive_int, require_rank
from .multihead import MultiHeadAttention

#: The rows of Table 1 in Vaswani et al. (2017), one per kind of layer, each
#: (cost per layer, sequential operations, maximum path length) for n tokens of size d
#: and kernels of size k.
TABLE_1 = {
    "self-attention": ("O(n² d)", "O(1)", "O(1)"),
    "recurrent": ("O(n d²)", "O(n)", "O(n)"),
    "convolutional": ("O(k n d²)", "O(1)", "O(log_k n) dilated, O(n/k) contiguous"),
}


class RecurrentLayer(nn.Module):
    """A tanh RNN that returns every hidden state:
    ``h_t = tanh(x_t W_ihᵀ + b_ih + h_{t-1} W_hhᵀ + b_hh)``, ``h_{-1} = 0``.

    ``N`` steps, each waiting for the one before (``O(n)`` sequential operations), each a
    ``D × D`` matrix product (``O(n d²)`` in all). Input 0 reaches output ``t`` through ``t``
    applications of ``W_hh`` and of tanh's slope.
    """

    def __init__(self, d_model: int):
        super().__init__()
        require_positive_int("d_model", d_model)
        self.d_model = d_model
        self.rnn = nn.RNN(d_model, d_model, nonlinearity="tanh", batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_sequence(x, self.d_model)
        return self.rnn(x)[0]  # (B, N, D): h_0 ... h_{N-1}


class ConvolutionStack(nn.Module):
    """``num_layers`` 1-D convolutions of odd ``kernel_size`` k over the sequence, zero
    padding that keeps the length, tanh between them:
    ``y_t = Σ_{|j| ≤ (k-1)/2} x_{t+j} W_j + b`` per layer.

    One layer costs ``O(k n d²)`` and has no sequential steps. Output ``t`` sees the inputs
    within ``receptive_radius = num_layers · (k-1)/2`` positions of ``t`` and
    nothing beyond: there its gradient is exactly 0.
    """

    def __init__(self, d_model: int, kernel_size: int = 3, num_layers: int = 1):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("kernel_size", kernel_size)
        require_positive_int("num_layers", num_layers)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a window centred on each token), got {kernel_size}")
        self.d_model = d_model
        self.receptive_radius = num_layers * (kernel_size - 1) // 2
        self.convs = nn.ModuleList(
            nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2) for _ in range(num_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_sequence(x, self.d_model)
        h = x.transpose(1, 2)  # (B, D, N): Conv1d wants channels first
        for i, conv in enumerate(self.convs):
            h = conv(h)  # (B, D, N)
            if i < len(self.convs) - 1:
                h = torch.tanh(h)
        return h.transpose(1, 2)  # (B, N, D)


class SelfAttentionLayer(nn.Module):
    """One head of self-attention over the whole sequence (no mask):
    ``Y = softmax(Q Kᵀ / √d) V W_O`` with ``Q, K, V = X W_Q, X W_K, X W_V``.

    ``N²`` scores of ``d`` products each (``O(n² d)``), all computed at once (``O(1)``
    sequential operations); every output reads every input directly (path length 1).
    The explicit path of :class:`~companion.multihead.MultiHeadAttention` (``fused=False``)
    is used, so that :func:`gradient_path` can differentiate it twice.
    """

    def __init__(self, d_model: int):
        super().__init__()
        require_positive_int("d_model", d_model)
        self.d_model = d_model
        self.attn = MultiHeadAttention(d_model, 1, fused=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_sequence(x, self.d_model)
        return self.attn(x)[0]  # (B, N, D)


def make_layer(kind: str, d_model: int, kernel_size: int = 3, num_layers: int = 1) -> nn.Module:
    """One layer of ``kind`` ``"self-attention"``, ``"recurrent"`` or ``"convolutional"``
    (the rows of :data:`TABLE_1`); ``kernel_size`` and ``num_layers`` shape the convolution."""
    if kind == "self-attention":
        return SelfAttentionLayer(d_model)
    if kind == "recurrent":
        return RecurrentLayer(d_model)
    if kind == "convolutional":
        return ConvolutionStack(d_model, kernel_size, num_layers)
    raise ValueError(f"kind must be one of {sorted(TABLE_1)}, got {kind!r}")


def gradient_path(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``g[t] = ‖∂y_t / ∂x_0‖_F`` for ``t = 0 .. N-1``, where ``y = layer(x)`` and ``x (N, D)``
    is one sequence: how much output ``t`` moves when input 0 moves.

    The ``D_out × D`` Jacobian of every ``y_t`` with respect to ``x_0`` comes from one
    Jacobian-vector product on a batch of ``D`` copies of ``x`` (copy ``j`` moves
    coordinate ``j`` of ``x_0``), computed by differentiating twice (so the layer needs
    a double-differentiable forward pass). Returns a ``(N,)`` tensor; an output that
    cannot see input 0 gets exactly 0.
    """
    if not isinstance(layer, nn.Module):
        raise TypeError(f"layer must be a torch.nn.Module, got {type(layer).__name__}")
    require_float("x", x)
    require_rank("x", x, 2, "one sequence (N, D)")
    n, d = x.shape
    xs = x.detach().expand(d, n, d).clone()  # (D, N, D): D copies of the sequence
    tangent = torch.zeros_like(xs)  # (D, N, D)
    tangent[:, 0, :] = torch.eye(d, dtype=x.dtype, device=x.device)  # copy j moves x_0[j]
    with torch.enable_grad():
        y, dy = torch.autograd.functional.jvp(layer, xs, tangent)  # dy (D, N, D_out)
    if y.dim() != 3 or y.shape[:2] != (d, n):
        raise ValueError(f"layer must map (B, N, D) to (B, N, D_out), got {tuple(xs.shape)} -> {tuple(y.shape)}")
    return dy.pow(2).sum(dim=(0, 2)).sqrt()  # (N,): Frobenius norm of each ∂y_t/∂x_0


def time_layer(layer: nn.Module, n: int, batch_size: int = 1, min_run_time: float = 0.05,
               num_threads: int = 1, seed: int = 0, cpu_time: bool = True) -> float:
    """Seconds for one forward pass of ``layer`` on ``(batch_size, n, layer.d_model)``
    random inputs (no gradients), timed by ``torch.utils.benchmark.Timer`` on the CPU
    with ``num_threads`` threads.

    ``blocked_autorange`` repeats the call in blocks for at least ``min_run_time`` seconds;
    the *fastest* block's time per call is returned, the one least disturbed by other
    programs. ``cpu_time=True`` clocks the processor time this process used
    (``time.process_time``) instead of the wall time: on a busy machine it counts the work
    done, not the waiting for a free core.
    """
    if not isinstance(layer, nn.Module) or not isinstance(getattr(layer, "d_model", None), int):
        raise TypeError(f"layer must be a module with an int d_model, got {type(layer).__name__}")
    require_positive_int("n", n)
    require_positive_int("batch_size", batch_size)
    require_positive_int("num_threads", num_threads)
    require_number("min_run_time", min_run_time, 0.0, strict=True)
    from torch.utils import benchmark  # imported here: it takes a while, and only timing needs it

    x = torch.randn(batch_size, n, layer.d_model, generator=torch.Generator().manual_seed(seed))
    layer = layer.cpu().eval()
    with torch.no_grad():
        timer = benchmark.Timer("layer(x)", globals={"layer": layer, "x": x}, num_threads=num_threads,
                                timer=time.process_time if cpu_time else time.perf_counter)
        measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return min(measurement.times)


def _check_sequence(x: torch.Tensor, d_model: int) -> None:
    require_float("x", x)
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (B, N, D={d_model}), got shape {tuple(x.shape)}")
