"""Sequence across devices: Ring Attention (Liu, Zaharia and Abbeel 2023).

Split the ``N`` positions among ``P`` ranks. Rank ``r`` keeps its block of queries ``Q_r``
for good and starts with its own block of keys and values ``(K_r, V_r)``. At each of ``P``
steps it computes attention of ``Q_r`` against the key/value block it holds, then passes that
block to rank ``r + 1`` and receives one from rank ``r - 1`` (mod ``P``): after ``P`` steps
every query block has met every key block, and no rank ever held more than two key/value
blocks, ``O(N / P)`` numbers.

Each step gives a *partial* softmax over one block of keys, three numbers per query
(chapter 12's statistics): ``m`` the row maximum of the scores, ``ℓ = Σ exp(s - m)`` and
``acc = Σ exp(s - m) v``. Two partials merge exactly (:func:`merge_partials`, built on
:func:`companion.flash.merge_stats`)::

    m = max(m1, m2),  ℓ = e^(m1 - m) ℓ1 + e^(m2 - m) ℓ2,  acc = e^(m1 - m) acc1 + e^(m2 - m) acc2

and at the end ``O = acc / ℓ``, exactly ``softmax(QKᵀ/√d) V``.

**Causal masking** leaves a block of keys that lies wholly after a block of queries with
nothing to do. With contiguous blocks (``layout="contiguous"``) rank 0 works at step 0 only
and rank ``P - 1`` at every step. The **zig-zag** layout (``layout="zigzag"``, as in
zhuzilin/ring-flash-attention and Llama 3's context parallelism) cuts the sequence into
``2P`` chunks and gives rank ``r`` chunks ``r`` and ``2P - 1 - r``: one early, one late, so
at each step every rank does the same work (:func:`ring_schedule`).

The backward pass runs the ring again: the key/value blocks travel with the gradients
``dK, dV`` accumulated for them, which make one more hop home at the end.
"""

from __future__ import annotations

import math

import torch

from .._validate import require_float, require_positive_int, require_rank
from ..flash import _finite, merge_stats, softmax_stats
from .launch import CommLog, RingPass, launch, rank_device

LAYOUTS = ("contiguous", "zigzag")
NEG_INF = float("-inf")


# --- which positions each rank holds ----------------------------------------------------------

def block_chunks(rank: int, world_size: int, length: int, layout: str = "contiguous") -> list[tuple[int, int]]:
    """The chunks of positions rank ``rank`` holds, as ``(start, size)``: contiguous, one chunk
    ``[r N/P, (r + 1) N/P)``; zig-zag, chunks ``r`` and ``2P - 1 - r`` of size ``N / 2P``."""
    require_positive_int("world_size", world_size)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    parts = world_size if layout == "contiguous" else 2 * world_size
    if length % parts:
        raise ValueError(f"length={length} must be a multiple of {parts} for layout={layout!r} "
                         f"with world_size={world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0 … {world_size - 1}, got {rank}")
    size = length // parts
    if layout == "contiguous":
        return [(rank * size, size)]
    return [(rank * size, size), ((2 * world_size - 1 - rank) * size, size)]


def shard_sequence(x: torch.Tensor, world_size: int, layout: str = "contiguous") -> list[torch.Tensor]:
    """``x (..., N, D)`` cut into the ``P`` ranks' blocks ``(..., N/P, D)`` along positions."""
    n = x.shape[-2]
    return [torch.cat([x[..., s:s + size, :] for s, size in block_chunks(r, world_size, n, layout)], dim=-2)
            for r in range(world_size)]


def gather_sequence(blocks: list[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The inverse of :func:`shard_sequence`: the ranks' blocks back in position order."""
    world, n = len(blocks), sum(b.shape[-2] for b in blocks)
    pieces = {}
    for r, block in enumerate(blocks):
        offset = 0
        for start, size in block_chunks(r, world, n, layout):
            pieces[start] = block[..., offset:offset + size, :]
            offset += size
    return torch.cat([pieces[s] for s in sorted(pieces)], dim=-2)


# --- one block of keys: a partial softmax, and the merge --------------------------------------

def _blocked(q_start: int, q_size: int, k_start: int, k_size: int, causal: bool) -> bool:
    """True when a causal mask hides every key of the block from every query of the block."""
    return causal and k_start > q_start + q_size - 1


def _scores(q, k, q_start, k_start, causal):
    """``q kᵀ / √d``, keys after the query at ``-inf`` where the diagonal crosses the block."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, n_q, n_k)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal and k_start + n_k - 1 > q_start:
        q_pos = torch.arange(q_start, q_start + n_q, device=q.device)
        k_pos = torch.arange(k_start, k_start + n_k, device=q.device)
        s = s.masked_fill(k_pos[None, :] > q_pos[:, None], NEG_INF)  # (B, H, n_q, n_k)
    return s


def block_partial(q, k, v, q_start: int = 0, k_start: int = 0, causal: bool = False):
    """The partial softmax of queries ``q (B, H, n_q, D)`` over one block of keys and values
    ``k, v (B, H, n_k, D)`` whose first positions are ``q_start`` and ``k_start``:
    ``(m, ℓ, acc)`` with ``m, ℓ (B, H, n_q)`` and ``acc (B, H, n_q, D)``. ``None`` when a
    causal mask blocks the whole block (nothing to compute)."""
    if _blocked(q_start, q.shape[-2], k_start, k.shape[-2], causal):
        return None
    s = _scores(q, k, q_start, k_start, causal)  # (B, H, n_q, n_k)
    m, l = softmax_stats(s)  # (B, H, n_q) each
    acc = torch.exp(s - _finite(m)[..., None]) @ v  # (B, H, n_q, D)
    return m, l, acc


def merge_partials(a, b):
    """Merge two partial softmaxes ``(m, ℓ, acc)`` over disjoint blocks of keys (either may
    be ``None``: nothing seen yet)."""
    if a is None or b is None:
        return a if b is None else b
    (m1, l1, acc1), (m2, l2, acc2) = a, b
    m, l = merge_stats(m1, l1, m2, l2)  # chapter 12's rule for (m, ℓ)
    scale1, scale2 = torch.exp(m1 - _finite(m)), torch.exp(m2 - _finite(m))  # (B, H, n_q)
    return m, l, scale1[..., None] * acc1 + scale2[..., None] * acc2


def finish(partial) -> tuple[torch.Tensor, torch.Tensor]:
    """``O = acc / ℓ`` and the log-sum-exp ``L = m + log ℓ`` the backward pass needs."""
    m, l, acc = partial
    return acc / l[..., None], m + torch.log(l)


# --- one ring step, for one rank ---------------------------------------------------------------

def _split(x, chunks):
    out, offset = [], 0
    for _, size in chunks:
        out.append(x[..., offset:offset + size, :])
        offset += size
    return out


def ring_step(q, q_chunks, k, v, kv_chunks, partials, causal: bool = False):
    """Attention of a rank's queries ``q`` (its chunks ``q_chunks``) against the key/value
    block it holds (chunks ``kv_chunks``), merged into ``partials`` (one per query chunk).
    Returns the new partials and the work: how many scores were computed."""
    work, new = 0, []
    for q_i, (qs, qn), part in zip(_split(q, q_chunks), q_chunks, partials):
        for k_j, v_j, (ks, kn) in zip(_split(k, kv_chunks), _split(v, kv_chunks), kv_chunks):
            block = block_partial(q_i, k_j, v_j, qs, ks, causal)
            if block is not None:
                part = merge_partials(part, block)
                work += qn * kn
        new.append(part)
    return new, work


def ring_schedule(world_size: int, length: int, causal: bool = True, layout: str = "contiguous") -> torch.Tensor:
    """Work ``(P, P)``: entry ``[r, t]`` is the number of scores (per batch and head) rank
    ``r`` computes at step ``t``, when it holds key/value block ``(r - t) mod P``."""
    chunks = [block_chunks(r, world_size, length, layout) for r in range(world_size)]
    work = torch.zeros(world_size, world_size, dtype=torch.long)
    for r in range(world_size):
        for t in range(world_size):
            j = (r - t) % world_size
            work[r, t] = sum(qn * kn for qs, qn in chunks[r] for ks, kn in chunks[j]
                             if not _blocked(qs, qn, ks, kn, causal))
    return work


def _check_qkv(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_float(name, x)
        require_rank(name, x, 4, "batch, heads, length, head_dim")
    if q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"q, k, v must have one shape (self-attention), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")


def simulated_ring_attention(q, k, v, world_size: int, causal: bool = False, layout: str = "contiguous"):
    """Ring Attention with the ``P`` ranks simulated in one process (lists of blocks; a pass
    along the ring is an index). ``q, k, v (B, H, N, D)``. Returns the output ``(B, H, N, D)``
    and the work ``(P, P)`` each rank did at each step (differentiable by autograd)."""
    _check_qkv(q, k, v)
    n = q.shape[-2]
    chunks = [block_chunks(r, world_size, n, layout) for r in range(world_size)]
    qs, ks, vs = (shard_sequence(t, world_size, layout) for t in (q, k, v))
    partials = [[None] * len(chunks[r]) for r in range(world_size)]
    work = torch.zeros(world_size, world_size, dtype=torch.long)
    for t in range(world_size):
        for r in range(world_size):
            j = (r - t) % world_size  # the key/value block rank r holds at step t
            partials[r], work[r, t] = ring_step(qs[r], chunks[r], ks[j], vs[j], chunks[j], partials[r], causal)
    outs = [torch.cat([finish(p)[0] for p in partials[r]], dim=-2) for r in range(world_size)]
    return gather_sequence(outs, layout), work


# --- the ring on real ranks --------------------------------------------------------------------

def _ring_step_backward(q, q_chunks, k, v, kv_chunks, d_out, lse, delta, causal):
    """The gradients one held key/value block contributes: ``dQ`` of the rank's queries and
    ``dK, dV`` of the block (FlashAttention's recomputation: ``P = exp(S - L)``)."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    scale = 1 / math.sqrt(q.shape[-1])
    pieces = zip(_split(q, q_chunks), _split(d_out, q_chunks), _split(lse[..., None], q_chunks),
                 _split(delta[..., None], q_chunks), _split(dq, q_chunks), q_chunks)
    for q_i, do_i, lse_i, delta_i, dq_i, (qs, qn) in pieces:
        blocks = zip(_split(k, kv_chunks), _split(v, kv_chunks), _split(dk, kv_chunks),
                     _split(dv, kv_chunks), kv_chunks)
        for k_j, v_j, dk_j, dv_j, (ks, kn) in blocks:
            if _blocked(qs, qn, ks, kn, causal):
                continue
            p = torch.exp(_scores(q_i, k_j, qs, ks, causal) - lse_i)  # (B, H, n_q, n_k) weights
            dv_j += p.transpose(-2, -1) @ do_i  # dV = Pᵀ dO
            ds = p * (do_i @ v_j.transpose(-2, -1) - delta_i)  # dS = P ∘ (dP - δ)
            dq_i += ds @ k_j * scale  # views: these add into dq, dk, dv
            dk_j += ds.transpose(-2, -1) @ q_i * scale
    return dq, dk, dv


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, chunks, causal, log, stats):
        rank, world = torch.distributed.get_rank(), len(chunks)
        kv = torch.stack([k, v])  # (2, B, H, n, D): one message per step
        partials = [None] * len(chunks[rank])
        stats["work"], held = [], 0
        for t in range(world):
            j = (rank - t) % world
            ring = RingPass(kv, log, "forward") if t < world - 1 else None  # start sending
            partials, work = ring_step(q, chunks[rank], kv[0], kv[1], chunks[j], partials, causal)
            stats["work"].append(work)
            tile = q.shape[0] * q.shape[1] * max(a * b for _, a in chunks[rank] for _, b in chunks[j])
            state = sum(x.numel() for p in partials if p is not None for x in p)
            held = max(held, q.numel() + kv.numel() * (1 if ring is None else 2) + state + tile)
            if ring is not None:
                kv = ring.wait()  # the block of rank r - 1
        stats["held_elements"] = held
        outs, lses = zip(*[finish(p) for p in partials])  # per query chunk
        out, lse = torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)  # (B, H, n, D), (B, H, n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.chunks, ctx.causal, ctx.log = chunks, causal, log
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        chunks, rank, world = ctx.chunks, torch.distributed.get_rank(), len(ctx.chunks)
        delta = (d_out * out).sum(-1)  # δ = rowsum(dO ∘ O): (B, H, n)
        dq, kv = torch.zeros_like(q), torch.stack([k, v])
        dkv = torch.zeros_like(kv)  # the gradient of the block held, travelling with it
        for t in range(world):
            j = (rank - t) % world
            ring = RingPass(kv, ctx.log, "backward") if t < world - 1 else None
            dq_t, dk_t, dv_t = _ring_step_backward(q, chunks[rank], kv[0], kv[1], chunks[j], d_out, lse, delta,
                                                   ctx.causal)
            dq += dq_t
            dkv = RingPass(dkv + torch.stack([dk_t, dv_t]), ctx.log, "backward").wait()
            if ring is not None:
                kv = ring.wait()
        return dq, dkv[0], dkv[1], None, None, None, None  # after P hops dkv is this rank's own


def ring_attention(q, k, v, causal: bool = False, layout: str = "contiguous", log: CommLog | None = None,
                   stats: dict | None = None) -> torch.Tensor:
    """Ring Attention on the calling rank (inside :func:`~companion.distributed.launch.launch`):
    ``q, k, v (B, H, N/P, D)`` are this rank's blocks (:func:`shard_sequence`); returns this
    rank's block of the output, differentiable. ``stats`` (a dict) receives the ``work`` per
    step and ``held_elements``, the most numbers the rank held at once."""
    _check_qkv(q, k, v)
    world = torch.distributed.get_world_size()
    n = q.shape[-2] * world
    chunks = [block_chunks(r, world, n, layout) for r in range(world)]
    return _RingAttention.apply(q, k, v, chunks, causal, log, {} if stats is None else stats)


def make_qkv(batch: int, heads: int, length: int, head_dim: int, seed: int):
    """Seeded ``q, k, v`` and the weights ``w`` of the test loss ``Σ w ∘ O``, each ``(B, H, N, D)``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, head_dim, generator=g) for _ in range(4)]


def _ring_rank(rank, world_size, batch, heads, length, head_dim, seed, causal, layout):
    device = rank_device()
    log, stats = CommLog(), {}
    q, k, v, w = (shard_sequence(t, world_size, layout)[rank].to(device).requires_grad_()
                  for t in make_qkv(batch, heads, length, head_dim, seed))
    out = ring_attention(q, k, v, causal, layout, log, stats)
    (out * w).sum().backward()
    return {"out": out, "dq": q.grad, "dk": k.grad, "dv": v.grad, "log": log.summary(), **stats}


def run_ring_attention(world_size: int, *, batch: int = 1, heads: int = 2, length: int = 32, head_dim: int = 8,
                       seed: int = 0, causal: bool = True, layout: str = "contiguous", timeout: float = 60.0,
                       scale: str = "cpu") -> list[dict]:
    """Ring Attention on ``world_size`` processes over :func:`make_qkv`'s tensors, forward and
    backward of ``Σ w ∘ O``. Each rank returns its blocks ``out, dq, dk, dv``, its ``work`` per
    step, ``held_elements`` and its :class:`~companion.distributed.launch.CommLog` summary."""
    for r in range(world_size):
        block_chunks(r, world_size, length, layout)  # a clear error here, not in P processes
    return launch(_ring_rank, world_size, (batch, heads, length, head_dim, seed, causal, layout),
                  timeout=timeout, scale=scale)


# --- what it sends, and DeepSpeed-Ulysses' alternative ----------------------------------------

def ring_bytes(batch: int, heads: int, length: int, head_dim: int, world_size: int,
               bytes_per_element: int = 4) -> dict:
    """Bytes each rank sends: one key/value block is ``2 · B · H · (N/P) · D_H`` numbers.
    Forward: ``P - 1`` blocks. Backward: ``P - 1`` key/value blocks and ``P`` gradient blocks
    (one more hop home); nothing when ``P = 1``."""
    block = 2 * batch * heads * (length // world_size) * head_dim * bytes_per_element
    return {"forward": (world_size - 1) * block,
            "backward": 0 if world_size == 1 else (2 * world_size - 1) * block}


def ulysses_bytes(batch: int, heads: int, length: int, head_dim: int, world_size: int,
                  bytes_per_element: int = 4) -> int:
    """DeepSpeed-Ulysses (Jacobs et al. 2023), forward: an all-to-all turns Q, K, V from
    ``N/P`` positions × all heads into all positions × ``H/P`` heads, one more turns the
    output back. Each all-to-all of a rank's ``B · (N/P) · D`` numbers (``D = H · D_H``) sends
    ``(P - 1)/P`` of them: ``4 · B · N · D · (P - 1) / P²`` numbers per rank, falling as ``P``
    grows. Each rank must own whole heads, so ``P`` must divide ``H``: ``P ≤ H``."""
    if world_size < 1 or heads % world_size != 0:
        raise ValueError(f"Ulysses gives each rank H/P whole heads: world_size={world_size} "
                         f"must divide heads={heads}")
    d_model = heads * head_dim
    return 4 * batch * length * d_model * (world_size - 1) * bytes_per_element // world_size ** 2
