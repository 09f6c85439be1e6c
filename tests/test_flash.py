import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from companion.attention import attention_with_weights, masked_softmax
from companion.flash import (
    causal_tiles,
    hbm_bytes,
    merge_stats,
    online_softmax,
    softmax_stats,
    tile_update,
    tiled_attention,
)
from companion.masks import causal_mask, graph_mask, local_window_mask, real_key_mask, real_token_mask


def qkv(B=2, H=3, Nq=37, Nk=37, d=8, dv=6, dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, n, m, dtype=dtype, generator=g).requires_grad_(grad)
            for n, m in ((Nq, d), (Nk, d), (Nk, dv))]


def masks(n):
    """Every mask kind of chapter 4, for 2 sequences of n tokens, as (name, mask)."""
    real = real_key_mask(real_token_mask([n, n // 2], n))  # (2, 1, 1, n)
    adjacency = torch.rand(n, n, generator=torch.Generator().manual_seed(1)) > 0.8
    fully = torch.ones(n, n, dtype=torch.bool)
    fully[[0, 5, n - 1]] = False  # three queries that may attend nowhere
    rand = torch.rand(2, 3, n, n, generator=torch.Generator().manual_seed(2)) > 0.5
    return [("none", None), ("causal", causal_mask(n)), ("padding", real),
            ("causal+padding", causal_mask(n) & real), ("window", local_window_mask(n, 3)),
            ("graph", graph_mask(adjacency)), ("fully masked rows", fully), ("random", rand)]


# --- the online softmax ------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_online_softmax_equals_softmax(block):
    s = torch.randn(4, 5, 20, dtype=torch.float64) * 10
    torch.testing.assert_close(online_softmax(s, block), torch.softmax(s, dim=-1))


@pytest.mark.parametrize("name,mask", masks(12), ids=[m[0] for m in masks(12)])
def test_online_softmax_with_masks_equals_the_masked_softmax(name, mask):
    s = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    out = online_softmax(s, 5, mask)
    torch.testing.assert_close(out, masked_softmax(s, mask))
    assert not out.isnan().any()


def test_online_softmax_rows_of_minus_inf():
    s = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")], [float("-inf")] * 4])
    out = online_softmax(s, 2)
    torch.testing.assert_close(out[0], torch.softmax(s[0], -1))
    assert out[1].tolist() == [0.0] * 4  # fully blocked: 0, as masked_softmax gives


def test_merging_two_blocks_gives_the_stats_of_the_whole():
    s = torch.randn(3, 10, dtype=torch.float64)
    m, l = merge_stats(*softmax_stats(s[:, :4]), *softmax_stats(s[:, 4:]))
    torch.testing.assert_close(m, s.amax(-1))
    torch.testing.assert_close(m + l.log(), torch.logsumexp(s, -1))
    m, l = merge_stats(*softmax_stats(torch.full((3, 2), float("-inf"))), *softmax_stats(s[:, :2].float()))
    torch.testing.assert_close(l, softmax_stats(s[:, :2].float())[1])  # an empty block changes nothing


def test_tile_update_by_hand():
    # Before: one key with score 0 and value 1 (m=0, l=1, acc=1). Tile: a score of log 3, value 5.
    m, l, acc = torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([[1.0]])
    m, l, acc = tile_update(m, l, acc, torch.tensor([[math.log(3)]]), torch.tensor([[5.0]]))
    assert m.item() == pytest.approx(math.log(3)) and l.item() == pytest.approx(4 / 3)
    assert (acc / l[..., None]).item() == pytest.approx((1 + 3 * 5) / 4)  # weights 1/4 and 3/4


# --- tiled attention -------------------------------------------------------------------------

@pytest.mark.parametrize("name,mask", masks(37), ids=[m[0] for m in masks(37)])
def test_tiled_equals_explicit_and_torch_forward_and_backward(name, mask):
    q, k, v = qkv(grad=True)
    out = tiled_attention(q, k, v, mask, block_q=8, block_k=5)
    ref, _ = attention_with_weights(q, k, v, mask)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    d_out = torch.randn_like(out)
    for g, r in zip(torch.autograd.grad(out, (q, k, v), d_out), torch.autograd.grad(ref, (q, k, v), d_out), strict=True):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("n,bq,bk", [(37, 8, 5), (64, 16, 16), (10, 64, 64), (33, 1, 7)])
def test_causal_flag_equals_torch_is_causal(n, bq, bk):
    q, k, v = qkv(Nq=n, Nk=n, grad=True)
    out = tiled_attention(q, k, v, causal=True, block_q=bq, block_k=bk)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref)
    for g, r in zip(torch.autograd.grad(out.sum(), (q, k, v)), torch.autograd.grad(ref.sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(g, r)


def test_causal_flag_with_a_padding_mask_and_fewer_queries_than_keys():
    q, k, v = qkv(Nq=9, Nk=20)
    real = real_key_mask(real_token_mask([20, 7], 20))
    bottom_right = torch.ones(9, 20, dtype=torch.bool).tril(diagonal=20 - 9)  # the last query sees all
    torch.testing.assert_close(tiled_attention(q, k, v, real, causal=True, block_q=4, block_k=3),
                               attention_with_weights(q, k, v, real & bottom_right)[0])


@pytest.mark.parametrize("nq,nk", [(9, 20), (1, 37), (20, 20), (20, 9)])
def test_causal_is_aligned_bottom_right_as_torch_and_multihead_attention(nq, nk):
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = qkv(Nq=nq, Nk=nk, grad=True)
    out = tiled_attention(q, k, v, causal=True, block_q=4, block_k=3)
    allowed = torch.ones(nq, nk, dtype=torch.bool).tril(diagonal=nk - nq)
    ref = attention_with_weights(q, k, v, allowed)[0]  # rows that see no key: 0
    torch.testing.assert_close(out, ref)
    for g, r in zip(torch.autograd.grad(out.sum(), (q, k, v)), torch.autograd.grad(ref.sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(g, r)
    if nq <= nk:  # torch's bias aligns bottom-right, and so does a cache: the last N_q queries
        with torch.no_grad():
            torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(nq, nk)))
            q_all = torch.randn(*q.shape[:-2], nk, q.shape[-1], dtype=q.dtype)  # (B, H, N_k, d)
            q_all[..., nk - nq:, :] = q
            full = F.scaled_dot_product_attention(q_all, k, v, is_causal=True)  # self-attention, N_k
            torch.testing.assert_close(out, full[..., nk - nq:, :])
    computed, skipped = causal_tiles(nq, nk, 4, 3)
    blocks = [not allowed[i:i + 4, j:j + 3].any() for i in range(0, nq, 4) for j in range(0, nk, 3)]
    assert (computed, skipped) == (blocks.count(False), blocks.count(True))


def test_float32_within_rounding_and_broadcast_heads():
    q, k, v = qkv(Nq=50, Nk=70, dtype=torch.float32)
    torch.testing.assert_close(tiled_attention(q, k[:, :1], v[:, :1]), attention_with_weights(q, k[:, :1], v[:, :1])[0])
    q1 = q[0, 0]  # (N_q, d): no batch at all
    torch.testing.assert_close(tiled_attention(q1, k[0, 0], v[0, 0], block_q=16),
                               attention_with_weights(q1, k[0, 0], v[0, 0])[0])


def test_causal_tiles_counts_the_tiles_above_the_diagonal():
    assert causal_tiles(64, 64, 16, 16) == (10, 6)  # 4 × 4 tiles, T(T-1)/2 = 6 above
    for t in (1, 2, 5, 9):
        assert causal_tiles(8 * t, 8 * t, 8, 8) == (t * (t + 1) // 2, t * (t - 1) // 2)
    computed, skipped = causal_tiles(37, 37, 8, 5)
    mask = causal_mask(37)  # a tile is skipped exactly when its block of the mask is all False
    blocks = [not mask[i:i + 8, j:j + 5].any() for i in range(0, 37, 8) for j in range(0, 37, 5)]
    assert (computed, skipped) == (blocks.count(False), blocks.count(True))


class _Shapes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def test_the_n_by_n_matrix_is_never_formed_forward_or_backward():
    n = 96
    q, k, v = qkv(B=1, H=2, Nq=n, Nk=n, d=4, dv=4, grad=True)
    with _Shapes() as seen:
        tiled_attention(q, k, v, causal=True, block_q=16, block_k=32).sum().backward()
    assert max(math.prod(s[-2:]) for s in seen.shapes if len(s) >= 2) <= 16 * 32
    with _Shapes() as seen:
        attention_with_weights(q, k, v, causal_mask(n))[0].sum().backward()
    assert (1, 2, n, n) in seen.shapes  # the test sees the explicit path's weights


def test_errors_name_the_problem():
    q, k, v = qkv(Nq=5, Nk=7)
    with pytest.raises(ValueError, match=r"same length .* got k \(2, 3, 7, 8\) and v \(2, 3, 6, 6\)"):
        tiled_attention(q, k, v[:, :, :6])
    with pytest.raises(ValueError, match=r"mask of shape \(5, 5\) does not broadcast .* \(2, 3, 5, 7\)"):
        tiled_attention(q, k, v, torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        tiled_attention(q, k, v, torch.ones(5, 7))
    with pytest.raises(TypeError, match="same dtype"):
        tiled_attention(q.float(), k, v)
    with pytest.raises(TypeError, match="floating-point"):
        tiled_attention(q.long(), k, v)
    with pytest.raises(ValueError, match="block_q must be positive, got 0"):
        tiled_attention(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="causal must be True or False"):
        tiled_attention(q, k, v, causal=causal_mask(5))
    with pytest.raises(ValueError, match="block_size must be positive"):
        online_softmax(torch.randn(3, 4), 0)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) does not broadcast"):
        online_softmax(torch.randn(3, 4), 2, torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_q must be positive"):
        causal_tiles(0, 4, 2, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_keeps_float32_statistics_and_beats_rounding(dtype):
    q, k, v = qkv(B=2, H=3, Nq=200, Nk=200, d=64, dv=64, dtype=torch.float64, grad=True)
    q, k, v = (4 * t.detach() for t in (q, k, v))  # sharp weights: rounding in l and acc shows
    low = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = tiled_attention(*low, causal=True, block_q=16, block_k=16)
    assert out.dtype == dtype
    sdpa = F.scaled_dot_product_attention(*(t.detach() for t in low), is_causal=True)
    inputs = attention_with_weights(*(t.detach().double() for t in low), causal_mask(200))[0]  # float64
    err, err_sdpa = (out.double() - inputs).abs().max(), (sdpa.double() - inputs).abs().max()
    rounding = (inputs.to(dtype).double() - inputs).abs().max()  # one rounding of the exact output
    assert err <= rounding * 1.01 and err <= err_sdpa * 1.01, (err, rounding, err_sdpa)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    grads = torch.autograd.grad(out, low, d_out.to(dtype))
    exact = [t.detach().double().requires_grad_() for t in low]
    refs = torch.autograd.grad(attention_with_weights(*exact, causal_mask(200))[0], exact, d_out.to(dtype).double())
    for g, r in zip(grads, refs, strict=True):
        assert g.dtype == dtype
        ulp = 2.0 ** (-7 if dtype == torch.bfloat16 else -10)
        assert (g.double() - r).abs().max() <= ulp * r.abs().max(), (g.double() - r).abs().max()
    _, lse = __import__("companion.flash", fromlist=["_tiled_forward"])._tiled_forward(
        *(t.detach() for t in low), None, True, 16, 16)
    assert lse.dtype == torch.float32


def test_hbm_bytes_counts_k_and_v_once_per_query_tile():
    n, d = 256, 64
    for b in (16, 64, 100, 256):
        counts = hbm_bytes(n, d, b, 32, bytes_per_element=2)
        assert counts["explicit"] == 2 * (4 * n * d + 4 * n * n)
        assert counts["tiled"] == 2 * (2 * n * d + 2 * math.ceil(n / b) * n * d) + 4 * n
    assert hbm_bytes(1024, 64, 128, 64)["explicit"] / hbm_bytes(1024, 64, 128, 64)["tiled"] > 3
    with pytest.raises(ValueError, match="block_q must be positive"):
        hbm_bytes(8, 4, 0, 4)
