"""The Vision Transformer (Dosovitskiy et al., 2021) of the lecture, on small images.

    image (B, C, H, W) → N = HW / p² patches of p²·C numbers each   (patchify)
                       → Linear p²·C → d  (= a p×p convolution with stride p)
                       → + learned position embeddings
                       → Transformer encoder (chapter 7's EncoderLayer)
                       → average pooling over the N tokens (or the [class] token)
                       → Linear d → classes

Patches are ordered row by row, and the numbers of one patch as ``(p1 p2 c)``, as in
timm and vit-pytorch: ``'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'``.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from .._validate import require_float, require_matches_parameters, require_positive_int, require_rank, require_tensor
from .transformer import Encoder


def _check_images(images: torch.Tensor, patch_size: int) -> None:
    require_float("images", images)
    require_rank("images", images, 4, "batch, channels, height, width")
    require_positive_int("patch_size", patch_size)
    H, W = images.shape[-2:]
    if H % patch_size or W % patch_size:
        raise ValueError(f"image height and width must be multiples of patch_size={patch_size}, "
                         f"got images of shape {tuple(images.shape)}")


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``(B, C, H, W) -> (B, N, p²·C)`` with ``N = HW / p²``, patches in row-major order."""
    _check_images(images, patch_size)
    p = patch_size
    return rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=p, p2=p)  # (B, N, p²C)


def unpatchify(patches: torch.Tensor, patch_size: int, height: int, width: int) -> torch.Tensor:
    """The inverse of :func:`patchify`: ``(B, N, p²·C) -> (B, C, H, W)``."""
    require_float("patches", patches)
    require_rank("patches", patches, 3, "batch, patches, p*p*channels")
    for name, v in (("patch_size", patch_size), ("height", height), ("width", width)):
        require_positive_int(name, v)
    p = patch_size
    if height % p or width % p:
        raise ValueError(f"height={height} and width={width} must be multiples of patch_size={p}")
    h, w = height // p, width // p
    if patches.shape[1] != h * w or patches.shape[2] % (p * p):
        raise ValueError(f"patches of shape {tuple(patches.shape)} do not tile a {height}×{width} image "
                         f"with {p}×{p} patches: expected (B, {h * w}, {p * p}·C)")
    return rearrange(patches, "b (h w) (p1 p2 c) -> b c (h p1) (w p2)", h=h, w=w, p1=p, p2=p)  # (B, C, H, W)


class PatchEmbedding(nn.Module):
    """Flatten ``p×p`` patches and project each with one Linear ``p²·C → d``.

    The same map as ``nn.Conv2d(C, d, kernel_size=p, stride=p)`` (see :meth:`as_conv`).
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int):
        super().__init__()
        for name, v in (("in_channels", in_channels), ("patch_size", patch_size), ("d_model", d_model)):
            require_positive_int(name, v)
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.proj = nn.Linear(patch_size * patch_size * in_channels, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images, self.patch_size)
        if images.shape[1] != self.in_channels:
            raise ValueError(f"images must have {self.in_channels} channels, got shape {tuple(images.shape)}")
        require_matches_parameters("images", images, self.proj.weight)
        return self.proj(patchify(images, self.patch_size))  # (B, N, p²C) -> (B, N, d)

    def as_conv(self) -> nn.Conv2d:
        """The equivalent strided convolution (kernel = stride = p), weights copied."""
        p, C = self.patch_size, self.in_channels
        d = self.proj.out_features
        conv = nn.Conv2d(C, d, kernel_size=p, stride=p)
        with torch.no_grad():
            # Linear weight (d, p1 p2 c) -> conv weight (d, c, p1, p2)
            conv.weight.copy_(rearrange(self.proj.weight, "d (p1 p2 c) -> d c p1 p2", p1=p, p2=p, c=C))
            conv.bias.copy_(self.proj.bias)
        return conv.to(self.proj.weight.device)


class ViT(nn.Module):
    """A small Vision Transformer classifier.

    ``pool="mean"`` (the lecture's): average the encoder's N output tokens, then a
    Linear layer. ``pool="cls"``: prepend a learned [class] token and classify its output.
    ``model(images (B, C, H, W)) -> logits (B, num_classes)``. After a call with
    ``need_weights=True`` every encoder layer keeps its attention weights
    ``(B, heads, tokens, tokens)`` in ``layer.attn_weights``.
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, num_classes: int, d_model: int = 64,
                 depth: int = 2, num_heads: int = 4, d_ff: int = 128, dropout: float = 0.0, pool: str = "mean",
                 norm_first: bool = True):
        super().__init__()
        for name, v in (("image_size", image_size), ("patch_size", patch_size), ("num_classes", num_classes)):
            require_positive_int(name, v)
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} must be a multiple of patch_size={patch_size}")
        if pool not in ("mean", "cls"):
            raise ValueError(f"pool must be 'mean' or 'cls', got {pool!r}")
        self.image_size, self.pool = image_size, pool
        self.num_patches = (image_size // patch_size) ** 2
        self.patch_embed = PatchEmbedding(in_channels, patch_size, d_model)
        n_tokens = self.num_patches + (pool == "cls")
        self.pos_embed = nn.Parameter(torch.randn(1, n_tokens, d_model) * 0.02)  # learned positions
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model)) if pool == "cls" else None
        self.encoder = Encoder(depth, d_model, num_heads, d_ff, dropout, norm_first)
        self.head = nn.Linear(d_model, num_classes)

    def features(self, images: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        """The encoder's output tokens ``(B, N (+1), d)``."""
        require_tensor("images", images)
        if images.dim() == 4 and images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be {self.image_size}×{self.image_size}, got shape {tuple(images.shape)}")
        x = self.patch_embed(images)  # (B, N, d)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, 1 + N, d)
        return self.encoder(x + self.pos_embed, None, need_weights)  # (B, N (+1), d)

    def forward(self, images: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        z = self.features(images, need_weights)  # (B, N (+1), d)
        pooled = z.mean(dim=1) if self.pool == "mean" else z[:, 0]  # (B, d)
        return self.head(pooled)  # (B, classes)
