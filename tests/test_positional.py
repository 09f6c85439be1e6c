import math

import pytest
import torch

from companion.positional import SinusoidalPositionalEncoding, frequencies, rotation_matrix, sinusoidal_encoding


def test_hand_computed_points():
    pe = sinusoidal_encoding(50, 8, base=10000.0)
    assert pe.shape == (50, 8)
    # t = 0: sin 0 = 0 on even dims, cos 0 = 1 on odd dims
    assert pe[0].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    # t = 1, i = 0: angle 1 rad
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0))
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0))
    # t = 7, i = 1 (dims 2, 3): angle 7 / 10000^(2/8) = 7 / 10
    assert pe[7, 2].item() == pytest.approx(math.sin(0.7))
    assert pe[7, 3].item() == pytest.approx(math.cos(0.7))
    # base 10, t = 3, i = 3 (dims 6, 7): angle 3 / 10^(6/8)
    pe10 = sinusoidal_encoding(4, 8, base=10.0)
    assert pe10[3, 6].item() == pytest.approx(math.sin(3 / 10 ** 0.75), rel=1e-6)


def test_frequencies():
    torch.testing.assert_close(frequencies(4, 100.0), torch.tensor([1.0, 0.1], dtype=torch.float64))


@pytest.mark.parametrize("base", [10.0, 10000.0])
def test_shift_is_a_fixed_rotation(base):
    d = 16
    pe = sinusoidal_encoding(200, d, base).double()
    for delta in (1, 5, 37):
        R = rotation_matrix(delta, d, base)
        # the same R for every t
        shifted = pe[: 200 - delta] @ R.T
        torch.testing.assert_close(shifted, pe[delta:], atol=1e-5, rtol=0)
        # R is orthogonal: a rotation keeps lengths
        torch.testing.assert_close(R @ R.T, torch.eye(d, dtype=torch.float64))


def test_rotation_composes():
    torch.testing.assert_close(rotation_matrix(3, 8) @ rotation_matrix(4, 8), rotation_matrix(7, 8))


def test_module_adds_table():
    m = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.zeros(2, 5, 8)
    torch.testing.assert_close(m(x), sinusoidal_encoding(5, 8).expand(2, 5, 8))
    with pytest.raises(ValueError, match="positions 0…29 go past max_len=20"):
        m(torch.zeros(2, 30, 8))
    with pytest.raises(ValueError, match=r"expected x of shape \(B, N, 8\), got \(5, 8\)"):
        m(torch.zeros(5, 8))


def test_module_offset_continues_the_table():
    m = SinusoidalPositionalEncoding(8, max_len=20)
    table = sinusoidal_encoding(20, 8)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(m(x, offset=7), x + table[7:10])
    torch.testing.assert_close(m(x[:, :1], offset=19), x[:, :1] + table[19:20])  # the last row
    with pytest.raises(ValueError, match="positions 18…20 go past max_len=20"):
        m(x, offset=18)
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        m(x, offset=-1)


def test_module_refuses_integer_inputs():
    # an int tensor would truncate the table to 0/±1 (silently wrong)
    m = SinusoidalPositionalEncoding(8, max_len=20)
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        m(torch.zeros(2, 5, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got NoneType"):
        m(None)


@pytest.mark.parametrize("bits", [62, 63, 64, 65, 100])
def test_binary_encoding_does_not_overflow(bits):
    from companion.positional import binary_encoding

    b = binary_encoding(6, bits)
    assert b.shape == (6, bits)
    assert b[:, :-3].abs().sum() == 0  # the high digits of 0..5 are 0
    assert b[:, -3:].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [1, 0, 0], [1, 0, 1]]


def test_rotation_matrix_delta_must_be_a_finite_number():
    from companion.positional import rotation_matrix

    for delta, error in ((float("nan"), ValueError), (float("inf"), ValueError), ("1", TypeError)):
        with pytest.raises(error, match="delta must be a"):
            rotation_matrix(delta, 8)


@pytest.mark.parametrize("call, message", [
    (lambda: sinusoidal_encoding(10, 7), "d_model must be even"),
    (lambda: sinusoidal_encoding(10, 0), "d_model must be positive"),
    (lambda: sinusoidal_encoding(0, 8), "length must be positive"),
    (lambda: sinusoidal_encoding(10, 8, base=1.0), "base must be a finite number > 1"),
    (lambda: sinusoidal_encoding(10, 8, base=-5), "base must be a finite number > 1"),
    (lambda: rotation_matrix(1, 5), "d_model must be even"),
])
def test_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_binary_encoding():
    from companion.positional import binary_encoding
    b = binary_encoding(9, 4)
    assert b[7].tolist() == [0, 1, 1, 1] and b[8].tolist() == [1, 0, 0, 0]
    # neighbours 7, 8 differ in all four digits; 8, 9 in one
    assert torch.dist(b[7], b[8]).item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="4 bits hold only 16 positions, got length=17"):
        binary_encoding(17, 4)


def test_static_fraction_hand_made():
    from companion.positional import static_fraction
    pe = torch.tensor([[0.0, 1.0, 0.0], [0.5, 1.0, 0.01], [1.0, 1.0, 0.02]])
    assert static_fraction(pe, 0.05) == pytest.approx(2 / 3)
    assert static_fraction(pe, 0.015) == pytest.approx(1 / 3)
    # base 10 has no static region at 128 x 512; base 10000 has one
    assert static_fraction(sinusoidal_encoding(128, 512, 10.0)) == 0.0
    assert static_fraction(sinusoidal_encoding(128, 512, 10000.0)) > 0.2
    with pytest.raises(ValueError, match="threshold must be a number > 0"):
        static_fraction(pe, 0)
    with pytest.raises(ValueError, match="pe must have 2 dimensions"):
        static_fraction(torch.zeros(3), 0.1)


def test_distances_and_collisions():
    from companion.positional import min_distance, near_collisions, pairwise_distances
    pe = torch.tensor([[0.0, 0.0], [3.0, 4.0], [3.0, 4.1]])
    d = pairwise_distances(pe)
    assert d[0, 1].item() == pytest.approx(5.0)
    assert min_distance(pe) == pytest.approx(0.1)
    assert near_collisions(pe, 0.2) == 1 and near_collisions(pe, 6.0) == 3
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        near_collisions(pe, -1)
    with pytest.raises(ValueError, match="at least 2 positions"):
        min_distance(pe[:1])


def test_binary_encoding_edges_and_messages():
    from companion.positional import binary_encoding

    assert binary_encoding(4, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]  # exactly 2^bits positions fit
    assert binary_encoding(1, 1).tolist() == [[0]]
    with pytest.raises(ValueError, match="length must be positive, got 0"):
        binary_encoding(0, 3)
    with pytest.raises(ValueError, match="bits must be positive, got 0"):
        binary_encoding(3, 0)


def test_module_table_settings():
    m = SinusoidalPositionalEncoding(8)
    assert m.max_len == 512 and m.pe.shape == (512, 8)
    assert "pe" not in m.state_dict()  # a fixed table: not saved with the weights
    m10 = SinusoidalPositionalEncoding(8, max_len=6, base=10.0)
    torch.testing.assert_close(m10.positions(6), sinusoidal_encoding(6, 8, base=10.0))
    torch.testing.assert_close(m10.positions(3), sinusoidal_encoding(3, 8, base=10.0))  # offset 0 by default
    assert m10.positions(0).shape == (0, 8)  # no positions: an empty table
    with pytest.raises(ValueError, match="length must be >= 0, got -1"):
        m10.positions(-1)
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        SinusoidalPositionalEncoding(8, max_len=0)
    x = torch.zeros(1, 3, 8, dtype=torch.float16)
    assert m10(x).dtype == torch.float16  # the table follows the input's dtype


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------

def test_base_and_default_values():
    from companion.positional import frequencies, rotation_matrix

    for base in (float("nan"), 1.0, "10"):
        with pytest.raises(ValueError, match="base must be a finite number > 1"):
            sinusoidal_encoding(4, 8, base=base)
    assert sinusoidal_encoding(4, 8, base=1.5).shape == (4, 8)
    torch.testing.assert_close(frequencies(4), torch.tensor([1.0, 0.01], dtype=torch.float64))  # base 10000
    R = rotation_matrix(1000.0, 4)  # the default base too: ω_1 = 0.01, angle 10
    assert math.isclose(R[2, 2].item(), math.cos(10.0), abs_tol=1e-12)


def test_overlap_measures_at_their_boundaries():
    from companion.positional import min_distance, near_collisions, pairwise_distances, static_fraction

    pe = torch.tensor([[0.0, 0.0], [0.0, 0.5]])  # column spreads 0 and 0.5
    assert static_fraction(pe, threshold=0.5) == 0.5  # "less than": spread 0.5 is not static
    assert static_fraction(torch.tensor([[0.0, 0.0], [0.0, 0.04]])) == 1.0  # default threshold 0.05
    assert static_fraction(pe) == 0.5
    pts = torch.tensor([[0.0, 0.0], [3.0, 4.0]])  # distance exactly 5
    assert near_collisions(pts, 5.0) == 0 and near_collisions(pts, 5.001) == 1
    assert min_distance(pts) == 5.0  # two positions are enough
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        near_collisions(pts, 0)
    with pytest.raises(TypeError, match="pe must hold real numbers, got dtype torch.bool"):
        pairwise_distances(torch.ones(2, 2, dtype=torch.bool))
    for fn in (static_fraction, pairwise_distances):
        with pytest.raises(ValueError, match=r"pe must have 2 dimensions \(positions, dimensions\)"):
            fn(torch.zeros(3))
        with pytest.raises(TypeError, match="pe must be a torch.Tensor"):
            fn([[0.0]])


def test_static_fraction_refuses_empty_nan_and_complex_tables():
    from companion.positional import static_fraction

    for shape in ((5, 0), (0, 4)):
        with pytest.raises(ValueError, match=r"at least one position and one dimension, got shape"):
            static_fraction(torch.zeros(shape))
    pe = torch.zeros(5, 4)
    pe[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or infinite values \(1 of 20\)"):
        static_fraction(pe)
    with pytest.raises(TypeError, match="real numbers, got dtype torch.complex64"):
        static_fraction(torch.zeros(5, 4, dtype=torch.complex64))
    assert static_fraction(torch.zeros(5, 4)) == 1.0


def test_distances_refuse_tables_without_dimensions_or_with_nan():
    from companion.positional import min_distance, near_collisions, pairwise_distances

    for fn in (pairwise_distances, min_distance, lambda pe: near_collisions(pe, 0.1)):
        with pytest.raises(ValueError, match=r"at least one dimension, got shape \(6, 0\)"):
            fn(torch.zeros(6, 0))
        pe = torch.randn(6, 4)
        pe[3, 2] = float("nan")
        with pytest.raises(ValueError, match=r"NaN or infinite values \(1 of 24\)"):
            fn(pe)


def test_learned_positions_add_their_rows_and_refuse_past_max_len():
    from companion.positional import LearnedPositionalEmbedding

    pe = LearnedPositionalEmbedding(4, max_len=8)
    x = torch.zeros(2, 3, 4)
    assert torch.equal(pe(x, offset=2), pe.weight[2:5].expand(2, 3, 4))
    assert sum(p.numel() for p in pe.parameters()) == 32
    with pytest.raises(ValueError, match="past max_len=8"):
        pe(torch.zeros(1, 3, 4), offset=6)


def test_the_two_position_modules_take_their_arguments_in_one_order():
    import inspect

    from companion.positional import LearnedPositionalEmbedding

    params = [list(inspect.signature(cls).parameters)[:2]
              for cls in (SinusoidalPositionalEncoding, LearnedPositionalEmbedding)]
    assert params == [["d_model", "max_len"]] * 2
    for cls in (SinusoidalPositionalEncoding, LearnedPositionalEmbedding):
        pe = cls(6, 10)  # d_model 6, max_len 10
        assert pe.positions(10).shape == (10, 6)
        assert pe.max_len == 10


# --- RoPE and ALiBi (chapter 11) ---------------------------------------------------------


from companion.masks import causal_mask, to_additive  # noqa: E402
from companion.positional import (  # noqa: E402
    alibi_bias,
    alibi_mask,
    alibi_slopes,
    apply_rope,
    apply_rope_complex,
    relative_alibi_bias,
)


def _rope_reference(x, base=10000.0):
    """RoPE from the paper's formula (Su et al., eq. 34): R^d_{Θ,m} x with
    θ_i = base^(-2(i-1)/d), i = 1..d/2, written as an explicit block-diagonal matrix."""
    n, d = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x, dtype=torch.float64)
    for m in range(n):
        R = torch.zeros(d, d, dtype=torch.float64)
        for i in range(d // 2):
            theta = base ** (-2 * i / d)
            c, s = math.cos(m * theta), math.sin(m * theta)
            R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = c, -s
            R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = s, c
        out[..., m, :] = x[..., m, :].double() @ R.T
    return out


def test_rope_equals_the_papers_rotation_matrix():
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x), _rope_reference(x))
    torch.testing.assert_close(apply_rope(x, base=100.0), _rope_reference(x, base=100.0))


def test_rope_equals_rotary_embedding_torch():
    rotary = pytest.importorskip(
        "rotary_embedding_torch",
        reason="the independent RoPE reference: pip install rotary-embedding-torch (in the test extra)")
    x = torch.randn(2, 4, 50, 16)
    ref = rotary.RotaryEmbedding(dim=16).rotate_queries_or_keys(x)
    torch.testing.assert_close(apply_rope(x), ref, atol=1e-5, rtol=1e-5)
    ref_offset = rotary.RotaryEmbedding(dim=16).rotate_queries_or_keys(x, offset=7)
    torch.testing.assert_close(apply_rope(x, torch.arange(7, 57)), ref_offset, atol=1e-5, rtol=1e-5)


def test_rope_complex_form_equals_real_form():
    x = torch.randn(3, 40, 12, dtype=torch.float64)
    positions = torch.arange(100, 140)
    torch.testing.assert_close(apply_rope_complex(x, positions), apply_rope(x, positions))
    x32 = x.float()
    assert apply_rope_complex(x32).dtype == torch.float32
    torch.testing.assert_close(apply_rope_complex(x32), apply_rope(x32), atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_only_on_the_offset_for_every_offset():
    # One query q and one key k placed at every position of a long sequence: the score
    # q'_m · k'_n is a function of n - m alone, for every offset -(L-1) … L-1.
    L, d = 256, 16
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    qs = apply_rope(q.expand(L, d).clone())  # (L, d): q at positions 0..L-1
    ks = apply_rope(k.expand(L, d).clone())
    scores = qs @ ks.T  # (L, L): scores[m, n]
    for offset in range(-(L - 1), L):
        diagonal = torch.diagonal(scores, offset)  # all (m, n) with n - m = offset
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-9, rtol=0)
    # and at offset 0 the rotation leaves the dot product unchanged
    torch.testing.assert_close(scores.diagonal(), (q @ k).expand(L))


def test_rope_keeps_lengths_and_is_undone_by_the_opposite_rotation():
    x = torch.randn(5, 10, 8, dtype=torch.float64)
    p = torch.arange(10) * 3
    torch.testing.assert_close(apply_rope(x, p).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rope(apply_rope(x, p), -p), x)


def test_rope_bad_input():
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(4, 5))
    with pytest.raises(ValueError, match="one position per token"):
        apply_rope(torch.randn(4, 6), torch.arange(3))
    with pytest.raises(TypeError, match="float"):
        apply_rope(torch.ones(4, 6, dtype=torch.long))


def _press_slopes(n):
    """The slopes as Press et al.'s code writes them (github.com/ofirpress/attention_with_linear_biases)."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _press_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("H", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24])
def test_alibi_slopes_follow_the_papers_rule(H):
    torch.testing.assert_close(alibi_slopes(H), torch.tensor(_press_slopes(H), dtype=torch.float64))


def test_alibi_slopes_for_eight_heads_are_halves():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)], dtype=torch.float64))
    H = 16
    torch.testing.assert_close(alibi_slopes(H), torch.tensor([2 ** (-8 * h / H) for h in range(1, H + 1)],
                                                             dtype=torch.float64))


def test_alibi_bias_and_mask_by_hand():
    B = alibi_bias(2, 3)
    # head 1 slope 2^-4, head 2 slope 2^-8: B[h, i, j] = -m_h |i - j|
    expected = torch.tensor([[0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=torch.float32)
    torch.testing.assert_close(B, -torch.stack([expected / 16, expected / 256]))
    M = alibi_mask(2, 3)
    torch.testing.assert_close(M, B + to_additive(causal_mask(3)))
    assert torch.isinf(M[:, 0, 1]).all() and (M[:, 1, 0] < 0).all()


def test_relative_alibi_bias_of_a_cached_window_is_a_slice_of_the_full_one():
    full = relative_alibi_bias(alibi_slopes(4), torch.arange(20), torch.arange(20))
    part = relative_alibi_bias(alibi_slopes(4), torch.arange(15, 17), torch.arange(10, 17))
    torch.testing.assert_close(part, full[:, 15:17, 10:17])


def test_rope_table_equals_apply_rope_far_out_and_after_a_change_of_base():
    """The kept float32 table: positions past its first length (256) rebuild it, a new base
    too; a scale or float64 input computes the angles anew."""
    from companion.positional import _RopeTable

    table, x = _RopeTable(), torch.randn(2, 3, 5, 8)
    torch.testing.assert_close(table(x, 0), apply_rope(x))
    assert table.cos.shape == (256, 4) and table.cos.dtype == torch.float32
    torch.testing.assert_close(table(x, 300), apply_rope(x, torch.arange(300, 305)))
    assert table.cos.shape[0] >= 305
    torch.testing.assert_close(table(x, 7, base=500.0), apply_rope(x, torch.arange(7, 12), base=500.0))
    torch.testing.assert_close(table(x, 4, scale=2.0), apply_rope(x, torch.arange(4, 9) / 2.0))
    xd = x.double()
    torch.testing.assert_close(table(xd, 9), apply_rope(xd, torch.arange(9, 14)))
