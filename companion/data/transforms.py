"""Transformations of image batches, for measuring what a model does with a changed input.

:func:`shift_images` translates images, the test of translation equivariance in chapter 8
(the CNN's built-in assumption, which a ViT has to learn).
"""

from __future__ import annotations

import torch

from .._validate import require_int, require_tensor


def shift_images(images: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """Translate ``(B, C, H, W)`` images by ``dx`` pixels right and ``dy`` down, filling with 0."""
    require_tensor("images", images)
    require_int("dx", dx)
    require_int("dy", dy)
    if images.dim() != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}")
    H, W = images.shape[-2:]
    if abs(dx) >= W or abs(dy) >= H:
        raise ValueError(f"shift ({dx}, {dy}) must be smaller than the image ({H}×{W})")
    out = torch.zeros_like(images)
    ys, yd = (slice(0, H - dy), slice(dy, H)) if dy >= 0 else (slice(-dy, H), slice(0, H + dy))
    xs, xd = (slice(0, W - dx), slice(dx, W)) if dx >= 0 else (slice(-dx, W), slice(0, W + dx))
    out[..., yd, xd] = images[..., ys, xs]
    return out
