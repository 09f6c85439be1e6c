"""Weights copied from PyTorch's own Transformer layers into the companion's, so that the two
can be compared number for number (the tests; chapter 7)::

    companion (models.blocks)          torch.nn
    EncoderLayer.self_attn             TransformerEncoderLayer.self_attn
    EncoderLayer.ffn.linear1, linear2  TransformerEncoderLayer.linear1, linear2
    EncoderLayer.norm1, norm2          TransformerEncoderLayer.norm1, norm2
    DecoderLayer.cross_attn            TransformerDecoderLayer.multihead_attn
    DecoderLayer.norm3                 TransformerDecoderLayer.norm3

Both layers must have the same sizes, the same ``norm_first`` and torch's must use ReLU:
otherwise the same weights would compute something else, and the copy is refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# This module knows the companion's layers only by their attributes (``self_attn``, ``ffn``,
# ``norm1`` …) and imports nothing of the course: models.blocks imports it, not the reverse.


def load_encoder_layer(ours: nn.Module, theirs: nn.TransformerEncoderLayer) -> nn.Module:
    """Copy the weights of ``theirs`` (a ``torch.nn.TransformerEncoderLayer``) into ``ours`` (a
    :class:`~companion.models.blocks.EncoderLayer`); returns ``ours``."""
    if not isinstance(theirs, nn.TransformerEncoderLayer):
        raise TypeError(f"layer must be a torch.nn.TransformerEncoderLayer, got {type(theirs).__name__}")
    _check_same_form(ours, theirs)
    ours.self_attn.load_from_torch(theirs.self_attn)
    _copy_ffn(ours, theirs)
    _copy_norm(ours.norm1, theirs.norm1)
    _copy_norm(ours.norm2, theirs.norm2)
    return ours


def load_decoder_layer(ours: nn.Module, theirs: nn.TransformerDecoderLayer) -> nn.Module:
    """Copy the weights of ``theirs`` (a ``torch.nn.TransformerDecoderLayer``) into ``ours`` (a
    :class:`~companion.models.blocks.DecoderLayer`); returns ``ours``."""
    if not isinstance(theirs, nn.TransformerDecoderLayer):
        raise TypeError(f"layer must be a torch.nn.TransformerDecoderLayer, got {type(theirs).__name__}")
    _check_same_form(ours, theirs)
    ours.self_attn.load_from_torch(theirs.self_attn)
    ours.cross_attn.load_from_torch(theirs.multihead_attn)
    _copy_ffn(ours, theirs)
    _copy_norm(ours.norm1, theirs.norm1)
    _copy_norm(ours.norm2, theirs.norm2)
    _copy_norm(ours.norm3, theirs.norm3)
    return ours


def _check_same_form(ours, theirs) -> None:
    if theirs.norm_first != ours.norm_first:
        raise ValueError(f"norm_first differs: this layer has norm_first={ours.norm_first}, torch's has "
                         f"norm_first={theirs.norm_first} (torch's layers default to False, the companion's to True); "
                         "build both with the same norm_first")
    if not (theirs.activation is F.relu or isinstance(theirs.activation, nn.ReLU)):
        raise ValueError(f"torch's layer uses the activation {theirs.activation!r}; the companion's FFN uses ReLU")
    if ours.ffn.activation != "relu":
        raise ValueError(f"this layer's FFN uses {ours.ffn.activation!r}; torch's layer uses ReLU")


def _copy_ffn(ours, theirs) -> None:
    for mine, their in ((ours.ffn.linear1, theirs.linear1), (ours.ffn.linear2, theirs.linear2)):
        if mine.weight.shape != their.weight.shape:
            raise ValueError(f"size mismatch: FFN weight {tuple(mine.weight.shape)} vs torch's {tuple(their.weight.shape)}")
        with torch.no_grad():
            mine.weight.copy_(their.weight)
            mine.bias.copy_(their.bias)


def _copy_norm(mine, theirs: nn.LayerNorm) -> None:
    with torch.no_grad():
        mine.weight.copy_(theirs.weight)
        mine.bias.copy_(theirs.bias)
    mine.eps = theirs.eps
