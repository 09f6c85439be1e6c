import math

import pytest
import torch
import torch.nn.functional as F

from companion.attention import AdditiveAttention, fused_attention, scaled_dot_product_attention
from companion.masks import causal_mask, key_mask, padding_mask


def qkv(B=2, H=3, Nq=5, Nk=7, d=8, dv=6, dtype=torch.float32):
    return (torch.randn(B, H, Nq, d, dtype=dtype), torch.randn(B, H, Nk, d, dtype=dtype),
            torch.randn(B, H, Nk, dv, dtype=dtype))


def test_hand_computed_example():
    # Two keys; the query matches the first exactly.
    q = torch.tensor([[1.0, 0.0]])
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    v = torch.tensor([[10.0], [20.0]])
    out, w = scaled_dot_product_attention(q, k, v)
    s = 1 / math.sqrt(2)  # scores are (1/sqrt2, 0)
    a0 = math.exp(s) / (math.exp(s) + 1)
    assert w[0].tolist() == pytest.approx([a0, 1 - a0])
    assert out.item() == pytest.approx(10 * a0 + 20 * (1 - a0))


@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "random"])
def test_explicit_equals_torch_fused(mask_kind):
    q, k, v = qkv(Nq=6, Nk=6)
    mask = None
    if mask_kind == "causal":
        mask = causal_mask(6)
    elif mask_kind == "padding":
        mask = key_mask(padding_mask([6, 3], 6))
    elif mask_kind == "random":
        mask = torch.rand(2, 3, 6, 6) > 0.3
        mask[..., 0] = True  # keep every row attending to something
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_attention(q, k, v, mask), ref)


def test_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    q, k, v = qkv(Nq=6, Nk=6)
    mask = causal_mask(6) & key_mask(padding_mask([6, 4], 6))  # (2, 1, 6, 6)
    _, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 6))
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()


def test_fully_masked_row_gives_zero_not_nan_like_torch():
    q, k, v = qkv(B=1, H=1, Nq=3, Nk=3)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nowhere
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any()
    assert (w[..., 1, :] == 0).all() and (out[..., 1, :] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_causal_mask_hides_the_future():
    x = torch.randn(1, 8, 4)
    out1, _ = scaled_dot_product_attention(x, x, x, causal_mask(8))
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 4)  # change tokens 5, 6, 7
    out2, _ = scaled_dot_product_attention(y, y, y, causal_mask(8))
    torch.testing.assert_close(out1[:, :5], out2[:, :5], rtol=0, atol=0)
    assert not torch.allclose(out1[:, 5:], out2[:, 5:])


def test_gradcheck_float64():
    q, k, v = qkv(B=1, H=2, Nq=3, Nk=4, d=3, dv=2, dtype=torch.float64)
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.tensor([[True, True, False, True]] * 3)
    assert torch.autograd.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, mask)[0], (q, k, v))


def test_additive_attention_matches_formula_and_ignores_padding():
    att = AdditiveAttention(query_dim=4, key_dim=6, hidden_dim=5)
    s = torch.randn(2, 4)
    h = torch.randn(2, 7, 6)
    mask = padding_mask([7, 4], 7)
    context, w = att(s, h, mask=mask)
    assert context.shape == (2, 6) and w.shape == (2, 7)
    # by hand: e_i = w^T tanh(W_q s + W_k h_i)
    e = (torch.tanh(att.W_q(s)[:, None] + att.W_k(h)) @ att.w.weight.T).squeeze(-1)
    e = e.masked_fill(~mask, float("-inf"))
    a = torch.softmax(e, -1)
    torch.testing.assert_close(w, a)
    torch.testing.assert_close(context, (a[:, :, None] * h).sum(1))
    assert (w[1, 4:] == 0).all()
    # padding content cannot change the result
    h2 = h.clone()
    h2[1, 4:] = 100.0
    torch.testing.assert_close(att(s, h2, mask=mask)[0], context)


def test_additive_attention_many_queries():
    att = AdditiveAttention(4, 4, 8)
    s, h = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    c, w = att(s, h)
    assert c.shape == (2, 3, 4) and w.shape == (2, 3, 5)
    c0, w0 = att(s[:, 0], h)
    torch.testing.assert_close(c[:, 0], c0)
