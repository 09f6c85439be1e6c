"""The training loop's learning-rate warmup."""

import pytest
import torch
from torch import nn

from companion.train import train


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
