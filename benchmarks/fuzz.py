"""Fuzz the companion's public API with careless input and sort what comes back.

Not a test: a benchmark run that prints a table. Each case calls one public name with
bad (or borderline) input and says what the right outcome is: an error, or a value that
an oracle checks. What happened is sorted into four kinds:

- clear error:    a ``ValueError``/``TypeError`` (``AssertionError`` from the student checks)
                  raised by a ``raise`` statement of the companion: the message names the argument;
- right answer:   the call returned, and the case's oracle accepts the value;
- silently wrong: the call returned although the input is bad, or the oracle rejects the value
                  (the worst outcome);
- deep error:     any other exception (from inside torch, NumPy or Python: ``RuntimeError``,
                  ``IndexError``, ``ZeroDivisionError``, a ``TypeError`` not raised by us, ...).

Run: ``python benchmarks/fuzz.py`` (add ``-v`` to list every case that is not a clear
error or a right answer). Needs only the CPU; takes a few seconds.
"""

from __future__ import annotations

import argparse
import linecache
import math
import os
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import companion
from companion import attention, checks, conv_as_attention, data, decoding, device, dft, masks, models, multihead, positional
from companion import train as train_mod
from companion.models import blocks
from companion.models import transformer as tfm
from companion.models import vit as vit_mod

COMPANION_DIR = os.path.dirname(os.path.abspath(companion.__file__))
ERROR = "error"  # the input is bad: the only right outcome is a clear error

CLEAR, RIGHT, SILENT, DEEP = "clear error", "right answer", "silently wrong", "deep error"
REFUSED = "good input refused"


@dataclass
class Either:
    """A clear error, or a value the oracle accepts: both are honest outcomes."""
    oracle: Callable[[Any], bool]


@dataclass
class Case:
    name: str
    call: Callable[[], Any]
    expect: Any = ERROR  # ERROR, or an oracle: value -> bool


CASES: list[Case] = []


def case(name: str, call: Callable[[], Any], expect: Any = ERROR) -> None:
    CASES.append(Case(name, call, expect))


def raised_by_companion(exc: BaseException) -> bool:
    """Did a ``raise`` statement in the companion raise ``exc`` (not torch, not Python itself)?"""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    filename = os.path.abspath(last.tb_frame.f_code.co_filename)
    if not filename.startswith(COMPANION_DIR):
        return False
    line = linecache.getline(filename, last.tb_lineno).strip()
    return line.startswith("raise ")


def classify(c: Case) -> tuple[str, str]:
    torch.manual_seed(0)
    try:
        value = c.call()
    except (ValueError, TypeError, AssertionError) as exc:
        if raised_by_companion(exc):
            return CLEAR, f"{type(exc).__name__}: {exc}"
        return DEEP, f"{type(exc).__name__}: {exc}".splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - sorting every failure is the point
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return DEEP, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} ({where.filename}:{where.lineno})"
    if c.expect is ERROR:
        return SILENT, f"returned {short(value)} for bad input"
    oracle = c.expect.oracle if isinstance(c.expect, Either) else c.expect
    try:
        ok = bool(oracle(value))
    except Exception as exc:  # noqa: BLE001
        ok, value = False, f"oracle failed: {exc!r}"
    return (RIGHT, "") if ok else (SILENT, f"wrong value {short(value)}")


def short(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {value.dtype}"
    text = repr(value)
    return text[:80]


# ---------------------------------------------------------------------------------------
# The cases. Small shapes; everything on the CPU.
# ---------------------------------------------------------------------------------------
nan, inf = float("nan"), float("inf")
q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 4)
bool_mask = torch.ones(5, 7, dtype=torch.bool)


def finite(t) -> bool:
    return isinstance(t, torch.Tensor) and bool(torch.isfinite(t).all())


# attention ------------------------------------------------------------------------------
for fn_name, fn in (("attention_with_weights", attention.attention_with_weights),
                    ("fused_attention", attention.fused_attention)):
    case(f"{fn_name}: head size 0", lambda fn=fn: fn(torch.randn(2, 5, 0), torch.randn(2, 7, 0), v))
    case(f"{fn_name}: no keys (N_k = 0)", lambda fn=fn: fn(q, torch.randn(2, 0, 8), torch.randn(2, 0, 4)))
    case(f"{fn_name}: no queries (N_q = 0)", lambda fn=fn: fn(torch.randn(2, 0, 8), k, v),
         lambda r: (r[0] if isinstance(r, tuple) else r).shape == (2, 0, 4))
    case(f"{fn_name}: q is None", lambda fn=fn: fn(None, k, v))
    case(f"{fn_name}: q is a list", lambda fn=fn: fn(q.tolist(), k, v))
    case(f"{fn_name}: q is a str", lambda fn=fn: fn("q", k, v))
    case(f"{fn_name}: q float64, k/v float32", lambda fn=fn: fn(q.double(), k, v))
    case(f"{fn_name}: q complex", lambda fn=fn: fn(q.to(torch.complex64), k, v))
    case(f"{fn_name}: q 1-D", lambda fn=fn: fn(torch.randn(8), k, v))
    case(f"{fn_name}: q/k last dims differ", lambda fn=fn: fn(q, torch.randn(2, 7, 6), v))
    case(f"{fn_name}: k/v lengths differ", lambda fn=fn: fn(q, k, torch.randn(2, 6, 4)))
    case(f"{fn_name}: batches do not broadcast", lambda fn=fn: fn(q, torch.randn(3, 7, 8), torch.randn(3, 7, 4)))
    case(f"{fn_name}: float 0/1 mask", lambda fn=fn: fn(q, k, v, bool_mask.float()))
    case(f"{fn_name}: mask transposed", lambda fn=fn: fn(q, k, v, bool_mask.T))
    case(f"{fn_name}: mask is a list", lambda fn=fn: fn(q, k, v, bool_mask.tolist()))
    case(f"{fn_name}: fully masked row -> 0", lambda fn=fn: fn(q, k, v, torch.zeros(5, 7, dtype=torch.bool)),
         lambda r: (r[0] if isinstance(r, tuple) else r).abs().max() == 0)
    case(f"{fn_name}: NaN in q propagates", lambda fn=fn: fn(torch.full((1, 2, 8), nan), k[:1], v[:1]),
         lambda r: bool(torch.isnan(r[0] if isinstance(r, tuple) else r).all()))
for p in (-0.1, 1.0, nan, "0.1"):
    case(f"fused_attention: dropout_p={p!r}", lambda p=p: attention.fused_attention(q, k, v, dropout_p=p))

add = attention.AdditiveAttention(4, 6, 5)
case("AdditiveAttention: hidden_dim=0", lambda: attention.AdditiveAttention(4, 6, 0))
case("AdditiveAttention: query_dim=1.5", lambda: attention.AdditiveAttention(1.5, 6, 5))
case("AdditiveAttention: query None", lambda: add(None, torch.randn(2, 7, 6)))
case("AdditiveAttention: keys a list", lambda: add(torch.randn(2, 4), torch.randn(2, 7, 6).tolist()))
case("AdditiveAttention: query float64", lambda: add(torch.randn(2, 4).double(), torch.randn(2, 7, 6).double()))
case("AdditiveAttention: query int", lambda: add(torch.ones(2, 4, dtype=torch.long), torch.randn(2, 7, 6)))
case("AdditiveAttention: no keys", lambda: add(torch.randn(2, 4), torch.randn(2, 0, 6)))
case("AdditiveAttention: float mask", lambda: add(torch.randn(2, 4), torch.randn(2, 7, 6), mask=torch.ones(2, 7)))
case("AdditiveAttention: mask of wrong length", lambda: add(torch.randn(2, 4), torch.randn(2, 7, 6),
                                                             mask=torch.ones(2, 6, dtype=torch.bool)))
case("AdditiveAttention: keys of wrong width", lambda: add(torch.randn(2, 4), torch.randn(2, 7, 5)))
case("AdditiveAttention: batch mismatch", lambda: add(torch.randn(3, 4), torch.randn(2, 7, 6)))
case("AdditiveAttention: blocked keys get 0", lambda: add(torch.randn(2, 4), torch.randn(2, 7, 6),
                                                           mask=torch.arange(7)[None].expand(2, 7) < 3),
     lambda r: r[1][:, 3:].abs().max() == 0 and torch.allclose(r[1].sum(-1), torch.ones(2)))

# masks ----------------------------------------------------------------------------------
for n in (0, -1, 1.5, "3", True, None):
    case(f"causal_mask({n!r})", lambda n=n: masks.causal_mask(n))
case("causal_mask(3)", lambda: masks.causal_mask(3), lambda m: torch.equal(m, torch.ones(3, 3).tril().bool()))
for lengths, max_len in (([], None), ([3, -1], None), ([1.5], None), ([[1]], None), ("abc", None), (None, None),
                         ([3], 2), ([3], 0), ([True, False], None), (torch.tensor([2.0]), None)):
    case(f"real_token_mask({lengths!r}, max_len={max_len})", lambda a=lengths, m=max_len: masks.real_token_mask(a, m))
case("real_token_mask([0, 2])", lambda: masks.real_token_mask([0, 2]),
     lambda m: torch.equal(m, torch.tensor([[False, False], [True, True]])))
case("real_key_mask(list)", lambda: masks.real_key_mask([[True]]))
case("real_key_mask(3-D)", lambda: masks.real_key_mask(torch.ones(2, 3, 4, dtype=torch.bool)))
case("real_key_mask(float padding)", lambda: masks.real_key_mask(torch.ones(2, 3)))
case("real_key_mask(lengths instead of a mask)", lambda: masks.real_key_mask(torch.tensor([[3, 2]])))
case("to_torch_attn_mask(float)", lambda: masks.to_torch_attn_mask(torch.ones(2, 2)))
case("to_key_padding_mask(None)", lambda: masks.to_key_padding_mask(None))
for dt in (torch.bool, torch.long, "float32", torch.complex64):
    case(f"to_additive(dtype={dt})", lambda dt=dt: masks.to_additive(masks.causal_mask(3), dtype=dt))
case("to_additive(float64)", lambda: masks.to_additive(masks.causal_mask(3), dtype=torch.float64),
     lambda a: a.dtype == torch.float64 and torch.equal(torch.isfinite(a), masks.causal_mask(3)))
case("to_additive(float mask)", lambda: masks.to_additive(torch.ones(3, 3)))
case("from_additive(NaN)", lambda: masks.from_additive(torch.tensor([[0.0, nan]])))
case("from_additive(+inf)", lambda: masks.from_additive(torch.tensor([[0.0, inf]])))
case("from_additive(bool)", lambda: masks.from_additive(masks.causal_mask(3)))
case("from_additive(0/-inf)", lambda: masks.from_additive(torch.tensor([[0.0, -inf]])),
     lambda m: torch.equal(m, torch.tensor([[True, False]])))
for args in ((5, -1), (0, 1), (5, 1.5), (5, None), ("5", 1)):
    case(f"local_window_mask{args!r}", lambda a=args: masks.local_window_mask(*a))
for args in ((0, 3, 1), (3, 3, -1), (3, 3, 0.5), (3, None, 1)):
    case(f"local_window_mask_2d{args!r}", lambda a=args: masks.local_window_mask_2d(*a))
case("local_window_mask_2d(2, 2, 0)", lambda: masks.local_window_mask_2d(2, 2, 0),
     lambda m: torch.equal(m, torch.eye(4, dtype=torch.bool)))
case("graph_mask(NaN adjacency)", lambda: masks.graph_mask(torch.tensor([[0.0, nan], [1.0, 0.0]])))
case("graph_mask(non-square)", lambda: masks.graph_mask(torch.ones(2, 3)))
case("graph_mask(ragged list)", lambda: masks.graph_mask([[1, 0], [1]]))
case("graph_mask(complex)", lambda: masks.graph_mask(torch.ones(2, 2, dtype=torch.complex64)))
case("graph_mask(str)", lambda: masks.graph_mask("ab"))
case("graph_mask(None)", lambda: masks.graph_mask(None))
case("graph_mask(3-D)", lambda: masks.graph_mask(torch.ones(2, 2, 2)))
case("graph_mask(self_loops='no')", lambda: masks.graph_mask(torch.zeros(2, 2), self_loops="no"))
case("graph_mask(weights)", lambda: masks.graph_mask([[0, 0.5], [0, 0]], self_loops=False),
     lambda m: torch.equal(m, torch.tensor([[False, True], [False, False]])))

# multihead ------------------------------------------------------------------------------
for args, kw in (((0, 1), {}), ((8, 3), {}), ((8, 0), {}), ((8, 2), {"dropout": 1.0}), ((8, 2), {"dropout": nan}),
                 ((8, 2), {"dropout": "0.1"}), ((8.0, 2), {}), ((8, 2), {"dropout": -0.5})):
    case(f"MultiHeadAttention{args!r} {kw}", lambda a=args, kw=kw: multihead.MultiHeadAttention(*a, **kw))
mha = multihead.MultiHeadAttention(8, 2).eval()
mha_explicit = multihead.MultiHeadAttention(8, 2, fused=False).eval()
x8 = torch.randn(2, 5, 8)
for label, m in (("fused", mha), ("explicit", mha_explicit)):
    case(f"MHA {label}: x None", lambda m=m: m(None))
    case(f"MHA {label}: x list", lambda m=m: m(x8.tolist()))
    case(f"MHA {label}: x str", lambda m=m: m("x"))
    case(f"MHA {label}: x float64", lambda m=m: m(x8.double()))
    case(f"MHA {label}: x int", lambda m=m: m(x8.long()))
    case(f"MHA {label}: x 2-D", lambda m=m: m(x8[0]))
    case(f"MHA {label}: x of width 6", lambda m=m: m(torch.randn(2, 5, 6)))
    case(f"MHA {label}: (B, N, N) mask with B = H", lambda m=m: m(x8, mask=torch.ones(2, 5, 5, dtype=torch.bool)))
    case(f"MHA {label}: float mask", lambda m=m: m(x8, mask=torch.ones(5, 5)))
    case(f"MHA {label}: mask of wrong size", lambda m=m: m(x8, mask=torch.ones(4, 4, dtype=torch.bool)))
    case(f"MHA {label}: no keys", lambda m=m: m(x8, torch.randn(2, 0, 8)))
    case(f"MHA {label}: no tokens", lambda m=m: m(torch.randn(2, 0, 8)), lambda r: r[0].shape == (2, 0, 8))
    case(f"MHA {label}: key/value batch mismatch", lambda m=m: m(x8, torch.randn(3, 5, 8)))
    case(f"MHA {label}: causal mask (N, N)", lambda m=m: m(x8, mask=masks.causal_mask(5)),
         lambda r: finite(r[0]) and r[0].shape == (2, 5, 8))
    case(f"MHA {label}: per-sequence mask (B, 1, N, N)",
         lambda m=m: m(x8, mask=torch.ones(2, 1, 5, 5, dtype=torch.bool)), lambda r: finite(r[0]))
case("MHA.load_from_torch(None)", lambda: mha.load_from_torch(None))
case("MHA.load_from_torch(wrong size)", lambda: mha.load_from_torch(nn.MultiheadAttention(16, 2)))

# positional -----------------------------------------------------------------------------
for args, kw in (((0, 8), {}), ((4, 7), {}), ((4, 8), {"base": 1}), ((4, 8), {"base": nan}), ((4, 8), {"base": inf}),
                 ((4, 8), {"base": "10"}), ((1.5, 8), {}), ((4, 8), {"base": True}), ((None, 8), {})):
    case(f"sinusoidal_encoding{args!r} {kw}", lambda a=args, kw=kw: positional.sinusoidal_encoding(*a, **kw))
case("frequencies(8, base=-2)", lambda: positional.frequencies(8, base=-2))
for delta in (nan, inf, "1", None):
    case(f"rotation_matrix(delta={delta!r})", lambda d=delta: positional.rotation_matrix(d, 8))
case("rotation_matrix(2, 8) shifts PE", lambda: positional.rotation_matrix(2, 8),
     lambda R: torch.allclose(positional.sinusoidal_encoding(10, 8).double()[:8] @ R.T,
                              positional.sinusoidal_encoding(10, 8).double()[2:], atol=1e-5))
for bits in (63, 64, 100):
    case(f"binary_encoding(4, {bits})", lambda b=bits: positional.binary_encoding(4, b),
         lambda t, b=bits: t.shape == (4, b) and t[:, :-2].abs().sum() == 0 and t[3, -2:].tolist() == [1.0, 1.0]
         and t[2, -2:].tolist() == [1.0, 0.0])
case("binary_encoding(5, 2)", lambda: positional.binary_encoding(5, 2))
case("binary_encoding(0, 3)", lambda: positional.binary_encoding(0, 3))
case("binary_encoding(3, 0)", lambda: positional.binary_encoding(3, 0))
pe = positional.sinusoidal_encoding(20, 8)
case("static_fraction(threshold=nan)", lambda: positional.static_fraction(pe, threshold=nan))
case("static_fraction(1-D)", lambda: positional.static_fraction(pe[0]))
case("static_fraction(list)", lambda: positional.static_fraction(pe.tolist()))
case("pairwise_distances(complex)", lambda: positional.pairwise_distances(pe.to(torch.complex64)))
case("pairwise_distances(3-D)", lambda: positional.pairwise_distances(pe[None]))
case("pairwise_distances(int)", lambda: positional.pairwise_distances(torch.ones(3, 2, dtype=torch.long)),
     lambda d: torch.allclose(d, torch.zeros(3, 3, dtype=torch.float64)))
case("near_collisions(eps=0)", lambda: positional.near_collisions(pe, 0))
case("near_collisions(eps=nan)", lambda: positional.near_collisions(pe, nan))
case("near_collisions(eps='1')", lambda: positional.near_collisions(pe, "1"))
case("min_distance(1 row)", lambda: positional.min_distance(pe[:1]))
case("min_distance(None)", lambda: positional.min_distance(None))
for args in ((7,), (8, 0), (8, 4, nan)):
    case(f"SinusoidalPositionalEncoding{args!r}", lambda a=args: positional.SinusoidalPositionalEncoding(*a))
spe = positional.SinusoidalPositionalEncoding(8, max_len=16)
case("SinusoidalPE(int x)", lambda: spe(torch.zeros(2, 5, 8, dtype=torch.long)))
case("SinusoidalPE(None)", lambda: spe(None))
case("SinusoidalPE(list)", lambda: spe(torch.zeros(2, 5, 8).tolist()))
case("SinusoidalPE(N > max_len)", lambda: spe(torch.zeros(2, 17, 8)))
case("SinusoidalPE(2-D)", lambda: spe(torch.zeros(5, 8)))
case("SinusoidalPE(float64)", lambda: spe(torch.zeros(1, 5, 8, dtype=torch.float64)),
     lambda y: y.dtype == torch.float64 and torch.allclose(y[0].float(), positional.sinusoidal_encoding(5, 8)))

# dft, conv_as_attention ------------------------------------------------------------------
case("dft_matrix(0)", lambda: dft.dft_matrix(0))
case("dft_matrix(4, float32)", lambda: dft.dft_matrix(4, torch.float32))
case("kernel_offsets(2)", lambda: conv_as_attention.kernel_offsets(2))
case("kernel_offsets(0)", lambda: conv_as_attention.kernel_offsets(0))
case("ConvAsSelfAttention(kernel_size=2)", lambda: conv_as_attention.ConvAsSelfAttention(1, 1, 2))
case("ConvAsSelfAttention(alpha=nan)", lambda: conv_as_attention.ConvAsSelfAttention(1, 1, 3, alpha=nan))
case("ConvAsSelfAttention(in_channels=0)", lambda: conv_as_attention.ConvAsSelfAttention(0, 1, 3))
conv_attn = conv_as_attention.ConvAsSelfAttention(2, 3, 3)
case("ConvAsSelfAttention(long x)", lambda: conv_attn(torch.ones(1, 2, 4, 4, dtype=torch.long)))
case("ConvAsSelfAttention(float64 x)", lambda: conv_attn(torch.ones(1, 2, 4, 4, dtype=torch.float64)))
case("ConvAsSelfAttention(None)", lambda: conv_attn(None))
case("ConvAsSelfAttention(wrong channels)", lambda: conv_attn(torch.ones(1, 3, 4, 4)))
case("ConvAsSelfAttention.from_conv(str)", lambda: conv_as_attention.ConvAsSelfAttention.from_conv("conv"))
case("ConvAsSelfAttention.from_conv(strided)",
     lambda: conv_as_attention.ConvAsSelfAttention.from_conv(nn.Conv2d(1, 1, 3, stride=2, padding=1)))
case("ConvAsSelfAttention.relative_scores(0, 3)", lambda: conv_attn.relative_scores(0, 3))
_conv = nn.Conv2d(2, 3, 3, padding=1)
case("ConvAsSelfAttention.from_conv equals the conv",
     lambda: (conv_as_attention.ConvAsSelfAttention.from_conv(_conv)(x := torch.randn(1, 2, 5, 5)), _conv(x)),
     lambda r: torch.allclose(r[0], r[1], atol=1e-4))

# models: captioning ---------------------------------------------------------------------
cell = models.VanillaRNNCell(3, 4)
case("VanillaRNNCell: b_v (B, 1)", lambda: cell(torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 1)))
case("VanillaRNNCell: b_v (1, hidden) for B = 2", lambda: cell(torch.randn(2, 3), torch.randn(2, 4), torch.randn(1, 4)))
case("VanillaRNNCell: x None", lambda: cell(None, torch.randn(2, 4)))
case("VanillaRNNCell: x of width 5", lambda: cell(torch.randn(2, 5), torch.randn(2, 4)))
case("VanillaRNNCell: h batch 3", lambda: cell(torch.randn(2, 3), torch.randn(3, 4)))
case("VanillaRNNCell: x float64", lambda: cell(torch.randn(2, 3).double(), torch.randn(2, 4).double()))
case("VanillaRNNCell: x int", lambda: cell(torch.ones(2, 3, dtype=torch.long), torch.randn(2, 4)))
case("VanillaRNNCell: formula", lambda: (cell(x := torch.randn(2, 3), h := torch.randn(2, 4)), x, h),
     lambda r: torch.allclose(r[0], torch.tanh(r[1] @ cell.W_hx.weight.T + r[2] @ cell.W_hh.weight.T + cell.b_h)))
cnn = models.ShapesCNN(n_classes=5, feature_dim=8, width=2)
case("ShapesCNN(image_size=30)", lambda: models.ShapesCNN(3, image_size=30))
case("ShapesCNN(None)", lambda: cnn(None))
case("ShapesCNN(long images)", lambda: cnn(torch.ones(1, 3, 32, 32, dtype=torch.long)))
case("ShapesCNN(1 channel)", lambda: cnn(torch.ones(1, 1, 32, 32)))
cap = models.ImageCaptioner(None, 8, 10, emb_dim=4, hidden_dim=6).eval()
codes = torch.randn(2, 8)
case("ImageCaptioner: cell='transformer'", lambda: models.ImageCaptioner(None, 8, 10, cell="transformer"))
case("ImageCaptioner: images None", lambda: cap.start(None))
case("ImageCaptioner: codes float64", lambda: cap.start(codes.double()))
case("ImageCaptioner: codes of width 7", lambda: cap.start(torch.randn(2, 7)))
case("ImageCaptioner: token id 10 of 10", lambda: cap(codes, torch.tensor([[1, 10], [1, 2]])))
case("ImageCaptioner: token id -1", lambda: cap(codes, torch.tensor([[1, -1], [1, 2]])))
case("ImageCaptioner: float tokens", lambda: cap(codes, torch.ones(2, 3)))
case("ImageCaptioner: tokens None", lambda: cap(codes, None))
case("ImageCaptioner: step(prev out of range)", lambda: cap.step(torch.tensor([1, 12]), cap.start(codes)))
case("ImageCaptioner: step(prev 2-D)", lambda: cap.step(torch.ones(2, 1, dtype=torch.long), cap.start(codes)))
case("ImageCaptioner: batch mismatch", lambda: cap(codes, torch.ones(3, 2, dtype=torch.long)))
case("ImageCaptioner: no tokens (T = 0)", lambda: cap(codes, torch.ones(2, 0, dtype=torch.long)))

# models: seq2seq ------------------------------------------------------------------------
s2s = models.Seq2Seq(10, 12, 4, 6, "additive").eval()
s2s_dot = models.Seq2Seq(10, 12, 4, 6, "dot").eval()
src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
lens = torch.tensor([3, 4])
tgt = torch.tensor([[1, 3, 4], [1, 5, 6]])
for label, m in (("additive", s2s), ("dot", s2s_dot)):
    case(f"Seq2Seq {label}: a source of length 0", lambda m=m: m(src, torch.tensor([0, 4]), tgt))
    case(f"Seq2Seq {label}: source length > N", lambda m=m: m(src, torch.tensor([5, 4]), tgt))
    case(f"Seq2Seq {label}: source id 10 of 10", lambda m=m: m(src.masked_fill(src == 9, 10), lens, tgt))
    case(f"Seq2Seq {label}: target id 12 of 12", lambda m=m: m(src, lens, tgt.masked_fill(tgt == 6, 12)))
    case(f"Seq2Seq {label}: float source", lambda m=m: m(src.float(), lens, tgt))
    case(f"Seq2Seq {label}: float lengths", lambda m=m: m(src, lens.float(), tgt))
    case(f"Seq2Seq {label}: lengths a list", lambda m=m: m(src, [3, 4], tgt))
    case(f"Seq2Seq {label}: src None", lambda m=m: m(None, lens, tgt))
    case(f"Seq2Seq {label}: tgt None", lambda m=m: m(src, lens, None))
    case(f"Seq2Seq {label}: empty source (N = 0)", lambda m=m: m(src[:, :0], torch.tensor([0, 0]), tgt))
    case(f"Seq2Seq {label}: batch mismatch src/tgt", lambda m=m: m(src, lens, tgt[:1]))
    case(f"Seq2Seq {label}: weights on real tokens only", lambda m=m: m(src, lens, tgt),
         lambda r: r[1][0, :, 3].abs().max() == 0 and torch.allclose(r[1].sum(-1), torch.ones(2, 3)))
case("Seq2Seq: pad_id=-1", lambda: models.Seq2Seq(10, 12, pad_id=-1))
case("Seq2Seq: pad_id=10 (outside the vocabulary)", lambda: models.Seq2Seq(10, 12, pad_id=10))
case("Seq2Seq: attention='luong'", lambda: models.Seq2Seq(10, 12, attention="luong"))
dpa = models.DotProductAttention(6, 5, 4)
case("DotProductAttention: query None", lambda: dpa(None, torch.randn(2, 3, 5)))
case("DotProductAttention: query float64", lambda: dpa(torch.randn(2, 6).double(), torch.randn(2, 3, 5).double()))
case("DotProductAttention: float mask", lambda: dpa(torch.randn(2, 6), torch.randn(2, 3, 5), mask=torch.ones(2, 3)))
case("DotProductAttention: keys of width 4", lambda: dpa(torch.randn(2, 6), torch.randn(2, 3, 4)))

# models: transformer --------------------------------------------------------------------
Cfg = tfm.TransformerConfig
for kw in ({"vocab_size": 0}, {"vocab_size": 11, "d_model": 0}, {"vocab_size": 11, "num_heads": 3},
           {"vocab_size": 11, "pe_base": 1.0}, {"vocab_size": 11, "max_len": 0}, {"vocab_size": 11, "dropout": 1.5},
           {"vocab_size": 11, "dropout": nan}, {"vocab_size": 11, "pad_id": -1}, {"vocab_size": 11, "pad_id": 11},
           {"vocab_size": 11, "pad_id": 1.0}, {"vocab_size": 11.0}, {"vocab_size": 11, "num_encoder_layers": 0}):
    case(f"Transformer({kw})", lambda kw=kw: tfm.Transformer(Cfg(**kw)))
case("Transformer(dict)", lambda: tfm.Transformer({"vocab_size": 11}))
T = tfm.Transformer(Cfg(vocab_size=11, d_model=16, num_heads=4, d_ff=32, num_encoder_layers=1, num_decoder_layers=1,
                        max_len=8)).eval()
tsrc, ttgt = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]]), torch.tensor([[1, 5, 4], [1, 10, 9]])
case("Transformer: src id 11 of 11", lambda: T(tsrc.masked_fill(tsrc == 9, 11), ttgt))
case("Transformer: tgt id -1", lambda: T(tsrc, ttgt.masked_fill(ttgt == 9, -1)))
case("Transformer: float src", lambda: T(tsrc.float(), ttgt))
case("Transformer: src None", lambda: T(None, ttgt))
case("Transformer: src a list", lambda: T(tsrc.tolist(), ttgt))
case("Transformer: src 1-D", lambda: T(tsrc[0], ttgt))
case("Transformer: empty src (N = 0)", lambda: T(tsrc[:, :0], ttgt))
case("Transformer: empty tgt (T = 0)", lambda: T(tsrc, ttgt[:, :0]))
case("Transformer: src longer than max_len", lambda: T(torch.ones(2, 9, dtype=torch.long), ttgt))
case("Transformer: batch mismatch", lambda: T(tsrc, ttgt[:1]))
case("Transformer: bool src", lambda: T(tsrc.bool(), ttgt))


def decode_past_max_len(model, n_steps):
    state = model.start(tsrc)
    prev = torch.ones(2, dtype=torch.long)
    for _ in range(n_steps):
        logits, state = model.step(prev, state)
    return logits


case("Transformer.step past max_len (cache)", lambda: decode_past_max_len(T, 9))
case("Transformer.step up to max_len (cache)", lambda: decode_past_max_len(T, 8), lambda r: finite(r))
case("Transformer.step(prev out of range)", lambda: T.step(torch.tensor([1, 11]), T.start(tsrc)))
case("Transformer.step(prev float)", lambda: T.step(torch.tensor([1.0, 2.0]), T.start(tsrc)))
case("Transformer.step(prev batch 3)", lambda: T.step(torch.tensor([1, 2, 3]), T.start(tsrc)))
ln = blocks.LayerNorm(8)
case("LayerNorm(eps=0)", lambda: blocks.LayerNorm(8, eps=0))
case("LayerNorm(eps=nan)", lambda: blocks.LayerNorm(8, eps=nan))
case("LayerNorm(None)", lambda: ln(None))
case("LayerNorm(float64 x)", lambda: ln(torch.randn(2, 8).double()))
case("layer_norm(eps=0)", lambda: blocks.layer_norm(torch.randn(2, 8), torch.ones(8), torch.zeros(8), eps=0.0))
case("layer_norm(eps=-1)", lambda: blocks.layer_norm(torch.randn(2, 8), torch.ones(8), torch.zeros(8), eps=-1.0))
case("layer_norm(x None)", lambda: blocks.layer_norm(None, torch.ones(8), torch.zeros(8)))
case("layer_norm(weight of size 4)", lambda: blocks.layer_norm(torch.randn(2, 8), torch.ones(4), torch.zeros(4)))
case("layer_norm of a constant row = bias", lambda: blocks.layer_norm(torch.ones(1, 4), torch.ones(4), torch.arange(4.0)),
     lambda r: torch.allclose(r, torch.arange(4.0)[None]))
ffn = blocks.FeedForward(8, 16)
case("FeedForward(dropout=1.5)", lambda: blocks.FeedForward(8, 16, dropout=1.5))
case("FeedForward(None)", lambda: ffn(None))
case("FeedForward(x of width 4)", lambda: ffn(torch.randn(2, 3, 4)))
case("FeedForward(float64)", lambda: ffn(torch.randn(2, 3, 8).double()))
enc = blocks.EncoderLayer(8, 2, 16).eval()
case("EncoderLayer(float64 x)", lambda: enc(torch.randn(2, 3, 8).double()))
case("EncoderLayer(None)", lambda: enc(None))
case("EncoderLayer((B, N, N) mask, B = H)", lambda: enc(torch.randn(2, 3, 8), mask=torch.ones(2, 3, 3, dtype=torch.bool)))
case("EncoderLayer.load_from_torch(None)", lambda: enc.load_from_torch(None))
dec = blocks.DecoderLayer(8, 2, 16).eval()
case("DecoderLayer: memory float64", lambda: dec(torch.randn(2, 3, 8), torch.randn(2, 4, 8).double()))
case("DecoderLayer: cache but 2 new tokens", lambda: dec(torch.randn(2, 2, 8), torch.randn(2, 4, 8), cache={}))
case("Encoder(num_layers=0)", lambda: tfm.Encoder(0, 8, 2, 16))

# models: vit and cnn --------------------------------------------------------------------
case("ViT(patch_size=0)", lambda: models.ViT(8, 0, 1, 10))
case("ViT(patch_size=-2)", lambda: models.ViT(8, -2, 1, 10))
case("ViT(patch_size=1.5)", lambda: models.ViT(8, 1.5, 1, 10))
case("ViT(patch_size=3)", lambda: models.ViT(8, 3, 1, 10))
case("ViT(pool='max')", lambda: models.ViT(8, 2, 1, 10, pool="max"))
case("ViT(in_channels=0)", lambda: models.ViT(8, 2, 0, 10))
case("ViT(num_heads=3)", lambda: models.ViT(8, 2, 1, 10, d_model=64, num_heads=3))
vit = models.ViT(8, 2, 1, 10, d_model=16, depth=1, num_heads=2, d_ff=32).eval()
case("ViT(None)", lambda: vit(None))
case("ViT(list)", lambda: vit(torch.randn(1, 1, 8, 8).tolist()))
case("ViT(long images)", lambda: vit(torch.ones(1, 1, 8, 8, dtype=torch.long)))
case("ViT(float64 images)", lambda: vit(torch.randn(1, 1, 8, 8).double()))
case("ViT(3-D images)", lambda: vit(torch.randn(1, 8, 8)))
case("ViT(16x16 images)", lambda: vit(torch.randn(1, 1, 16, 16)))
case("ViT(3 channels)", lambda: vit(torch.randn(1, 3, 8, 8)))
case("ViT(empty batch)", lambda: vit(torch.randn(0, 1, 8, 8)), lambda r: r.shape == (0, 10))
case("patchify(x, 0)", lambda: vit_mod.patchify(torch.randn(1, 1, 4, 4), 0))
case("patchify(None, 2)", lambda: vit_mod.patchify(None, 2))
case("unpatchify(patch_size=0)", lambda: vit_mod.unpatchify(torch.randn(1, 4, 4), 0, 4, 4))
case("PatchEmbedding(float64)", lambda: vit_mod.PatchEmbedding(1, 2, 4)(torch.randn(1, 1, 4, 4).double()))
case("SmallCNN(channels=5)", lambda: models.SmallCNN(1, 10, channels=5))
case("SmallCNN(channels=(0,))", lambda: models.SmallCNN(1, 10, channels=(0,)))
small = models.SmallCNN(1, 10, channels=(4,))
case("SmallCNN(float64)", lambda: small(torch.randn(1, 1, 8, 8).double()))
case("SmallCNN(None)", lambda: small(None))
case("count_parameters('cnn')", lambda: companion.profiling.count_parameters("cnn"))

# decoding -------------------------------------------------------------------------------
def step4(prev, state):
    return torch.zeros(prev.shape[0], 4), state


for fname, fn in (("greedy_decode", decoding.greedy_decode), ("beam_search", decoding.beam_search)):
    case(f"{fname}(step_fn=None)", lambda fn=fn: fn(None, None, 1, 2, 3, batch_size=2))
    case(f"{fname}(max_len=0)", lambda fn=fn: fn(step4, None, 1, 2, 0, batch_size=2))
    case(f"{fname}(batch_size=0)", lambda fn=fn: fn(step4, None, 1, 2, 3, batch_size=0))
    case(f"{fname}(bos_id=1.0)", lambda fn=fn: fn(step4, None, 1.0, 2, 3, batch_size=2))
    case(f"{fname}(pad_id=None)", lambda fn=fn: fn(step4, None, 1, 2, 3, batch_size=2, pad_id=None))
    case(f"{fname}(pad_id=4 of V=4)", lambda fn=fn: fn(step4, None, 1, 2, 3, batch_size=2, pad_id=4))
    case(f"{fname}(step_fn returns a list)", lambda fn=fn: fn(lambda p, s: ([[0.0] * 4] * p.shape[0], s), None, 1, 2, 3,
                                                              batch_size=2))
    case(f"{fname}(step_fn returns (B, 1, V))", lambda fn=fn: fn(lambda p, s: (torch.zeros(p.shape[0], 1, 4), s), None,
                                                                 1, 2, 3, batch_size=2))
    case(f"{fname}(step_fn returns NaN logits)",
         lambda fn=fn: fn(lambda p, s: (torch.full((p.shape[0], 4), nan), s), None, 1, 2, 3, batch_size=2))
for lp in (nan, -1.0, inf, "1", True):
    case(f"beam_search(length_penalty={lp!r})", lambda lp=lp: decoding.beam_search(step4, None, 1, 2, 3, batch_size=2,
                                                                                    length_penalty=lp))
case("beam_search(beam_size=0)", lambda: decoding.beam_search(step4, None, 1, 2, 3, batch_size=2, beam_size=0))
case("beam_search(beam_size=1) = greedy", lambda: (
    decoding.beam_search(lambda p, s: (torch.tensor([[0.0, 1.0, 3.0, 2.0]]).expand(p.shape[0], 4), s), None, 1, 2, 3,
                         batch_size=2, beam_size=1),),
     lambda r: r[0].tokens[:, 0].tolist() == [2, 2] and r[0].lengths.tolist() == [1, 1])
case("generate(model without start)", lambda: decoding.generate(nn.Linear(2, 2), torch.zeros(1, 2), bos_id=1, eos_id=2,
                                                                  max_len=3))
case("generate(keep='nope')", lambda: decoding.generate(s2s, src, lens, bos_id=1, eos_id=2, max_len=3, keep="nope"))
case("generate(no inputs)", lambda: decoding.generate(s2s, bos_id=1, eos_id=2, max_len=3))
case("index_state(float index)", lambda: decoding.index_state({"h": torch.zeros(3, 2)}, torch.tensor([0.0, 1.0])))

# train ----------------------------------------------------------------------------------
lin = nn.Linear(3, 1)
xs, ys = torch.randn(16, 3), torch.randn(16, 1)


def mse(m, xb, yb):
    return ((m(xb) - yb) ** 2).mean()


def run_train(**kw):
    args = {"steps": 3, "batch_size": 4, "device": "cpu", "progress": False}
    args.update(kw)
    data_ = args.pop("data", [xs, ys])
    loss_fn = args.pop("loss_fn", mse)
    model = args.pop("model", nn.Linear(3, 1))
    return train_mod.train(model, loss_fn, data_, **args)


for kw in ({"clip": -1.0}, {"clip": 0.0}, {"clip": nan}, {"clip": "1"}, {"lr": -1.0}, {"lr": nan}, {"lr": 0.0},
           {"seed": None}, {"seed": "a"}, {"seed": 1.5}, {"seed": -1}, {"steps": 0}, {"batch_size": 0},
           {"warmup": -1}, {"log_every": 0}, {"data": []}, {"data": [xs[:0], ys[:0]]}, {"data": [xs, ys[:8]]},
           {"data": [xs.tolist()]}, {"loss_fn": None}, {"loss_fn": lambda m, xb, yb: (m(xb) - yb) ** 2},
           {"loss_fn": lambda m, xb, yb: 3.0}, {"model": "model"}, {"device": "nope"}):
    case(f"train({', '.join(f'{k}={v!r}' if k not in ('data', 'loss_fn') else k for k, v in kw.items())})",
         lambda kw=kw: run_train(**kw))
case("train(clip=None) trains", lambda: run_train(clip=None, steps=40, batch_size=16, lr=0.05, log_every=10),
     lambda h: h.losses[-1] < h.losses[0])
case("train(batch_size > n) trains", lambda: run_train(batch_size=64, steps=4, log_every=2),
     lambda h: len(h.losses) == 2 and all(map(math.isfinite, h.losses)))
logits = torch.randn(2, 3, 5)
case("sequence_loss(all padding)", lambda: train_mod.sequence_loss(logits, torch.zeros(2, 3, dtype=torch.long)),
     lambda r: math.isfinite(float(r)))
case("sequence_loss(float targets)", lambda: train_mod.sequence_loss(logits, torch.ones(2, 3)))
case("sequence_loss(long logits)", lambda: train_mod.sequence_loss(logits.long(), torch.ones(2, 3, dtype=torch.long)))
case("sequence_loss(target id 5 of V=5)", lambda: train_mod.sequence_loss(logits, torch.full((2, 3), 5)))
case("sequence_loss(None)", lambda: train_mod.sequence_loss(None, torch.ones(2, 3, dtype=torch.long)))
case("sequence_loss(pad_id=1.5)", lambda: train_mod.sequence_loss(logits, torch.ones(2, 3, dtype=torch.long), pad_id=1.5))
case("sequence_loss = mean CE over real tokens",
     lambda: train_mod.sequence_loss(logits, torch.tensor([[1, 2, 0], [3, 0, 0]])),
     lambda r: torch.allclose(r, torch.nn.functional.cross_entropy(logits[torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()],
                                                                   torch.tensor([1, 2, 3]))))
case("predict(no tensors)", lambda: train_mod.predict(lambda x: x))
case("predict(empty input)", lambda: train_mod.predict(lambda x: x, torch.zeros(0, 3)))
case("predict(batch_size=0)", lambda: train_mod.predict(lambda x: x, torch.zeros(4, 3), batch_size=0))
case("predict(fn=None)", lambda: train_mod.predict(None, torch.zeros(4, 3)))
case("sequence_accuracy(empty batch)", lambda: train_mod.sequence_accuracy(torch.zeros(0, 3, dtype=torch.long),
                                                                            torch.zeros(0, 3, dtype=torch.long)))
case("sequence_accuracy(B mismatch)", lambda: train_mod.sequence_accuracy(torch.zeros(2, 3), torch.zeros(3, 3)))
case("sequence_accuracy(None)", lambda: train_mod.sequence_accuracy(None, torch.zeros(3, 3)))
case("sequence_accuracy(pred float logits (B, T, V))",
     lambda: train_mod.sequence_accuracy(torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long)))
case("sequence_accuracy right", lambda: train_mod.sequence_accuracy(torch.tensor([[3, 4, 9]]), torch.tensor([[3, 5, 0]])),
     lambda r: r == (0.0, 0.5))

# data -----------------------------------------------------------------------------------
for seed in (None, -1, 1.5, "0", True):
    case(f"make_dates(5, seed={seed!r})", lambda s=seed: data.make_dates(5, seed=s))
    case(f"make_sequence_task(5, 2, 4, seed={seed!r})", lambda s=seed: data.make_sequence_task(5, 2, 4, seed=s))
    case(f"make_shapes(5, seed={seed!r})", lambda s=seed: data.make_shapes(5, seed=s))
    case(f"digits_split(10, 5, seed={seed!r})", lambda s=seed: data.digits_split(10, 5, seed=s))
case("make_dates(0)", lambda: data.make_dates(0))
case("make_dates(formats=[7])", lambda: data.make_dates(5, formats=[7]))
case("make_dates(formats=[])", lambda: data.make_dates(5, formats=[]))
case("make_dates(formats=[1.0])", lambda: data.make_dates(5, formats=[1.0]))
case("make_sequence_task(min_len > max_len)", lambda: data.make_sequence_task(5, 4, 2))
case("make_sequence_task(task='sort')", lambda: data.make_sequence_task(5, 2, 4, task="sort"))
case("make_sequence_task(n_symbols=21)", lambda: data.make_sequence_task(5, 2, 4, n_symbols=21))
case("make_sequence_task(min_len=0)", lambda: data.make_sequence_task(5, 0, 4))
for kw in ({"p_two": nan}, {"p_two": 1.5}, {"p_two": "0.5"}, {"noise": nan}, {"noise": -0.1}, {"noise": inf},
           {"noise": "0.1"}, {"image_size": 8}, {"image_size": 32.0}):
    case(f"make_shapes(5, {kw})", lambda kw=kw: data.make_shapes(5, **kw))
case("digits_split(0)", lambda: data.digits_split(0))
case("digits_split(2000)", lambda: data.digits_split(2000))
case("shift_images(dx=1.5)", lambda: data.transforms.shift_images(torch.zeros(1, 1, 4, 4), 1.5, 0))
case("shift_images(None)", lambda: data.transforms.shift_images(None, 1, 0))
case("shift_images(dx=4 of W=4)", lambda: data.transforms.shift_images(torch.zeros(1, 1, 4, 4), 4, 0))
case("shift_images(dx=-1) right", lambda: data.transforms.shift_images(torch.arange(4.0).reshape(1, 1, 1, 4), -1, 0),
     lambda r: r.flatten().tolist() == [1.0, 2.0, 3.0, 0.0])
vocab = data.Vocab(["a", "b"])
case("Vocab([1])", lambda: data.Vocab([1]))
case("Vocab(['a', 'a'])", lambda: data.Vocab(["a", "a"]))
case("Vocab(['<pad>'])", lambda: data.Vocab(["<pad>"]))
case("Vocab.encode(['c'])", lambda: vocab.encode(["c"]))
case("Vocab.decode([9])", lambda: vocab.decode([9]))
case("Vocab.decode([1.5])", lambda: vocab.decode([1.5]))
case("Vocab.decode(2-D tensor)", lambda: vocab.decode(torch.zeros(2, 2, dtype=torch.long)))
case("Vocab.decode(float tensor)", lambda: vocab.decode(torch.tensor([3.0, 4.0])))
case("Vocab.decode_batch(list)", lambda: vocab.decode_batch([[3, 4]]))
case("Vocab.encode_batch(max_len too short)", lambda: vocab.encode_batch([["a", "b"]], max_len=1))
case("symbol_vocab(0)", lambda: data.sequences.symbol_vocab(0))

# device ---------------------------------------------------------------------------------
for s in (None, "3", 1.5, True):
    case(f"seed_everything({s!r})", lambda s=s: device.seed_everything(s))
case("seed_everything(-1)", lambda: device.seed_everything(-1), lambda g: isinstance(g, torch.Generator))
case("describe_device('cpu')", lambda: device.describe_device("cpu"), lambda s: s.startswith("cpu"))
case("describe_device('nope')", lambda: device.describe_device("nope"))

# checks ---------------------------------------------------------------------------------
class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


for label, actual, expected in (("NaN vs NaN at other positions", [nan, 1.0], [1.0, nan]),
                                ("NaN vs a number", [nan], [0.0]), ("a number vs NaN", [0.0], [nan]),
                                ("1.0 vs inf", [1.0], [inf]), ("-inf vs inf", [-inf], [inf]),
                                ("complex vs real part", torch.tensor([1 + 1j]), torch.tensor([1 + 0j])),
                                ("None", None, [1.0]), ("shape (2,) vs (3,)", [0.0, 0.0], [0.0, 0.0, 0.0]),
                                ("float mask vs bool mask", torch.ones(2), torch.ones(2, dtype=torch.bool))):
    case(f"check_close: {label}", lambda a=actual, e=expected: checks.check_close(
        torch.as_tensor(a) if a is not None else None, torch.as_tensor(e)))
for atol, rtol in ((nan, 1e-4), (1e-5, nan), (-1.0, 1e-4), (1e-5, -1.0), (inf, 0.0), ("1", 0.0)):
    case(f"check_close(atol={atol!r}, rtol={rtol!r})",
         lambda a=atol, r=rtol: checks.check_close(torch.zeros(1), torch.ones(1) * 100, atol=a, rtol=r))
case("check_close: equal with NaN in the same places",
     lambda: checks.check_close(torch.tensor([nan, inf, 1.0]), torch.tensor([nan, inf, 1.0])), lambda r: r is None)
for label, w, m in (("NaN weights", torch.tensor([[nan, 1.0]]), None), ("all-NaN row", torch.tensor([[nan, nan]]), None),
                    ("inf weight", torch.tensor([[inf, 0.0]]), None), ("negative", torch.tensor([[1.5, -0.5]]), None),
                    ("rows sum to 2", torch.tensor([[1.0, 1.0]]), None),
                    ("weight on a blocked key", torch.full((2, 2), 0.5), masks.causal_mask(2)),
                    ("float mask", torch.full((2, 2), 0.5), torch.ones(2, 2)),
                    ("mask of wrong shape", torch.full((2, 2), 0.5), torch.ones(3, 3, dtype=torch.bool)),
                    ("weights a list", [[0.5, 0.5]], None), ("1-D weights", torch.tensor([0.5, 0.5]), None)):
    case(f"check_attention_weights: {label}", lambda w=w, m=m: checks.check_attention_weights(w, m))
case("check_attention_weights(atol=nan)", lambda: checks.check_attention_weights(torch.tensor([[2.0, 2.0]]), atol=nan))
case("check_attention_weights: valid causal", lambda: checks.check_attention_weights(
    attention.attention_with_weights(q, q, q, masks.causal_mask(5))[1], masks.causal_mask(5)), lambda r: r is None)
for label, actual, expected in (("__eq__ always True", AlwaysEqual(), 12), ("tuple holding such an object",
                                                                           (AlwaysEqual(), 3), (2, 3)),
                                ("1 vs True", 1, True), ("'12' vs 12", "12", 12), ("NaN vs 12", nan, 12),
                                ("tensor", torch.tensor(12), 12), ("dict", {"a": 1}, 12), ("(2, 3) vs (2, 3, 1)",
                                                                                        (2, 3), (2, 3, 1)),
                                ("None", None, 12), ("12.5 vs 12", 12.5, 12)):
    case(f"check_equal: {label}", lambda a=actual, e=expected: checks.check_equal(a, e))
case("check_equal(expected=tensor)", lambda: checks.check_equal(12, torch.tensor(12)))
case("check_equal: [2, 3] for (2, 3)", lambda: checks.check_equal([2, 3], (2, 3)), lambda r: r is None)
case("check_equal: 12.0 for 12", lambda: checks.check_equal(12.0, 12), lambda r: r is None)
case("check_shape(expected=3)", lambda: checks.check_shape(torch.zeros(3), 3))
case("check_shape(wrong shape)", lambda: checks.check_shape(torch.zeros(3), (4,)))
case("rel_error(NaN)", lambda: checks.rel_error([nan], [1.0]), lambda r: math.isnan(r))
case("rel_error(eps=0)", lambda: checks.rel_error([0.0], [0.0], eps=0.0))


# classes of bad input, for every public function that takes tensors -----------------------
# Each function's good call, then one tensor argument at a time made: empty (a dimension of
# size 0), NaN (one NaN among its numbers), of the wrong dtype (complex for real numbers,
# float for ids or booleans), and, where the function takes a mask or padding, all masked.
# Honest outcomes: a clear error, or "empty in, empty out", or NaN propagated to the output;
# a number computed from nothing, or a NaN turned into a plain number, is silently wrong.
from companion import heads, plotting  # noqa: E402


def has_nan(r) -> bool:
    if isinstance(r, tuple):
        return any(has_nan(x) for x in r)
    if isinstance(r, torch.Tensor):
        return r.is_floating_point() and bool(torch.isnan(r).any())
    return isinstance(r, float) and math.isnan(r)


def is_empty(r) -> bool:
    if isinstance(r, tuple):
        return all(is_empty(x) for x in r if isinstance(x, torch.Tensor))
    return isinstance(r, torch.Tensor) and r.numel() == 0


def emptied(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.narrow(dim, 0, 0)


def with_nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = nan
    return t


def wrong_dtype(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.complex64) if t.is_floating_point() else t.float()


mha = multihead.MultiHeadAttention(8, 2).eval()
w55 = torch.softmax(torch.randn(2, 5, 5), -1)  # (B, N, N) attention weights
PUBLIC = [  # (name, function, good arguments, {argument index: dimension to empty})
    ("masked_softmax", attention.masked_softmax, (torch.randn(2, 5, 7), bool_mask), {0: -1}),
    ("attention_with_weights", attention.attention_with_weights, (q, k, v), {0: -1, 1: 1, 2: 1}),
    ("fused_attention", attention.fused_attention, (q, k, v), {0: -1, 1: 1, 2: 1}),
    ("MultiHeadAttention", mha, (torch.randn(2, 5, 8),), {0: -1}),
    ("static_fraction", positional.static_fraction, (positional.sinusoidal_encoding(6, 8),), {0: 0}),
    ("pairwise_distances", positional.pairwise_distances, (positional.sinusoidal_encoding(6, 8),), {0: 1}),
    ("min_distance", positional.min_distance, (positional.sinusoidal_encoding(6, 8),), {0: 1}),
    ("near_collisions", lambda pe: positional.near_collisions(pe, 0.1), (positional.sinusoidal_encoding(6, 8),),
     {0: 1}),
    ("plot_attention", lambda w: plotting.plot_attention(w, colorbar=False), (w55[0],), {0: 0}),
    ("plot_positional_encoding", plotting.plot_positional_encoding, (positional.sinusoidal_encoding(6, 8),), {0: 0}),
    ("sequence_loss", train_mod.sequence_loss, (torch.randn(2, 3, 5), torch.tensor([[1, 2, 0], [3, 0, 0]])),
     {0: 2, 1: 1}),
    ("sequence_accuracy", train_mod.sequence_accuracy, (torch.tensor([[1, 2, 0]]), torch.tensor([[1, 2, 0]])), {1: 1}),
    ("attention_entropy", heads.attention_entropy, (w55,), {0: -1}),
    ("peak_offsets", heads.peak_offsets, (w55,), {0: -1}),
]
for name, fn, good, empty_dims in PUBLIC:
    for i, arg in enumerate(good):
        args = list(good)
        if i in empty_dims:
            bad = [*args[:i], emptied(arg, empty_dims[i]), *args[i + 1:]]
            case(f"{name}: argument {i} empty", lambda fn=fn, a=bad: fn(*a), Either(is_empty))
        if arg.is_floating_point():
            bad = [*args[:i], with_nan(arg), *args[i + 1:]]
            case(f"{name}: NaN in argument {i}", lambda fn=fn, a=bad: fn(*a), Either(has_nan))
        bad = [*args[:i], wrong_dtype(arg), *args[i + 1:]]
        case(f"{name}: argument {i} of dtype {wrong_dtype(arg).dtype}", lambda fn=fn, a=bad: fn(*a))
# all masked: a documented answer, never 0 / 0
case("masked_softmax: every key masked -> zeros",
     lambda: attention.masked_softmax(torch.randn(2, 5, 7), torch.zeros(5, 7, dtype=torch.bool)),
     lambda r: r.abs().max() == 0)
case("MultiHeadAttention: every key masked -> zeros", lambda: mha(torch.randn(1, 3, 8), mask=torch.zeros(3, 3, dtype=torch.bool))[0],
     finite)
case("sequence_loss: every target padding -> 0",
     lambda: train_mod.sequence_loss(torch.randn(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)), lambda r: float(r) == 0.0)
case("sequence_accuracy: every target padding",
     lambda: train_mod.sequence_accuracy(torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)))
case("attention_entropy: a row of zeros (a fully masked query)",
     lambda: heads.attention_entropy(torch.zeros(1, 2, 3)), lambda r: finite(r))
case("real_key_mask: no real token", lambda: masks.real_key_mask(torch.zeros(2, 3, dtype=torch.bool)),
     lambda m: not m.any())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list every silently wrong and deep-error case")
    args = parser.parse_args(argv)
    counts: Counter = Counter()
    problems = []
    for c in CASES:
        kind, detail = classify(c)
        counts[kind] += 1
        if kind in (SILENT, DEEP):
            problems.append((kind, c.name, detail))
        elif kind == CLEAR and c.expect is not ERROR and not isinstance(c.expect, Either):
            counts[REFUSED] += 1  # good input refused: counted among the clear errors, listed with -v
            problems.append((REFUSED, c.name, detail))
    print(f"{len(CASES)} cases over the companion's public API\n")
    width = max(len(k) for k in (CLEAR, RIGHT, SILENT, DEEP))
    print(f"| {'outcome':<{width}} | cases |")
    print(f"| {'-' * width} | ----: |")
    for kind in (CLEAR, RIGHT, SILENT, DEEP):
        print(f"| {kind:<{width}} | {counts[kind]:>5} |")
    print(f"\n(of the clear errors, {counts[REFUSED]} refused input that has a right answer)")
    if problems and args.verbose:
        print()
        for kind, name, detail in sorted(problems):
            print(f"{kind:>14}: {name}\n{'':>16}{detail[:200]}")
    return 1 if counts[SILENT] or counts[REFUSED] else 0


if __name__ == "__main__":
    sys.exit(main())
