"""Heads across devices: Megatron-LM's tensor parallelism (Shoeybi et al. 2019, section 3).

Multi-head attention's heads are independent until the output projection, so ``P`` ranks can
each own ``H / P`` whole heads:

- **column-parallel** Q/K/V projection: rank ``r`` keeps the rows of ``W^Q, W^K, W^V`` (in
  ``nn.Linear``'s layout) of its heads, ``[D × 3 D/P]``, and computes its heads' Q, K, V and
  attention with no communication at all;
- **row-parallel** output projection: rank ``r`` keeps the columns of ``W^O`` that read its
  heads, ``[D/P × D]``, and computes a *partial* output ``Y_r = heads_r W^O_r`` of full size
  ``(B, N, D)``. The output is their sum, ``Y = Σ_r Y_r + b^O``: one **all-reduce**.

The MLP splits the same way (``W_1`` by columns, ``W_2`` by rows, one all-reduce). Megatron's
two conjugate operators mark where a parallel region starts and ends:

- ``f`` (:func:`copy_to_parallel`): identity forward, all-reduce of the gradient backward;
- ``g`` (:func:`reduce_from_parallel`): all-reduce forward, identity backward.

A Transformer block (attention + MLP) thus costs 2 all-reduces of ``B · N · D`` numbers in the
forward pass and 2 in the backward pass (:func:`block_all_reduces`).

The pure parts work on a list of shards in one process (:func:`head_shards`,
:func:`local_attention`, :func:`simulated_attention`), the way the exercises use them; the
process version (:func:`tensor_parallel_block`) runs them on real ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .._validate import require_positive_int
from ..models.blocks import ACTIVATIONS, EncoderLayer
from ..multihead import MultiHeadAttention
from .launch import CommLog, all_reduce, launch, rank_device

# --- the pure parts: shards of a module, in one process ---------------------------------------


def _check_world(num_heads: int, world_size: int) -> None:
    require_positive_int("world_size", world_size)
    if num_heads % world_size:
        raise ValueError(f"world_size={world_size} must divide num_heads={num_heads}: each rank owns whole heads")


def head_shards(mha: MultiHeadAttention, world_size: int) -> list[dict]:
    """Split ``mha``'s weights among ``world_size`` ranks, ``H / P`` heads each.

    Rank ``r`` gets ``w_qkv (3 D/P, D)`` (its rows of ``W^Q``, then of ``W^K``, then of ``W^V``),
    ``b_qkv (3 D/P,)``, ``w_o (D, D/P)`` (the columns of ``W^O`` that read its heads) and the
    replicated ``b_o (D,)``, added once after the sum."""
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    _check_world(mha.num_heads, world_size)
    if mha.num_kv_heads != mha.num_heads or mha.position is not None or mha.window is not None:
        raise ValueError("head_shards splits plain multi-head attention (no GQA, RoPE, ALiBi or window)")
    D, width = mha.d_model, mha.d_model // world_size
    w_q, w_k, w_v = mha.in_proj.weight.detach().split(D)  # 3 × (D, D): rows = head h's D_H outputs
    has_bias = mha.in_proj.bias is not None
    b_q, b_k, b_v = mha.in_proj.bias.detach().split(D) if has_bias else (None, None, None)
    shards = []
    for r in range(world_size):
        rows = slice(r * width, (r + 1) * width)  # heads r·H/P … (r+1)·H/P - 1
        shards.append({
            "w_qkv": torch.cat([w_q[rows], w_k[rows], w_v[rows]]).clone(),  # (3 D/P, D)
            "b_qkv": torch.cat([b_q[rows], b_k[rows], b_v[rows]]).clone() if has_bias else None,
            "w_o": mha.out_proj.weight.detach()[:, rows].clone(),  # (D, D/P)
            "b_o": mha.out_proj.bias.detach().clone() if has_bias else None,  # (D,) replicated
            "num_heads": mha.num_heads // world_size,
        })
    return shards


def local_attention(x: torch.Tensor, w_qkv, b_qkv, w_o, num_heads: int, causal: bool = False) -> torch.Tensor:
    """What rank ``r`` computes alone: its heads' attention and its *partial* output
    ``Y_r = Concat(head_h, h of rank r) W^O_r``, ``(B, N, D)``, without ``b^O``."""
    q, k, v = F.linear(x, w_qkv, b_qkv).chunk(3, dim=-1)  # 3 × (B, N, D/P): column-parallel
    q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=num_heads) for t in (q, k, v))  # (B, H/P, N, D_H)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H/P, N, D_H)
    return F.linear(rearrange(heads, "b h n d -> b n (h d)"), w_o)  # (B, N, D): row-parallel, partial


def simulated_attention(x: torch.Tensor, shards: list[dict], causal: bool = False) -> torch.Tensor:
    """The tensor-parallel forward with the ranks simulated in one process: each shard's
    partial output, then their sum (what the all-reduce computes) plus ``b^O``."""
    partials = [local_attention(x, s["w_qkv"], s["b_qkv"], s["w_o"], s["num_heads"], causal) for s in shards]
    out = torch.stack(partials).sum(0)  # the all-reduce: (B, N, D)
    return out if shards[0]["b_o"] is None else out + shards[0]["b_o"]


# --- f and g: the two places where ranks talk -------------------------------------------------

class _CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, log):
        ctx.log = log
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad.contiguous().clone(), ctx.log, "backward"), None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, log):
        return all_reduce(x.contiguous().clone(), log, "forward")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_parallel(x: torch.Tensor, log: CommLog | None = None) -> torch.Tensor:
    """``f``: enter a parallel region (identity; the backward pass all-reduces the gradient)."""
    return _CopyToParallel.apply(x, log)


def reduce_from_parallel(x: torch.Tensor, log: CommLog | None = None) -> torch.Tensor:
    """``g``: leave a parallel region (all-reduce of the partial outputs; identity backward)."""
    return _ReduceFromParallel.apply(x, log)


# --- the parallel modules, for one rank -------------------------------------------------------

def _param(t: torch.Tensor | None, device) -> nn.Parameter | None:
    return None if t is None else nn.Parameter(t.detach().clone().to(device))


class ParallelAttention(nn.Module):
    """Rank ``r``'s part of a :class:`~companion.multihead.MultiHeadAttention`: ``f``, its
    heads (column-parallel Q/K/V, row-parallel ``W^O``), ``g``, then ``b^O``."""

    def __init__(self, shard: dict, log: CommLog | None = None, device=None):
        super().__init__()
        self.w_qkv, self.b_qkv = _param(shard["w_qkv"], device), _param(shard["b_qkv"], device)
        self.w_o, self.b_o = _param(shard["w_o"], device), _param(shard["b_o"], device)
        self.num_heads, self.log = shard["num_heads"], log

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = copy_to_parallel(x, self.log)  # f
        partial = local_attention(x, self.w_qkv, self.b_qkv, self.w_o, self.num_heads, causal)  # (B, N, D)
        out = reduce_from_parallel(partial, self.log)  # g: Σ over ranks
        return out if self.b_o is None else out + self.b_o


class ParallelFeedForward(nn.Module):
    """Rank ``r``'s part of the FFN: ``W_1`` column-parallel (``d_ff / P`` hidden units), the
    activation on them alone, ``W_2`` row-parallel, one all-reduce."""

    def __init__(self, ffn, rank: int, world_size: int, log: CommLog | None = None, device=None):
        super().__init__()
        d_ff = ffn.linear1.out_features
        if d_ff % world_size:
            raise ValueError(f"world_size={world_size} must divide d_ff={d_ff}")
        rows = slice(rank * d_ff // world_size, (rank + 1) * d_ff // world_size)
        self.w1, self.b1 = _param(ffn.linear1.weight[rows], device), _param(ffn.linear1.bias[rows], device)
        self.w2, self.b2 = _param(ffn.linear2.weight[:, rows], device), _param(ffn.linear2.bias, device)
        self.act, self.log = ACTIVATIONS[ffn.activation], log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_parallel(x, self.log)  # f
        hidden = self.act(F.linear(x, self.w1, self.b1))  # (B, N, d_ff/P): column-parallel
        return reduce_from_parallel(F.linear(hidden, self.w2), self.log) + self.b2  # g, then b_2


class ParallelBlock(nn.Module):
    """Rank ``r``'s part of a pre-norm :class:`~companion.models.blocks.EncoderLayer`: the
    LayerNorms are replicated (every rank holds them whole), attention and FFN are split."""

    def __init__(self, layer: EncoderLayer, rank: int, world_size: int, log: CommLog | None = None, device=None):
        super().__init__()
        if not isinstance(layer, EncoderLayer) or not layer.norm_first:
            raise TypeError("layer must be a pre-norm companion EncoderLayer")
        self.norm1 = _copy_module(layer.norm1, device)
        self.norm2 = _copy_module(layer.norm2, device)
        self.attn = ParallelAttention(head_shards(layer.self_attn, world_size)[rank], log, device)
        self.ffn = ParallelFeedForward(layer.ffn, rank, world_size, log, device)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), causal)  # (B, N, D)
        return x + self.ffn(self.norm2(x))  # (B, N, D)


def _copy_module(module: nn.Module, device) -> nn.Module:
    import copy
    return copy.deepcopy(module).to(device)


# --- the formula, and the run on P processes --------------------------------------------------

def block_all_reduces(batch: int, length: int, d_model: int, world_size: int, bytes_per_element: int = 4) -> dict:
    """Megatron's count for one block: 2 all-reduces of ``B · N · D`` numbers forward (``g``
    after attention and after the MLP), 2 backward (``f`` before each). ``sent`` is each rank's
    bytes on the wire under the ring algorithm's model, ``2 (P - 1) / P`` of the payload."""
    payload = batch * length * d_model * bytes_per_element
    sent = 2 * (world_size - 1) * payload // world_size
    return {"forward": (2, 2 * payload, 2 * sent), "backward": (2, 2 * payload, 2 * sent)}


def make_block(d_model: int, num_heads: int, d_ff: int, seed: int) -> EncoderLayer:
    """The reference block every rank builds from the same seed (a GPT block: GELU, pre-norm)."""
    torch.manual_seed(seed)
    layer = EncoderLayer(d_model, num_heads, d_ff, norm_first=True, activation="gelu")
    with torch.no_grad():  # non-trivial LayerNorm parameters, so their gradients are tested too
        for norm in (layer.norm1, layer.norm2):
            norm.weight.add_(0.1 * torch.randn_like(norm.weight))
            norm.bias.add_(0.1 * torch.randn_like(norm.bias))
    return layer


def make_inputs(batch: int, length: int, d_model: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (B, N, D)`` and the weights ``w`` of the test loss ``Σ w ∘ block(x)``."""
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, length, d_model, generator=g), torch.randn(batch, length, d_model, generator=g)


def _tensor_parallel_rank(rank, world_size, d_model, num_heads, d_ff, batch, length, seed, causal):
    device = rank_device()
    log = CommLog()
    block = ParallelBlock(make_block(d_model, num_heads, d_ff, seed), rank, world_size, log, device)
    x, w = (t.to(device) for t in make_inputs(batch, length, d_model, seed))
    x.requires_grad_(True)
    out = block(x, causal)
    (out * w).sum().backward()
    return {"out": out, "x_grad": x.grad, "log": log.summary(),
            "grads": {name: p.grad for name, p in block.named_parameters()}}


def tensor_parallel_block(world_size: int, *, d_model: int = 32, num_heads: int = 4, d_ff: int = 64,
                          batch: int = 2, length: int = 8, seed: int = 0, causal: bool = True,
                          timeout: float = 60.0, scale: str = "cpu") -> list[dict]:
    """Run :func:`make_block` split over ``world_size`` processes, forward and backward on
    :func:`make_inputs`. Each rank returns ``out``, ``x_grad``, its parameters' ``grads`` and
    its :class:`~companion.distributed.launch.CommLog` summary; :func:`gather_block_grads` puts the shards back together."""
    _check_world(num_heads, world_size)
    return launch(_tensor_parallel_rank, world_size,
                  (d_model, num_heads, d_ff, batch, length, seed, causal), timeout=timeout, scale=scale)


def gather_block_grads(results: list[dict]) -> dict[str, torch.Tensor]:
    """The ranks' gradients in the names and layout of :class:`~companion.models.blocks.EncoderLayer`'s parameters:
    sharded ones concatenated back, replicated ones taken from rank 0."""
    g = [r["grads"] for r in results]
    qkv = [s["attn.w_qkv"].chunk(3) for s in g]  # per rank: its rows of W^Q, W^K, W^V
    full = {
        "self_attn.in_proj.weight": torch.cat([torch.cat([s[i] for s in qkv]) for i in range(3)]),
        "self_attn.out_proj.weight": torch.cat([s["attn.w_o"] for s in g], dim=1),
        "self_attn.out_proj.bias": g[0]["attn.b_o"],
        "ffn.linear1.weight": torch.cat([s["ffn.w1"] for s in g]),
        "ffn.linear1.bias": torch.cat([s["ffn.b1"] for s in g]),
        "ffn.linear2.weight": torch.cat([s["ffn.w2"] for s in g], dim=1),
        "ffn.linear2.bias": g[0]["ffn.b2"],
    }
    qkv_b = [s["attn.b_qkv"].chunk(3) for s in g]
    full["self_attn.in_proj.bias"] = torch.cat([torch.cat([s[i] for s in qkv_b]) for i in range(3)])
    for name in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"):
        full[name] = g[0][name]
    return full
