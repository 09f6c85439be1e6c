import pytest
import torch

from companion.attention import scaled_dot_product_attention
from companion.checks import check_attention_weights, check_close, check_equal, check_shape, rel_error
from companion.masks import causal_mask


def test_rel_error():
    assert rel_error([1.0, 2.0], [1.0, 2.0]) == 0
    assert rel_error([1.0, 2.0], [1.0, 2.2]) == pytest.approx(0.2 / 2.2)
    with pytest.raises(ValueError, match="same shape"):
        rel_error([1.0], [1.0, 2.0])


def test_check_shape():
    check_shape(torch.zeros(2, 3), (2, None))
    with pytest.raises(AssertionError, match=r"out has shape \(2, 3\), expected \(3, 2\)"):
        check_shape(torch.zeros(2, 3), (3, 2), name="out")


def test_check_close_reports_the_worst_entry():
    check_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]))
    with pytest.raises(AssertionError, match=r"y differs in 1 of 3 entries; largest difference 0.5 at index \(2,\)"):
        check_close(torch.tensor([1.0, 2.0, 3.5]), torch.tensor([1.0, 2.0, 3.0]), name="y")
    with pytest.raises(AssertionError, match="contains NaN"):
        check_close(torch.tensor([float("nan")]), torch.tensor([0.0]))
    with pytest.raises(AssertionError, match=r"has shape \(2,\), expected \(3,\)"):
        check_close(torch.zeros(2), torch.zeros(3))


def test_check_close_on_masks():
    check_close(causal_mask(3), causal_mask(3))
    wrong = causal_mask(3).clone()
    wrong[0, 2] = True
    with pytest.raises(AssertionError, match=r"differs at 1 of 9 entries, first at index \(0, 2\): got True, expected False"):
        check_close(wrong, causal_mask(3), name="mask")
    with pytest.raises(AssertionError, match="dtype"):
        check_close(causal_mask(3).float(), causal_mask(3))


def test_check_attention_weights():
    q = torch.randn(2, 4, 8)
    _, w = scaled_dot_product_attention(q, q, q, causal_mask(4))
    check_attention_weights(w, causal_mask(4))
    with pytest.raises(AssertionError, match="blocked positions"):
        check_attention_weights(torch.full((4, 4), 0.25), causal_mask(4))
    with pytest.raises(AssertionError, match=r"rows must sum to 1; row \(0,\) sums to 2"):
        check_attention_weights(torch.tensor([[1.0, 1.0], [0.5, 0.5]]))
    with pytest.raises(AssertionError, match="negative"):
        check_attention_weights(torch.tensor([[1.5, -0.5]]))


def test_check_equal_compares_exact_answers():
    check_equal((3, 1, 5, 5), (3, 1, 5, 5))
    check_equal([2, 3], (2, 3))  # a list for a tuple of sizes
    check_equal(torch.Size([2, 3]), (2, 3))
    check_equal(12.0, 12)
    check_equal(True, True)
    with pytest.raises(AssertionError, match=r"predicted_allowed is 11, expected 12"):
        check_equal(11, 12, name="predicted_allowed")
    with pytest.raises(AssertionError, match=r"answer is None: replace it by your answer"):
        check_equal(None, 12)
    with pytest.raises(AssertionError, match=r"is 1 \(int\), expected True \(bool\)"):
        check_equal(1, True)
    with pytest.raises(AssertionError, match="use check_close for tensors"):
        check_equal(torch.tensor(12), 12)
    with pytest.raises(AssertionError, match="expected 12"):
        check_equal(float("nan"), 12)
