"""Greedy decoding through the step-function protocol."""

import pytest
import torch

from companion.decoding import greedy_decode, index_state


def scripted(script):
    """A step function that emits ``script[t]`` at step t (one row per sequence)."""
    script = torch.tensor(script)  # (B, T)

    def step(prev, state):
        t = state["t"]
        logits = torch.full((script.shape[0], 6), -10.0)
        logits[torch.arange(script.shape[0]), script[:, t]] = 10.0
        return logits, {"t": t + 1, "seen": state["seen"] + [prev.clone()]}

    return step


def test_greedy_walk_stops_at_end_and_pads():
    step = scripted([[4, 5, 2, 3, 3], [3, 2, 4, 4, 4]])
    res = greedy_decode(step, {"t": 0, "seen": []}, bos_id=1, eos_id=2, max_len=5, batch_size=2)
    assert res.tokens.tolist() == [[4, 5, 2], [3, 2, 0]]
    assert res.lengths.tolist() == [3, 2] and res.finished.all()
    assert res.log_prob.shape == (2,) and (res.log_prob > -1e-3).all()


def test_greedy_feeds_its_own_predictions_back():
    step = scripted([[4, 5, 2]])
    seen = []
    greedy_decode(step, {"t": 0, "seen": []}, 1, 2, 3, batch_size=1,
                  on_step=lambda t, tok, st: seen.append(st["seen"][-1].item()))
    assert seen == [1, 4, 5]  # <start>, then what it produced


def test_greedy_max_len_without_end():
    res = greedy_decode(scripted([[3, 3, 3, 3]]), {"t": 0, "seen": []}, 1, 2, 4, batch_size=1)
    assert res.tokens.tolist() == [[3, 3, 3, 3]] and not res.finished.any() and res.lengths.tolist() == [4]


def test_greedy_messages():
    with pytest.raises(TypeError, match="step_fn must be callable, got int"):
        greedy_decode(3, None, 1, 2, 4, batch_size=1)
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        greedy_decode(scripted([[3]]), None, 1, 2, 0, batch_size=1)
    bad = lambda prev, state: (torch.zeros(3, 6), state)
    with pytest.raises(ValueError, match="step_fn must return logits of shape \\(B=2, V\\), got \\(3, 6\\)"):
        greedy_decode(bad, None, 1, 2, 4, batch_size=2)


def test_index_state_reorders_nested_tensors():
    st = {"h": torch.arange(3)[:, None].float(), "pair": (torch.arange(3), 7), "t": 2}
    out = index_state(st, torch.tensor([2, 0]))
    assert out["h"].squeeze(1).tolist() == [2.0, 0.0] and out["pair"][0].tolist() == [2, 0]
    assert out["pair"][1] == 7 and out["t"] == 2


def test_index_state_and_generate_name_their_mistakes():
    from companion.decoding import generate
    from companion.models import Seq2Seq

    with pytest.raises(TypeError, match="index must be a 1-D tensor of int64/int32 row numbers, got torch.float32"):
        index_state({"h": torch.zeros(3, 2)}, torch.tensor([0.0, 1.0]))
    m = Seq2Seq(10, 10, 4, 8, "dot").eval()
    src, lengths = torch.tensor([[3, 4, 5]]), torch.tensor([3])
    with pytest.raises(ValueError, match="keep='nope' is not a key of the decoding state of Seq2Seq"):
        generate(m, src, lengths, bos_id=1, eos_id=2, max_len=3, keep="nope")
    with pytest.raises(TypeError, match="generate needs the model's inputs"):
        generate(m, bos_id=1, eos_id=2, max_len=3)
