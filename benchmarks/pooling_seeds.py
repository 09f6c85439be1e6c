"""Chapter 8's pooling comparison (class token against mean pooling) over many seeds.

    python benchmarks/pooling_seeds.py 0 31    # seeds 0 to 30, one line per seed

The chapter's recipe at ``scale = "cpu"``: the same ViT, data split, steps and learning rate,
one seed at a time (``benchmarks/results/pooling_seeds_cpu.md``). Three seeds, as the chapter
trains, are too few to tell the two heads apart; this shows how the difference spreads.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import companion
from companion.data.digits import digits_split
from companion.models import ViT
from companion.train import predict, train

VIT_SIZE = dict(d_model=32, depth=2, num_heads=4, d_ff=64)  # chapter 8, scale = "cpu"
STEPS, LR, BATCH, N_TRAIN, N_TEST = 150, 3e-3, 64, 1200, 500


def accuracy(model, x, y) -> float:
    model.eval()
    return (predict(lambda b: model(b).argmax(-1), x) == y).float().mean().item()


def main(first: int, stop: int) -> None:
    torch.set_num_threads(1)  # as the chapter: tiny models
    for s in range(first, stop):
        data = digits_split(N_TRAIN, N_TEST, seed=s)
        acc = {}
        for pool in ("mean", "cls"):
            companion.seed_everything(s)
            model = ViT(image_size=8, patch_size=2, in_channels=1, num_classes=10, pool=pool, **VIT_SIZE)
            train(model, lambda m, x, y: F.cross_entropy(m(x), y), [data.x_train, data.y_train], steps=STEPS,
                  batch_size=BATCH, lr=LR, seed=s, progress=False)
            acc[pool] = accuracy(model, data.x_test, data.y_test)
        print(s, f"{acc['mean']:.3f} {acc['cls']:.3f} {acc['cls'] - acc['mean']:+.3f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
