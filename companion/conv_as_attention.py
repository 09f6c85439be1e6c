"""A convolution written as multi-head self-attention (chapter 3; Cordonnier, Loukas & Jaggi, 2020).

:class:`ConvAsSelfAttention` is a multi-head self-attention layer over the pixels of an image
whose attention scores depend only on the *relative* position of query and key pixels. With one
head per kernel offset (:func:`kernel_offsets`) it computes exactly a ``K × K`` convolution.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from ._validate import require_float, require_matches_parameters, require_positive_int, require_rank
from .masks import pixel_grid


def kernel_offsets(kernel_size: int) -> torch.Tensor:
    """The ``K²`` offsets ``Δ = (Δrow, Δcol)`` of a ``K × K`` kernel, row by row.

    Shape ``(K², 2)``, integers in ``[-(K-1)/2, (K-1)/2]``. Offset ``h`` is the
    one that head ``h`` of :class:`ConvAsSelfAttention` looks at.
    """
    require_positive_int("kernel_size", kernel_size)
    if kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (the kernel needs a centre pixel), got {kernel_size}")
    r = kernel_size // 2
    steps = torch.arange(-r, r + 1)
    return torch.stack(torch.meshgrid(steps, steps, indexing="ij"), dim=-1).reshape(-1, 2)  # (K², 2)


class ConvAsSelfAttention(nn.Module):
    """Multi-head self-attention over pixels that reproduces a ``K × K`` convolution.

    There are ``K²`` heads, one per kernel offset ``Δ_h``. Head ``h`` scores the
    query pixel ``p`` against the key pixel ``p'`` by their relative position
    ``δ = p' - p`` only (no content), with the quadratic encoding of
    Cordonnier et al. (2020):

        r_δ = (‖δ‖², δ_row, δ_col),     v_h = -α (1, -2Δ_row, -2Δ_col),
        score_h(p, p') = v_h · r_δ = -α (‖δ - Δ_h‖² - ‖Δ_h‖²).

    The score is largest at ``δ = Δ_h`` and falls by at least ``α`` elsewhere,
    so for large ``α`` the softmax is one-hot: head ``h`` copies the pixel at
    offset ``Δ_h``. Each head's value matrix is the kernel's slice at that
    offset, ``W_h = weight[:, :, Δ_h]ᵀ`` of shape ``(C_in, C_out)``, and the
    heads are summed (concatenation followed by the output projection):

        y_p = Σ_h Σ_p' A_h[p, p'] · x_p' W_h + b.

    The image is zero padded by ``K // 2`` pixels first and the output cropped,
    as ``F.conv2d(..., padding=K // 2)`` does.

    Args:
        in_channels, out_channels, kernel_size: as for ``nn.Conv2d`` (odd kernel).
        alpha: the sharpness ``α`` of the attention (``α = 100`` leaves
            weights off the target below ``e^-100``).
        bias: whether to add a bias per output channel.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 alpha: float = 100.0, bias: bool = True):
        super().__init__()
        require_positive_int("in_channels", in_channels)
        require_positive_int("out_channels", out_channels)
        if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.alpha = kernel_size, float(alpha)
        self.register_buffer("offsets", kernel_offsets(kernel_size), persistent=False)  # (K², 2)
        heads = kernel_size * kernel_size
        self.value = nn.Parameter(torch.randn(heads, in_channels, out_channels) / math.sqrt(in_channels * heads))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, alpha: float = 100.0) -> ConvAsSelfAttention:
        """Build the attention layer that computes what ``conv`` computes.

        ``conv`` must have an odd square kernel, stride 1, no dilation, one group
        and ``padding = kernel_size // 2`` with zeros (a "same" convolution).
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be a torch.nn.Conv2d, got {type(conv).__name__}")
        k = conv.kernel_size[0]
        if (conv.kernel_size != (k, k) or conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != 1
                or conv.padding != (k // 2, k // 2) or conv.padding_mode != "zeros"):
            raise ValueError(
                "conv must have a square odd kernel, stride 1, dilation 1, groups 1 and zero padding kernel_size // 2; "
                f"got kernel_size={conv.kernel_size}, stride={conv.stride}, dilation={conv.dilation}, "
                f"groups={conv.groups}, padding={conv.padding}, padding_mode={conv.padding_mode!r}"
            )
        layer = cls(conv.in_channels, conv.out_channels, k, alpha=alpha, bias=conv.bias is not None)
        layer = layer.to(device=conv.weight.device, dtype=conv.weight.dtype)
        r = k // 2
        with torch.no_grad():
            for h, (dr, dc) in enumerate(layer.offsets.tolist()):
                layer.value[h] = conv.weight[:, :, dr + r, dc + r].T  # (C_in, C_out)
            if conv.bias is not None:
                layer.bias.copy_(conv.bias)
        return layer

    def relative_scores(self, height: int, width: int) -> torch.Tensor:
        """The scores ``v_h · r_δ`` of every head for every pair of pixels of a
        ``height × width`` image: shape ``(K², H·W, H·W)``, pixels row by row."""
        device, dtype = self.value.device, self.value.dtype
        rows, cols = pixel_grid(height, width, device)  # (P,) each, pixels row by row
        pos = torch.stack([rows, cols], dim=-1).to(dtype)  # (P, 2)
        delta = pos[None, :, :] - pos[:, None, :]  # (P_q, P_k, 2): δ = p' - p
        r = torch.cat([(delta**2).sum(-1, keepdim=True), delta], dim=-1)  # (P_q, P_k, 3): r_δ
        off = self.offsets.to(dtype)  # (K², 2)
        v = -self.alpha * torch.cat([torch.ones_like(off[:, :1]), -2 * off], dim=-1)  # (K², 3): v_h
        return torch.einsum("hc,qkc->hqk", v, r)  # (K², P_q, P_k)

    def attention_weights(self, height: int, width: int) -> torch.Tensor:
        """Softmax of :meth:`relative_scores` over the keys: ``(K², H·W, H·W)``."""
        return torch.softmax(self.relative_scores(height, width), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, C_in, H, W) -> (B, C_out, H, W)``."""
        require_float("x", x)
        require_rank("x", x, 4, "batch, channels, height, width")
        if x.shape[1] != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} channels, got shape {tuple(x.shape)}")
        require_matches_parameters("x", x, self.value)
        r = self.kernel_size // 2
        H, W = x.shape[-2:]
        padded = nn.functional.pad(x, (r, r, r, r))  # (B, C_in, H+2r, W+2r)
        tokens = rearrange(padded, "b c h w -> b (h w) c")  # (B, P, C_in), P = (H+2r)(W+2r)
        A = self.attention_weights(H + 2 * r, W + 2 * r).to(x.dtype)  # (K², P, P)
        values = torch.einsum("bpc,hco->bhpo", tokens, self.value)  # (B, K², P, C_out)
        out = torch.einsum("hqp,bhpo->bqo", A, values)  # (B, P, C_out): heads summed
        if self.bias is not None:
            out = out + self.bias
        out = rearrange(out, "b (h w) o -> b o h w", h=H + 2 * r)  # (B, C_out, H+2r, W+2r)
        return out[:, :, r:r + H, r:r + W]  # crop the padding: (B, C_out, H, W)
