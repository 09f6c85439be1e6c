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


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------


def test_greedy_log_prob_stops_counting_after_end():
    # logits 10 for the scripted token, -10 for the 5 others: log p = -log(1 + 5 e^-20) per step
    step = scripted([[2, 3, 3], [4, 4, 2]])
    res = greedy_decode(step, {"t": 0, "seen": []}, bos_id=1, eos_id=2, max_len=3, batch_size=2)
    per_step = -torch.log1p(5 * torch.exp(torch.tensor(-20.0)))
    torch.testing.assert_close(res.log_prob, torch.stack([per_step, 3 * per_step]))
    assert res.log_prob[0] <= 0  # a finished row adds nothing more (not +1 per padding step)


def test_on_step_sees_the_step_number_and_the_tokens_just_made():
    calls = []
    greedy_decode(scripted([[4, 5, 2]]), {"t": 0, "seen": []}, 1, 2, 3, batch_size=1,
                  on_step=lambda t, tok, st: calls.append((t, tok.tolist())))
    assert calls == [(0, [4]), (1, [5]), (2, [2])]


def test_index_state_refuses_a_2d_index():
    with pytest.raises(TypeError, match=r"index must be a 1-D tensor .* got torch.int64\(2, 1\)"):
        index_state({"h": torch.zeros(3, 2)}, torch.tensor([[0], [1]]))


class _Scripted(torch.nn.Module):
    """The decoder protocol around :func:`scripted`: ``start(src)`` keeps nothing of the source
    but its batch size; each step stores fake attention weights ``(B, N=4)`` that hold ``t``."""

    def __init__(self, script):
        super().__init__()
        self.step_fn = scripted(script)

    def start(self, src):
        return {"t": 0, "seen": []}

    def step(self, prev, state):
        logits, state = self.step_fn(prev, state)
        state["weights"] = torch.full((prev.shape[0], 4), float(state["t"]))
        return logits, state


def test_generate_returns_tokens_and_the_kept_state_stacked_over_steps():
    from companion.decoding import generate

    model = _Scripted([[4, 2, 3], [5, 5, 2]])
    src = torch.zeros(2, 7, dtype=torch.long)
    tokens = generate(model, src, bos_id=1, eos_id=2, max_len=3)
    assert torch.equal(tokens, torch.tensor([[4, 2, 0], [5, 5, 2]]))  # padded with pad_id=0 by default
    tokens, weights = generate(model, src, bos_id=1, eos_id=2, max_len=3, keep="weights", pad_id=3)
    assert tokens.tolist() == [[4, 2, 3], [5, 5, 2]]  # row 0 padded with 3
    assert weights.shape == (2, 3, 4)  # (B, T, N): one entry per step, on dim 1
    assert weights[:, :, 0].tolist() == [[1.0, 2.0, 3.0]] * 2


def test_generate_refuses_a_model_without_the_protocol():
    from companion.decoding import generate

    with pytest.raises(TypeError, match="model must have a start\\(\\) method"):
        generate(torch.nn.Linear(2, 2), torch.zeros(1, 2), bos_id=1, eos_id=2, max_len=3)
    with pytest.raises(TypeError, match="model must have a step\\(\\) method"):
        generate(type("OnlyStart", (), {"start": lambda self, x: None})(), torch.zeros(1, 2), bos_id=1,
                 eos_id=2, max_len=3)


@pytest.mark.parametrize("kw, name", [({"batch_size": 0}, "batch_size"), ({"eos_id": 2.0}, "eos_id"),
                                      ({"pad_id": "0"}, "pad_id")])
def test_decoding_errors_name_the_argument(kw, name):
    args = {"bos_id": 1, "eos_id": 2, "max_len": 3, "batch_size": 1, **kw}
    with pytest.raises((TypeError, ValueError), match=f"^{name} must be"):
        greedy_decode(scripted([[2]]), {"t": 0, "seen": []}, **args)
