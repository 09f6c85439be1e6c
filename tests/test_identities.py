"""The identities that chapters 3, 4 and 6 demonstrate, checked independently of the notebooks."""

import math

import torch

from companion.attention import attention_with_weights
from companion.dft import dft_matrix
from companion.masks import causal_mask, real_key_mask, real_token_mask
from companion.multihead import MultiHeadAttention
from companion.positional import sinusoidal_encoding


def test_self_attention_is_permutation_equivariant_until_positions_are_added():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7)
    with torch.no_grad():
        torch.testing.assert_close(mha(x[:, perm])[0], mha(x)[0][:, perm], atol=1e-5, rtol=1e-5)
        pe = sinusoidal_encoding(7, 16)
        assert not torch.allclose(mha(x[:, perm] + pe)[0], mha(x + pe)[0][:, perm], atol=1e-3)


def test_causal_mask_hides_the_future_exactly():
    mha = MultiHeadAttention(8, 2, fused=False).eval()
    n = 5
    x = torch.randn(1, n, 8)

    def layer(inputs):
        return mha(inputs[None], mask=causal_mask(n))[0][0]

    jac = torch.autograd.functional.jacobian(layer, x[0])  # (n, 8, n, 8)
    influence = jac.abs().sum(dim=(1, 3))  # (n, n)
    assert (influence[~causal_mask(n)] == 0).all() and (influence[causal_mask(n)] > 0).all()
    changed = x.clone()
    changed[:, 3:] += 5.0
    assert torch.equal(layer(changed[0])[:3], layer(x[0])[:3])


def test_padded_batch_gives_the_unpadded_outputs():
    mha = MultiHeadAttention(8, 2).eval()
    lengths = [5, 3]
    real = real_token_mask(lengths, 5)
    x = torch.randn(2, 5, 8)
    x[~real] = 50.0
    with torch.no_grad():
        out = mha(x, mask=real_key_mask(real))[0]
        for b, n in enumerate(lengths):
            torch.testing.assert_close(out[b, :n], mha(x[b:b + 1, :n])[0][0], atol=1e-5, rtol=1e-5)


def test_dft_value_matrix_cannot_create_frequencies():
    n = 256
    t = torch.arange(n, dtype=torch.float64) / n
    X = torch.stack([torch.sin(2 * math.pi * f * t) for f in (3, 17)])  # (2, n)
    _, A = attention_with_weights(X, X, X)
    Y = A.to(torch.complex128) @ (X.to(torch.complex128) @ dft_matrix(n))  # (2, n)
    assert Y[:, 10].abs().max() < 1e-10 * Y.abs().max()
    assert Y[0, 3].abs() > 100 and Y[1, 17].abs() > 100  # each row: the spectrum of its own signal


def test_sines_alone_admit_no_linear_shift():
    pe = sinusoidal_encoding(50, 8).double()
    sines = pe[:, 0::2]
    # a linear map sends 0 = sines(0) to 0, but sines(Δ) is not 0
    assert (sines[0] == 0).all() and sines[1].abs().max() > 0.5
    M = torch.linalg.lstsq(sines[:-1], sines[1:]).solution
    assert (sines[:-1] @ M - sines[1:]).norm() / sines[1:].norm() > 0.1
    M_full = torch.linalg.lstsq(pe[:-1], pe[1:]).solution
    assert (pe[:-1] @ M_full - pe[1:]).norm() / pe[1:].norm() < 1e-6
