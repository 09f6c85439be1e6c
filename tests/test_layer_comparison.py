"""Chapter 3's comparison of recurrent, convolutional and self-attention layers."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from companion.layer_comparison import (
    TABLE_1,
    ConvolutionStack,
    RecurrentLayer,
    SelfAttentionLayer,
    gradient_path,
    make_layer,
    time_layer,
)


def test_table_1_holds_the_papers_rows():
    assert TABLE_1["self-attention"] == ("O(n² d)", "O(1)", "O(1)")
    assert TABLE_1["recurrent"] == ("O(n d²)", "O(n)", "O(n)")
    assert TABLE_1["convolutional"][:2] == ("O(k n d²)", "O(1)")
    assert "O(log_k n)" in TABLE_1["convolutional"][2] and "O(n/k)" in TABLE_1["convolutional"][2]


def test_recurrent_layer_is_torchs_tanh_rnn_step_by_step():
    torch.manual_seed(0)
    layer = RecurrentLayer(4)
    x = torch.randn(2, 5, 4)
    r = layer.rnn
    h, states = torch.zeros(2, 4), []
    for t in range(5):  # h_t = tanh(x_t W_ihᵀ + b_ih + h_{t-1} W_hhᵀ + b_hh)
        h = torch.tanh(x[:, t] @ r.weight_ih_l0.T + r.bias_ih_l0 + h @ r.weight_hh_l0.T + r.bias_hh_l0)
        states.append(h)
    torch.testing.assert_close(layer(x), torch.stack(states, 1))


def test_convolution_stack_is_conv1d_with_tanh_between():
    torch.manual_seed(0)
    layer = ConvolutionStack(3, kernel_size=5, num_layers=2)
    x = torch.randn(2, 9, 3)
    c0, c1 = layer.convs
    expected = F.conv1d(torch.tanh(F.conv1d(x.transpose(1, 2), c0.weight, c0.bias, padding=2)), c1.weight, c1.bias,
                        padding=2).transpose(1, 2)
    torch.testing.assert_close(layer(x), expected)
    assert layer(x).shape == (2, 9, 3) and layer.receptive_radius == 4


def test_self_attention_layer_is_one_softmax_head():
    torch.manual_seed(0)
    layer = SelfAttentionLayer(6)
    x = torch.randn(2, 7, 6)
    mha = layer.attn
    q, k, v = (x @ mha.in_proj.weight.T + mha.in_proj.bias).chunk(3, dim=-1)  # (B, N, D) each
    w = torch.softmax(q @ k.transpose(1, 2) / 6**0.5, dim=-1)  # (B, N, N)
    torch.testing.assert_close(layer(x), mha.out_proj(w @ v))
    ref = nn.MultiheadAttention(6, 1, batch_first=True)
    ref.in_proj_weight.data, ref.in_proj_bias.data = mha.in_proj.weight.data, mha.in_proj.bias.data
    ref.out_proj.weight.data, ref.out_proj.bias.data = mha.out_proj.weight.data, mha.out_proj.bias.data
    torch.testing.assert_close(layer(x), ref(x, x, x, need_weights=False)[0])


def test_make_layer_builds_each_row():
    assert isinstance(make_layer("recurrent", 8), RecurrentLayer)
    assert isinstance(make_layer("self-attention", 8), SelfAttentionLayer)
    conv = make_layer("convolutional", 8, kernel_size=5, num_layers=3)
    assert isinstance(conv, ConvolutionStack) and len(conv.convs) == 3 and conv.receptive_radius == 6
    with pytest.raises(ValueError, match="kind must be one of"):
        make_layer("transformer", 8)


def test_gradient_path_equals_the_jacobian():
    torch.manual_seed(0)
    layer = SelfAttentionLayer(3).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda s: layer(s[None])[0], x)  # (N, D, N, D)
    expected = jac[:, :, 0, :].pow(2).sum(dim=(1, 2)).sqrt()  # ‖∂y_t/∂x_0‖_F
    torch.testing.assert_close(gradient_path(layer, x), expected)


def test_gradient_path_of_a_linear_map_by_hand():
    # y_t = 2 x_t + 3 x_{t-1} (causal kernel): ∂y_0/∂x_0 = 2 I, ∂y_1/∂x_0 = 3 I, 0 beyond
    class Shift(nn.Module):
        def forward(self, x):
            return 2 * x + 3 * F.pad(x, (0, 0, 1, 0))[:, :-1]

    g = gradient_path(Shift(), torch.randn(4, 2))
    torch.testing.assert_close(g, torch.tensor([2 * 2**0.5, 3 * 2**0.5, 0.0, 0.0]))


def test_convolution_gradient_is_exactly_zero_beyond_the_receptive_field():
    torch.manual_seed(0)
    layer = ConvolutionStack(4, kernel_size=3, num_layers=3)
    g = gradient_path(layer, torch.randn(12, 4))
    assert (g[:4] > 0).all() and (g[4:] == 0).all()


def test_attention_reaches_every_distance_and_the_rnn_fades():
    torch.manual_seed(0)
    x = torch.randn(40, 8, dtype=torch.float64)
    g_attn = gradient_path(SelfAttentionLayer(8).double(), x)
    g_rnn = gradient_path(RecurrentLayer(8).double(), x)
    assert (g_attn > 0.01 * g_attn.max()).all()
    assert (g_rnn[1:] < g_rnn[:-1]).all() and g_rnn[-1] < 1e-6 * g_rnn[0]


def test_gradient_path_rejects_bad_input():
    with pytest.raises(ValueError, match=r"one sequence \(N, D\)"):
        gradient_path(RecurrentLayer(2), torch.randn(1, 3, 2))
    with pytest.raises(TypeError, match="floating-point"):
        gradient_path(RecurrentLayer(2), torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        gradient_path(lambda x: x, torch.randn(3, 2))
    with pytest.raises(ValueError, match="layer must map"):
        gradient_path(nn.Flatten(), torch.randn(3, 2))


def test_layers_reject_the_wrong_width():
    for layer in (RecurrentLayer(4), ConvolutionStack(4), SelfAttentionLayer(4)):
        with pytest.raises(ValueError, match=r"x must be \(B, N, D=4\)"):
            layer(torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        ConvolutionStack(4, kernel_size=2)


def test_time_layer_grows_with_the_work():
    layer = SelfAttentionLayer(16)
    short, long = time_layer(layer, 32, min_run_time=0.02), time_layer(layer, 1024, min_run_time=0.02)
    assert 0 < short < long  # 1024² scores against 32²: about a thousand times the work
    wall = time_layer(layer, 1024, min_run_time=0.02, cpu_time=False)
    assert wall > 0.5 * long  # one thread: the wall clock runs at least as fast as the CPU time
    with pytest.raises(ValueError, match="n must be positive"):
        time_layer(layer, 0)
    with pytest.raises(TypeError, match="d_model"):
        time_layer(nn.Linear(2, 2), 4)
