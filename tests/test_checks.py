import math

import pytest
import torch

from companion.attention import attention_with_weights
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
    _, w = attention_with_weights(q, q, q, causal_mask(4))
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


# --- a check never passes a wrong answer ------------------------------------------------

nan, inf = float("nan"), float("inf")


@pytest.mark.parametrize("actual, expected", [
    ([nan, 1.0], [1.0, nan]),  # NaN at different positions
    ([1.0, 2.0], [nan, 2.0]),  # a number where NaN is expected
    ([nan], [0.0]),  # NaN where a number is expected
    ([1.0], [inf]),  # a finite number is not infinity
    ([inf], [1.0]),
    ([-inf], [inf]),
    ([1e30], [inf]),
])
def test_check_close_refuses_nan_and_inf_in_the_wrong_places(actual, expected):
    with pytest.raises(AssertionError, match="result"):
        check_close(torch.tensor(actual), torch.tensor(expected))


def test_check_close_accepts_nan_and_inf_in_the_same_places():
    check_close(torch.tensor([nan, inf, -inf, 1.0]), torch.tensor([nan, inf, -inf, 1.0 + 1e-7]))


@pytest.mark.parametrize("atol, rtol, error, message", [
    (nan, 1e-4, ValueError, r"atol must be a finite number >= 0, got nan"),
    (1e-5, nan, ValueError, r"rtol must be a finite number >= 0, got nan"),
    (inf, 1e-4, ValueError, r"atol must be a finite number >= 0, got inf"),
    (-1.0, 1e-4, ValueError, r"atol must be a finite number >= 0, got -1.0"),
    (1e-5, -0.5, ValueError, r"rtol must be a finite number >= 0, got -0.5"),
    ("0.1", 1e-4, TypeError, r"atol must be a number, got str"),
    (True, 1e-4, TypeError, r"atol must be a number, got bool"),
])
def test_check_close_tolerances_must_be_finite_and_non_negative(atol, rtol, error, message):
    with pytest.raises(error, match=message):
        check_close(torch.tensor([0.0]), torch.tensor([100.0]), atol=atol, rtol=rtol)


def test_check_close_complex_and_non_numeric_answers():
    z = torch.tensor([1 + 2j, 3 - 1j])
    check_close(z, z.clone())
    with pytest.raises(AssertionError, match="differs in 1 of 2"):
        check_close(torch.tensor([1 + 2j, 3 + 1j]), z)  # only the imaginary part differs
    with pytest.raises(AssertionError, match="complex and real"):
        check_close(z.real, z)
    with pytest.raises(AssertionError, match="replace it by your answer"):
        check_close(None, torch.zeros(2))
    with pytest.raises(AssertionError, match="not an array of numbers"):
        check_close("0.5", torch.zeros(()))


@pytest.mark.parametrize("weights", [
    torch.tensor([[nan, 1.0], [0.5, 0.5]]),
    torch.tensor([[nan, nan], [0.5, 0.5]]),
    torch.tensor([[inf, 0.0], [0.5, 0.5]]),
])
def test_check_attention_weights_refuses_nan_and_inf(weights):
    with pytest.raises(AssertionError, match="NaN or infinite"):
        check_attention_weights(weights)
    with pytest.raises(AssertionError, match="NaN or infinite"):
        check_attention_weights(weights, torch.ones(2, 2, dtype=torch.bool))


def test_check_attention_weights_mask_and_atol_are_checked():
    w = torch.full((2, 2), 0.5)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        check_attention_weights(w, torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 3\) does not broadcast"):
        check_attention_weights(w, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="atol must be a finite number >= 0, got nan"):
        check_attention_weights(torch.tensor([[2.0, 2.0]]), atol=nan)


class _AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class _SneakyInt(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


@pytest.mark.parametrize("actual", [_AlwaysEqual(), _SneakyInt(5), (_AlwaysEqual(), 3), [_SneakyInt(1), 3],
                                    {"a": 12}, 12j])
def test_check_equal_refuses_objects_that_are_not_plain_values(actual):
    expected = (2, 3) if isinstance(actual, (tuple, list)) else 12
    with pytest.raises(AssertionError, match="plain Python value"):
        check_equal(actual, expected)


def test_check_equal_compares_strictly():
    check_equal("abc", "abc")
    check_equal([1, [2, 3]], (1, (2, 3)))
    for actual, expected in [("12", 12), (12, "12"), ((1, 2), (1, 2, 3)), ((True, 2), (1, 2)), (12.5, 12),
                             (float("nan"), float("nan")), (0, False), (None, None)]:
        with pytest.raises(AssertionError):
            check_equal(actual, expected)
    with pytest.raises(TypeError, match="expected must be a plain Python value"):
        check_equal(3, torch.tensor(3))


def test_rel_error_does_not_hide_nan_and_checks_eps():
    assert math.isnan(rel_error([nan], [1.0]))
    assert rel_error([inf], [inf]) == 0.0
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        rel_error([1.0], [1.0], eps=0.0)


def test_check_shape_expected_must_be_sizes():
    with pytest.raises(TypeError, match="expected must be a tuple of sizes, got int"):
        check_shape(torch.zeros(3), 3)
    with pytest.raises(TypeError, match="expected must hold ints or None"):
        check_shape(torch.zeros(1), (True,))


def test_fresh_rng_draws_from_the_grading_seed_and_restores_the_global_generator(monkeypatch):
    from companion.checks import GRADING_SEED, fresh_rng

    def draw(seed):
        monkeypatch.setenv(GRADING_SEED, str(seed))
        torch.manual_seed(123)
        before = torch.random.get_rng_state()
        with fresh_rng():
            inside = torch.randn(4)
        assert torch.equal(torch.random.get_rng_state(), before)  # the fixed inputs after it stay
        return inside

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))
    monkeypatch.setenv(GRADING_SEED, "-1")
    with pytest.raises(ValueError, match=GRADING_SEED):
        with fresh_rng():
            pass


def test_check_attention_weights_checks_dtype_and_shape_before_converting():
    """Red team round 3: a 61 MiB uint8 tensor was converted with ``.double()`` before any
    check (a gigabyte in the grader). Integer weights and a wrong ``shape`` fail first."""
    import companion.checks as ch

    with pytest.raises(AssertionError, match="floating-point"):
        ch.check_attention_weights(torch.ones(2, 2, dtype=torch.uint8), name="w")
    with pytest.raises(AssertionError, match=r"shape \(40, 40\), expected \(5, 5\)"):
        ch.check_attention_weights(torch.full((40, 40), 1 / 40), name="w", shape=(5, 5))
    ch.check_attention_weights(torch.full((5, 5), 0.2), name="w", shape=(5, 5))
