"""Input checks shared by the companion's public functions.

Every check raises a ``TypeError`` or ``ValueError`` whose message names the
argument and what was expected and received, so that a student sees *their*
mistake instead of a traceback from deep inside torch.
"""

from __future__ import annotations

import torch


def require_tensor(name: str, x) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_float(name: str, x: torch.Tensor) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` holds floating-point numbers."""
    require_tensor(name, x)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def require_rank(name: str, x: torch.Tensor, ranks, meaning: str = "") -> torch.Tensor:
    """Raise ``ValueError`` unless ``x.dim()`` is one of ``ranks``."""
    require_tensor(name, x)
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if x.dim() not in ranks:
        wanted = " or ".join(str(r) for r in ranks)
        hint = f" ({meaning})" if meaning else ""
        raise ValueError(
            f"{name} must have {wanted} dimensions{hint}, got shape {tuple(x.shape)}"
        )
    return x


def require_int(name: str, value, minimum: int | None = None) -> int:
    """Raise unless ``value`` is an int (not a bool) and, if ``minimum`` is given, ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def require_positive_int(name: str, value) -> int:
    """Raise unless ``value`` is an int > 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def require_bool_mask(name: str, mask: torch.Tensor, target_shape) -> torch.Tensor:
    """Check that ``mask`` is boolean and broadcasts to ``target_shape``."""
    require_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "convert a 0/1 mask with mask.bool(), or an additive float mask with "
            "companion.masks.from_additive(mask)"
        )
    try:
        ok = torch.broadcast_shapes(mask.shape, tuple(target_shape)) == tuple(target_shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores of shape {tuple(target_shape)} (batch..., queries, keys)"
        )
    return mask
