"""The Transformer's blocks (LayerNorm, FFN, encoder and decoder layers) equal PyTorch's
after copying weights, and compute the formulas they name."""

import pytest
import torch
from torch import nn

from companion.masks import causal_mask, real_key_mask, real_token_mask
from companion.models.blocks import DecoderLayer, EncoderLayer, FeedForward, LayerNorm, layer_norm

D, H, FF = 16, 4, 32


def test_layernorm_equals_torch():
    x = torch.randn(3, 5, D)
    ours, theirs = LayerNorm(D), nn.LayerNorm(D)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.normal_()
        ours.weight.copy_(theirs.weight)
        ours.bias.copy_(theirs.bias)
    assert torch.allclose(ours(x), theirs(x), atol=1e-5)
    assert torch.allclose(layer_norm(x, ours.weight, ours.bias), theirs(x), atol=1e-5)


def test_layernorm_rejects_wrong_width():
    with pytest.raises(ValueError, match=r"d_model=16.*\(2, 8\)"):
        LayerNorm(D)(torch.randn(2, 8))
    with pytest.raises(TypeError, match="floating-point"):
        LayerNorm(D)(torch.ones(2, D, dtype=torch.long))


def test_ffn_shape():
    x = torch.randn(2, 7, D)
    assert FeedForward(D, FF)(x).shape == x.shape


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_is_the_residual_formula_it_names(norm_first):
    # pre-norm: x + f(LN(x)); post-norm: LN(x + f(x)), for both sublayers
    torch.manual_seed(0)
    layer = EncoderLayer(D, H, FF, norm_first=norm_first).eval()
    with torch.no_grad():  # non-trivial LayerNorms, so a misplaced one shows
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_()
    x = torch.randn(2, 7, D) * 3 + 1

    def attn(h):
        return layer.self_attn(h)[0]

    if norm_first:
        h = x + attn(layer.norm1(x))
        want = h + layer.ffn(layer.norm2(h))
    else:
        h = layer.norm1(x + attn(x))
        want = layer.norm2(h + layer.ffn(h))
    torch.testing.assert_close(layer(x), want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_is_the_residual_formula_it_names(norm_first):
    torch.manual_seed(0)
    layer = DecoderLayer(D, H, FF, norm_first=norm_first).eval()
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2, layer.norm3):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_()
    y, memory = torch.randn(2, 5, D) * 3 + 1, torch.randn(2, 6, D)
    c = causal_mask(5)

    def self_attn(h):
        return layer.self_attn(h, mask=c)[0]

    def cross_attn(h):
        return layer.cross_attn(h, memory, memory)[0]

    if norm_first:
        h = y + self_attn(layer.norm1(y))
        h = h + cross_attn(layer.norm2(h))
        want = h + layer.ffn(layer.norm3(h))
    else:
        h = layer.norm1(y + self_attn(y))
        h = layer.norm2(h + cross_attn(h))
        want = layer.norm3(h + layer.ffn(h))
    torch.testing.assert_close(layer(y, memory, self_mask=c), want)


def test_copy_from_torch_refuses_another_form():
    # the same weights in a pre-norm and a post-norm layer compute different things
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=False)
    with pytest.raises(ValueError, match="norm_first differs"):
        EncoderLayer(D, H, FF, norm_first=True).load_from_torch(theirs)
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, activation="gelu", norm_first=True)
    with pytest.raises(ValueError, match="uses ReLU"):
        DecoderLayer(D, H, FF, norm_first=True).load_from_torch(theirs)
    with pytest.raises(TypeError, match="norm_first must be True"):
        EncoderLayer(D, H, FF, norm_first="False")


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = EncoderLayer(D, H, FF, norm_first=norm_first).load_from_torch(theirs).eval()
    x = torch.randn(3, 6, D)
    real = real_token_mask([6, 4, 2])  # (B, N) True = real token
    # our mask: True = may attend; torch's key padding mask: True = padding
    out_ours = ours(x, mask=real_key_mask(real))
    out_theirs = theirs(x, src_key_padding_mask=~real)
    assert torch.allclose(out_ours[real], out_theirs[real], atol=1e-5)
    # with a causal attention mask as well
    c = causal_mask(6)
    out_ours = ours(x, mask=c)
    out_theirs = theirs(x, src_mask=~c)
    assert torch.allclose(out_ours, out_theirs, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    torch.manual_seed(1)
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = DecoderLayer(D, H, FF, norm_first=norm_first).load_from_torch(theirs).eval()
    y, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    real = real_token_mask([7, 3])
    out_ours = ours(y, memory, self_mask=causal_mask(5), memory_mask=real_key_mask(real), need_weights=True)
    out_theirs = theirs(y, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~real)
    assert torch.allclose(out_ours, out_theirs, atol=1e-5)
    # cross-attention: queries from the decoder (5), keys from the memory (7); padding gets no weight
    assert ours.cross_weights.shape == (2, H, 5, 7)
    assert ours.cross_weights[1, :, :, 3:].abs().max() == 0
    assert ours.self_weights.triu(1).abs().max() == 0  # causal


def test_decoder_layer_errors_name_shapes():
    layer = DecoderLayer(D, H, FF)
    with pytest.raises(ValueError, match=r"memory must have last dimension d_model=16, got shape \(2, 7, 8\)"):
        layer(torch.randn(2, 5, D), torch.randn(2, 7, 8))
    with pytest.raises(ValueError, match="same batch size"):
        layer(torch.randn(2, 5, D), torch.randn(3, 7, D))
    with pytest.raises(ValueError, match=r"y must have 3 dimensions"):
        layer(torch.randn(5, D), torch.randn(2, 7, D))


# --- no silent wrong answer --------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan")])
def test_layer_norm_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match="eps must be"):
        layer_norm(torch.randn(2, D), torch.ones(D), torch.zeros(D), eps=eps)
    with pytest.raises(ValueError, match="eps must be"):
        LayerNorm(D, eps=eps)


def test_layer_norm_checks_its_arguments():
    with pytest.raises(ValueError, match=r"weight must have shape \(16,\)"):
        layer_norm(torch.randn(2, D), torch.ones(4), torch.zeros(4))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got NoneType"):
        layer_norm(None, torch.ones(D), torch.zeros(D))
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the module's parameters are torch.float32"):
        LayerNorm(D)(torch.randn(2, D, dtype=torch.float64))


def test_blocks_name_dtype_and_dropout_mistakes():
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        FeedForward(D, FF, dropout=1.5)
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        FeedForward(D, FF)(torch.randn(2, 3, D, dtype=torch.float64))
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        EncoderLayer(D, H, FF)(torch.randn(2, 3, D, dtype=torch.float64))
    with pytest.raises(TypeError, match="layer must be a torch.nn.TransformerEncoderLayer"):
        EncoderLayer(D, H, FF).load_from_torch(None)


def test_one_norm_first_default_for_every_class():
    # pre-norm everywhere: a layer, a stack and a model built with the defaults agree
    import dataclasses
    import inspect

    from companion.models import CaptionerConfig, TransformerConfig, ViT
    from companion.models.transformer import Decoder, Encoder

    defaults = {cls.__name__: inspect.signature(cls).parameters["norm_first"].default
                for cls in (EncoderLayer, DecoderLayer, Encoder, Decoder, ViT)}
    for config in (TransformerConfig, CaptionerConfig):
        defaults[config.__name__] = next(f.default for f in dataclasses.fields(config) if f.name == "norm_first")
    assert defaults == dict.fromkeys(defaults, True)
    assert EncoderLayer(D, H, FF).norm_first and isinstance(Encoder(1, D, H, FF).norm, LayerNorm)


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_with_a_cache_equals_the_causal_pass(norm_first):
    torch.manual_seed(0)
    layer = DecoderLayer(D, H, FF, norm_first=norm_first).eval()
    y, memory = torch.randn(2, 4, D), torch.randn(2, 5, D)
    full = layer(y, memory, self_mask=causal_mask(4))
    cache, steps = {}, []
    for t in range(4):
        steps.append(layer(y[:, t:t + 1], memory, cache=cache))
        assert cache["self"]["k"].shape == (2, H, t + 1, D // H)  # one more key per step
        assert cache["cross"]["k"].shape == (2, H, 5, D // H)  # the memory's keys, kept
        assert layer.self_weights.shape == (2, H, 1, t + 1) and layer.cross_weights.shape == (2, H, 1, 5)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # the memory's keys and values come from the cache after the first step: the memory passed is not read
    again = layer(y[:, :1], torch.zeros_like(memory), cache={"self": {}, "cross": cache["cross"]})
    torch.testing.assert_close(again, steps[0], atol=1e-6, rtol=1e-6)


def test_layers_keep_attention_weights_only_when_asked():
    x = torch.randn(2, 3, D)
    enc, dec = EncoderLayer(D, H, FF), DecoderLayer(D, H, FF)
    assert enc.attn_weights is None and dec.self_weights is None and dec.cross_weights is None
    enc(x)
    dec(x, x)
    assert enc.attn_weights is None and dec.self_weights is None and dec.cross_weights is None
    for norm_first in (True, False):
        enc = EncoderLayer(D, H, FF, norm_first=norm_first)
        enc(x, need_weights=True)
        assert enc.attn_weights.shape == (2, H, 3, 3)
        torch.testing.assert_close(enc.attn_weights.sum(-1), torch.ones(2, H, 3))
    assert DecoderLayer(D, H, FF).norm_first  # pre-norm by default, as EncoderLayer


def test_dropout_reaches_every_sublayer():
    enc, dec = EncoderLayer(D, H, FF, dropout=0.25), DecoderLayer(D, H, FF, dropout=0.25)
    assert enc.self_attn.dropout == enc.ffn.dropout.p == enc.dropout.p == 0.25
    assert dec.self_attn.dropout == dec.cross_attn.dropout == dec.ffn.dropout.p == dec.dropout.p == 0.25


def test_layer_norm_uses_its_eps_and_ffn_takes_any_rank():
    x = torch.randn(3, 5, D)
    norm = LayerNorm(D, eps=1.0)  # a large eps changes the result visibly
    torch.testing.assert_close(norm(x), layer_norm(x, norm.weight, norm.bias, eps=1.0))
    ffn = FeedForward(D, FF)
    torch.testing.assert_close(ffn(x[0]), ffn(x)[0])  # (N, d): every position alone


@pytest.mark.parametrize("make, message", [
    (lambda: LayerNorm(0), "^d_model must be"),
    (lambda: FeedForward(0, FF), "^d_model must be"),
    (lambda: FeedForward(D, 0), "^d_ff must be"),
    (lambda: LayerNorm(D)(torch.ones(2, D, dtype=torch.long)), "^x must be"),
    (lambda: FeedForward(D, FF)(torch.ones(2, D, dtype=torch.long)), "^x must be"),
    (lambda: EncoderLayer(D, H, FF)(torch.randn(3, D)), r"^x must have 3 dimensions \(batch, length, d_model\), got shape \(3, 16\)"),
    (lambda: layer_norm(torch.randn(2, D), [1.0] * D, torch.zeros(D)), "^weight must be"),
    (lambda: layer_norm(torch.randn(2, D), torch.ones(D), [0.0] * D), "^bias must be"),
    (lambda: layer_norm(torch.randn(2, D), torch.ones(D), torch.zeros(D + 1)), r"^bias must have shape \(16,\)"),
])
def test_block_errors_name_the_argument(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()
