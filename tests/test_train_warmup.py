"""The training loop's learning-rate warmup."""

import pytest
import torch
from torch import nn

from companion.train import train


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
