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
    with pytest.raises(ValueError, match="expected x of shape \\(B, N <= 20, 8\\), got \\(2, 30, 8\\)"):
        m(torch.zeros(2, 30, 8))


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
