"""Training throughput of the course's models on the default device, with ratios
against models built from PyTorch's own modules of the same sizes, in the same run.

    python benchmarks/training.py            # default sizes (the chapters' CPU scale)
    python benchmarks/training.py --min-run-time 3 --batch 256

Each row times optimiser steps (forward, backward, Adam) with ``torch.utils.benchmark.Timer``
(``companion.profiling.time_call``: warm-up, device synchronisation, as many steps as fill
``--min-run-time`` seconds, the median per step) and reports examples/s and tokens/s (a
token: one input position). Ratio = the companion
model's throughput / the torch-built model's throughput (1.0 = as fast; > 1 faster).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import companion
from companion.models.cnn import SmallCNN
from companion.models.seq2seq import Seq2Seq
from companion.models.transformer import Transformer, TransformerConfig
from companion.models.vit import ViT, patchify
from companion.profiling import time_call


class TorchTransformer(nn.Module):
    """The same encoder-decoder from ``torch.nn.Transformer`` (pre-norm, batch first)."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.src_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.register_buffer("pe", companion.sinusoidal_encoding(c.max_len, c.d_model))
        self.core = nn.Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.d_ff,
                                   dropout=0.0, batch_first=True, norm_first=c.norm_first)
        self.generator = nn.Linear(c.d_model, c.vocab_size)
        self.scale = c.d_model ** 0.5

    def forward(self, src, tgt_in):
        s = self.src_embed(src) * self.scale + self.pe[: src.shape[1]]
        t = self.tgt_embed(tgt_in) * self.scale + self.pe[: tgt_in.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        return self.generator(self.core(s, t, tgt_mask=causal, tgt_is_causal=True))


class TorchViT(nn.Module):
    """The same mean-pooled ViT from ``torch.nn.TransformerEncoder``."""

    def __init__(self, image_size, patch_size, channels, classes, d_model, depth, heads, d_ff):
        super().__init__()
        self.p = patch_size
        self.embed = nn.Linear(patch_size * patch_size * channels, d_model)
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True, norm_first=True)
        # pre-norm: one more LayerNorm after the last layer, as the companion's Encoder
        self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, images):
        return self.head(self.encoder(self.embed(patchify(images, self.p)) + self.pos).mean(1))


def throughput(model, batch_fn, loss_fn, min_run_time, device):
    """Examples per second of full training steps (forward, backward, Adam) on one batch."""
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = batch_fn()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_fn(model, *batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return batch[0].shape[0] / time_call(step, device=device, min_run_time=min_run_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds of measurement per model (default 1)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=12, help="sequence length of the text tasks")
    args = parser.parse_args()
    device = companion.default_device()
    torch.manual_seed(0)
    B, N, V = args.batch, args.length, 24

    def seqs():
        src = torch.randint(3, V, (B, N), device=device)
        return src, torch.cat([torch.ones(B, 1, dtype=torch.long, device=device), src.flip(1)[:, :-1]], 1), src.flip(1)

    def seq_loss(model, src, tgt_in, tgt):
        out = model(src, tgt_in)
        logits = out[0] if isinstance(out, tuple) else out
        return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())

    def seq2seq_loss(model, src, tgt_in, tgt):
        logits, _ = model(src, torch.full((B,), N, device=device), tgt_in)
        return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())

    def images(size, channels):
        def make():
            return torch.randn(B, channels, size, size, device=device), torch.randint(0, 10, (B,), device=device)
        return make

    def cls_loss(model, x, y):
        return F.cross_entropy(model(x), y)

    cfg = TransformerConfig(vocab_size=V, d_model=64, num_heads=4, d_ff=128, num_encoder_layers=2,
                            num_decoder_layers=2, norm_first=True)
    vit_args = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, d_model=64, depth=2, num_heads=4, d_ff=128)
    t = args.min_run_time
    rows = [
        ("seq2seq GRU + dot attention", N, throughput(Seq2Seq(V, V, 32, 64, attention="dot"), seqs, seq2seq_loss,
                                                      t, device), None),
        ("Transformer 2+2 layers, d=64", N, throughput(Transformer(cfg), seqs, seq_loss, t, device),
         throughput(TorchTransformer(cfg), seqs, seq_loss, t, device)),
        ("ViT 8x8 digits, p=2, d=64", 16, throughput(ViT(**vit_args), images(8, 1), cls_loss, t, device),
         throughput(TorchViT(8, 2, 1, 10, 64, 2, 4, 128), images(8, 1), cls_loss, t, device)),
        ("CNN 8x8 digits", 64, throughput(SmallCNN(1, 10), images(8, 1), cls_loss, t, device), None),
    ]
    print(f"\nTraining throughput on {companion.describe_device(device)}, batch {B}, "
          f"{args.min_run_time:g} s of steps per model (torch.utils.benchmark.Timer)")
    print(f"{'model':<30} {'examples/s':>11} {'tokens/s':>10} {'torch-built ex/s':>17} {'ratio':>6}")
    for name, tokens, ours, ref in rows:
        ratio = f"{ours / ref:6.2f}" if ref else "     -"
        ref_s = f"{ref:17.0f}" if ref else f"{'-':>17}"
        print(f"{name:<30} {ours:11.0f} {ours * tokens:10.0f} {ref_s} {ratio}")


if __name__ == "__main__":
    main()
