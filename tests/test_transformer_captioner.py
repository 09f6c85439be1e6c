"""The Transformer captioner of chapter 9 and the helpers that measure where it looks."""

import math

import pytest
import torch
from torch import nn

import companion
from companion.data import make_shapes
from companion.data.shapes import CAPTION_VOCAB
from companion.decoding import beam_search, generate, greedy_decode
from companion.masks import causal_mask
from companion.models import CaptionerConfig, TransformerCaptioner, patchify
from companion.models.transformer_captioner import object_attention, object_masks, patch_coverage, word_objects
from companion.positional import sinusoidal_encoding

V = len(CAPTION_VOCAB)


def make_model(seed=0, **kw):
    torch.manual_seed(seed)
    return TransformerCaptioner(CaptionerConfig(vocab_size=V, **kw)).eval()


@pytest.fixture(scope="module")
def batch():
    data = make_shapes(6, seed=3)
    return data.images, data.tokens


def test_shapes(batch):
    images, tokens = batch
    model = make_model(d_model=32, num_heads=2, num_decoder_layers=3)
    with torch.no_grad():
        memory = model.encode(images)
        logits = model(images, tokens[:, :-1])
    assert model.num_patches == 16 and memory.shape == (6, 16, 32)
    assert logits.shape == (6, tokens.shape[1] - 1, V)
    small = make_model(patch_size=4)
    with torch.no_grad():
        assert small.encode(images).shape == (6, 64, 64)


def test_cross_attention_weights_shape_and_rows(batch):
    images, tokens = batch
    model = make_model(num_heads=4, num_decoder_layers=2)
    w = model.cross_attention(images, tokens[:, :-1])
    assert w.shape == (6, 2, 4, tokens.shape[1] - 1, 16)  # (B, L, H, T, N)
    companion.checks.check_attention_weights(w)
    assert w.std() > 0  # not all equal: the weights depend on queries and keys


def test_causal_mask_hides_the_future(batch):
    images, tokens = batch
    model = make_model()
    t_in = tokens[:, :-1]
    changed = t_in.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % V
    with torch.no_grad():
        a, b = model(images, t_in), model(images, changed)
    assert torch.equal(a[:, :4], b[:, :4]), "earlier positions must not see later words"
    assert not torch.allclose(a[:, 4:], b[:, 4:]), "the changed positions themselves do change"


def test_cached_steps_equal_teacher_forcing_and_keep_the_cross_weights(batch):
    images, tokens = batch
    model = make_model()
    t_in = tokens[:, :-1]
    with torch.no_grad():
        full = model(images, t_in)
        teacher = model.cross_attention(images, t_in)  # (B, L, H, T, N)
        state = model.start(images)
        for t in range(t_in.shape[1]):
            logits, state = model.step(t_in[:, t], state)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-4)
            assert state["cross"].shape == (6, 2, 4, 16)  # (B, L, H, N)
            torch.testing.assert_close(state["cross"], teacher[:, :, :, t], atol=1e-5, rtol=1e-4)


def test_step_keeps_the_old_state_valid(batch):
    images, _ = batch
    model = make_model()
    with torch.no_grad():
        s0 = model.start(images)
        prev = torch.full((6,), CAPTION_VOCAB.start_id)
        a, s1 = model.step(prev, s0)
        b, _ = model.step(prev, s0)  # the same step again from the old state
    torch.testing.assert_close(a, b)
    assert s0["t"] == 0 and s1["t"] == 1 and s0["caches"][0] == {}


def test_greedy_equals_beam_search_with_one_beam():
    torch.manual_seed(0)
    model = TransformerCaptioner(CaptionerConfig(vocab_size=13)).eval()
    images = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        model.patch_embed.proj.weight.mul_(10.0)  # images that differ more
        model.generator.bias[2] += 0.5  # and <end> likely enough: rows end at different steps
        g = greedy_decode(model.step, model.start(images), 1, 2, 9, batch_size=4)
        b = beam_search(model.step, model.start(images), 1, 2, 9, batch_size=4, beam_size=1)
        tokens = generate(model, images, bos_id=1, eos_id=2, max_len=9)
    assert torch.equal(g.tokens, b.tokens) and torch.equal(g.tokens, tokens)
    torch.testing.assert_close(g.log_prob, b.log_prob)
    assert len(set(g.lengths.tolist())) > 1, "the test needs rows of different lengths"


def test_generate_keeps_the_cross_attention_of_every_step(batch):
    images, _ = batch
    model = make_model()
    with torch.no_grad():
        tokens, kept = generate(model, images, bos_id=1, eos_id=2, max_len=5, keep="cross")
    assert kept.shape == (6, tokens.shape[1], 2, 4, 16)
    companion.checks.check_attention_weights(kept)


@pytest.mark.parametrize("num_encoder_layers", [0, 1, 2])
def test_agrees_with_a_model_built_from_torch_modules(batch, num_encoder_layers):
    """Conv2d patches + nn.TransformerEncoder + nn.TransformerDecoder, weights copied in."""
    images, tokens = batch
    d, H, ff, L = 32, 4, 48, 2
    model = make_model(d_model=d, num_heads=H, d_ff=ff, num_encoder_layers=num_encoder_layers,
                       num_decoder_layers=L)
    torch.manual_seed(5)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, H, ff, 0.0, batch_first=True, norm_first=True),
                                L, norm=nn.LayerNorm(d)).eval()
    for mine, theirs in zip(model.decoder.layers, dec.layers, strict=True):
        mine.load_from_torch(theirs)
    model.decoder.norm.load_state_dict(dec.norm.state_dict())
    enc = None
    if num_encoder_layers:
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, H, ff, 0.0, batch_first=True, norm_first=True),
                                    num_encoder_layers, norm=nn.LayerNorm(d), enable_nested_tensor=False).eval()
        for mine, theirs in zip(model.encoder.layers, enc.layers, strict=True):
            mine.load_from_torch(theirs)
        model.encoder.norm.load_state_dict(enc.norm.state_dict())
    t_in = tokens[:, :-1]
    T = t_in.shape[1]
    with torch.no_grad():
        x = model.patch_embed.as_conv()(images).flatten(2).transpose(1, 2) + model.patch_pos  # (B, N, d) row by row
        memory = enc(x) if enc is not None else x
        y = model.tgt_embed(t_in) * math.sqrt(d) + sinusoidal_encoding(T, d)
        expected = model.generator(dec(y, memory, tgt_mask=~causal_mask(T)))  # torch: True = blocked
        got = model(images, t_in)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_validation():
    with pytest.raises(TypeError, match="CaptionerConfig"):
        TransformerCaptioner({"vocab_size": V})
    with pytest.raises(ValueError, match="multiple of patch_size"):
        TransformerCaptioner(CaptionerConfig(vocab_size=V, image_size=30, patch_size=8))
    with pytest.raises(ValueError, match="num_encoder_layers"):
        TransformerCaptioner(CaptionerConfig(vocab_size=V, num_encoder_layers=-1))
    model = make_model()
    with pytest.raises(ValueError, match=r"\(B, 3, 32, 32\), got \(2, 3, 16, 16\)"):
        model.encode(torch.rand(2, 3, 16, 16))
    with pytest.raises(ValueError, match=r"must be in \[0, 14\)"):
        model(torch.rand(2, 3, 32, 32), torch.full((2, 3), V))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.rand(2, 3, 32, 32), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="same batch size"):
        model(torch.rand(2, 3, 32, 32), torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="beyond max_len=32"):
        model(torch.rand(1, 3, 32, 32), torch.zeros(1, 33, dtype=torch.long))


# --- the measurement helpers ------------------------------------------------------------------

def test_object_masks_on_a_drawn_image():
    img = torch.zeros(2, 3, 16, 16)
    img[0, 0, 2:5, 3:6] = 0.9  # red block in the top half ...
    img[0, 2, 10:14, 4:7] = 0.95  # ... above a blue block in the bottom half
    img[1, 1, 6:9, 9:12] = 0.8  # one green block
    img += 0.05 * torch.rand(img.shape)
    masks = object_masks(img, torch.tensor([2, 1]), torch.tensor([0, -1]))
    assert masks.shape == (2, 2, 16, 16) and masks.dtype == torch.bool
    want = torch.zeros(2, 2, 16, 16, dtype=torch.bool)
    want[0, 0, 2:5, 3:6] = want[0, 1, 10:14, 4:7] = want[1, 0, 6:9, 9:12] = True
    assert torch.equal(masks, want)
    left = torch.zeros(1, 3, 16, 16)
    left[0, 0, 5:8, 2:5] = left[0, 1, 5:8, 10:13] = 0.9  # "left of": split by columns
    m = object_masks(left, torch.tensor([2]), torch.tensor([1]))
    assert m[0, 0, :, :8].sum() == 9 and m[0, 0, :, 8:].sum() == 0 and m[0, 1, :, 8:].sum() == 9


def test_object_masks_on_generated_shapes():
    data = make_shapes(300, seed=11)
    masks = object_masks(data.images, data.n_shapes, data.relation)
    fg = data.images.max(1).values > 0.5
    assert torch.equal(masks.any(1), fg), "every bright pixel belongs to one object"
    assert not (masks[:, 0] & masks[:, 1]).any()
    pixels = masks.sum((2, 3))  # (B, 2)
    assert (pixels[:, 0] > 0).all()
    assert torch.equal(pixels[:, 1] > 0, data.n_shapes == 2)
    r_min = 0.1 * 32  # the smallest radius: a shape covers at least ~the triangle's area
    assert pixels[pixels > 0].min() >= 0.5 * r_min**2


def test_object_masks_validation():
    with pytest.raises(ValueError, match="n_shapes must have shape"):
        object_masks(torch.rand(2, 3, 16, 16), torch.tensor([1]), torch.tensor([0, 0]))


def test_patch_coverage_follows_patchify_order():
    torch.manual_seed(0)
    mask = torch.rand(3, 16, 24) > 0.7  # (B, H, W), not square
    cov = patch_coverage(mask, 4)
    assert cov.shape == (3, 24)
    expected = patchify(mask.float()[:, None], 4).mean(-1)  # one channel: the mean of each patch
    torch.testing.assert_close(cov, expected)
    one = torch.zeros(8, 8, dtype=torch.bool)
    one[0:2, 4:8] = True  # half of the top right 4×4 patch
    torch.testing.assert_close(patch_coverage(one, 4), torch.tensor([0.0, 0.5, 0.0, 0.0]))
    with pytest.raises(ValueError, match="tile"):
        patch_coverage(torch.zeros(10, 8, dtype=torch.bool), 4)


def test_word_objects():
    v = CAPTION_VOCAB
    rows = [["a", "red", "circle", "above", "a", "blue", "square"], ["a", "green", "triangle", "left", "of", "a",
                                                                     "red", "circle"], ["a", "yellow", "square"]]
    ids, _ = v.encode_batch(rows, end=True)
    named, relational = word_objects(ids)
    assert named.tolist()[0] == [-1, 0, 0, -1, -1, 1, 1, -1, -1]
    assert named.tolist()[1] == [-1, 0, 0, -1, -1, -1, 1, 1, -1]
    assert named.tolist()[2] == [-1, 0, 0, -1, -1, -1, -1, -1, -1]
    assert relational.tolist()[0] == [False, False, False, True] + [False] * 5
    assert relational.tolist()[1] == [False, False, False, True, True] + [False] * 4
    assert not relational[2].any()


def test_object_attention():
    w = torch.tensor([[[0.5, 0.25, 0.25, 0.0], [0.0, 0.0, 0.1, 0.9]]])  # (B=1, T=2, N=4)
    masks = torch.zeros(1, 2, 4, 4, dtype=torch.bool)  # 2×2 patches of 2×2 pixels
    masks[0, 0, 0, 0] = True  # object 0 touches patch 0
    masks[0, 1, 3, 1:3] = True  # object 1 touches patches 2 and 3
    mass = object_attention(w, masks, 2)
    torch.testing.assert_close(mass, torch.tensor([[[0.5, 0.25], [0.0, 1.0]]]))
    with pytest.raises(ValueError, match="do not match"):
        object_attention(w, masks, 1)
