import math

import pytest
import torch
import torch.nn.functional as F

from companion.attention import AdditiveAttention, DotProductAttention, attention_with_weights, fused_attention
from companion.masks import causal_mask, real_key_mask, real_token_mask


def qkv(B=2, H=3, Nq=5, Nk=7, d=8, dv=6, dtype=torch.float32):
    return (torch.randn(B, H, Nq, d, dtype=dtype), torch.randn(B, H, Nk, d, dtype=dtype),
            torch.randn(B, H, Nk, dv, dtype=dtype))


def test_hand_computed_example():
    # Two keys; the query matches the first exactly.
    q = torch.tensor([[1.0, 0.0]])
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    v = torch.tensor([[10.0], [20.0]])
    out, w = attention_with_weights(q, k, v)
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
        mask = real_key_mask(real_token_mask([6, 3], 6))
    elif mask_kind == "random":
        mask = torch.rand(2, 3, 6, 6) > 0.3
        mask[..., 0] = True  # keep every row attending to something
    out, _ = attention_with_weights(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_attention(q, k, v, mask), ref)


def test_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    q, k, v = qkv(Nq=6, Nk=6)
    mask = causal_mask(6) & real_key_mask(real_token_mask([6, 4], 6))  # (2, 1, 6, 6)
    _, w = attention_with_weights(q, k, v, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 6))
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()


def test_fully_masked_row_gives_zero_not_nan_like_torch():
    q, k, v = qkv(B=1, H=1, Nq=3, Nk=3)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nowhere
    out, w = attention_with_weights(q, k, v, mask)
    assert not torch.isnan(out).any()
    assert (w[..., 1, :] == 0).all() and (out[..., 1, :] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_causal_mask_hides_the_future():
    x = torch.randn(1, 8, 4)
    out1, _ = attention_with_weights(x, x, x, causal_mask(8))
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 4)  # change tokens 5, 6, 7
    out2, _ = attention_with_weights(y, y, y, causal_mask(8))
    torch.testing.assert_close(out1[:, :5], out2[:, :5], rtol=0, atol=0)
    assert not torch.allclose(out1[:, 5:], out2[:, 5:])


def test_gradcheck_float64():
    q, k, v = qkv(B=1, H=2, Nq=3, Nk=4, d=3, dv=2, dtype=torch.float64)
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.tensor([[True, True, False, True]] * 3)
    assert torch.autograd.gradcheck(lambda a, b, c: attention_with_weights(a, b, c, mask)[0], (q, k, v))


def test_additive_attention_matches_formula_and_ignores_padding():
    att = AdditiveAttention(query_dim=4, key_dim=6, hidden_dim=5)
    s = torch.randn(2, 4)
    h = torch.randn(2, 7, 6)
    mask = real_token_mask([7, 4], 7)
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


# --- no silent wrong answer --------------------------------------------------------------

@pytest.mark.parametrize("fn", [attention_with_weights, fused_attention])
def test_head_size_zero_and_no_keys_are_errors_not_nan(fn):
    with pytest.raises(ValueError, match=r"head size\) >= 1, got q \(2, 5, 0\)"):
        fn(torch.randn(2, 5, 0), torch.randn(2, 7, 0), torch.randn(2, 7, 4))
    with pytest.raises(ValueError, match=r"at least one key \(length >= 1\), got k \(2, 0, 8\)"):
        fn(torch.randn(2, 5, 8), torch.randn(2, 0, 8), torch.randn(2, 0, 4))
    out = fn(torch.randn(2, 0, 8), torch.randn(2, 0, 8), torch.randn(2, 0, 4))  # no queries: an empty answer
    assert (out[0] if isinstance(out, tuple) else out).shape == (2, 0, 4)


@pytest.mark.parametrize("fn", [attention_with_weights, fused_attention])
def test_q_k_v_of_different_dtypes_are_named(fn):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="q, k and v must have the same dtype, got q torch.float64, k torch.float32"):
        fn(q.double(), k, v)


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan"), "0.1"])
def test_fused_dropout_must_be_a_probability(p):
    q, k, v = qkv()
    with pytest.raises((ValueError, TypeError), match="dropout_p must be"):
        fused_attention(q, k, v, dropout_p=p)


def test_explicit_dropout_multiplies_v_once():
    # dropout on the weights, then one product with V: out = dropout(A) V
    q, k, v = qkv()
    torch.manual_seed(3)
    out, w = attention_with_weights(q, k, v, dropout_p=0.3)
    torch.manual_seed(3)
    dropped = F.dropout(w, 0.3)  # not 0.5, F.dropout's default
    torch.testing.assert_close(out, dropped @ v)
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))  # the returned weights are A itself


def test_masked_softmax_is_the_one_formula():
    from companion.attention import masked_softmax

    e = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    m = torch.tensor([[True, False, True], [False, False, False]])
    w = masked_softmax(e, m)
    torch.testing.assert_close(w[0], torch.tensor([math.exp(1), 0.0, math.exp(3)]) / (math.exp(1) + math.exp(3)))
    assert torch.equal(w[1], torch.zeros(3))  # no allowed key: 0, not NaN
    torch.testing.assert_close(masked_softmax(e), e.softmax(-1))


def test_additive_attention_input_dtype_and_empty_keys():
    att = AdditiveAttention(4, 6, 5)
    with pytest.raises(TypeError, match="query has dtype torch.float64 but the module's parameters are torch.float32"):
        att(torch.randn(2, 4).double(), torch.randn(2, 7, 6).double())
    with pytest.raises(ValueError, match=r"keys must hold at least one key \(N_k >= 1\), got keys \(2, 0, 6\)"):
        att(torch.randn(2, 4), torch.randn(2, 0, 6))


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------

def test_shape_checks_cover_every_argument():
    q, k, v = torch.randn(2, 1, 8), torch.randn(2, 0, 8), torch.randn(2, 0, 4)
    with pytest.raises(ValueError, match="at least one key"):  # one query and no key
        attention_with_weights(q, k, v)
    with pytest.raises(ValueError, match="do not broadcast"):  # only k's batch is wrong
        attention_with_weights(torch.randn(2, 5, 8), torch.randn(3, 7, 8), torch.randn(2, 7, 4))
    with pytest.raises(TypeError, match="k must be a floating-point tensor"):
        attention_with_weights(torch.randn(2, 5, 8), torch.ones(2, 7, 8, dtype=torch.long), torch.randn(2, 7, 4))
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        attention_with_weights(torch.randn(2, 5, 8), torch.randn(2, 7, 8), None)


def test_fused_attention_applies_its_dropout():
    q, k, v = qkv()
    torch.manual_seed(0)
    assert not torch.allclose(fused_attention(q, k, v, dropout_p=0.9), fused_attention(q, k, v))


def test_additive_attention_layout_and_checks():
    att = AdditiveAttention(4, 6, 5)
    # e = wᵀ tanh(W_q s + W_k h + b): one bias, inside the tanh
    assert att.W_q.bias is None and att.W_k.bias is not None and att.w.bias is None
    q3, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    mask = torch.ones(2, 3, 7, dtype=torch.bool)
    mask[:, :, 5:] = False
    ctx, w = att(q3, keys, mask=mask)  # several queries, one mask per query
    assert ctx.shape == (2, 3, 6) and w[..., 5:].abs().max() == 0
    with pytest.raises(ValueError, match="AdditiveAttention expects"):
        att(q3, keys, torch.randn(2, 7))  # 2-D values
    with pytest.raises(ValueError, match="batch sizes and key/value lengths must agree"):
        att(torch.randn(3, 4), keys)  # only the query's batch differs
    with pytest.raises(ValueError, match="query_dim must be positive"):
        AdditiveAttention(0, 6, 5)
    with pytest.raises(ValueError, match="key_dim must be positive"):
        AdditiveAttention(4, 0, 5)


def test_additive_attention_uses_separate_values_and_names_its_inputs():
    att = AdditiveAttention(4, 6, 5)
    q, keys, values = torch.randn(2, 4), torch.randn(2, 7, 6), torch.randn(2, 7, 3)
    ctx, w = att(q, keys, values)
    assert ctx.shape == (2, 3)
    torch.testing.assert_close(ctx, torch.einsum("bn,bnd->bd", w, values))
    for args, message in (((q.long(), keys), "query must be a floating-point"),
                          ((q, keys.long()), "keys must be a floating-point"),
                          ((q, keys, values.long()), "values must be a floating-point"),
                          ((q.double(), keys.double()), "query has dtype torch.float64"),
                          ((q, keys.double()), "keys has dtype torch.float64")):
        with pytest.raises(TypeError, match=message):
            att(*args)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        att(q, keys, mask=torch.ones(2, 7))


def test_values_batch_and_query_rank_are_checked():
    with pytest.raises(ValueError, match="do not broadcast"):  # only v's batch is wrong
        attention_with_weights(torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(3, 7, 4))
    with pytest.raises(ValueError, match="AdditiveAttention expects"):
        AdditiveAttention(4, 6, 5)(torch.randn(2, 1, 3, 4), torch.randn(2, 7, 6))  # a 4-D query


# --- DotProductAttention, the module beside AdditiveAttention -----------------------------

def test_dot_product_attention_module_formula_mask_and_projection():
    att = DotProductAttention(6, 5, 4)
    assert att.W_Q.bias is None and att.W_K.bias is None and att.W_V.bias is None
    s, H = torch.randn(2, 6), torch.randn(2, 3, 5)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    c, a = att(s, H, mask=mask)
    q, k, v = att.W_Q(s), att.W_K(H), att.W_V(H)
    e = torch.einsum("bd,bnd->bn", q, k) / 2.0  # sqrt(4)
    want = e.masked_fill(~mask, float("-inf")).softmax(-1)
    torch.testing.assert_close(a, want)
    torch.testing.assert_close(c, torch.einsum("bn,bnd->bd", a, v))
    c2, a2 = att(s, H, mask=mask, projected=att.project(H))  # keys/values projected once
    torch.testing.assert_close(c2, c)
    torch.testing.assert_close(a2, a)
    torch.testing.assert_close(att.project(H)[1], v)
    H2 = torch.randn(2, 3, 5)  # what `projected` holds is what is attended to
    torch.testing.assert_close(att(s, H, projected=att.project(H2))[0], att(s, H2)[0])
    c3, a3 = att(s, H)  # no mask: every key
    torch.testing.assert_close(a3, e.softmax(-1))


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m(torch.randn(2, 6).double(), torch.randn(2, 3, 5)), TypeError, "query has dtype torch.float64"),
    (lambda m: m(torch.randn(2, 5), torch.randn(2, 3, 5)), ValueError, "query must have last dimension query_dim=6"),
    (lambda m: m(torch.randn(2, 1, 6), torch.randn(2, 3, 5)), ValueError, r"query must have 2 dimensions \(B, query_dim\)"),
    (lambda m: m(None, torch.randn(2, 3, 5)), TypeError, "query must be a torch.Tensor"),
    (lambda m: m(torch.randn(2, 6), torch.randn(2, 3, 4)), ValueError, "keys must have last dimension key_dim=5"),
    (lambda m: m(torch.randn(2, 6), torch.randn(2, 5)), ValueError, r"keys must have 3 dimensions \(B, N, key_dim\)"),
    (lambda m: m(torch.randn(2, 6), torch.randn(2, 3, 5).double()), TypeError, "keys has dtype torch.float64"),
    (lambda m: m(torch.randn(2, 6), torch.ones(2, 3, 5, dtype=torch.long)), TypeError, "keys must be a floating-point"),
])
def test_dot_product_attention_module_messages(call, error, message):
    with pytest.raises(error, match=message):
        call(DotProductAttention(6, 5, 4))
    for i, name in enumerate(("query_dim", "key_dim", "dim")):
        sizes = [6, 5, 4]
        sizes[i] = 0
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            DotProductAttention(*sizes)


def test_masked_softmax_checks_its_inputs():
    from companion.attention import masked_softmax

    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        masked_softmax(torch.ones(2, 3, dtype=torch.complex64))
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\) does not broadcast to the attention scores of shape \(2, 3\)"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 4, dtype=torch.bool))
    assert masked_softmax(torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.bool)).abs().max() == 0


def test_masked_softmax_leaves_its_input_alone_and_in_place_falls_back_where_the_mask_broadcasts_up():
    from companion.attention import _masked_softmax, masked_softmax

    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4)
    mask = torch.rand(2, 3, 4) > 0.3
    before = scores.clone()
    expected = masked_softmax(scores, mask)
    assert torch.equal(scores, before)  # the public function never writes into its input
    wide = torch.rand(5, 2, 3, 4) > 0.3  # a mask that makes the scores larger: no in-place write
    out = _masked_softmax(scores, wide, in_place=True)
    assert out.shape == (5, 2, 3, 4) and torch.equal(scores, before)
    torch.testing.assert_close(_masked_softmax(scores.clone(), mask, in_place=True), expected)
