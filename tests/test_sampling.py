"""Sampling from logits: temperature, top-k, top-p, each by its defining property."""

import math

import pytest
import torch

from companion.decoding import sample_decode
from companion.sampling import (
    apply_temperature,
    entropy,
    nucleus_mask,
    repeated_ngram_share,
    sample_next,
    top_k_filter,
    top_p_filter,
)


@pytest.fixture
def logits():
    return torch.randn(8, 50, generator=torch.Generator().manual_seed(0)) * 3


def test_temperature_zero_and_k_one_are_greedy(logits):
    greedy = logits.argmax(-1)
    assert torch.equal(sample_next(logits, temperature=0), greedy)
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        assert torch.equal(sample_next(logits, top_k=1, generator=g), greedy)
        g = torch.Generator().manual_seed(seed)
        assert torch.equal(sample_next(logits, temperature=1e-4, generator=g), greedy)  # T -> 0


def test_entropy_rises_with_temperature(logits):
    temps = [0.25, 0.5, 1.0, 2.0, 4.0]
    h = torch.stack([entropy(apply_temperature(logits, t)) for t in temps])  # (5, 8)
    assert bool((h[1:] > h[:-1]).all())
    assert float(h[-1].max()) < math.log(50)  # bounded by the uniform's log V


def test_entropy_by_hand():
    assert float(entropy(torch.zeros(4))) == pytest.approx(math.log(4))
    assert float(entropy(torch.tensor([0.0, float("-inf")]))) == pytest.approx(0.0)


def test_top_k_keeps_the_k_largest(logits):
    kept = torch.isfinite(top_k_filter(logits, 5))
    assert bool((kept.sum(-1) == 5).all())
    top = logits.topk(5, dim=-1).indices
    assert bool(kept.gather(1, top).all())
    assert torch.isfinite(top_k_filter(logits, 500)).all()  # k > V keeps all


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.99, 1.0])
def test_nucleus_is_the_smallest_set_reaching_p(logits, p):
    probs = torch.softmax(logits, -1)
    keep = nucleus_mask(logits, p)
    for row in range(logits.shape[0]):
        kept = probs[row][keep[row]]
        assert float(kept.sum()) >= p - 1e-6  # it reaches p
        # it is the top tokens, and dropping its least likely one falls below p (smallest)
        n = int(keep[row].sum())
        assert set(probs[row].topk(n).indices.tolist()) == set(keep[row].nonzero().flatten().tolist())
        assert float(kept.sum() - kept.min()) < p


def test_nucleus_by_hand():
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert nucleus_mask(z, 0.5).tolist() == [True, False, False, False]
    assert nucleus_mask(z, 0.6).tolist() == [True, True, False, False]
    assert nucleus_mask(z, 0.96).tolist() == [True, True, True, True]
    assert torch.isinf(top_p_filter(z, 0.6)[2:]).all()


def test_seeded_generator_reproduces_and_samples_follow_the_distribution():
    z = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(20000, 3)
    a = sample_next(z, generator=torch.Generator().manual_seed(3))
    b = sample_next(z, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    freq = torch.bincount(a, minlength=3).float() / a.numel()
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)
    c = sample_next(z, top_k=2, generator=torch.Generator().manual_seed(3))
    freq = torch.bincount(c, minlength=3).float() / c.numel()
    assert freq[2] == 0 and abs(float(freq[0]) - 0.7 / 0.9) < 0.02  # renormalised over the kept two


def test_repeated_ngram_share():
    assert repeated_ngram_share([1, 2, 3, 4, 5], 2) == 0.0
    assert repeated_ngram_share([1, 2] * 6, 2) == pytest.approx(9 / 11)
    with pytest.raises(ValueError, match="no 3-gram"):
        repeated_ngram_share([1, 2], 3)


def test_sample_decode_feeds_back_what_it_draws():
    V = 5

    def step(prev, state):  # the next token is always prev + 1 (mod V), with certainty
        return torch.nn.functional.one_hot((prev + 1) % V, V).float() * 50, state

    out = sample_decode(step, None, torch.tensor([0, 3]), 6, generator=torch.Generator().manual_seed(0))
    assert out.tolist() == [[1, 2, 3, 4, 0, 1], [4, 0, 1, 2, 3, 4]]


def test_errors_name_the_argument(logits):
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(logits, 0)
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        nucleus_mask(logits, 1.5)
    with pytest.raises(ValueError, match="top_k must be positive"):
        sample_next(logits, top_k=0)
    with pytest.raises(TypeError, match="floating-point"):
        sample_next(torch.ones(2, 3, dtype=torch.long))


def test_sample_next_applies_temperature_then_top_k_then_top_p():
    """Only this order keeps tokens 0 and 1 of this row: top-p before the temperature or
    before top-k keeps one token, top-p before top-k after the temperature three (the
    nucleus is taken of the distribution the earlier steps left)."""
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0, -2.0]]).repeat(4000, 1)
    drawn = sample_next(logits, temperature=3.0, top_k=3, top_p=0.6, generator=torch.Generator().manual_seed(0))
    # by hand: z = logits / 3; the top 3 renormalised are e^(1, 2/3, 1/3) / sum = 0.45, 0.32, 0.23;
    # the nucleus at 0.6 keeps 0.45 and 0.32 (the mass before the third is 0.77 >= 0.6)
    assert set(drawn.tolist()) == {0, 1}
    share = (drawn == 0).double().mean().item()
    expected = 1 / (1 + math.exp(-1 / 3))  # e^1 / (e^1 + e^(2/3))
    assert abs(share - expected) < 0.03, share


def test_sample_decode_passes_top_p_and_top_k_through():
    """generate's loop samples as sample_next does, with every filter."""
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0, -2.0])

    def step(prev, state):
        return logits.repeat(prev.shape[0], 1), state

    drawn = sample_decode(step, None, torch.zeros(500, dtype=torch.long), 4, temperature=3.0, top_k=3,
                          top_p=0.6, generator=torch.Generator().manual_seed(0))
    assert set(drawn.flatten().tolist()) == {0, 1}
