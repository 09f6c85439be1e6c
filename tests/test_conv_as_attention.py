import math

import pytest
import torch
import torch.nn.functional as F

from companion.conv_as_attention import ConvAsSelfAttention, kernel_offsets
from companion.masks import local_window_mask_2d


def test_kernel_offsets_row_by_row():
    off = kernel_offsets(3)
    assert off.shape == (9, 2)
    assert off[0].tolist() == [-1, -1] and off[4].tolist() == [0, 0] and off[5].tolist() == [0, 1]


@pytest.mark.parametrize("k, cin, cout, bias", [(3, 3, 4, True), (5, 2, 3, False), (1, 2, 2, True)])
def test_conv_as_attention_equals_conv2d(k, cin, cout, bias):
    conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2, bias=bias).double()
    x = torch.randn(2, cin, 6, 7, dtype=torch.float64)
    layer = ConvAsSelfAttention.from_conv(conv)
    torch.testing.assert_close(layer(x), F.conv2d(x, conv.weight, conv.bias, padding=k // 2), atol=1e-12, rtol=0)


def test_conv_as_attention_float32_and_heads_are_one_hot_in_the_window():
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    x = torch.randn(1, 3, 8, 8)
    layer = ConvAsSelfAttention.from_conv(conv)
    assert (layer(x) - conv(x)).abs().max() < 1e-5
    A = layer.attention_weights(6, 6).double()  # (9, 36, 36)
    # each head puts (numerically) all its weight on one key ...
    assert (A.amax(-1) > 1 - 1e-12).all()
    # ... and for an interior query that key is inside the 3x3 window
    window = local_window_mask_2d(6, 6, 1)
    centre = 2 * 6 + 2
    assert A[:, centre].masked_select(~window[centre]).max() < 1e-30
    # head h attends to the pixel at offset Δ_h
    for h, (dr, dc) in enumerate(layer.offsets.tolist()):
        assert A[h, centre].argmax().item() == (2 + dr) * 6 + (2 + dc)


def test_relative_scores_formula():
    layer = ConvAsSelfAttention(1, 1, 3, alpha=2.0)
    s = layer.relative_scores(3, 3)  # (9, 9, 9)
    # head 5 has Δ = (0, 1); query pixel 4 (centre), key pixel 0 (δ = (-1, -1))
    delta, off = torch.tensor([-1.0, -1.0]), torch.tensor([0.0, 1.0])
    expected = -2.0 * (((delta - off) ** 2).sum() - (off**2).sum())
    assert s[5, 4, 0].item() == pytest.approx(expected.item())
    assert math.isclose(s[4].max().item(), 0.0, abs_tol=1e-12)  # the centre head peaks at δ = 0


@pytest.mark.parametrize("call, message", [
    (lambda: kernel_offsets(4), "kernel_size must be odd"),
    (lambda: ConvAsSelfAttention(2, 2, 3, alpha=0), "alpha must be a finite number > 0"),
    (lambda: ConvAsSelfAttention.from_conv(torch.nn.Conv2d(2, 2, 3)), "zero padding kernel_size // 2"),
    (lambda: ConvAsSelfAttention.from_conv(torch.nn.Linear(2, 2)), "conv must be a torch.nn.Conv2d"),
    (lambda: ConvAsSelfAttention(2, 2)(torch.randn(1, 3, 4, 4)), "x must have 2 channels, got shape \\(1, 3, 4, 4\\)"),
    (lambda: ConvAsSelfAttention(2, 2)(torch.randn(2, 4, 4)), "x must have 4 dimensions"),
])
def test_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
