"""The companion's Transformer blocks equal PyTorch's after copying weights."""

import math

import pytest
import torch
from torch import nn

from companion.masks import causal_mask, key_mask, padding_mask
from companion.models.transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    Residual,
    Transformer,
    TransformerConfig,
    layer_norm,
)
from companion.positional import sinusoidal_encoding

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


def test_ffn_and_residual_shapes():
    x = torch.randn(2, 7, D)
    assert FeedForward(D, FF)(x).shape == x.shape
    post, pre = Residual(D, norm_first=False), Residual(D, norm_first=True)
    f = lambda h: 2 * h
    assert torch.allclose(post(x, f), post.norm(3 * x))
    assert torch.allclose(pre(x, f), x + 2 * pre.norm(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = EncoderLayer(D, H, FF, norm_first=norm_first).load_from_torch(theirs).eval()
    x = torch.randn(3, 6, D)
    real = padding_mask([6, 4, 2])  # (B, N) True = real token
    # our mask: True = may attend; torch's key padding mask: True = padding
    out_ours = ours(x, mask=key_mask(real))
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
    real = padding_mask([7, 3])
    out_ours = ours(y, memory, self_mask=causal_mask(5), memory_mask=key_mask(real), need_weights=True)
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


def small_model(norm_first=True, pe_base=10000.0):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=11, d_model=D, num_heads=H, d_ff=FF, num_encoder_layers=2,
                                         num_decoder_layers=2, norm_first=norm_first, pe_base=pe_base)).eval()


def test_transformer_logits_shape_and_padding_invariance():
    model = small_model()
    src = torch.tensor([[3, 4, 5, 0, 0], [6, 7, 8, 9, 10]])
    tgt_in = torch.tensor([[1, 5, 4], [1, 10, 9]])
    logits = model(src, tgt_in)
    assert logits.shape == (2, 3, 11)
    # extra padding on the source changes nothing
    longer = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    assert torch.allclose(model(longer, tgt_in), logits, atol=1e-5)
    # the decoder is causal: changing a later target token leaves earlier logits alone
    other = tgt_in.clone()
    other[:, 2] = 3
    assert torch.allclose(model(src, other)[:, :2], logits[:, :2], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_with_and_without_cache_equals_full_decode(norm_first):
    model = small_model(norm_first)
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt_in = torch.tensor([[1, 5, 4, 3], [1, 10, 9, 8]])
    full = model(src, tgt_in)  # (B, T, V)
    for use_cache in (True, False):
        model.use_cache = use_cache
        state = model.start(src)
        steps = []
        for t in range(tgt_in.shape[1]):
            logits, state = model.step(tgt_in[:, t], state)
            steps.append(logits)
        assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5), use_cache


def test_transformer_without_positions_is_permutation_equivariant_in_the_encoder():
    model = small_model(pe_base=None)
    src = torch.tensor([[3, 4, 5, 6]])
    mem, _ = model.encode(src)
    mem_rev, _ = model.encode(src.flip(1))
    assert torch.allclose(mem.flip(1), mem_rev, atol=1e-5)


def test_transformer_input_errors():
    model = small_model()
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ids must be in \[0, 11\), got range \[0, 12\]"):
        model(torch.tensor([[12, 0]]), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src must have 2 dimensions"):
        model(torch.ones(3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="TransformerConfig"):
        Transformer({"vocab_size": 3})


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


@pytest.mark.parametrize("kw, error, message", [
    ({"pad_id": -1}, ValueError, "pad_id must be >= 0"),
    ({"pad_id": 11}, ValueError, r"pad_id=11 must be a token of the vocabulary \[0, 11\)"),
    ({"pad_id": 1.0}, TypeError, "pad_id must be an int"),
    ({"dropout": 1.5}, ValueError, r"dropout must be in \[0, 1\)"),
])
def test_config_mistakes(kw, error, message):
    with pytest.raises(error, match=message):
        Transformer(TransformerConfig(vocab_size=11, **kw))


def test_empty_sequences_and_bad_steps_are_named():
    model = small_model()
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    with pytest.raises(ValueError, match=r"src must hold at least one token per sequence, got shape \(2, 0\)"):
        model(src[:, :0], torch.ones(2, 3, dtype=torch.long))
    state = model.start(src)
    with pytest.raises(ValueError, match=r"prev ids must be in \[0, 11\), got range \[1, 11\]"):
        model.step(torch.tensor([1, 11]), state)
    with pytest.raises(TypeError, match="prev must hold integer token ids, got dtype torch.float32"):
        model.step(torch.tensor([1.0, 2.0]), state)
    with pytest.raises(ValueError, match=r"prev must hold one token per sequence: shape \(2,\), got \(3,\)"):
        model.step(torch.tensor([1, 2, 3]), state)


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_past_max_len_says_so(use_cache):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=11, d_model=D, num_heads=H, d_ff=FF, num_encoder_layers=1,
                                          num_decoder_layers=1, max_len=4)).eval()
    model.use_cache = use_cache
    state = model.start(torch.tensor([[3, 4, 5]]))
    prev = torch.tensor([1])
    for _ in range(4):  # positions 0..3 fit
        logits, state = model.step(prev, state)
    assert torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="max_len=4"):
        model.step(prev, state)


def test_cached_decoding_leaves_earlier_states_valid():
    model = small_model()
    src = torch.tensor([[3, 4, 5, 0]])
    state0 = model.start(src)
    a, state1 = model.step(torch.tensor([1]), state0)
    model.step(torch.tensor([5]), state1)  # must not change state1
    b, _ = model.step(torch.tensor([1]), state0)
    torch.testing.assert_close(a, b)
    c, _ = model.step(torch.tensor([5]), state1)
    full = model(src, torch.tensor([[1, 5]]))
    torch.testing.assert_close(c, full[:, 1], atol=1e-5, rtol=1e-5)


# --- the whole model against one built from torch's own modules ---------------------------

def _copy_into(ours: Transformer, theirs) -> None:
    """Copy the torch-built model's weights into ours (embeddings, layers, final norms, generator)."""
    with torch.no_grad():
        ours.src_embed.weight.copy_(theirs.src_embed.weight)
        ours.tgt_embed.weight.copy_(theirs.tgt_embed.weight)
        ours.generator.weight.copy_(theirs.generator.weight)
        ours.generator.bias.copy_(theirs.generator.bias)
        for mine, their in zip(ours.encoder.layers, theirs.core.encoder.layers, strict=True):
            mine.load_from_torch(their)
        for mine, their in zip(ours.decoder.layers, theirs.core.decoder.layers, strict=True):
            mine.load_from_torch(their)
        for mine, their in ((ours.encoder.norm, theirs.core.encoder.norm), (ours.decoder.norm, theirs.core.decoder.norm)):
            if their is not None:
                mine.weight.copy_(their.weight)
                mine.bias.copy_(their.bias)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's nested-tensor notices
@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_equals_one_built_from_torch_modules(norm_first):
    from _torch_reference import TorchTransformer

    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=13, d_model=D, num_heads=H, d_ff=FF, num_encoder_layers=2,
                               num_decoder_layers=2, norm_first=norm_first, max_len=16)
    theirs = TorchTransformer(config).eval()
    if not norm_first:  # post-norm stacks have no final LayerNorm (nn.Transformer always adds one)
        theirs.core.encoder.norm = theirs.core.decoder.norm = None
    with torch.no_grad():  # non-trivial LayerNorm parameters, so a missing norm shows
        for m in theirs.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
    ours = Transformer(config).eval()
    _copy_into(ours, theirs)
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]])
    tgt_in = torch.tensor([[1, 5, 4, 3, 7], [1, 10, 9, 8, 2]])
    pad = src == config.pad_id  # torch's key padding mask: True = padding
    with torch.no_grad():
        s = theirs.src_embed(src) * theirs.scale + theirs.pe[: src.shape[1]]
        t = theirs.tgt_embed(tgt_in) * theirs.scale + theirs.pe[: tgt_in.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        want = theirs.generator(theirs.core(s, t, tgt_mask=causal, src_key_padding_mask=pad,
                                            memory_key_padding_mask=pad))
        got = ours(src, tgt_in)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    if norm_first:  # also without padding, through the benchmark model's own forward
        torch.testing.assert_close(ours(src[1:], tgt_in[1:]), theirs(src[1:], tgt_in[1:]), atol=1e-5, rtol=1e-4)


def test_embedding_is_scaled_by_sqrt_d_then_positions_added():
    model = small_model()
    ids = torch.tensor([[3, 4, 5]])
    want = model.src_embed(ids) * math.sqrt(D) + sinusoidal_encoding(3, D)
    torch.testing.assert_close(model.embed(ids, model.src_embed), want)
    torch.testing.assert_close(model.embed(ids[:, 1:], model.src_embed, offset=1), want[:, 1:])


def test_pre_norm_stack_ends_with_a_layer_norm():
    # pre-norm leaves the residual stream un-normalised; the stack's last LayerNorm fixes it
    from companion.models.transformer import Decoder, Encoder

    torch.manual_seed(0)
    x = torch.randn(2, 5, D) * 3 + 1
    for stack, args in ((Encoder(2, D, H, FF, norm_first=True), (x,)),
                        (Decoder(2, D, H, FF, norm_first=True), (x, torch.randn(2, 4, D)))):
        y = stack.eval()(*args)
        torch.testing.assert_close(y.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
        torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
