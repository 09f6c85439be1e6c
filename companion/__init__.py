"""Companion package of the course *Attention & Transformers*.

Each module holds one idea of the book:

- :mod:`companion.device`     where code runs (CUDA, MPS, CPU) and seeding
- :mod:`companion.attention`  scaled dot-product and additive attention (and their modules)
- :mod:`companion.masks`      causal and padding masks (True = may attend)
- :mod:`companion.multihead`  multi-head attention in the lecture's four steps
- :mod:`companion.heads`      what each trained head does: entropy, peak offset, mass on a key
- :mod:`companion.positional` sinusoidal positional encodings, binary codes, overlap measures
- :mod:`companion.selfattention` the DFT matrix and a convolution written as self-attention
- :mod:`companion.plotting`   attention heat maps and cost plots
- :mod:`companion.data`       seeded datasets: shapes+captions, dates, copy/reverse, coreference; vocabularies
- :mod:`companion.models`     captioning CNN+RNN, seq2seq GRUs with and without attention,
                              the Transformer, the Vision Transformer, a small CNN
- :mod:`companion.train`      one training loop, evaluation helpers
- :mod:`companion.decoding`   greedy decoding and beam search through a step function
- :mod:`companion.profiling`  timing and memory measurements
- :mod:`companion.progress`   progress bars that degrade quietly without ipywidgets
- :mod:`companion.checks`     checks that students call in the exercises
"""

import warnings as _warnings

import torch as _torch

from . import (
    attention,
    checks,
    data,
    decoding,
    device,
    heads,
    masks,
    models,
    multihead,
    plotting,
    positional,
    profiling,
    progress,
    selfattention,
    train,
)
from .attention import AdditiveAttention, fused_attention, scaled_dot_product_attention
from .device import default_device, describe_device, seed_everything
from .masks import causal_mask, padding_mask
from .multihead import MultiHeadAttention
from .positional import sinusoidal_encoding

#: The oldest PyTorch whose behaviour the book relies on: from 2.5,
#: ``F.scaled_dot_product_attention`` returns 0 (not NaN) on fully masked rows (chapter 4).
MIN_TORCH = "2.5"
if _torch.__version__ < MIN_TORCH:  # TorchVersion compares as a version, not as a string
    _warnings.warn(
        f"the course needs torch>={MIN_TORCH}, found {_torch.__version__}: older versions return NaN "
        "where chapter 4 expects F.scaled_dot_product_attention to return 0 (fully masked rows); "
        "upgrade with `pip install -U torch`",
        RuntimeWarning,
        stacklevel=2,
    )


__version__ = "0.1.0"

__all__ = [
    "attention", "checks", "data", "decoding", "device", "heads", "masks", "models", "multihead", "plotting", "positional",
    "profiling", "progress", "selfattention", "train",
    "AdditiveAttention", "MultiHeadAttention", "causal_mask", "default_device",
    "describe_device", "fused_attention", "padding_mask", "scaled_dot_product_attention",
    "seed_everything", "sinusoidal_encoding",
]
