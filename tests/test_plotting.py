import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from companion.plotting import plot_matrix, plot_positional_encoding
from companion.positional import sinusoidal_encoding


def test_plot_matrix_signed_uses_centred_diverging_map():
    ax = plot_matrix(torch.tensor([[-2.0, 1.0], [0.5, 0.0]]), title="t", xlabel="x", ylabel="y")
    image = ax.images[0]
    assert image.get_cmap().name == "RdBu_r"
    assert image.get_clim() == (-2.0, 2.0)
    assert ax.get_title() == "t" and ax.get_xlabel() == "x"


def test_plot_matrix_ignores_nan_for_the_colour_scale():
    m = torch.tensor([[-3.0, float("nan")], [1.0, 2.0]])
    ax = plot_matrix(m)
    assert ax.images[0].get_clim() == (-3.0, 3.0)


def test_plot_matrix_unsigned_and_pe():
    ax = plot_matrix(torch.eye(3))
    assert ax.images[0].get_cmap().name == "viridis"
    ax = plot_positional_encoding(sinusoidal_encoding(16, 8))
    assert ax.images[0].get_clim() == (-1.0, 1.0) and ax.get_ylabel() == "position t"


@pytest.mark.parametrize("call, message", [
    (lambda: plot_matrix(torch.zeros(2, 2, 2)), "matrix must be 2-D, got shape \\(2, 2, 2\\)"),
    (lambda: plot_positional_encoding(torch.zeros(4)), "pe must be a 2-D"),
])
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_plots_refuse_complex_empty_and_non_finite_weights():
    import numpy as np

    from companion.plotting import plot_attention, plot_matrix

    for weights in (torch.ones(2, 2, dtype=torch.complex64), np.ones((2, 2)) * 1j):
        with pytest.raises(TypeError, match="weights must hold real numbers"):
            plot_attention(weights)
    with pytest.raises(ValueError, match=r"weights holds 1 NaN or infinite values of 2"):
        plot_attention([[0.5, float("nan")]])
    with pytest.raises(ValueError, match=r"weights is empty \(shape \(0, 3\)\)"):
        plot_attention(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="matrix holds 1 infinite values"):
        plot_matrix([[0.0, float("-inf")]])
    plot_matrix([[0.0, float("nan")]])  # NaN draws a blank cell on purpose (chapter 4)
