"""Companion package of the course *Attention & Transformers*.

Each module holds one idea of the book:

- :mod:`companion.device`     where code runs (CUDA, MPS, CPU) and seeding
- :mod:`companion.attention`  scaled dot-product and additive attention (and their modules)
- :mod:`companion.masks`      causal and real-token masks (True = may attend), conversions to torch
- :mod:`companion.multihead`  multi-head attention in the lecture's four steps
- :mod:`companion.flash`      FlashAttention from first principles: the online softmax, tiled attention
- :mod:`companion.heads`      what each trained head does: entropy, peak offset, mass on a key
- :mod:`companion.kv_cache`   the size of a key/value cache by formula
- :mod:`companion.induction`  induction heads grown on purpose, and the tests that find them
- :mod:`companion.explorer`   an interactive, offline view of attention weights
- :mod:`companion.positional` sinusoidal and learned positional encodings, binary codes, overlap measures
- :mod:`companion.tokenizer`  characters and byte-level BPE trained from scratch
- :mod:`companion.dft`        the DFT matrix: attention seen from signal processing
- :mod:`companion.conv_as_attention` a convolution written as multi-head self-attention
- :mod:`companion.layer_comparison` recurrent, convolutional and self-attention layers compared
                              (Vaswani et al.'s Table 1: time and gradient path, measured)
- :mod:`companion.plotting`   attention heat maps and cost plots
- :mod:`companion.diagrams`   architecture diagrams whose shapes are recorded from a forward pass
- :mod:`companion.data`       seeded datasets: shapes+captions, dates, copy/reverse, coreference; vocabularies;
                              shipped data: digits, tiny Shakespeare
- :mod:`companion.models`     captioning CNN+RNN, seq2seq GRUs with and without attention,
                              the Transformer, the Vision Transformer, a small CNN, a GPT
- :mod:`companion.train`      one training loop, evaluation helpers
- :mod:`companion.decoding`   greedy decoding, beam search and sampling through a step function
- :mod:`companion.sampling`   temperature, top-k and top-p (nucleus) sampling from logits
- :mod:`companion.language_model` next-token windows, bits per character, loss by position
- :mod:`companion.profiling`  timing, memory and parameter counts
- :mod:`companion.progress`   progress bars that degrade quietly without ipywidgets
- :mod:`companion.checks`     checks that students call in the exercises
- :mod:`companion.variants`   per-student variants of the predict-then-check exercises
- :mod:`companion.distributed` attention across devices: heads (tensor parallel), sequence (ring
                              attention), batch (DDP); imported on its own (``import companion.distributed``)
"""

import warnings as _warnings

import torch as _torch

from . import (
    attention,
    checks,
    conv_as_attention,
    data,
    decoding,
    device,
    dft,
    diagrams,
    explorer,
    flash,
    heads,
    induction,
    kv_cache,
    language_model,
    layer_comparison,
    masks,
    models,
    multihead,
    plotting,
    positional,
    profiling,
    progress,
    sampling,
    tokenizer,
    train,
    variants,
)
from .attention import AdditiveAttention, attention_with_weights, fused_attention
from .device import default_device, describe_device, seed_everything
from .masks import causal_mask, real_token_mask
from .multihead import MultiHeadAttention
from .positional import sinusoidal_encoding

#: The oldest PyTorch the book runs on, installed and run for real (benchmarks/version_floor.py):
#: from 2.5, ``F.scaled_dot_product_attention`` returns 0 (not NaN) on fully masked rows (chapter 4);
#: under 2.5.1 chapter 7's FLOP count of cached decoding is 0 (``FlopCounterMode``), under 2.6 it runs.
MIN_TORCH = "2.6"
if _torch.__version__ < MIN_TORCH:  # TorchVersion compares as a version, not as a string
    _warnings.warn(
        f"the course needs torch>={MIN_TORCH}, found {_torch.__version__}: older versions return NaN "
        "where chapter 4 expects F.scaled_dot_product_attention to return 0 (fully masked rows), and "
        "count no FLOPs where chapter 7 measures the KV cache; "
        "upgrade with `pip install -U torch`",
        RuntimeWarning,
        stacklevel=2,
    )


__version__ = "0.1.0"

__all__ = [
    "attention", "checks", "conv_as_attention", "data", "decoding", "device", "dft", "diagrams", "explorer", "flash",
    "heads", "induction", "kv_cache", "language_model", "layer_comparison", "masks", "models", "multihead", "plotting",
    "positional", "profiling", "progress", "sampling", "tokenizer", "train", "variants",
    "AdditiveAttention", "MultiHeadAttention", "attention_with_weights", "causal_mask", "default_device",
    "describe_device", "fused_attention", "real_token_mask", "seed_everything", "sinusoidal_encoding",
]
