"""The course's diagrams, one function per model: each records one forward pass of the real
module (:func:`~companion.diagrams.record`) and lays its shapes out as a
:class:`~companion.diagrams.Diagram`.
"""

from __future__ import annotations

import torch
from torch import nn

from .drawing import Block, Diagram, Group, Link
from .recording import Recording, Shape, record

__all__ = ["captioner_diagram", "gpt_diagram", "multihead_diagram", "seq2seq_diagram", "transformer_diagram",
           "vit_diagram"]


def _symbolic(diagram_blocks, rec: Recording) -> list[Block]:
    """Fill in each block's recorded shape from its source."""
    out = []
    for spec in diagram_blocks:
        key, label, dims, source = spec[:4]
        opts = spec[4] if len(spec) > 4 else {}
        extras = tuple((lab, d, _read(rec, src), src) for lab, d, src in opts.pop("extras", ()))
        out.append(Block(key, label, dims, _read(rec, source), source, extras=extras, **opts))
    return out


def _read(rec: Recording, source: tuple) -> Shape:
    kind = source[0]
    if kind in ("output", "input"):
        _, path, index, call = source
        return getattr(rec, kind)(path, index, call)
    if kind == "op":
        _, path, name, nth, side, index = source
        return getattr(rec.op(path, name, nth), side + "s")[index]
    raise ValueError(f"unknown source {source!r}")


# --- the course's diagrams ---------------------------------------------------------------------

def transformer_diagram(model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor) -> Diagram:
    """The encoder-decoder :class:`~companion.models.transformer.Transformer` on ``src (B, N)`` and
    ``tgt_in (B, T)``: embeddings, one encoder and one decoder layer (each repeated L times),
    the memory feeding the cross-attention, the logits."""
    from ..models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    c = model.config
    rec = record(model, src, tgt_in, need_weights=True)
    B, N = src.shape
    sizes = dict(B=B, N=N, T=tgt_in.shape[1], d=c.d_model, H=c.num_heads, d_ff=c.d_ff, V=c.vocab_size)
    enc, dec = "encoder.layers.0.", "decoder.layers.0."
    specs = [
        ("src", "source tokens", "B, N", ("input", "", 0, 0), dict(kind="data")),
        ("src_embed", "embedding × √d + positions", "B, N, d", ("input", "encoder", 0, 0), dict(row=1)),
        ("enc_self", "multi-head self-attention", "B, N, d", ("output", enc + "self_attn", 0, 0),
         dict(row=2, extras=[("weights", "B, H, N, N", ("output", enc + "self_attn", 1, 0))])),
        ("enc_ffn", "feed-forward network", "B, N, d", ("output", enc + "ffn", 0, 0),
         dict(row=3, extras=[("hidden", "B, N, d_ff", ("output", enc + "ffn.linear1", 0, 0))])),
        ("memory", "encoder output: the memory", "B, N, d", ("output", "encoder", 0, 0), dict(row=4)),
        ("tgt", "target tokens, shifted right", "B, T", ("input", "", 1, 0), dict(column=1, kind="data")),
        ("tgt_embed", "embedding × √d + positions", "B, T, d", ("input", "decoder", 0, 0), dict(column=1, row=1)),
        ("dec_self", "masked multi-head self-attention", "B, T, d", ("output", dec + "self_attn", 0, 0),
         dict(column=1, row=2, extras=[("weights", "B, H, T, T", ("output", dec + "self_attn", 1, 0))])),
        ("cross", "cross-attention (queries: decoder)", "B, T, d", ("output", dec + "cross_attn", 0, 0),
         dict(column=1, row=4, extras=[("weights", "B, H, T, N", ("output", dec + "cross_attn", 1, 0))])),
        ("dec_ffn", "feed-forward network", "B, T, d", ("output", dec + "ffn", 0, 0), dict(column=1, row=5)),
        ("logits", "Linear d → V: logits", "B, T, V", ("output", "generator", 0, 0),
         dict(column=1, row=6, kind="data")),
    ]
    norm = "pre-norm" if c.norm_first else "post-norm"
    return Diagram(
        title=f"The Transformer ({norm}), shapes recorded from one forward pass",
        blocks=_symbolic(specs, rec), sizes=sizes, recording=rec, columns=["encoder", "decoder"],
        links=[Link("memory", "cross", "keys, values")],
        groups=[Group("enc_self", "enc_ffn", f"encoder layer × {c.num_encoder_layers}"),
                Group("dec_self", "dec_ffn", f"decoder layer × {c.num_decoder_layers}")])


def vit_diagram(model: nn.Module, images: torch.Tensor) -> Diagram:
    """The :class:`~companion.models.vit.ViT` on ``images (B, C, S, S)``: patches, patch
    embedding, positions, the encoder layer (repeated), pooling and the class scores."""
    from ..models.vit import ViT

    if not isinstance(model, ViT):
        raise TypeError(f"model must be a companion ViT, got {type(model).__name__}")
    rec = record(model, images, need_weights=True)
    p = model.patch_embed.patch_size
    layer = model.encoder.layers[0]
    sizes = dict(B=images.shape[0], C=model.patch_embed.in_channels, S=model.image_size, p=p,
                 N=model.num_patches, d=model.head.in_features, H=layer.self_attn.num_heads,
                 d_ff=layer.ffn.linear1.out_features, K=model.head.out_features)
    cls = model.pool == "cls"
    tokens = "N + 1" if cls else "N"
    enc = "encoder.layers.0."
    specs = [
        ("image", "images", "B, C, S, S", ("input", "", 0, 0), dict(kind="data")),
        ("patches", "patchify: N = (S/p)² patches", "B, N, p*p*C", ("input", "patch_embed.proj", 0, 0), dict(row=1)),
        ("embed", "patch embedding: Linear p·p·C → d", "B, N, d", ("output", "patch_embed", 0, 0), dict(row=2)),
        ("tokens", ("[class] token + positions" if cls else "+ learned positions"), f"B, {tokens}, d",
         ("input", "encoder", 0, 0), dict(row=3)),
        ("self_attn", "multi-head self-attention", f"B, {tokens}, d", ("output", enc + "self_attn", 0, 0),
         dict(column=1, row=3, extras=[("weights", f"B, H, {tokens}, {tokens}", ("output", enc + "self_attn", 1, 0))])),
        ("ffn", "feed-forward network", f"B, {tokens}, d", ("output", enc + "ffn", 0, 0),
         dict(column=1, row=4, extras=[("hidden", f"B, {tokens}, d_ff", ("output", enc + "ffn.linear1", 0, 0))])),
        ("features", "encoder output (final LayerNorm)", f"B, {tokens}, d", ("output", "encoder", 0, 0),
         dict(column=1, row=5)),
        ("pooled", "[class] token's output" if cls else "mean over the N tokens", "B, d", ("input", "head", 0, 0),
         dict(column=1, row=6)),
        ("logits", "Linear d → K classes: logits", "B, K", ("output", "head", 0, 0),
         dict(column=1, row=7, kind="data")),
    ]
    return Diagram(
        title="The Vision Transformer, shapes recorded from one forward pass",
        blocks=_symbolic(specs, rec), sizes=sizes, recording=rec,
        columns=["image → tokens", "Transformer encoder → class scores"],
        links=[Link("tokens", "self_attn", "tokens")],
        groups=[Group("self_attn", "ffn", f"encoder layer × {len(model.encoder.layers)}")])


def multihead_diagram(mha: nn.Module, x: torch.Tensor) -> Diagram:
    """:class:`~companion.multihead.MultiHeadAttention` as self-attention on ``x (B, N, D)``,
    in the four steps of chapter 5 (the explicit path, which keeps the weights)."""
    from ..multihead import MultiHeadAttention

    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a companion MultiHeadAttention, got {type(mha).__name__}")
    rec = record(mha, x, need_weights=True)
    sizes = dict(B=x.shape[0], N=x.shape[1], D=mha.d_model, H=mha.num_heads, D_H=mha.head_dim)
    specs = [
        ("x", "input tokens x", "B, N, D", ("input", "", 0, 0), dict(column=1, kind="data")),
        ("qkv", "step 1: QKV projection", "B, N, 3*D", ("output", "in_proj", 0, 0), dict(column=1, row=1)),
        ("q", "Q, split into H heads", "B, H, N, D_H", ("op", "", "matmul", 0, "input", 0), dict(row=2)),
        ("k", "K, split into H heads", "B, H, N, D_H", ("op", "", "transpose", 0, "input", 0),
         dict(column=1, row=2)),
        ("v", "V, split into H heads", "B, H, N, D_H", ("op", "", "matmul", 1, "input", 1), dict(column=2, row=2)),
        ("weights", "step 2: softmax($QK^T/\\sqrt{D_H}$)", "B, H, N, N", ("op", "", "softmax", 0, "output", 0),
         dict(column=1, row=3)),
        ("heads", "step 3: weights × V", "B, H, N, D_H", ("op", "", "matmul", 1, "output", 0),
         dict(column=1, row=4)),
        ("concat", "concatenate the heads", "B, N, H*D_H", ("input", "out_proj", 0, 0), dict(column=1, row=5)),
        ("out", "step 4: output projection", "B, N, D", ("output", "", 0, 0), dict(column=1, row=6, kind="data")),
    ]
    links = [Link("qkv", "q"), Link("qkv", "v"), Link("q", "weights"), Link("v", "heads")]
    return Diagram(title="Multi-head attention, shapes recorded from one forward pass",
                   blocks=_symbolic(specs, rec), sizes=sizes, recording=rec, links=links)


def seq2seq_diagram(model: nn.Module, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> Diagram:
    """The GRU :class:`~companion.models.seq2seq.Seq2Seq` on ``src (B, N)``, ``src_lengths (B,)``
    and ``tgt_in (B, T)``: the encoder, one decoder step (run T times) and, with attention,
    the context it reads from every encoder state."""
    from ..models.seq2seq import Seq2Seq

    if not isinstance(model, Seq2Seq):
        raise TypeError(f"model must be a companion Seq2Seq, got {type(model).__name__}")
    rec = record(model, src, src_lengths, tgt_in)
    hidden = model.encoder.hidden_size
    sizes = dict(B=src.shape[0], N=src.shape[1], T=tgt_in.shape[1], E=model.src_embed.embedding_dim,
                 h=hidden, V=model.tgt_vocab)
    specs = [
        ("src", "source tokens", "B, N", ("input", "", 0, 0), dict(kind="data")),
        ("src_embed", "embedding", "B, N, E", ("output", "src_embed", 0, 0), dict(row=1)),
        ("states", "GRU encoder: states $h_1 \\dots h_N$", "B, N, h", ("output", "encoder", 0, 0), dict(row=2)),
        ("tgt", "target tokens, shifted right", "B, T", ("input", "", 2, 0), dict(column=2, kind="data")),
        ("prev", "token $y_{t-1}$", "B", ("input", "tgt_embed", 0, 0), dict(column=2, row=1)),
        ("tgt_embed", "embedding", "B, E", ("output", "tgt_embed", 0, 0), dict(column=2, row=2)),
        ("cell_in", "[embedding; context $c_t$]", "B, E + h", ("input", "cell", 0, 0), dict(column=2, row=3)),
        ("cell", "GRU cell: state $s_t$", "B, h", ("output", "cell", 0, 0), dict(column=2, row=4)),
        ("step_logits", "Linear $[s_t; c_t]$ → V", "B, V", ("output", "out", 0, 0), dict(column=2, row=5)),
        ("logits", "logits of the T steps", "B, T, V", ("output", "", 0, 0), dict(column=2, row=6, kind="data")),
    ]
    links = []
    kind = model.attention_kind
    if kind is not None:
        specs.append(("attention", f"{'additive' if kind == 'additive' else 'dot-product'} attention: context $c_t$",
                      "B, h", ("output", "attend", 0, 0),
                      dict(column=1, row=3, extras=[("weights", "B, N", ("output", "attend", 1, 0))])))
        links += [Link("states", "attention", "keys, values"), Link("attention", "cell_in", "$c_t$"),
                  Link("cell", "attention", "query $s_{t-1}$", dashed=True)]
        title = f"Seq2seq with {'additive' if kind == 'additive' else 'dot-product'} attention"
    else:
        links.append(Link("states", "cell_in", "$c = h_N$ at every step"))
        title = "Seq2seq without attention (the bottleneck)"
    return Diagram(title=title + ", shapes recorded from one forward pass", blocks=_symbolic(specs, rec),
                   sizes=sizes, recording=rec, columns=["encoder", "attention" if kind else "", "decoder, one step"],
                   links=links, groups=[Group("prev", "step_logits", "each of the T steps")])


class _EncoderThenCaptioner(nn.Module):
    """``captioner(encoder(images), tokens_in)``: a captioner built with ``encoder=None``
    (image codes computed once) drawn together with its CNN. No parameters of its own."""

    def __init__(self, encoder: nn.Module, captioner: nn.Module):
        super().__init__()
        self.encoder, self.captioner = encoder, captioner

    def forward(self, images, tokens_in):
        return self.captioner(self.encoder(images), tokens_in)


def captioner_diagram(model: nn.Module, images: torch.Tensor, tokens_in: torch.Tensor,
                      encoder: nn.Module | None = None) -> Diagram:
    """The :class:`~companion.models.captioning.ImageCaptioner` on ``images (B, 3, S, S)`` and
    ``tokens_in (B, T)``: the truncated CNN, the image code's bias ``b_v``, one step of
    the recurrent decoder (run T times) and the logits. A captioner built with
    ``encoder=None`` is drawn with the ``encoder`` given here (e.g. ``cnn.truncate()``)."""
    from ..models.captioning import ImageCaptioner

    if not isinstance(model, ImageCaptioner):
        raise TypeError(f"model must be a companion ImageCaptioner, got {type(model).__name__}")
    if model.encoder is None and encoder is None:
        raise ValueError("this captioner reads image codes (encoder=None): pass the CNN as encoder=")
    if model.encoder is not None:
        encoder, whole, cap = model.encoder, model, ""
    else:
        whole, cap = _EncoderThenCaptioner(encoder, model), "captioner."
    rec = record(whole, images, tokens_in)
    sizes = dict(B=images.shape[0], S=images.shape[-1], F=model.feature_dim, h=model.hidden_dim,
                 E=model.embed.embedding_dim, V=model.vocab_size, T=tokens_in.shape[1])
    specs = [("image", "images", "B, 3, S, S", ("input", "", 0, 0), dict(kind="data"))]
    pools = [name for name, m in encoder.named_modules() if isinstance(m, nn.MaxPool2d)]
    convs = [m for m in encoder.modules() if isinstance(m, nn.Conv2d)]
    if len(pools) == 3 and len(convs) == 3:  # ShapesCNN(...).truncate(): three conv blocks
        sizes["w"] = convs[0].out_channels
        for k, (name, dims) in enumerate(zip(pools, ["B, w, S//2, S//2", "B, 2*w, S//4, S//4",
                                                     "B, 4*w, S//8, S//8"], strict=True)):
            specs.append((f"conv{k + 1}", f"conv block {k + 1} (conv, BN, ReLU, pool)", dims,
                          ("output", "encoder." + name, 0, 0), dict(row=k + 1)))
        row = 4
    else:
        row = 1
    specs += [
        ("code", "image code CNN(I)", "B, F", ("output", "encoder", 0, 0), dict(row=row)),
        ("b_v", "$b_v = W_{hi}\\,$CNN(I)", "B, h", ("output", cap + "W_hi", 0, 0), dict(row=row + 1)),
        ("tokens", "caption tokens, shifted right", "B, T", ("input", "", 1, 0), dict(column=1, kind="data")),
        ("prev", "token $y_{t-1}$", "B", ("input", cap + "embed", 0, 0), dict(column=1, row=row - 2)),
        ("embed", "embedding", "B, E", ("output", cap + "embed", 0, 0), dict(column=1, row=row - 1)),
        ("cell", f"{model.cell_kind.upper()} cell: state $h_t$", "B, h", ("output", cap + "cell", 0, 0),
         dict(column=1, row=row + 1)),
        ("step_logits", "$W_{hy} h_t$: scores of the next word", "B, V", ("output", cap + "W_hy", 0, 0),
         dict(column=1, row=row + 2)),
        ("logits", "logits of the T steps", "B, T, V", ("output", "", 0, 0),
         dict(column=1, row=row + 3, kind="data")),
    ]
    how = "added at $t = 1$ only" if model.cell_kind == "rnn" else "$h_0 = \\tanh(b_v)$"
    return Diagram(title=f"Image captioner (CNN + {model.cell_kind.upper()}), shapes recorded from one forward pass",
                   blocks=_symbolic(specs, rec), sizes=sizes, recording=rec,
                   columns=["image encoder (CNN)", "decoder, one step"],
                   links=[Link("b_v", "cell", how)], groups=[Group("prev", "step_logits", "each of the T steps")])


def gpt_diagram(model: nn.Module, ids: torch.Tensor) -> Diagram:
    """The decoder-only :class:`~companion.models.gpt.GPT` on ``ids (B, T)``: the token
    embedding and positions, one pre-norm block under the causal mask (repeated L times), the
    final LayerNorm and the head tied to the embedding."""
    from ..models.gpt import GPT

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a companion GPT, got {type(model).__name__}")
    c = model.config
    rec = record(model, ids, need_weights=True)
    B, T = ids.shape
    sizes = dict(B=B, T=T, d=c.d_model, H=c.num_heads, d_ff=c.ffn_size, V=c.vocab_size)
    block = "layers.0."
    specs = [
        ("ids", "token ids", "B, T", ("input", "", 0, 0), dict(kind="data")),
        ("embed", "token embedding $E$", "B, T, d", ("output", "token_embed", 0, 0), dict(row=1)),
    ]
    row = 2
    if model.pos is not None:
        specs.append(("pos", f"+ {c.positions} positions", "B, T, d", ("output", "pos", 0, 0), dict(row=row)))
        row += 1
    specs += [
        ("attn", "masked multi-head self-attention", "B, T, d", ("output", block + "self_attn", 0, 0),
         dict(row=row, extras=[("weights", "B, H, T, T", ("output", block + "self_attn", 1, 0))])),
        ("ffn", "feed-forward network", "B, T, d", ("output", block + "ffn", 0, 0),
         dict(row=row + 1, extras=[("hidden", "B, T, d_ff", ("output", block + "ffn.linear1", 0, 0))])),
        ("norm", "final LayerNorm", "B, T, d", ("output", "norm", 0, 0), dict(row=row + 2)),
        ("logits", "head $h E^T$: logits" if c.tie_weights else "Linear d → V: logits", "B, T, V",
         ("output", "head", 0, 0), dict(row=row + 3, kind="data")),
    ]
    tied = ", tied head" if c.tie_weights else ""
    return Diagram(
        title=f"The GPT (decoder only, pre-norm{tied}),\nshapes recorded from one forward pass",
        blocks=_symbolic(specs, rec), sizes=sizes, recording=rec,
        groups=[Group("attn", "ffn", f"block × {c.num_layers}, causal mask")])
