"""Models of the course, one module per chapter's architecture.

- :mod:`companion.models.transformer` the encoder–decoder Transformer (chapter 7)
- :mod:`companion.models.vit`         the Vision Transformer (chapter 8)
- :mod:`companion.models.cnn`         a small CNN to compare it with (chapter 8)
"""

from . import cnn, transformer, vit
from .cnn import SmallCNN, count_parameters
from .transformer import DecoderLayer, EncoderLayer, Transformer, TransformerConfig
from .vit import ViT, patchify, unpatchify

__all__ = ["cnn", "transformer", "vit", "DecoderLayer", "EncoderLayer", "SmallCNN", "Transformer",
           "TransformerConfig", "ViT", "count_parameters", "patchify", "unpatchify"]
