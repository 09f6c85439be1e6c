"""Small images of one or two coloured shapes, with a caption from a tiny grammar.

    "a red circle"
    "a green triangle above a yellow circle"
    "a blue square left of a red circle"

With two shapes, one lies in the top half and the other in the bottom half
(caption "… above …", the upper one named first) or one in the left half and
the other in the right half ("… left of …", the left one first), lined up on
the other axis, so every caption is determined by its image. The labels (``shape_ids``, ``color_ids``,
``n_shapes``, ``relation``) let the same images serve classification tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validate import require_number, require_positive_int, require_seed
from .cache import cached_dataset
from .vocab import Vocab

SHAPES = ["circle", "square", "triangle"]
COLORS = ["red", "green", "blue", "yellow"]
RGB = torch.tensor([[0.9, 0.1, 0.1], [0.1, 0.8, 0.1], [0.15, 0.3, 0.95], [0.95, 0.9, 0.1]])  # (colours, 3)
RELATIONS = ["above", "left of"]
CAPTION_VOCAB = Vocab(["a", *COLORS, *SHAPES, "above", "left", "of"])


@dataclass
class ShapesBatch:
    """Generated images and captions.

    ``images (B, 3, S, S)`` in [0, 1]; ``tokens (B, T)`` = ``<start> … <end> <pad>…``
    and ``lengths (B,)`` (with ``<start>`` and ``<end>``); ``captions`` the strings;
    labels ``shape_ids``/``color_ids (B, 2)`` (``-1`` where there is no second
    shape), ``n_shapes (B,)`` and ``relation (B,)`` (0 above, 1 left of, -1 none).
    """

    images: torch.Tensor
    tokens: torch.Tensor
    lengths: torch.Tensor
    captions: list[str]
    shape_ids: torch.Tensor
    color_ids: torch.Tensor
    n_shapes: torch.Tensor
    relation: torch.Tensor
    vocab: Vocab = CAPTION_VOCAB

    def __len__(self) -> int:
        return self.images.shape[0]


FACTOR_SIZES = (len(COLORS), len(SHAPES), len(COLORS) + 1, len(SHAPES) + 1, len(RELATIONS) + 1)
"""Number of classes of each column of :func:`factor_labels`."""


def factor_labels(batch: ShapesBatch) -> torch.Tensor:
    """Class labels ``(B, 5)`` of what a caption says, one column per factor:
    first colour, first shape, second colour and second shape (0 = no second
    shape, else id + 1), relation (0 = none, 1 above, 2 left of). Column ``j``
    has ``FACTOR_SIZES[j]`` classes; a classifier of the images can learn them."""
    return torch.stack([batch.color_ids[:, 0], batch.shape_ids[:, 0], batch.color_ids[:, 1] + 1,
                        batch.shape_ids[:, 1] + 1, batch.relation + 1], dim=1)


def _shape_masks(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Pixel masks of the three shapes at unit radius, from offsets ``dx, dy (..., S, S)``
    measured in radii from the centre (y grows downwards). Returns ``(..., 3, S, S)``."""
    circle = dx**2 + dy**2 <= 1.0
    square = torch.maximum(dx.abs(), dy.abs()) <= 0.82
    triangle = (dy >= -1.0) & (dy <= 0.8) & (dx.abs() <= (dy + 1.0) / 1.8)  # apex at the top
    return torch.stack([circle, square, triangle], dim=-3)


@cached_dataset
def make_shapes(n: int, seed: int = 0, image_size: int = 32, p_two: float = 0.5,
                noise: float = 0.05) -> ShapesBatch:
    """``n`` images with one shape (probability ``1 - p_two``) or two.

    Radii are 10–20 % of ``image_size``. Everything is drawn in one batch from a
    seeded ``torch.Generator`` on the CPU, so a seed gives the same data on every
    machine; move the tensors to a device afterwards.
    """
    require_positive_int("n", n)
    require_seed("seed", seed)
    require_positive_int("image_size", image_size)
    if image_size < 16:
        raise ValueError(f"image_size must be >= 16 pixels for shapes to be recognisable, got {image_size}")
    require_number("p_two", p_two, 0.0)
    if p_two > 1.0:
        raise ValueError(f"p_two must be a probability in [0, 1], got {p_two}")
    require_number("noise", noise, 0.0)  # NaN noise would turn every image into NaN
    g = torch.Generator().manual_seed(seed)
    S, half = float(image_size), image_size / 2
    n_shapes = 1 + (torch.rand(n, generator=g) < p_two).long()  # (n,)
    two = n_shapes == 2
    relation = torch.randint(0, 2, (n,), generator=g).masked_fill(~two, -1)  # (n,)
    shape_ids = torch.randint(0, len(SHAPES), (n, 2), generator=g)  # (n, 2)
    color_ids = torch.randint(0, len(COLORS), (n, 2), generator=g)  # (n, 2)
    shape_ids[~two, 1] = -1
    color_ids[~two, 1] = -1
    r = S * (0.10 + 0.10 * torch.rand(n, 2, generator=g))  # (n, 2) radii in pixels
    u = torch.rand(n, 2, 2, generator=g)  # (n, slot, axis) uniform numbers for the centres
    # One shape: anywhere. Two: along the relation's axis slot 0 in the first half, slot 1 in the second.
    lo_full, hi_full = r[..., None], S - r[..., None]  # (n, 2, 1)
    centre = lo_full + u * (hi_full - lo_full)  # (n, slot, axis=(y, x))
    axis = relation.clamp(min=0)  # 0: y (above), 1: x (left of)
    lo = torch.stack([r[:, 0], half + r[:, 1]], dim=1)  # (n, 2)
    hi = torch.stack([half - r[:, 0], S - r[:, 1]], dim=1)  # (n, 2)
    along = lo + u[torch.arange(n), :, axis] * (hi - lo)  # (n, 2)
    # Across the axis both shapes share one line (±1 px), so only one relation describes them.
    margin = r.max(dim=1).values + 1.5  # (n,)
    common = margin + torch.rand(n, generator=g) * (S - 2 * margin)  # (n,)
    across = common[:, None] + 1.0 * (2 * torch.rand(n, 2, generator=g) - 1)  # (n, 2)
    rows = torch.nonzero(two).squeeze(1)
    centre[rows, :, axis[rows]] = along[rows]
    centre[rows, :, 1 - axis[rows]] = across[rows]
    pix = torch.arange(image_size, dtype=torch.float32) + 0.5  # (S,) pixel centres
    dy = (pix[None, None, :, None] - centre[:, :, 0, None, None]) / r[:, :, None, None]  # (n, 2, S, 1)
    dx = (pix[None, None, None, :] - centre[:, :, 1, None, None]) / r[:, :, None, None]  # (n, 2, 1, S)
    dy, dx = torch.broadcast_tensors(dy, dx)  # (n, 2, S, S)
    masks = _shape_masks(dx, dy)  # (n, 2, 3, S, S)
    pick = shape_ids.clamp(min=0)[:, :, None, None, None].expand(-1, -1, 1, image_size, image_size)
    mask = masks.gather(2, pick).squeeze(2) & (shape_ids >= 0)[:, :, None, None]  # (n, 2, S, S)
    colour = RGB[color_ids.clamp(min=0)]  # (n, 2, 3)
    images = torch.zeros(n, 3, image_size, image_size)
    for slot in range(2):  # two layers; the halves never overlap
        m = mask[:, slot, None]  # (n, 1, S, S)
        images = torch.where(m, colour[:, slot, :, None, None], images)
    images = (images + noise * torch.randn(images.shape, generator=g)).clamp(0.0, 1.0)
    tokens = _caption_tokens(shape_ids, color_ids, relation)
    lengths = (tokens != CAPTION_VOCAB.pad_id).sum(1)
    captions = [" ".join(CAPTION_VOCAB.decode(row)) for row in tokens]
    return ShapesBatch(images=images, tokens=tokens, lengths=lengths, captions=captions, shape_ids=shape_ids,
                       color_ids=color_ids, n_shapes=n_shapes, relation=relation)


def _caption_tokens(shape_ids: torch.Tensor, color_ids: torch.Tensor, relation: torch.Tensor) -> torch.Tensor:
    """Token ids ``(B, 10)``: ``<start> a c1 s1 [above | left of] a c2 s2 <end>``, padded."""
    v = CAPTION_VOCAB
    n = shape_ids.shape[0]
    hole = -1
    word = lambda w: torch.full((n,), v.stoi[w])
    colour_tok = torch.tensor([v.stoi[c] for c in COLORS])[color_ids.clamp(min=0)]  # (n, 2)
    shape_tok = torch.tensor([v.stoi[s] for s in SHAPES])[shape_ids.clamp(min=0)]  # (n, 2)
    two = relation >= 0
    rel1 = torch.where(relation == 0, v.stoi["above"], v.stoi["left"])
    rel2 = torch.where(relation == 1, v.stoi["of"], hole)
    cols = [
        torch.full((n,), v.start_id), word("a"), colour_tok[:, 0], shape_tok[:, 0],
        torch.where(two, rel1, v.end_id), torch.where(two, rel2, hole),
        torch.where(two, v.stoi["a"], hole), torch.where(two, colour_tok[:, 1], hole),
        torch.where(two, shape_tok[:, 1], hole), torch.where(two, v.end_id, hole),
    ]
    tokens = torch.stack(cols, dim=1)  # (n, 10) with holes
    order = torch.argsort((tokens == hole).int(), dim=1, stable=True)  # holes to the end
    return tokens.gather(1, order).masked_fill(tokens.gather(1, order) == hole, v.pad_id)
