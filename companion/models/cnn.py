"""A small convolutional classifier, the ViT's counterpart in chapter 8.

    [Conv 3×3 → BatchNorm → ReLU] × 2 per stage, max-pool between stages,
    global average pooling → Linear → classes

Its two built-in assumptions (the *inductive bias*): a pixel's features depend on
its neighbourhood (small kernels), and the same pattern means the same thing
wherever it appears (weights shared across positions: translation equivariance).
"""

from __future__ import annotations

import torch
from torch import nn

from .._validate import require_float, require_matches_parameters, require_positive_int, require_rank


class SmallCNN(nn.Module):
    """``model(images (B, C, H, W)) -> logits (B, num_classes)``.

    ``channels``: the width of each stage, e.g. ``(32, 64)``; a 2×2 max-pool follows every
    stage but the last.
    """

    def __init__(self, in_channels: int, num_classes: int, channels=(32, 64)):
        super().__init__()
        require_positive_int("in_channels", in_channels)
        require_positive_int("num_classes", num_classes)
        if not isinstance(channels, (tuple, list)):
            raise TypeError(f"channels must be a tuple of stage widths, e.g. (32, 64), got {type(channels).__name__}")
        channels = tuple(channels)
        if not channels:
            raise ValueError("channels must name at least one stage width, got ()")
        for i, c in enumerate(channels):
            require_positive_int(f"channels[{i}]", c)
        self.in_channels = in_channels
        layers, c_in = [], in_channels
        for i, c in enumerate(channels):
            for _ in range(2):
                layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
                c_in = c
            if i < len(channels) - 1:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        require_float("images", images)
        require_rank("images", images, 4, "batch, channels, height, width")
        if images.shape[1] != self.in_channels:
            raise ValueError(f"images must have {self.in_channels} channels, got shape {tuple(images.shape)}")
        require_matches_parameters("images", images, self.head.weight)
        h = self.features(images)  # (B, c, h, w)
        return self.head(h.mean(dim=(2, 3)))  # global average pooling -> (B, c) -> (B, classes)
