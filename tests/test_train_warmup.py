"""The training loop's learning-rate warmup (``lr_at``) and its record of gradient norms."""

import pytest
import torch
from torch import nn

from companion.train import lr_at, train


def _lrs_seen(monkeypatch, **kw):
    """The learning rate of every optimiser step of a short run."""
    seen = []
    real_step = torch.optim.Adam.step

    def spy(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.Adam, "step", spy)
    torch.manual_seed(0)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    h = train(nn.Linear(3, 1), lambda m, xb, yb: ((m(xb) - yb) ** 2).mean(), [x, y], batch_size=16, device="cpu",
              progress=False, **kw)
    return seen, h


def test_warmup_grows_the_rate_linearly_then_holds_it(monkeypatch):
    seen, h = _lrs_seen(monkeypatch, steps=6, lr=1e-2, warmup=4, log_every=3)
    assert seen == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])
    assert len(h.losses) == 2


def test_no_warmup_is_a_constant_rate(monkeypatch):
    seen, _ = _lrs_seen(monkeypatch, steps=3, lr=1e-2, warmup=0)
    assert seen == pytest.approx([1e-2] * 3)


def test_warmup_reaches_the_full_rate_and_trains():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = torch.randn(64, 3), torch.randn(64, 1)

    def loss_fn(m, xb, yb):
        return ((m(xb) - yb) ** 2).mean()

    h = train(model, loss_fn, [x, y], steps=20, batch_size=16, lr=1e-2, warmup=10, device="cpu", progress=False,
              log_every=5)
    assert len(h.losses) == 4 and h.losses[-1] < h.losses[0]


@pytest.mark.parametrize("warmup", [-1, 1.5, True])
def test_warmup_must_be_a_count_of_steps(warmup):
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        train(nn.Linear(2, 1), lambda m, x: m(x).sum(), [torch.randn(4, 2)], steps=1, warmup=warmup, device="cpu",
              progress=False)


def test_lr_at_by_hand():
    # lr · min(1, step / warmup): 1e-2 over a warmup of 4 steps
    assert [lr_at(s, 1e-2, 4) for s in (1, 2, 3, 4, 5, 100)] == pytest.approx(
        [2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])
    assert lr_at(1, 3e-3, 50) == pytest.approx(6e-5)  # chapter 7: the first step is lr / 50
    assert lr_at(25, 3e-3, 50) == pytest.approx(1.5e-3)  # halfway: half the rate
    assert lr_at(1, 0.5) == lr_at(10**6, 0.5) == 0.5  # no warmup: constant
    assert lr_at(1, 0.5, 1) == 0.5  # a warmup of 1 step is no warmup


def test_train_follows_lr_at(monkeypatch):
    seen, _ = _lrs_seen(monkeypatch, steps=12, lr=3e-3, warmup=7)
    assert seen == pytest.approx([lr_at(s, 3e-3, 7) for s in range(1, 13)])
    assert seen[0] < seen[5] < seen[6] == seen[11]  # grows, then holds: not constant


@pytest.mark.parametrize("kw, error, match", [
    ({"step": 0, "lr": 1e-3}, ValueError, "step must be positive"),
    ({"step": 1.0, "lr": 1e-3}, TypeError, "step must be an int"),
    ({"step": 1, "lr": 0.0}, ValueError, "lr must be > 0.0"),
    ({"step": 1, "lr": 1e-3, "warmup": -2}, ValueError, "warmup must be an int >= 0"),
])
def test_lr_at_rejects_bad_values(kw, error, match):
    with pytest.raises(error, match=match):
        lr_at(**kw)


def test_history_keeps_the_gradient_norm_before_clipping():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = torch.randn(8, 3) * 100, torch.randn(8, 1) * 100  # huge gradients: clipping acts
    w0, b0 = model.weight.detach().clone(), model.bias.detach().clone()
    err = x @ w0.T + b0 - y  # (8, 1): the first step's residuals, by hand
    g_w, g_b = 2 * (err * x).mean(0), 2 * err.mean()  # gradient of the mean squared error
    expected = torch.sqrt(g_w.pow(2).sum() + g_b**2).item()
    h = train(model, lambda m, xb, yb: ((m(xb) - yb) ** 2).mean(), [x, y], steps=3, batch_size=8, clip=0.5,
              device="cpu", progress=False)
    assert len(h.grad_norms) == 3 and h.grad_norms[0] == pytest.approx(expected, rel=1e-4)
    assert min(h.grad_norms) > 0.5  # above the threshold: every step was clipped
    assert train(model, lambda m, xb, yb: ((m(xb) - yb) ** 2).mean(), [x, y], steps=2, batch_size=8, clip=None,
                 device="cpu", progress=False).grad_norms == []


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------


def test_lr_at_refuses_a_float_warmup():
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        lr_at(1, 0.1, warmup=2.0)


def test_cosine_decay_after_warmup(monkeypatch):
    seen, _ = _lrs_seen(monkeypatch, steps=6, lr=1e-2, warmup=2, lr_min=1e-3, log_every=3)
    import math
    expect = [5e-3, 1e-2] + [1e-3 + 9e-3 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in (1, 2, 3, 4)]
    assert seen == pytest.approx(expect)
    assert seen[-1] == pytest.approx(1e-3)
    assert lr_at(3, 1.0, 0, 6, 0.0) == pytest.approx(0.5)  # halfway down the cosine
    with pytest.raises(ValueError, match="past the run"):
        lr_at(6, 1.0, 0, 5, 0.0)


def test_on_log_sees_every_logging_step_and_the_model():
    seen = []
    model = nn.Linear(3, 1)
    x, y = torch.randn(32, 3), torch.randn(32, 1)

    def on_log(step, m):
        seen.append((step, m is model, m.training))
        m.eval()  # the loop puts it back in training mode

    train(model, lambda m, xb, yb: ((m(xb) - yb) ** 2).mean(), [x, y], steps=7, batch_size=8, device="cpu",
          progress=False, log_every=3, on_log=on_log)
    assert seen == [(3, True, True), (6, True, True), (7, True, True)]
