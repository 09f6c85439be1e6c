"""Bad input to the attention functions gets a message naming the shapes."""

import pytest
import torch

from companion.attention import AdditiveAttention, attention_with_weights, fused_attention
from companion.device import default_device, seed_everything

q = torch.randn(2, 5, 8)
k = torch.randn(2, 7, 8)
v = torch.randn(2, 7, 4)


@pytest.mark.parametrize("fn", [attention_with_weights, fused_attention])
@pytest.mark.parametrize("args, message", [
    ((torch.randn(8), k, v), "q must have at least 2 dimensions \\(..., length, dim\\), got shape \\(8,\\)"),
    ((q, torch.randn(2, 7, 6), v), "q and k must have the same last dimension to be compared, got q \\(2, 5, 8\\) and k \\(2, 7, 6\\)"),
    ((q, k, torch.randn(2, 6, 4)), "k and v must have the same length \\(one value per key\\), got k \\(2, 7, 8\\) and v \\(2, 6, 4\\)"),
    ((q, torch.randn(3, 7, 8), torch.randn(3, 7, 4)), "leading \\(batch/head\\) dimensions"),
    ((q.long(), k, v), "q must be a floating-point tensor, got dtype torch.int64"),
    (([[1.0]], k, v), "q must be a torch.Tensor, got list"),
])
def test_shape_messages(fn, args, message):
    with pytest.raises((ValueError, TypeError), match=message):
        fn(*args)


@pytest.mark.parametrize("fn", [attention_with_weights, fused_attention])
def test_mask_messages(fn):
    with pytest.raises(TypeError, match="mask must be a boolean tensor \\(True = may attend\\), got dtype torch.float32"):
        fn(q, k, v, torch.zeros(5, 7))
    with pytest.raises(ValueError, match="mask of shape \\(7, 5\\) does not broadcast to the attention scores of shape \\(2, 5, 7\\)"):
        fn(q, k, v, torch.ones(7, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask of shape \\(3, 5, 7\\) does not broadcast"):
        fn(q, k, v, torch.ones(3, 5, 7, dtype=torch.bool))


def test_additive_messages():
    att = AdditiveAttention(4, 6, 5)
    with pytest.raises(ValueError, match="expected query last dim 4 and keys last dim 6"):
        att(torch.randn(2, 4), torch.randn(2, 7, 5))
    with pytest.raises(ValueError, match="AdditiveAttention expects query"):
        att(torch.randn(2, 4), torch.randn(7, 6))
    with pytest.raises(ValueError, match="hidden_dim must be positive"):
        AdditiveAttention(4, 6, 0)


def _fake_backends(monkeypatch, cuda: bool, mps: bool):
    """This machine, as if PyTorch saw (or did not see) CUDA and Apple's MPS."""
    monkeypatch.delenv("COMPANION_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    if getattr(torch.backends, "mps", None) is None:
        monkeypatch.setattr(torch.backends, "mps", type("FakeMPS", (), {}), raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, scale, want", [
    (True, True, "cpu", "cuda"), (True, True, "gpu", "cuda"), (True, False, "cpu", "cuda"),
    (False, True, "cpu", "cpu"),   # a Mac at the default scale: the CPU, where the claims are checked
    (False, True, "gpu", "mps"),   # a Mac at the bigger scale: its GPU
    (False, False, "cpu", "cpu"), (False, False, "gpu", "cpu"),
])
def test_device_policy(monkeypatch, cuda, mps, scale, want):
    _fake_backends(monkeypatch, cuda, mps)
    assert default_device(scale) == torch.device(want)
    if scale == "cpu":
        assert default_device() == torch.device(want), "the default scale is 'cpu'"


def test_device_policy_obeys_companion_device(monkeypatch):
    _fake_backends(monkeypatch, cuda=True, mps=True)
    for name in ("cpu", "mps", "cuda", "cuda:1"):
        monkeypatch.setenv("COMPANION_DEVICE", name)
        assert default_device() == default_device("gpu") == torch.device(name)
    _fake_backends(monkeypatch, cuda=False, mps=False)
    for name, complaint in (("cuda", "sees no CUDA device"), ("mps", "MPS is not available"),
                            ("gpu", "must name a device"), ("meta", "must be a cpu, cuda or mps device")):
        monkeypatch.setenv("COMPANION_DEVICE", name)
        with pytest.raises(ValueError, match=complaint):
            default_device()
    monkeypatch.delenv("COMPANION_DEVICE")
    with pytest.raises(ValueError, match="scale must be one of"):
        default_device("big")


def test_device_and_seed():
    seed_everything(3)
    a = torch.randn(3)
    seed_everything(3)
    assert torch.equal(a, torch.randn(3))
    with pytest.raises(TypeError, match="seed must be an int"):
        seed_everything("3")


@pytest.mark.gpu
def test_multihead_on_cuda_matches_cpu():
    from companion.multihead import MultiHeadAttention
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 50, 32)
    ref, _ = mha(x)
    out, _ = mha.cuda()(x.cuda())
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("value, error, message", [
    (1.5, TypeError, "seed must be an int, got float"),
    (True, TypeError, "seed must be an int, got bool"),
    (-1, ValueError, "seed must be >= 0, got -1"),
])
def test_require_int_names_the_argument_and_the_value(value, error, message):
    from companion._validate import require_int

    with pytest.raises(error, match=message):
        require_int("seed", value, minimum=0)
    assert require_int("seed", 3, minimum=0) == 3 and require_int("eos_id", -1) == -1


def test_decoding_token_ids_are_ints_and_eos_may_be_negative():
    from companion.decoding import beam_search, greedy_decode

    def step(prev, state):
        return torch.zeros(prev.shape[0], 4), state

    assert greedy_decode(step, None, bos_id=1, eos_id=-1, max_len=3, batch_size=2).tokens.shape == (2, 3)
    for decode in (greedy_decode, beam_search):
        with pytest.raises(TypeError, match="bos_id must be an int, got float"):
            decode(step, None, bos_id=1.0, eos_id=2, max_len=3, batch_size=2)
