"""Models of the course, one module per chapter's architecture.

- :mod:`companion.models.captioning`  truncated CNN + RNN captioner (chapter 1)
- :mod:`companion.models.seq2seq`     GRU encoder-decoder, with and without attention (chapter 2)
- :mod:`companion.models.blocks`      LayerNorm, FFN, encoder and decoder layers (chapter 7)
- :mod:`companion.models.transformer` the encoder and decoder stacks, the Transformer (chapter 7)
- :mod:`companion.models.torch_weights` weights copied from torch's Transformer layers
- :mod:`companion.models.vit`         the Vision Transformer (chapter 8)
- :mod:`companion.models.cnn`         a small CNN to compare it with (chapter 8)
- :mod:`companion.models.transformer_captioner` patch encoder + Transformer decoder (chapter 9)
- :mod:`companion.models.gpt`         the decoder alone: a GPT language model (chapter 10)
"""

from . import blocks, captioning, cnn, gpt, seq2seq, torch_weights, transformer, transformer_captioner, vit
from .blocks import DecoderLayer, EncoderLayer
from .captioning import ImageCaptioner, ShapesCNN, VanillaRNNCell
from .cnn import SmallCNN
from .gpt import GPT, GPTConfig
from .seq2seq import DotProductAttention, Seq2Seq
from .transformer import Transformer, TransformerConfig
from .transformer_captioner import CaptionerConfig, TransformerCaptioner
from .vit import ViT, patchify, unpatchify

__all__ = ["blocks", "captioning", "cnn", "gpt", "seq2seq", "torch_weights", "transformer", "transformer_captioner", "vit", "CaptionerConfig",
           "DecoderLayer", "DotProductAttention",
           "EncoderLayer", "GPT", "GPTConfig", "ImageCaptioner", "Seq2Seq", "ShapesCNN", "SmallCNN", "Transformer", "TransformerConfig",
           "TransformerCaptioner", "VanillaRNNCell", "ViT", "patchify", "unpatchify"]
