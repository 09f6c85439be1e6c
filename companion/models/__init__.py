"""Models of the course, one module per chapter's architecture.

- :mod:`companion.models.captioning` truncated CNN + RNN captioner (chapter 1)
- :mod:`companion.models.seq2seq`    GRU encoder-decoder, with and without attention (chapter 2)
"""

from . import captioning, seq2seq
from .captioning import ImageCaptioner, ShapesCNN, VanillaRNNCell
from .seq2seq import DotProductAttention, Seq2Seq

__all__ = ["captioning", "seq2seq", "DotProductAttention", "ImageCaptioner", "Seq2Seq", "ShapesCNN",
           "VanillaRNNCell"]
