"""Per-head measurements: entropy, peak offsets, preferred offset, mass on a key."""

import math

import pytest
import torch

from companion.heads import attention_entropy, mass_on, peak_offsets, preferred_offset, weight_by_offset
from companion.multihead import MultiHeadAttention


def test_entropy_of_one_hot_uniform_and_a_hand_computed_row():
    w = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0]])
    torch.testing.assert_close(attention_entropy(w), torch.tensor([0.0, math.log(4), math.log(2)]))
    p = torch.tensor([0.7, 0.2, 0.1])
    expected = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert attention_entropy(p).item() == pytest.approx(expected, rel=1e-6)


def test_entropy_of_real_attention_lies_between_zero_and_log_n():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    _, w = mha(torch.randn(2, 7, 16), need_weights=True)  # (2, 4, 7, 7)
    e = attention_entropy(w)
    assert e.shape == (2, 4, 7) and (e >= 0).all() and (e <= math.log(7) + 1e-6).all()


def test_peak_offsets_of_a_previous_token_head_and_a_self_head():
    n = 6
    prev = torch.diag(torch.ones(n - 1), -1)  # row i has its 1 at column i - 1
    prev[0, 0] = 1.0
    w = torch.stack([prev, torch.eye(n)])[None]  # (1, 2, n, n)
    off = peak_offsets(w)
    assert off[0, 0].tolist() == [0, -1, -1, -1, -1, -1] and off[0, 1].tolist() == [0] * n
    best, share = preferred_offset(off)
    assert best == [-1, 0] and share == pytest.approx([5 / 6, 1.0])
    valid = torch.arange(n)[None, None] > 0  # (1, 1, n): leave out the first query
    assert preferred_offset(off, valid) == ([-1, 0], [1.0, 1.0])


def test_weight_by_offset_tells_a_previous_token_head_from_a_recency_head():
    n = 8
    prev = torch.diag(torch.ones(n - 1), -1)  # all weight on i - 1
    prev[0, 0] = 1.0
    # a recency head: weight 4, 3, 2, 1 on i - 1, i, i - 2, i - 3 (argmax i - 1, share 0.4)
    rec = torch.zeros(n, n)
    for i in range(n):
        for j, v in ((i - 1, 4.0), (i, 3.0), (i - 2, 2.0), (i - 3, 1.0)):
            if j >= 0:
                rec[i, j] = v
    rec = rec / rec.sum(-1, keepdim=True)
    w = torch.stack([prev, rec])[None].repeat(2, 1, 1, 1)  # (2, 2, n, n)
    got = weight_by_offset(w, 3)  # (H, 4): offsets 0, 1, 2, 3
    torch.testing.assert_close(got, torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.3, 0.4, 0.2, 0.1]]))
    assert (peak_offsets(w)[:, :, 1:] == -1).all()  # both peak on i - 1: argmax alone cannot tell


def test_weight_by_offset_equals_a_loop_over_queries():
    torch.manual_seed(2)
    w = torch.rand(3, 2, 9, 9).tril().clamp_min(1e-9)
    w = w / w.sum(-1, keepdim=True)
    got = weight_by_offset(w, 4)
    for h in range(2):
        for k in range(5):
            want = torch.stack([w[b, h, i, i - k] for b in range(3) for i in range(4, 9)]).mean()
            torch.testing.assert_close(got[h, k], want)


def test_mass_on_picks_one_query_row_and_one_key_per_sequence():
    torch.manual_seed(1)
    w = torch.rand(3, 2, 5, 5).softmax(-1)
    q, k = torch.tensor([4, 0, 2]), torch.tensor([1, 3, 2])
    m = mass_on(w, q, k)
    assert m.shape == (3, 2)
    for b in range(3):
        for h in range(2):
            assert m[b, h] == w[b, h, q[b], k[b]]


@pytest.mark.parametrize("call, error, message", [
    (lambda: attention_entropy(torch.tensor([1, 0])), TypeError, "must be a floating-point tensor"),
    (lambda: attention_entropy(torch.tensor([-0.5, 1.5])), ValueError, "must be >= 0"),
    (lambda: peak_offsets(torch.rand(4, 4)), ValueError, "must have 4 dimensions"),
    (lambda: mass_on(torch.rand(2, 1, 3, 3), torch.tensor([0, 3]), torch.tensor([0, 0])),
     ValueError, r"query positions must lie in \[0, 3\)"),
    (lambda: mass_on(torch.rand(2, 1, 3, 3), torch.tensor([0]), torch.tensor([0, 0])),
     ValueError, r"query must hold one integer position per sequence, shape \(2,\)"),
    (lambda: preferred_offset(torch.zeros(2, 2, 3)), ValueError, "offsets must be integers"),
    (lambda: weight_by_offset(torch.rand(1, 2, 3, 4), 1), ValueError, r"square self-attention"),
    (lambda: weight_by_offset(torch.rand(1, 2, 3, 3), 3), ValueError, r"N > back=3"),
    (lambda: weight_by_offset(torch.rand(1, 2, 3, 3), 1.0), TypeError, "back must be an int"),
    (lambda: preferred_offset(torch.zeros(2, 2, 3, dtype=torch.long), torch.ones(2, 2, 3)),
     TypeError, "valid must be a boolean tensor"),
    (lambda: preferred_offset(torch.zeros(2, 2, 3, dtype=torch.long), torch.ones(3, 1, 3, dtype=torch.bool)),
     ValueError, "does not broadcast"),
    (lambda: preferred_offset(torch.zeros(1, 1, 3, dtype=torch.long), torch.zeros(1, 1, 3, dtype=torch.bool)),
     ValueError, "valid selects no row of head 0"),
])
def test_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()
