"""Patches, patch embedding, ViT and CNN shapes, digits data."""

import pytest
import torch

from companion.data.digits import digits_split
from companion.data.transforms import shift_images
from companion.models.cnn import SmallCNN
from companion.models.vit import PatchEmbedding, ViT, patchify, unpatchify
from companion.profiling import count_parameters


def test_patchify_shapes_and_round_trip():
    x = torch.randn(2, 3, 8, 12)
    p = patchify(x, 4)
    assert p.shape == (2, 6, 4 * 4 * 3)  # N = HW/p² = 96/16
    assert torch.equal(unpatchify(p, 4, 8, 12), x)
    # the first patch is the top-left p×p block, flattened as (p1 p2 c)
    assert torch.equal(p[0, 0], x[0, :, :4, :4].permute(1, 2, 0).reshape(-1))
    # patches go row by row: the second is the block to the right of the first
    assert torch.equal(p[0, 1], x[0, :, :4, 4:8].permute(1, 2, 0).reshape(-1))


def test_patchify_errors():
    with pytest.raises(ValueError, match=r"multiples of patch_size=3.*\(1, 1, 8, 8\)"):
        patchify(torch.randn(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="4 dimensions"):
        patchify(torch.randn(8, 8), 2)
    with pytest.raises(ValueError, match="do not tile"):
        unpatchify(torch.randn(1, 5, 4), 2, 4, 4)


def test_patch_embedding_equals_strided_conv():
    torch.manual_seed(0)
    emb = PatchEmbedding(3, 4, 10)
    x = torch.randn(2, 3, 8, 8)
    conv = emb.as_conv()
    assert conv.kernel_size == (4, 4) and conv.stride == (4, 4)
    via_conv = conv(x).flatten(2).transpose(1, 2)  # (B, d, h, w) -> (B, hw, d)
    assert torch.allclose(emb(x), via_conv, atol=1e-5)


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_vit_shapes_and_weights(pool):
    vit = ViT(image_size=8, patch_size=2, in_channels=1, num_classes=10, d_model=32, depth=2, num_heads=4,
              d_ff=64, pool=pool)
    x = torch.randn(5, 1, 8, 8)
    assert vit(x, need_weights=True).shape == (5, 10)
    n = 16 + (pool == "cls")
    assert vit.encoder.layers[-1].attn_weights.shape == (5, 4, n, n)


def test_vit_errors():
    with pytest.raises(ValueError, match="pool must be"):
        ViT(8, 2, 1, 10, pool="max")
    with pytest.raises(ValueError, match="multiple of patch_size"):
        ViT(8, 3, 1, 10)
    with pytest.raises(ValueError, match=r"8×8, got shape \(1, 1, 16, 16\)"):
        ViT(8, 2, 1, 10)(torch.randn(1, 1, 16, 16))


def test_cnn_and_vit_parameter_counts_are_close():
    cnn = SmallCNN(1, 10, channels=(32, 64))
    vit = ViT(8, 2, 1, 10, d_model=64, depth=2, num_heads=4, d_ff=128)
    ratio = count_parameters(vit) / count_parameters(cnn)
    assert 0.67 < ratio < 1.5, ratio
    assert SmallCNN(1, 10)(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_cnn_errors():
    with pytest.raises(ValueError, match=r"1 channels, got shape \(2, 3, 8, 8\)"):
        SmallCNN(1, 10)(torch.randn(2, 3, 8, 8))
    with pytest.raises(TypeError, match="nn.Module"):
        count_parameters("cnn")


def test_digits_split_and_shift():
    s = digits_split(100, 50, seed=0)
    assert s.x_train.shape == (100, 1, 8, 8) and s.y_test.shape == (50,)
    assert 0 <= s.x_train.min() and s.x_train.max() <= 1
    assert torch.equal(digits_split(300, 50, seed=0).x_test, s.x_test)  # same test set for any n_train
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    right = shift_images(x, 1, 0)
    assert torch.equal(right[..., 1:], x[..., :-1]) and right[..., 0].abs().sum() == 0
    assert torch.equal(shift_images(shift_images(x, 0, -1), 0, 1)[..., 1:, :], x[..., 1:, :])
    with pytest.raises(ValueError, match="n_train \\+ n_test"):
        digits_split(2000)


def test_vit_and_cnn_name_bad_sizes_and_dtypes():
    for p, error in ((0, ValueError), (-2, ValueError), (1.5, TypeError)):  # patch_size=0 was a ZeroDivisionError
        with pytest.raises(error, match="patch_size must be"):
            ViT(8, p, 1, 10)
    vit = ViT(8, 2, 1, 10, d_model=16, depth=1, num_heads=2, d_ff=32)
    with pytest.raises(TypeError, match="images must be a torch.Tensor, got NoneType"):
        vit(None)
    with pytest.raises(TypeError, match="images has dtype torch.float64 but the module's parameters are torch.float32"):
        vit(torch.randn(1, 1, 8, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="channels must be a tuple of stage widths"):
        SmallCNN(1, 10, channels=5)
    with pytest.raises(TypeError, match="images has dtype torch.float64"):
        SmallCNN(1, 10, channels=(4,))(torch.randn(1, 1, 8, 8, dtype=torch.float64))


# --- ViT against one built from torch's own modules; pooling; positions ---------------------

def _vit(pool="mean"):
    torch.manual_seed(0)
    return ViT(8, 2, 1, 10, d_model=16, depth=2, num_heads=2, d_ff=32, pool=pool).eval()


def test_vit_equals_one_built_from_torch_modules():
    from _torch_reference import TorchViT

    torch.manual_seed(1)
    theirs = TorchViT(8, 2, 1, 10, d_model=16, depth=2, heads=2, d_ff=32).eval()
    with torch.no_grad():
        theirs.pos.normal_()  # non-zero positions, so dropping them shows
        for m in theirs.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
    ours = _vit()
    with torch.no_grad():
        ours.patch_embed.proj.load_state_dict(theirs.embed.state_dict())
        ours.pos_embed.copy_(theirs.pos)
        for mine, their in zip(ours.encoder.layers, theirs.encoder.layers, strict=True):
            mine.load_from_torch(their)
        ours.encoder.norm.load_state_dict(theirs.encoder.norm.state_dict())
        ours.head.load_state_dict(theirs.head.state_dict())
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)


def test_vit_cls_pooling_reads_the_class_token():
    vit = _vit("cls")
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        z = vit.features(x)  # (B, 1 + N, d): the [class] token first
        assert z.shape == (3, 17, 16)
        torch.testing.assert_close(vit(x), vit.head(z[:, 0]))
        assert not torch.allclose(vit(x), vit.head(z[:, -1]))


def test_vit_adds_its_position_embedding():
    vit = _vit()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        vit.pos_embed.normal_()
        want = vit.encoder(vit.patch_embed(x) + vit.pos_embed)
        torch.testing.assert_close(vit.features(x), want)
        # the positions are what tell patches apart: swapping two patches changes the output ...
        swapped = x.clone()
        swapped[..., :2, :2], swapped[..., :2, 2:4] = x[..., :2, 2:4], x[..., :2, :2]
        assert not torch.allclose(vit(x), vit(swapped), atol=1e-4)
        # ... and without them the mean-pooled ViT cannot see the swap
        vit.pos_embed.zero_()
        torch.testing.assert_close(vit(x), vit(swapped), atol=1e-5, rtol=1e-4)
