"""Input checks shared by the companion's public functions.

Every check raises a ``TypeError`` or ``ValueError`` whose message names the
argument and what was expected and received, so that a student sees *their*
mistake instead of a traceback from deep inside torch.
"""

from __future__ import annotations

import contextvars
import math
from contextlib import contextmanager

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


def require_number(name: str, value, minimum: float | None = None, *, strict: bool = False,
                   allow_none: bool = False) -> float | None:
    """Raise unless ``value`` is a finite real number (not a bool) ``>= minimum``
    (``> minimum`` with ``strict``). NaN is refused: every comparison with it is False,
    so it would slip through any range check written as ``if value < minimum``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return value


def require_probability(name: str, p) -> float:
    """A dropout probability: a finite number in ``[0, 1)`` (1 would drop everything)."""
    require_number(name, p, 0.0)
    if p >= 1:
        raise ValueError(f"{name} must be in [0, 1), got {p!r}")
    return p


def require_seed(name: str, seed) -> int:
    """A seed is an int >= 0 (``None`` would silently mean "unseeded")."""
    return require_int(name, seed, minimum=0)


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no argument (CUDA) and has a CPU variant
        return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()


def require_matches_parameters(name: str, x: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """Raise unless the float tensor ``x`` has the dtype and device of the module's
    ``param`` (under autocast, any float dtype is fine: autocast casts)."""
    if x.device != param.device:
        raise ValueError(f"{name} is on {x.device} but the module's parameters are on {param.device}; "
                         f"move one to the other with .to(device)")
    if x.dtype != param.dtype and not _autocast_on(x.device.type):
        raise TypeError(f"{name} has dtype {x.dtype} but the module's parameters are {param.dtype}; "
                        f"convert the input ({name}.to({param.dtype})) or the module (module.to({x.dtype}))")
    return x


def require_token_ids(name: str, ids, vocab_size: int, rank: int | None = None) -> torch.Tensor:
    """Raise unless ``ids`` is an integer tensor (of ``rank`` dimensions) with every id in
    ``[0, vocab_size)``. The range is checked only for CPU tensors: on an accelerator it would
    cost a device sync on every training step (``nn.Embedding`` then fails on its own)."""
    require_tensor(name, ids)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if rank is not None:
        require_rank(name, ids, rank)
    if ids.device.type == "cpu" and ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{name} ids must be in [0, {vocab_size}), "
                             f"got range [{lo}, {hi}]")
    return ids


# Check at the edge, once. A model's public entry point (``GPT.forward``) checks its input and
# runs its layers inside ``checked_edge()``; a layer called there (``EncoderLayer``,
# ``MultiHeadAttention``, ``LayerNorm``, ``FeedForward``) skips its own checks, since its input
# was made by the model from a checked one. Called on its own, each layer checks as before.
# The layers are still called as modules (hooks and diagrams see them).
_CHECKED = contextvars.ContextVar("companion_checked_edge", default=False)


@contextmanager
def checked_edge():
    """Inside: the inputs were checked at a public edge; the layers below skip their checks."""
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def inside_checked_edge() -> bool:
    """Whether the call runs inside :func:`checked_edge` (its input already checked)."""
    return _CHECKED.get()
