"""Beam search beside greedy decoding."""

import math

import pytest
import torch

from companion.decoding import beam_search, greedy_decode
from companion.models.transformer import Transformer, TransformerConfig

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


def toy_step(prev, state):
    """After <start>: A 0.6, B 0.4. After A: <end> 0.35, A 0.33, B 0.32. After B: <end> 0.9."""
    p = torch.full((prev.shape[0], 5), 1e-6)
    p[prev == BOS, A], p[prev == BOS, B] = 0.6, 0.4
    p[prev == A, EOS], p[prev == A, A], p[prev == A, B] = 0.35, 0.33, 0.32
    p[prev == B, EOS], p[prev == B, A], p[prev == B, B] = 0.9, 0.05, 0.05
    p[prev == PAD, PAD] = 1.0
    p[prev == EOS, PAD] = 1.0
    return p.log(), state + 1


def test_beam_finds_the_more_likely_sequence_greedy_misses():
    g = greedy_decode(toy_step, torch.zeros(1), BOS, EOS, 5, batch_size=1)
    b = beam_search(toy_step, torch.zeros(1), BOS, EOS, 5, batch_size=1, beam_size=2)
    assert g.tokens[0, :2].tolist() == [A, EOS] and math.isclose(g.log_prob.item(), math.log(0.6 * 0.35), rel_tol=1e-4)
    assert b.tokens[0, :2].tolist() == [B, EOS] and math.isclose(b.log_prob.item(), math.log(0.4 * 0.9), rel_tol=1e-4)
    assert b.lengths.item() == 2 and bool(b.finished.item())
    assert (b.tokens[0, 2:] == PAD).all()


def test_beam_of_one_is_greedy_on_a_transformer():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=9, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                                          num_decoder_layers=1)).eval()
    src = torch.randint(3, 9, (4, 5))
    with torch.no_grad():
        g = greedy_decode(model.step, model.start(src), BOS, EOS, 7, batch_size=4)
        b1 = beam_search(model.step, model.start(src), BOS, EOS, 7, batch_size=4, beam_size=1)
        b3 = beam_search(model.step, model.start(src), BOS, EOS, 7, batch_size=4, beam_size=3)
    assert torch.equal(g.tokens, b1.tokens[:, : g.tokens.shape[1]])
    assert torch.allclose(g.log_prob, b1.log_prob, atol=1e-5)
    assert (b3.log_prob >= g.log_prob - 1e-5).all()  # with α = 0 the beam never does worse here


def test_length_penalty_prefers_longer_hypotheses():
    # raw sums favour <end> early; dividing by length^α rescues the longer A A ... hypotheses
    short = beam_search(toy_step, torch.zeros(1), BOS, EOS, 4, batch_size=1, beam_size=3, length_penalty=0.0)
    longer = beam_search(toy_step, torch.zeros(1), BOS, EOS, 4, batch_size=1, beam_size=3, length_penalty=3.0)
    assert longer.lengths.item() > short.lengths.item()


def test_beam_search_errors():
    with pytest.raises(ValueError, match="beam_size must be positive, got 0"):
        beam_search(toy_step, None, BOS, EOS, 5, batch_size=1, beam_size=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(toy_step, None, BOS, EOS, 5, batch_size=1, length_penalty=-1)
    with pytest.raises(TypeError, match="callable"):
        beam_search("step", None, BOS, EOS, 5, batch_size=1)
    bad = lambda prev, state: (torch.zeros(3, 5), state)
    with pytest.raises(ValueError, match=r"\(B\*k=2, V\), got \(3, 5\)"):
        beam_search(bad, None, BOS, EOS, 5, batch_size=1, beam_size=2)


@pytest.mark.parametrize("lp, error", [(float("nan"), ValueError), (float("inf"), ValueError), (-1.0, ValueError),
                                        ("1", TypeError), (True, TypeError)])
def test_length_penalty_must_be_a_finite_number(lp, error):
    # NaN made every normalised score NaN and argmax picked hypothesis 0 silently
    with pytest.raises(error, match="length_penalty must be"):
        beam_search(toy_step, torch.zeros(1), BOS, EOS, 5, batch_size=1, length_penalty=lp)


@pytest.mark.parametrize("decode", [greedy_decode, beam_search])
def test_step_function_output_is_checked(decode):
    with pytest.raises(ValueError, match="pad_id=5 must be one of the V=5 tokens"):
        decode(toy_step, torch.zeros(1), BOS, EOS, 5, batch_size=1, pad_id=5)
    with pytest.raises(ValueError, match="step_fn returned NaN logits"):
        decode(lambda p, s: (torch.full((p.shape[0], 5), float("nan")), s), None, BOS, EOS, 3, batch_size=1)
    with pytest.raises(TypeError, match="logits a tensor, got list"):
        decode(lambda p, s: ([[0.0] * 5] * p.shape[0], s), None, BOS, EOS, 3, batch_size=1)


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------


def test_defaults_beam_of_four_raw_sum_pad_zero():
    rows = []

    def spy(prev, state):
        rows.append(prev.shape[0])
        return toy_step(prev, state)

    out = beam_search(spy, torch.zeros(3), BOS, EOS, 4, batch_size=3)
    assert set(rows) == {3 * 4}  # B·k rows with the default beam_size=4
    assert out.tokens.dtype == torch.long and out.lengths.dtype == torch.long
    # raw sum (length_penalty=0): B <end> (0.4 · 0.9 = 0.36) beats every longer hypothesis
    assert out.tokens[:, :2].tolist() == [[B, EOS]] * 3 and out.lengths.tolist() == [2] * 3
    assert out.tokens.shape[1] > 2 and (out.tokens[:, 2:] == 0).all()  # padded with pad_id=0


def test_beam_pads_after_end_and_stops_when_every_beam_ended():
    calls = []

    def spy(prev, state):
        calls.append(prev.clone())
        return toy_step(prev, state)

    out = beam_search(spy, torch.zeros(1), BOS, EOS, 10, batch_size=1, beam_size=2)
    # step 1: A, B; step 2: B <end> (0.36) and A <end> (0.21) are the best two: both ended -> stop
    assert len(calls) == 2 and out.tokens.tolist() == [[B, EOS]]


def test_length_normalisation_divides_by_the_true_length():
    # <start> -> <end> (p 0.4, length 1) or <start> -> A (0.6) -> <end> (0.6): p 0.36, length 2
    def step(prev, state):
        p = torch.full((prev.shape[0], 5), 1e-6)
        p[prev == BOS, EOS], p[prev == BOS, A] = 0.4, 0.6
        p[prev == A, EOS], p[prev == A, B] = 0.6, 0.4
        p[(prev == EOS) | (prev == PAD), PAD] = 1.0
        return p.log(), state

    raw = beam_search(step, None, BOS, EOS, 3, batch_size=1, beam_size=2)
    assert raw.tokens[0, :1].tolist() == [EOS] and raw.lengths.item() == 1  # raw sums: log 0.4 > log 0.36
    out = beam_search(step, None, BOS, EOS, 3, batch_size=1, beam_size=2, length_penalty=1.0)
    # α = 1: log 0.4 / 1 = -0.92 < log 0.36 / 2 = -0.51: the longer one wins
    # (dividing the short one by 2 instead of its length 1 would give -0.46 and pick it)
    assert out.tokens[0, :2].tolist() == [A, EOS] and out.lengths.item() == 2
