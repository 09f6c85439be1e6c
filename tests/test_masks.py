import pytest
import torch
import torch.nn.functional as F

from companion import masks
from companion.masks import causal_mask, real_key_mask, real_token_mask


def test_causal_mask_values():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)


def test_padding_mask_values():
    m = real_token_mask([3, 1, 0], max_len=4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(m, expected)
    assert real_token_mask(torch.tensor([2, 5])).shape == (2, 5)
    assert real_key_mask(m).shape == (3, 1, 1, 4)


def test_conversion_to_nn_multiheadattention_polarity():
    # Same attention computed two ways: our convention with F.sdpa, torch's
    # opposite convention with nn.MultiheadAttention.
    torch.manual_seed(1)
    B, N, D = 2, 5, 8
    x = torch.randn(B, N, D)
    mha = torch.nn.MultiheadAttention(D, 2, batch_first=True).eval()
    real = real_token_mask([5, 3], N)  # True = real token
    causal = causal_mask(N)  # True = may attend
    ref, _ = mha(x, x, x, attn_mask=masks.to_torch_attn_mask(causal),
                 key_padding_mask=masks.to_key_padding_mask(real))
    # our way: one boolean mask, causal AND padding, broadcast to (B, 1, N, N)
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
    def heads(t):
        return t.view(B, N, 2, D // 2).transpose(1, 2)
    q, k, v = heads(F.linear(x, w_q, b_q)), heads(F.linear(x, w_k, b_k)), heads(F.linear(x, w_v, b_v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal & real_key_mask(real))
    out = mha.out_proj(out.transpose(1, 2).reshape(B, N, D))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # Passing our mask unconverted gives a different (wrong) answer
    wrong, _ = mha(x, x, x, attn_mask=causal)
    assert not torch.allclose(wrong, ref, atol=1e-3)


def test_additive_round_trip():
    m = causal_mask(4)
    add = masks.to_additive(m)
    assert add[0, 1] == float("-inf") and add[1, 0] == 0
    assert torch.equal(masks.from_additive(add), m)
    scores = torch.randn(4, 4)
    torch.testing.assert_close(torch.softmax(scores + add, -1),
                               torch.softmax(scores.masked_fill(~m, float("-inf")), -1))


@pytest.mark.parametrize("call, message", [
    (lambda: causal_mask(0), "n must be positive, got 0"),
    (lambda: causal_mask(2.5), "n must be an int"),
    (lambda: real_token_mask([3, 5], max_len=4), "max_len=4 is shorter than the longest sequence \\(5\\)"),
    (lambda: real_token_mask([[1, 2]]), "lengths must be 1-D"),
    (lambda: real_token_mask(torch.tensor([1.5])), "lengths must hold integers"),
    (lambda: real_token_mask([-1, 2]), "lengths must be >= 0"),
    (lambda: real_key_mask(torch.ones(3, dtype=torch.bool)), "real_tokens must have shape \\(B, N_k\\)"),
    (lambda: masks.to_additive(torch.ones(2, 2)), "mask must be boolean"),
])
def test_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_local_window_mask():
    m = masks.local_window_mask(5, 1)
    assert m.tolist()[0] == [True, True, False, False, False]
    assert m.tolist()[2] == [False, True, True, True, False]
    assert torch.equal(masks.local_window_mask(4, 0), torch.eye(4, dtype=torch.bool))
    assert masks.local_window_mask(4, 10).all()


def test_local_window_mask_2d():
    m = masks.local_window_mask_2d(4, 5, 1)  # 4 rows, 5 columns
    assert m.shape == (20, 20)
    # pixel (1, 1) sees its 3x3 neighbourhood: 9 pixels
    p = 1 * 5 + 1
    seen = m[p].view(4, 5)
    expected = torch.zeros(4, 5, dtype=torch.bool)
    expected[0:3, 0:3] = True
    assert torch.equal(seen, expected)
    # a corner pixel sees 4; the mask is symmetric
    assert m[0].sum() == 4 and torch.equal(m, m.T)
    # a row-major flattening, as einops 'c h w -> (h w) c'
    assert not m[4, 5]  # (0, 4) and (1, 0) are not neighbours although 4 and 5 are adjacent numbers


def test_graph_mask():
    adj = [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
    m = masks.graph_mask(adj)
    assert m.tolist() == [[True, True, False], [True, True, True], [False, True, True]]
    assert masks.graph_mask(torch.zeros(2, 2), self_loops=False).sum() == 0
    assert masks.graph_mask(torch.tensor([[0.0, 0.5], [0.5, 0.0]]))[0, 1]


@pytest.mark.parametrize("call, message", [
    (lambda: masks.local_window_mask(4, -1), "radius must be >= 0, got -1"),
    (lambda: masks.local_window_mask(4, 1.5), "radius must be an int"),
    (lambda: masks.local_window_mask_2d(0, 4, 1), "height must be positive"),
    (lambda: masks.graph_mask(torch.ones(2, 3)), "adjacency must be a square \\(n, n\\) matrix, got shape \\(2, 3\\)"),
    (lambda: masks.graph_mask(torch.ones(2, 2, dtype=torch.cfloat)), "adjacency must be real"),
])
def test_new_mask_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# --- no silent wrong answer --------------------------------------------------------------

def test_to_additive_needs_a_float_dtype():
    # dtype=torch.bool used to give True where allowed... and True (-inf) where blocked: inverted
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype"):
        masks.to_additive(causal_mask(3), dtype=torch.bool)
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype"):
        masks.to_additive(causal_mask(3), dtype=torch.long)
    a = masks.to_additive(causal_mask(3), dtype=torch.float64)
    assert a.dtype == torch.float64 and torch.equal(masks.from_additive(a), causal_mask(3))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_from_additive_refuses_nan_and_plus_inf(bad):
    with pytest.raises(ValueError, match=r"additive must hold finite numbers or -inf, got 1 NaN or \+inf entries"):
        masks.from_additive(torch.tensor([[0.0, bad], [0.0, float("-inf")]]))


def test_graph_mask_refuses_nan_and_non_matrices():
    with pytest.raises(ValueError, match=r"adjacency holds NaN at \(0, 1\)"):
        masks.graph_mask(torch.tensor([[0.0, float("nan")], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="adjacency must be a square"):
        masks.graph_mask([[1, 0], [1]])
    with pytest.raises(TypeError, match="adjacency must be a tensor or a nested list, got str"):
        masks.graph_mask("ab")
    with pytest.raises(TypeError, match="self_loops must be True or False"):
        masks.graph_mask(torch.zeros(2, 2), self_loops="no")


def test_key_mask_needs_a_boolean_padding_mask():
    with pytest.raises(TypeError, match="real_tokens must be a boolean"):
        real_key_mask(torch.ones(2, 3))


def test_pixel_grid_numbers_pixels_row_by_row():
    rows, cols = masks.pixel_grid(2, 3)
    assert rows.tolist() == [0, 0, 0, 1, 1, 1] and cols.tolist() == [0, 1, 2, 0, 1, 2]


def test_masks_are_built_on_the_device_asked_for():
    # the "meta" device holds shapes without data: a mask built on the CPU instead shows
    meta = torch.device("meta")
    assert causal_mask(3, device=meta).device == meta
    assert masks.local_window_mask(4, 1, device=meta).device == meta
    assert masks.local_window_mask_2d(2, 3, 1, device=meta).device == meta
    assert all(t.device == meta for t in masks.pixel_grid(2, 3, device=meta))
    assert masks.graph_mask(torch.zeros(3, 3, dtype=torch.long, device=meta)).device == meta


def test_window_mask_messages_name_the_argument():
    with pytest.raises(ValueError, match="n must be positive, got 0"):
        masks.local_window_mask(0, 1)
    with pytest.raises(ValueError, match="radius must be >= 0, got -1"):
        masks.local_window_mask(3, -1)
    with pytest.raises(ValueError, match="height must be positive, got 0"):
        masks.local_window_mask_2d(0, 3, 1)
    with pytest.raises(ValueError, match="NaN is neither an edge nor no edge"):
        masks.graph_mask(torch.tensor([[float("nan")]]))


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------

def test_mask_builders_name_their_arguments_and_edges():
    assert real_token_mask([], max_len=3).shape == (0, 3)  # no sequences
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        real_token_mask([])
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        real_token_mask([1], max_len=0)
    with pytest.raises(TypeError, match="lengths must be a torch.Tensor"):
        real_token_mask("abc")
    with pytest.raises(TypeError, match="real_tokens must be a torch.Tensor"):
        real_key_mask([[True]])
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        masks.to_torch_attn_mask(None)
    with pytest.raises(ValueError, match="width must be positive, got 0"):
        masks.pixel_grid(2, 0)
    with pytest.raises(ValueError, match="radius must be >= 0, got -1"):
        masks.local_window_mask_2d(2, 2, -1)
    assert torch.equal(masks.local_window_mask_2d(2, 2, 0), torch.eye(4, dtype=torch.bool))


def test_additive_masks_keep_the_device_and_name_their_argument():
    meta = torch.device("meta")
    assert masks.to_additive(causal_mask(3, device=meta)).device == meta
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        masks.to_additive([[True]])
    with pytest.raises(TypeError, match="additive must be a torch.Tensor"):
        masks.from_additive([[0.0]])


def test_causal_mask_with_more_keys_is_aligned_bottom_right():
    """Two new queries after three cached keys: the last query sees every key (torch's
    causal_lower_right, FlashAttention 2.1 and later)."""
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert torch.equal(causal_mask(4, 4), causal_mask(4))
    with pytest.raises(ValueError, match="n_k must be positive"):
        causal_mask(2, 0)
