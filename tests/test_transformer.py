"""The companion's Transformer equals one built from PyTorch's modules after copying weights."""

import math

import pytest
import torch
from torch import nn

from companion.models.transformer import Transformer, TransformerConfig
from companion.positional import sinusoidal_encoding

D, H, FF = 16, 4, 32


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
