"""Models of the course, one module per chapter's architecture.

- :mod:`companion.models.captioning`  truncated CNN + RNN captioner (chapter 1)
- :mod:`companion.models.seq2seq`     GRU encoder-decoder, with and without attention (chapter 2)
- :mod:`companion.models.transformer` the encoder–decoder Transformer (chapter 7)
- :mod:`companion.models.vit`         the Vision Transformer (chapter 8)
- :mod:`companion.models.cnn`         a small CNN to compare it with (chapter 8)
- :mod:`companion.models.transformer_captioner` patch encoder + Transformer decoder (chapter 9)
"""

from . import captioning, cnn, seq2seq, transformer, transformer_captioner, vit
from .captioning import ImageCaptioner, ShapesCNN, VanillaRNNCell
from .cnn import SmallCNN, count_parameters
from .seq2seq import DotProductAttention, Seq2Seq
from .transformer import DecoderLayer, EncoderLayer, Transformer, TransformerConfig
from .transformer_captioner import CaptionerConfig, TransformerCaptioner
from .vit import ViT, patchify, unpatchify

__all__ = ["captioning", "cnn", "seq2seq", "transformer", "transformer_captioner", "vit", "CaptionerConfig",
           "DecoderLayer", "DotProductAttention",
           "EncoderLayer", "ImageCaptioner", "Seq2Seq", "ShapesCNN", "SmallCNN", "Transformer", "TransformerConfig",
           "TransformerCaptioner", "VanillaRNNCell", "ViT", "count_parameters", "patchify", "unpatchify"]
