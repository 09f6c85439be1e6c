"""companion.explorer's Python side: the layout it accepts (BertViz's), its errors, the data a
view carries (rounded to 3 decimals, only what it shows), its size and its MIME bundle. The
views in a browser: tests/test_explorer_browser.py."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import torch

from companion import explorer
from companion.explorer import MIME_TYPE, head_view, model_view


def weights(batch=1, heads=2, q=5, k=5, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.softmax(torch.randn(batch, heads, q, k, generator=g), -1) for _ in range(layers)]


def payload(view):
    """The JSON the page carries, parsed back from the view's HTML."""
    text = re.search(r'<script type="application/json" class="ax-data">(.*?)</script>', view.html(), re.S).group(1)
    return json.loads(text.replace("<\\/", "</"))


def test_self_attention_carries_every_layer_and_head_rounded_to_three_decimals():
    w = weights(heads=3, q=4, k=4, layers=2)
    view = head_view(w, list("abcd"))
    data = payload(view)
    assert data["layers"] == [1, 2] and data["heads"] == 3 and data["layer"] == 1  # the last layer first
    (kind,) = data["kinds"]
    assert kind["name"] == "self" and kind["q"] == kind["k"] == list("abcd")
    got = np.asarray(kind["w"]) / 1000  # (L, H, Q, K) in thousandths
    want = torch.stack([x[0] for x in w]).numpy()
    assert got.shape == want.shape == (2, 3, 4, 4)
    assert np.abs(got - want).max() <= 0.0005 + 1e-9
    assert np.array_equal(np.asarray(kind["w"]), np.rint(want * 1000).astype(int))
    np.testing.assert_allclose(view.rounded(), np.round(want, 3), atol=1e-12)


def test_the_batch_item_and_the_layers_are_chosen():
    w = weights(batch=3, layers=3)
    view = model_view(w, list("abcde"), item=2, include_layers=[0, 2])
    data = payload(view)
    assert data["mode"] == "model" and data["layers"] == [1, 3]
    want = torch.stack([w[0][2], w[2][2]]).numpy()
    np.testing.assert_allclose(np.asarray(data["kinds"][0]["w"]) / 1000, want, atol=0.0005 + 1e-9)
    np.testing.assert_allclose(view.weights["self"], want, rtol=1e-6)


def test_encoder_decoder_layout_keeps_queries_and_keys_apart():
    enc, dec, cross = weights(q=6, k=6), weights(q=3, k=3), weights(q=3, k=6)
    view = head_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross,
                     encoder_tokens=list("abcdef"), decoder_tokens=list("xyz"))
    kinds = {k["name"]: k for k in payload(view)["kinds"]}
    assert list(kinds) == ["encoder", "decoder", "cross"]
    assert kinds["cross"]["q"] == list("xyz") and kinds["cross"]["k"] == list("abcdef")
    assert np.asarray(kinds["cross"]["w"]).shape == (2, 2, 3, 6)
    only_cross = head_view(cross_attention=cross, encoder_tokens=list("abcdef"), decoder_tokens=list("xyz"))
    assert [k["name"] for k in payload(only_cross)["kinds"]] == ["cross"]


def test_numpy_arrays_are_accepted_like_tensors():
    w = weights()
    a = payload(head_view(w, list("abcde")))
    b = payload(head_view([x.numpy() for x in w], list("abcde")))
    assert a["kinds"] == b["kinds"]


@pytest.mark.parametrize("call, message", [
    (lambda: head_view(weights()[0], list("abcde")), r"one array of shape \(1, 2, 5, 5\): wrap it"),
    (lambda: head_view([torch.rand(2, 5, 5)], list("abcde")), r"4 dimensions .* got shape \(2, 5, 5\)"),
    (lambda: head_view([torch.rand(1, 2, 5, 5), torch.rand(1, 3, 5, 5)], list("abcde")),
     r"layer 0 is \(1, 2, 5, 5\), layer 1 is \(1, 3, 5, 5\)"),
    (lambda: head_view(weights(), list("abcd")), r"tokens has 4 tokens but the weights have 5 queries .*\(2, 2, 5, 5\)"),
    (lambda: head_view(weights(q=3, k=6), list("abc")), r"tokens has 3 tokens but the weights have 6 keys"),
    (lambda: head_view(cross_attention=weights(q=3, k=6), decoder_tokens=list("xyz")),
     r"encoder_tokens are needed: the weights have 6 keys"),
    (lambda: head_view(weights(batch=2), list("abcde"), item=2), r"item 2 is out of range .* batch size 2"),
    (lambda: head_view([2 * x for x in weights()], list("abcde")), r"in \[0, 1\], got values from"),
    (lambda: head_view([x * float("nan") for x in weights()], list("abcde")), r"non-finite"),
    (lambda: head_view(), r"no weights given"),
    (lambda: head_view(weights(), list("abcde"), cross_attention=weights()), r"not both"),
    (lambda: head_view(weights(), list("abcde"), heads=[2]), r"heads \[2\] must be indices below 2"),
    (lambda: head_view(weights(), list("abcde"), query=5), r"query 5 is out of range for 5 query tokens"),
    (lambda: head_view(weights(), list("abcde"), include_layers=[0], layer=1), r"layer 1 is not among .* \[0\]"),
    (lambda: head_view(encoder_attention=weights(layers=2), cross_attention=weights(layers=3, q=2),
                       encoder_tokens=list("abcde"), decoder_tokens=list("xy")), r"same layers and heads"),
])
def test_bad_input_gets_an_error_naming_the_shapes(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_a_view_that_would_be_too_large_is_refused_with_its_shape():
    big = [torch.full((1, 8, 100, 100), 0.01) for _ in range(2)]
    with pytest.raises(ValueError, match=r"kB .* \(2, 8, 100, 100\)"):
        head_view(big, [str(i) for i in range(100)])


def test_views_are_small_fast_and_namespaced():
    w = weights(heads=4, q=12, k=12, layers=2)
    start = time.perf_counter()
    views = [head_view(w, list("abcdefghijkl")), model_view(w, list("abcdefghijkl"))]
    bundles = [v._repr_mimebundle_() for v in views]
    seconds = time.perf_counter() - start
    assert seconds < 0.5, f"two views took {seconds:.2f} s"
    for view, bundle in zip(views, bundles, strict=True):
        page = bundle["text/html"]
        assert len(page.encode()) < 60_000  # renderer + style ~ 15 kB, 2 x 4 x 12 x 12 weights
        assert page.count(f'id="{view.id}"') == 1
        ids = re.findall(r'\bid="([^"]+)"', page)
        assert all(i.startswith(view.id) for i in ids), ids
        assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
        assert "require(" not in page
        assert bundle["image/png"].startswith(b"\x89PNG")
    assert views[0].id != views[1].id


def test_only_what_is_shown_travels_in_the_page():
    w = weights(heads=2, q=5, k=5, layers=4)
    one = len(head_view(w, list("abcde"), include_layers=[3]).html())
    four = len(head_view(w, list("abcde")).html())
    assert one < four
    numbers = re.findall(r"\d+\.\d+", json.dumps(payload(head_view(w, list("abcde")))["kinds"]))
    assert not numbers, "weights travel as integers in thousandths, not as long floats"


def test_the_bundle_keeps_full_precision_weights_for_the_notebook_file():
    w = weights()
    bundle = head_view(w, list("abcde"))._repr_mimebundle_()
    full = np.asarray(bundle[MIME_TYPE]["kinds"]["self"])
    np.testing.assert_allclose(full, torch.stack([x[0] for x in w]).numpy(), atol=1e-7)
    assert set(bundle) == {"text/html", "image/png", MIME_TYPE, "text/plain"}
    assert set(head_view(w, list("abcde"))._repr_mimebundle_(include={"text/html"})) == {"text/html"}


def test_the_static_png_shows_the_layers_and_heads_of_the_view():
    import io

    from matplotlib.image import imread

    w = weights(heads=3, q=4, k=4, layers=2)
    head = imread(io.BytesIO(head_view(w, list("abcd"))._repr_png_()))
    grid = imread(io.BytesIO(model_view(w, list("abcd"))._repr_png_()))
    assert grid.shape[0] > 1.8 * head.shape[0] and grid.shape[1] == head.shape[1]  # two layers, one
    fig = model_view(w, list("abcd")).figure()
    assert len(fig.axes) == 6 and fig.axes[0].get_title() == "layer 1, head 1"


def test_the_script_and_style_ship_inside_the_package():
    from importlib import resources

    files = resources.files(explorer)
    js = files.joinpath("explorer.js").read_text(encoding="utf-8")
    css = files.joinpath("explorer.css").read_text(encoding="utf-8")
    assert "window.companionExplorer" in js and ".ax-root" in css
    assert 'data-theme="dark"' in css  # the book's dark mode
    view = head_view(weights(), list("abcde")).html()
    assert js in view and css in view


@pytest.mark.slow
def test_the_wheel_ships_the_script_and_style(tmp_path):
    """pyproject's package-data: a wheel built from the repository holds explorer.js and .css."""
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    src = tmp_path / "src"  # a clean copy: no build/ left over from an earlier build
    shutil.copytree(root / "companion", src / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(root / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"companion/explorer/explorer.js", "companion/explorer/explorer.css"} <= set(names), names
