import pytest
import torch

from companion.masks import causal_mask, real_key_mask, real_token_mask, to_key_padding_mask, to_torch_attn_mask
from companion.multihead import MultiHeadAttention


def pair(D=16, H=4, bias=True):
    ref = torch.nn.MultiheadAttention(D, H, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention(D, H, bias=bias).load_from_torch(ref).eval()
    return ours, ref


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_equals_torch(fused, bias):
    ours, ref = pair(bias=bias)
    ours.fused = fused
    x = torch.randn(3, 7, 16)
    out, _ = ours(x)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_masked_attention_equals_torch(fused):
    ours, ref = pair()
    ours.fused = fused
    x = torch.randn(2, 6, 16)
    real = real_token_mask([6, 4], 6)
    out, _ = ours(x, mask=causal_mask(6) & real_key_mask(real))
    expected, _ = ref(x, x, x, attn_mask=to_torch_attn_mask(causal_mask(6)),
                      key_padding_mask=to_key_padding_mask(real), need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_cross_attention_and_weights_equal_torch():
    ours, ref = pair()
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 9, 16)
    out, w = ours(q, kv, kv, need_weights=True)
    expected, expected_w = ref(q, kv, kv, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, expected_w, atol=1e-5, rtol=1e-5)
    assert w.shape == (2, 4, 3, 9)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 3))


def test_fused_and_explicit_paths_agree_with_separate_value():
    mha = MultiHeadAttention(16, 2)
    q, k, v = torch.randn(2, 4, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    mask = torch.rand(2, 1, 4, 5) > 0.4
    mask[..., 0] = True
    fused, none = mha(q, k, v, mask=mask)
    explicit, w = mha(q, k, v, mask=mask, need_weights=True)
    assert none is None and w.shape == (2, 2, 4, 5)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_permutation_equivariance_without_positions():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(1, 10, 16)
    perm = torch.randperm(10)
    out, _ = mha(x)
    out_perm, _ = mha(x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], atol=1e-5, rtol=1e-5)


def test_causal_future_tokens_do_not_change_the_past_and_gradients_are_zero():
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64, requires_grad=True)
    out, _ = mha(x, mask=causal_mask(6))
    out[0, 2].sum().backward()
    assert (x.grad[0, 3:] == 0).all()  # outputs at 2 do not depend on tokens 3..5
    assert (x.grad[0, :3].abs() > 0).any()


def test_gradcheck_module_float64():
    mha = MultiHeadAttention(4, 2, fused=False).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: mha(t, mask=causal_mask(3))[0], (x,))


def test_dropout_only_in_training():
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 5, 8)
    mha.eval()
    a, b = mha(x)[0], mha(x)[0]
    torch.testing.assert_close(a, b)
    mha.train()
    assert not torch.allclose(mha(x)[0], a)


@pytest.mark.parametrize("call, message", [
    (lambda: MultiHeadAttention(10, 3), "d_model=10 is not divisible by num_heads=3"),
    (lambda: MultiHeadAttention(0, 1), "d_model must be positive"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(5, 8)),
     "query must have 3 dimensions \\(batch, length, d_model\\), got shape \\(5, 8\\)"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(2, 5, 6)), "query must have last dimension d_model=8, got shape \\(2, 5, 6\\)"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), torch.randn(2, 4, 8), torch.randn(2, 3, 8)),
     "key and value must have the same batch and length"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), mask=torch.ones(4, 4, dtype=torch.bool)),
     "mask of shape \\(4, 4\\) does not broadcast to the attention scores of shape \\(2, 2, 5, 5\\)"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), mask=torch.ones(5, 5)), "mask must be a boolean tensor"),
    (lambda: MultiHeadAttention(8, 2)(torch.randint(0, 3, (2, 5, 8))), "query must be a floating-point tensor"),
])
def test_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# --- no silent wrong answer --------------------------------------------------------------

@pytest.mark.parametrize("fused", [True, False])
def test_three_dimensional_mask_is_refused(fused):
    # (B, N, N) with B == H would line up with the heads, not the batch: silently wrong
    mha = MultiHeadAttention(8, 2, fused=fused).eval()
    x = torch.randn(2, 5, 8)
    per_seq = torch.ones(2, 5, 5, dtype=torch.bool)
    per_seq[0] = causal_mask(5)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 5, 5\) is ambiguous.*\(B, 1, N_q, N_k\)"):
        mha(x, mask=per_seq)
    out, _ = mha(x, mask=per_seq[:, None])  # the unambiguous form
    torch.testing.assert_close(out[0], mha(x[:1], mask=causal_mask(5))[0][0])
    torch.testing.assert_close(out[1], mha(x[1:])[0][0])


def test_input_dtype_must_match_the_parameters():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="query has dtype torch.float64 but the module's parameters are torch.float32"):
        mha(torch.randn(2, 5, 8, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast any float dtype goes in
        out, _ = mha(torch.randn(2, 5, 8, dtype=torch.bfloat16))
    assert out.shape == (2, 5, 8)
    with pytest.raises(TypeError, match="torch_mha must be a torch.nn.MultiheadAttention, got NoneType"):
        mha.load_from_torch(None)


@pytest.mark.parametrize("fused", [True, False])
def test_cache_equals_attention_over_the_whole_prefix(fused):
    mha = MultiHeadAttention(8, 2, fused=fused).eval()
    x, memory = torch.randn(2, 6, 8), torch.randn(2, 4, 8)
    full_self = mha(x, mask=causal_mask(6))[0]
    full_cross = mha(x, memory, memory)[0]
    self_cache, cross_cache = {}, {}
    for t in range(6):
        step_self, _ = mha(x[:, t:t + 1], cache=self_cache)
        step_cross, _ = mha(x[:, t:t + 1], memory, memory, cache=cross_cache)
        torch.testing.assert_close(step_self[:, 0], full_self[:, t])
        torch.testing.assert_close(step_cross[:, 0], full_cross[:, t])
    assert self_cache["k"].shape == (2, 2, 6, 4) and cross_cache["k"].shape == (2, 2, 4, 4)


def test_explicit_path_with_dropout_multiplies_v_once():
    # a bug computed weights @ V, then dropout(weights) @ V again: with dropout the
    # explicit path must equal dropout(A) V for the same random draw
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5, fused=False).train()
    x = torch.randn(2, 5, 8)
    torch.manual_seed(1)
    out, w = mha(x, need_weights=True)
    q, k, v = (mha.split_heads(t) for t in mha.project_qkv(x, x, x))
    torch.manual_seed(1)
    A = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # sqrt(D_H) = 2
    dropped = torch.nn.functional.dropout(A, 0.5)
    want = mha.out_proj(mha.merge_heads(dropped @ v))
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(w, A)


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------

def _pair_with_biases(D=16, H=4):
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():  # torch initialises the biases to 0: make them count
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    return MultiHeadAttention(D, H).load_from_torch(ref).eval(), ref


@pytest.mark.parametrize("fused", [True, False])
def test_biases_in_self_and_cross_attention_equal_torch(fused):
    ours, ref = _pair_with_biases()
    ours.fused = fused
    x, memory, values = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    torch.testing.assert_close(ours(x)[0], ref(x, x, x)[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours(x, memory, values)[0], ref(x, memory, values)[0], atol=1e-5, rtol=1e-4)
    y = torch.randn(2, 5, 16)  # query is key, value differs
    torch.testing.assert_close(ours(x, x, y)[0], ref(x, x, y)[0], atol=1e-5, rtol=1e-4)


def test_without_biases_cross_attention_equals_torch():
    ref = torch.nn.MultiheadAttention(16, 4, bias=False, batch_first=True).eval()
    ours = MultiHeadAttention(16, 4, bias=False).load_from_torch(ref).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    torch.testing.assert_close(ours(x, memory, memory)[0], ref(x, memory, memory)[0], atol=1e-5, rtol=1e-4)


def test_constructor_defaults_and_checks():
    mha = MultiHeadAttention(8, 2)
    assert mha.in_proj.bias is not None and mha.out_proj.bias is not None  # bias=True by default
    assert mha.head_dim == 4 and isinstance(mha.head_dim, int)
    for dropout, error, message in ((-0.1, ValueError, "dropout must be >= 0.0"), (1.0, ValueError, "dropout must be in"),
                                    (1.5, ValueError, "dropout must be in"), (None, TypeError, "dropout must be a number")):
        with pytest.raises(error, match=message):
            MultiHeadAttention(8, 2, dropout=dropout)
    assert MultiHeadAttention(8, 2, dropout=0.999).dropout == 0.999
    with pytest.raises(ValueError, match="num_heads must be positive"):
        MultiHeadAttention(8, 0)


def test_cache_with_a_mask_over_all_keys_and_reused_memory():
    mha = MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 3, 8)
    no_first = torch.ones(4, 4, dtype=torch.bool).tril()
    no_first[1:, 0] = False  # from step 1 on, the first token is hidden
    full = mha(x, mask=no_first)[0]
    cache = {}
    for t in range(4):
        step, _ = mha(x[:, t:t + 1], mask=no_first[t:t + 1, :t + 1], cache=cache)  # mask (1, t + 1): all keys so far
        torch.testing.assert_close(step[:, 0], full[:, t])
    cross = {}
    first, _ = mha(x[:, :1], memory, memory, cache=cross)
    again, _ = mha(x[:, :1], torch.zeros_like(memory), torch.zeros_like(memory), cache=cross)  # K, V come from the cache
    torch.testing.assert_close(again, first)


@pytest.mark.parametrize("call, message", [
    (lambda m: m(torch.randn(2, 3, 8), torch.ones(2, 3, 8, dtype=torch.long)), "key must be a floating-point tensor"),
    (lambda m: m(torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 4)), "value must have last dimension"),
])
def test_messages_name_key_and_value(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call(MultiHeadAttention(8, 2))


def test_cross_attention_cache_with_a_memory_mask_and_size_checks():
    mha = MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    real = real_key_mask(real_token_mask([4, 2]))  # (B, 1, 1, N_k) over the memory
    full = mha(x, memory, memory, mask=real)[0]
    cache = {}
    for t in range(3):
        step, _ = mha(x[:, t:t + 1], memory, memory, mask=real, cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t])
    with pytest.raises(ValueError, match="size mismatch"):  # same width, other number of heads
        MultiHeadAttention(16, 4).load_from_torch(torch.nn.MultiheadAttention(16, 2))


@pytest.mark.parametrize("fused", [True, False])
def test_causal_flag_equals_the_causal_mask_tensor(fused):
    ours, ref = pair()
    ours.fused = fused
    x = torch.randn(2, 6, 16)
    real = real_key_mask(real_token_mask([6, 4], 6))
    torch.testing.assert_close(ours(x, causal=True)[0], ours(x, mask=causal_mask(6))[0])
    torch.testing.assert_close(ours(x, mask=real, causal=True)[0], ours(x, mask=causal_mask(6) & real)[0])
    expected, _ = ref(x, x, x, attn_mask=to_torch_attn_mask(causal_mask(6)), need_weights=False)
    torch.testing.assert_close(ours(x, causal=True)[0], expected, atol=1e-5, rtol=1e-5)
    _, w = ours(x, causal=True, need_weights=True)
    assert (w[..., causal_mask(6).logical_not()] == 0).all()


def test_causal_flag_with_a_cache_counts_from_the_last_key():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    full = mha(x, causal=True)[0]
    cache = {}
    first, _ = mha(x[:, :2], causal=True, cache=cache)  # two tokens at once, then one at a time
    torch.testing.assert_close(first, full[:, :2])
    for t in range(2, 5):
        step, _ = mha(x[:, t:t + 1], causal=True, cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t])


def test_causal_fused_call_hands_is_causal_to_the_kernel(monkeypatch):
    import torch.nn.functional as F
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), causal=True)
    assert calls == [(None, True)]  # no mask tensor: the kernel skips the upper triangle itself


def test_inputs_are_checked_once_per_call(monkeypatch):
    import companion.attention
    import companion.multihead
    counted = []
    check = companion.attention.check_attention_shapes

    def counting(*args, **kwargs):
        counted.append(1)
        return check(*args, **kwargs)

    monkeypatch.setattr(companion.multihead, "check_attention_shapes", counting)
    monkeypatch.setattr(companion.attention, "check_attention_shapes", counting)
    mha = MultiHeadAttention(8, 2)
    for fused, need_weights in ((True, False), (False, False), (True, True)):
        mha.fused = fused
        counted.clear()
        mha(torch.randn(2, 5, 8), mask=causal_mask(5), need_weights=need_weights)
        assert len(counted) == 1
    with pytest.raises(TypeError, match="causal must be True or False, got Tensor"):
        mha(torch.randn(2, 5, 8), causal=causal_mask(5))


# --- chapter 11: grouped-query attention, RoPE and ALiBi options, the sliding window -------

import math  # noqa: E402

import torch.nn.functional as F  # noqa: E402

from companion.masks import local_window_mask  # noqa: E402
from companion.multihead import repeat_kv_heads  # noqa: E402
from companion.positional import alibi_mask, apply_rope  # noqa: E402


def _heads(mha, x):
    """q (B, H, N, D_H) and k, v (B, H_kv, N, D_H) of a self-attention call, by hand."""
    D, Dkv = mha.d_model, mha.num_kv_heads * mha.head_dim
    W, b = mha.in_proj.weight, mha.in_proj.bias
    q = x @ W[:D].T + b[:D]
    k = x @ W[D:D + Dkv].T + b[D:D + Dkv]
    v = x @ W[D + Dkv:].T + b[D + Dkv:]
    split = lambda t: t.unflatten(-1, (-1, mha.head_dim)).transpose(1, 2)  # noqa: E731
    return split(q), split(k), split(v)


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("fused", [True, False])
def test_grouped_query_attention_equals_torch_enable_gqa(kv_heads, fused):
    mha = MultiHeadAttention(32, 8, num_kv_heads=kv_heads, fused=fused).eval()
    assert mha.in_proj.weight.shape == (32 + 2 * kv_heads * 4, 32)
    x = torch.randn(2, 9, 32)
    q, k, v = _heads(mha, x)
    assert k.shape == (2, kv_heads, 9, 4)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(9), enable_gqa=True)
    expected = mha.out_proj(heads.transpose(1, 2).flatten(2))
    out, _ = mha(x, mask=causal_mask(9))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_all_kv_heads_is_the_full_module_and_torchs():
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    gqa = MultiHeadAttention(16, 4, num_kv_heads=4).load_from_torch(ref).eval()
    full = MultiHeadAttention(16, 4).load_from_torch(ref).eval()
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(gqa(x, mask=causal_mask(7))[0], full(x, mask=causal_mask(7))[0])
    expected, _ = ref(x, x, x, attn_mask=to_torch_attn_mask(causal_mask(7)), need_weights=False)
    torch.testing.assert_close(gqa(x, mask=causal_mask(7))[0], expected, atol=1e-5, rtol=1e-5)


def test_query_heads_of_a_group_share_their_key_value_head():
    x = torch.arange(2 * 3 * 5 * 4.0).reshape(2, 3, 5, 4)  # (B, H_kv=3, N, D_H)
    r = repeat_kv_heads(x, 2)  # (B, 6, N, D_H)
    assert r.shape == (2, 6, 5, 4)
    for h in range(6):
        torch.testing.assert_close(r[:, h], x[:, h // 2])  # torch's enable_gqa grouping


def test_gqa_bad_sizes():
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        MultiHeadAttention(16, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads=2 < num_heads=4"):
        MultiHeadAttention(16, 4, num_kv_heads=2).load_from_torch(torch.nn.MultiheadAttention(16, 4))
    with pytest.raises(ValueError, match="position must be None, 'rope' or 'alibi'"):
        MultiHeadAttention(16, 4, position="sinusoidal")
    with pytest.raises(ValueError, match="for self-attention"):
        x = torch.randn(1, 3, 16)
        MultiHeadAttention(16, 4, position="rope")(x, x, x)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_rope_option_rotates_queries_and_keys_per_head(kv_heads):
    mha = MultiHeadAttention(16, 4, num_kv_heads=kv_heads, position="rope").double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    q, k, v = _heads(mha, x)
    q, k = apply_rope(q), apply_rope(k)
    k, v = k.repeat_interleave(4 // kv_heads, 1), v.repeat_interleave(4 // kv_heads, 1)
    A = torch.softmax((q @ k.transpose(-1, -2) / 2).masked_fill(~causal_mask(12), -math.inf), -1)
    expected = mha.out_proj((A @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(mha(x, mask=causal_mask(12))[0], expected)
    mha.fused = False
    torch.testing.assert_close(mha(x, mask=causal_mask(12))[0], expected)


def test_rope_attention_is_shift_invariant_but_not_permutation_equivariant():
    # Scores depend on n - m only: a causal RoPE model sees a sequence the same wherever it
    # starts, so feeding the tokens at positions 5.. (through the cache's position) changes nothing.
    mha = MultiHeadAttention(16, 4, position="rope").double().eval()
    x = torch.randn(1, 8, 16, dtype=torch.float64)
    plain, _ = mha(x, mask=causal_mask(8))
    shifted, _ = mha(x, mask=causal_mask(8), cache={"position": 5})
    torch.testing.assert_close(shifted, plain)
    perm = torch.randperm(8)
    while (perm == torch.arange(8)).all():
        perm = torch.randperm(8)
    assert not torch.allclose(mha(x[:, perm])[0], mha(x)[0][:, perm])


@pytest.mark.parametrize("fused", [True, False])
def test_alibi_option_adds_the_bias_as_an_additive_mask(fused):
    mha = MultiHeadAttention(16, 4, position="alibi", fused=fused).double().eval()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    q, k, v = _heads(mha, x)
    A = torch.softmax(q @ k.transpose(-1, -2) / 2 + alibi_mask(4, 10).double(), -1)
    expected = mha.out_proj((A @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(mha(x, mask=causal_mask(10))[0], expected)
    out, w = mha(x, mask=causal_mask(10), need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w, A)


@pytest.mark.parametrize("position", [None, "rope", "alibi"])
@pytest.mark.parametrize("kv_heads", [4, 1])
def test_cached_decoding_equals_the_full_pass(position, kv_heads):
    mha = MultiHeadAttention(16, 4, num_kv_heads=kv_heads, position=position).double().eval()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    full, _ = mha(x, mask=causal_mask(9))
    cache = {}
    first, _ = mha(x[:, :4], mask=causal_mask(4), cache=cache)  # a prompt of 4, then one by one
    steps = [first] + [mha(x[:, t:t + 1], cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    assert cache["k"].shape == (2, kv_heads, 9, 4) and cache["position"] == 9


@pytest.mark.parametrize("position", [None, "rope", "alibi"])
@pytest.mark.parametrize("window", [1, 3, 5])
def test_sliding_window_equals_full_attention_under_chapter_3s_window(position, window):
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, position=position, window=window).double().eval()
    full = MultiHeadAttention(16, 4, num_kv_heads=2, position=position).double().eval()
    full.load_state_dict(mha.state_dict())
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    band = causal_mask(12) & local_window_mask(12, window - 1)  # keys t - window + 1 … t
    expected, _ = full(x, mask=band)
    torch.testing.assert_close(mha(x)[0], expected)  # the window implies the band
    torch.testing.assert_close(mha(x, mask=causal_mask(12))[0], expected)
    # token by token with the rolling cache: the same outputs, a cache that stops growing
    cache, outs, sizes = {}, [], []
    for t in range(12):
        outs.append(mha(x[:, t:t + 1], cache=cache)[0])
        sizes.append(cache["k"].shape[2])
    torch.testing.assert_close(torch.cat(outs, 1), expected)
    assert sizes == [min(t + 1, window) for t in range(12)]
    assert cache["position"] == 12


def test_window_wider_than_the_sequence_is_full_causal_attention():
    mha = MultiHeadAttention(16, 4, window=50).eval()
    x = torch.randn(1, 10, 16)
    full = MultiHeadAttention(16, 4).eval()
    full.load_state_dict(mha.state_dict())
    torch.testing.assert_close(mha(x)[0], full(x, mask=causal_mask(10))[0])


def test_rope_reads_a_float32_table_built_once_and_matches_apply_rope():
    """Plain RoPE in the module: cos and sin computed once (float64 on the CPU, stored in
    float32: MPS refuses float64), equal to apply_rope at every position, cache or not."""
    import companion.positional as positional

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, position="rope").eval()
    x = torch.randn(2, 9, 16)
    calls = []
    real = positional.frequencies
    positional.frequencies = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        full, _ = mha(x, causal=True)
        cache = {}
        steps = torch.cat([mha(x[:, t:t + 1], cache=cache, causal=True)[0] for t in range(9)], dim=1)
    finally:
        positional.frequencies = real
    assert len(calls) == 1  # one table for the 18 calls
    cos, sin = mha._rope.cos, mha._rope.sin
    assert cos.dtype == sin.dtype == torch.float32 and cos.shape[1] == 2
    other = MultiHeadAttention(16, 4, position="rope", rope_base=500.0).eval()
    other.load_state_dict(mha.state_dict())
    mha.rope_base = 500.0  # chapter 11's NTK-aware base: the table follows the base
    torch.testing.assert_close(mha(x, causal=True)[0], other(x, causal=True)[0])
    mha.rope_base = 10000.0
    torch.testing.assert_close(steps, full)
    q = mha.split_heads(mha.project_qkv(x, None, None)[0])  # (B, H, N, D_H)
    positions = torch.arange(3, 12)
    torch.testing.assert_close(mha._rope(q, 3, mha.rope_base), apply_rope(q, positions))


def _expanded_twin(gqa):
    """A full multi-head module (H key/value heads) whose key/value head h is a copy of the
    GQA module's head h // G: what repeat_kv_heads computes, built into the weights."""
    H, h_kv, d_h, D = gqa.num_heads, gqa.num_kv_heads, gqa.head_dim, gqa.d_model
    twin = MultiHeadAttention(D, H, fused=gqa.fused, position=gqa.position, window=gqa.window).double()

    def expand(t):  # (D + 2 H_kv D_H, ...) -> (D + 2 H D_H, ...)
        q, k, v = t.split([D, h_kv * d_h, h_kv * d_h])
        kv = [x.unflatten(0, (h_kv, d_h)).repeat_interleave(H // h_kv, 0).flatten(0, 1) for x in (k, v)]
        return torch.cat([q, *kv])

    with torch.no_grad():
        twin.in_proj.weight.copy_(expand(gqa.in_proj.weight))
        twin.in_proj.bias.copy_(expand(gqa.in_proj.bias))
        twin.out_proj.load_state_dict(gqa.out_proj.state_dict())
    return twin


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("position, window", [(None, None), ("rope", None), ("alibi", None), ("rope", 3)])
@pytest.mark.parametrize("masking", ["none", "mask2d", "mask4d", "causal", "causal+mask", "cached"])
def test_gqa_reads_in_place_what_the_expanded_heads_compute(fused, kv_heads, position, window, masking):
    """GQA without copies equals the full module with each key/value head repeated for its
    group: outputs, weights and gradients (those of a shared key/value head summed over its group)."""
    torch.manual_seed(0)
    gqa = MultiHeadAttention(32, 8, num_kv_heads=kv_heads, fused=fused, position=position, window=window).double()
    twin = _expanded_twin(gqa)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    kwargs = {"none": {}, "mask2d": {"mask": torch.rand(7, 7) > 0.3}, "mask4d": {"mask": torch.rand(2, 1, 1, 7) > 0.3},
              "causal": {"causal": True}, "causal+mask": {"causal": True, "mask": torch.rand(2, 1, 7, 7) > 0.2},
              "cached": {"causal": True}}[masking]
    results = []
    for m in (gqa, twin):
        if masking == "cached":  # a prompt of 4, then three steps of one token
            cache = {}
            outs = [m(x[:, :4], cache=cache, **kwargs)[0]]
            outs += [m(x[:, t:t + 1], cache=cache, need_weights=not fused, **kwargs)[0] for t in range(4, 7)]
            out, weights = torch.cat(outs, dim=1), None
        else:
            out, weights = m(x, need_weights=not fused, **kwargs)
        out.pow(2).sum().backward()
        results.append((out, weights, m.in_proj.weight.grad, m.out_proj.weight.grad))
    (out, weights, g_in, g_out), (t_out, t_weights, t_in, t_g_out) = results
    torch.testing.assert_close(out, t_out)
    if weights is not None:
        torch.testing.assert_close(weights, t_weights)
    torch.testing.assert_close(g_out, t_g_out)
    D, d_h = 32, 4
    torch.testing.assert_close(g_in[:D], t_in[:D])  # W^Q
    for part in (slice(D, D + 8 * d_h), slice(D + 8 * d_h, None)):  # W^K, W^V: each group's copies summed
        summed = t_in[part].unflatten(0, (kv_heads, 8 // kv_heads, d_h)).sum(1).flatten(0, 1)
        torch.testing.assert_close(g_in[D:D + kv_heads * d_h] if part.start == D else g_in[D + kv_heads * d_h:], summed)


class _LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_a_cached_gqa_step_makes_no_expanded_copy_of_the_cache(fused, kv_heads):
    """Decoding one token against M cached ones: no operation returns a tensor of the size of
    the keys expanded to H heads, B·H·M·D_H (repeat_kv_heads' copy)."""
    B, H, M, d_h = 1, 8, 256, 16
    mha = MultiHeadAttention(H * d_h, H, num_kv_heads=kv_heads, fused=fused, position="rope").eval()
    x = torch.randn(B, M + 1, H * d_h)
    cache = {"k_buffer": torch.zeros(B, kv_heads, M + 1, d_h), "v_buffer": torch.zeros(B, kv_heads, M + 1, d_h)}
    with torch.no_grad():
        mha(x[:, :M], cache=cache, causal=True)
        with _LargestTensor() as seen:
            mha(x[:, M:], cache=cache, causal=True, need_weights=not fused)
    assert cache["k"].shape == (B, kv_heads, M + 1, d_h)
    assert seen.largest < B * H * (M + 1) * d_h, seen.largest
    assert seen.largest >= B * kv_heads * (M + 1) * d_h  # the cache itself (a view of the buffer) is seen
