import pytest
import torch

from companion.dft import dft_matrix


def test_dft_matrix_entries_and_fft():
    Fm = dft_matrix(4)
    # F[j, k] = exp(-2πi jk / 4): row 1 is 1, -i, -1, i
    torch.testing.assert_close(Fm[1], torch.tensor([1, -1j, -1, 1j], dtype=torch.complex128))
    torch.testing.assert_close(Fm, Fm.T)
    x = torch.randn(3, 64, dtype=torch.float64)
    torch.testing.assert_close(x.to(torch.complex128) @ dft_matrix(64), torch.fft.fft(x))
    # F F* = n I (unitary up to scale)
    n = 16
    torch.testing.assert_close(dft_matrix(n) @ dft_matrix(n).conj().T, n * torch.eye(n, dtype=torch.complex128))
    assert dft_matrix(8, dtype=torch.complex64).dtype == torch.complex64


@pytest.mark.parametrize("call, message", [
    (lambda: dft_matrix(0), "n must be positive"),
    (lambda: dft_matrix(4, dtype=torch.float32), "dtype must be torch.complex64 or torch.complex128"),
])
def test_bad_input_messages(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
