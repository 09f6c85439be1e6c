"""The architecture diagrams show the shapes of the models they claim to draw.

Each diagram's shapes are checked three ways: against the shapes that forward hooks observe
in a separate forward pass of the same model (module by module, call by call), against a
table computed here from the model's configuration, and in the drawn figure's text.
"""

from __future__ import annotations

import re
import shutil

import matplotlib
import pytest
import torch
from conftest import needs_dot
from torch import nn

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from companion import diagrams  # noqa: E402
from companion.models import (  # noqa: E402
    GPT,
    GPTConfig,
    ImageCaptioner,
    Seq2Seq,
    ShapesCNN,
    Transformer,
    TransformerConfig,
    ViT,
)
from companion.multihead import MultiHeadAttention  # noqa: E402


def _tensors(data) -> list[tuple[int, ...]]:
    """Shapes of the tensors in nested args/kwargs/outputs, in order."""
    if isinstance(data, torch.Tensor):
        return [tuple(data.shape)]
    if isinstance(data, dict):
        return [s for v in data.values() for s in _tensors(v)]
    if isinstance(data, (list, tuple)):
        return [s for v in data for s in _tensors(v)]
    return []


def hook_shapes(model: nn.Module, run) -> dict[str, list[dict]]:
    """Run ``run()`` with a forward hook on every module: per module name, one entry per call
    with the shapes of its tensor inputs (args, then kwargs) and outputs."""
    seen: dict[str, list[dict]] = {}
    handles = []
    for name, module in model.named_modules():
        def hook(mod, args, kwargs, out, name=name):
            seen.setdefault(name, []).append({"input": _tensors([args, kwargs]), "output": _tensors(out)})
        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return seen


def assert_matches_hooks(diagram, seen, prefix=""):
    """Every block read from a module call has the shape that the hooks saw there."""
    checked = 0
    for block in diagram.blocks:
        sources = [(block.label, block.shape, block.source)]
        sources += [(f"{block.label}: {lab}", shape, src) for lab, _, shape, src in block.extras]
        for label, shape, source in sources:
            if source[0] not in ("input", "output"):
                continue
            side, path, index, call = source
            path = path[len(prefix):] if path.startswith(prefix) else path
            assert path in seen, f"{label}: module {path!r} was never called"
            assert shape == seen[path][call][side][index], \
                f"{label}: diagram says {shape}, the hooks saw {seen[path][call][side][index]}"
            checked += 1
    return checked


def assert_drawn(diagram, expected):
    """The figure shows every block's symbolic and recorded shape, and no other shape."""
    fig = diagram.draw()
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    plt.close(fig)
    for block in diagram.blocks:
        assert block.shape_text() in texts, f"{block.label}: {block.shape_text()!r} is not drawn"
    drawn = {tuple(int(n) for n in m.split(",") if n.strip())
             for t in texts for m in re.findall(r"= \(([\d, ]+)\)", t)}
    allowed = set(expected.values())
    assert drawn <= allowed, f"drawn shapes that the model does not have: {drawn - allowed}"


def assert_expected(diagram, expected):
    shapes = {b.key: b.shape for b in diagram.blocks}
    shapes.update({f"{b.key}.{lab}": s for b in diagram.blocks for lab, _, s, _ in b.extras})
    assert shapes == expected


# --- the six diagrams -----------------------------------------------------------------------

def test_transformer_diagram():
    c = TransformerConfig(vocab_size=13, d_model=24, num_heads=3, d_ff=40, num_encoder_layers=2,
                          num_decoder_layers=1)
    model = Transformer(c).train()
    src, tgt = torch.randint(1, 13, (2, 9)), torch.randint(1, 13, (2, 7))
    d = diagrams.transformer_diagram(model, src, tgt)
    assert model.training, "the model's mode is restored"
    B, N, T, D, H, F, V = 2, 9, 7, 24, 3, 40, 13
    expected = {"src": (B, N), "src_embed": (B, N, D), "enc_self": (B, N, D), "enc_self.weights": (B, H, N, N),
                "enc_ffn": (B, N, D), "enc_ffn.hidden": (B, N, F), "memory": (B, N, D), "tgt": (B, T),
                "tgt_embed": (B, T, D), "dec_self": (B, T, D), "dec_self.weights": (B, H, T, T),
                "cross": (B, T, D), "cross.weights": (B, H, T, N), "dec_ffn": (B, T, D), "logits": (B, T, V)}
    assert_expected(d, expected)
    seen = hook_shapes(model, lambda: model.eval()(src, tgt, need_weights=True))
    assert assert_matches_hooks(d, seen) == 15
    assert seen[""][0]["output"] == [d.shape("logits")]  # the model's own output
    assert [g.label for g in d.groups] == ["encoder layer × 2", "decoder layer × 1"]
    assert d.shape("cross", "weights") == (B, H, T, N)
    with pytest.raises(KeyError, match="no extra 'nope'"):
        d.shape("cross", "nope")
    assert_drawn(d, expected)


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_gpt_diagram(positions):
    c = GPTConfig(vocab_size=11, context=12, d_model=24, num_heads=3, num_layers=2, d_ff=40, positions=positions)
    model = GPT(c).train()
    ids = torch.randint(0, 11, (2, 9))
    d = diagrams.gpt_diagram(model, ids)
    assert model.training, "the model's mode is restored"
    B, T, D, H, F, V = 2, 9, 24, 3, 40, 11
    expected = {"ids": (B, T), "embed": (B, T, D), "attn": (B, T, D), "attn.weights": (B, H, T, T),
                "ffn": (B, T, D), "ffn.hidden": (B, T, F), "norm": (B, T, D), "logits": (B, T, V)}
    if positions == "learned":
        expected["pos"] = (B, T, D)
    assert_expected(d, expected)
    seen = hook_shapes(model, lambda: model.eval()(ids, need_weights=True))
    assert assert_matches_hooks(d, seen) == len(expected)
    assert seen[""][0]["output"] == [d.shape("logits")]  # the model's own output
    assert [g.label for g in d.groups] == ["block × 2, causal mask"]
    assert_drawn(d, expected)
    with pytest.raises(TypeError, match="companion GPT"):
        diagrams.gpt_diagram(nn.Linear(2, 2), ids)


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_vit_diagram(pool):
    model = ViT(image_size=12, patch_size=3, in_channels=2, num_classes=7, d_model=20, depth=3, num_heads=4,
                d_ff=36, pool=pool)
    images = torch.randn(3, 2, 12, 12)
    d = diagrams.vit_diagram(model, images)
    B, N, n, D, H, F, K = 3, 16, 16 + (pool == "cls"), 20, 4, 36, 7
    expected = {"image": (B, 2, 12, 12), "patches": (B, N, 3 * 3 * 2), "embed": (B, N, D), "tokens": (B, n, D),
                "self_attn": (B, n, D), "self_attn.weights": (B, H, n, n), "ffn": (B, n, D),
                "ffn.hidden": (B, n, F), "features": (B, n, D), "pooled": (B, D), "logits": (B, K)}
    assert_expected(d, expected)
    seen = hook_shapes(model, lambda: model(images, need_weights=True))
    assert assert_matches_hooks(d, seen) == 11
    assert d.groups[0].label == "encoder layer × 3"
    assert_drawn(d, expected)


def test_multihead_diagram():
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    d = diagrams.multihead_diagram(mha, x)
    out, weights = mha(x, need_weights=True)
    B, N, D, H = 2, 5, 12, 3
    expected = {"x": (B, N, D), "qkv": (B, N, 3 * D), "q": (B, H, N, D // H), "k": (B, H, N, D // H),
                "v": (B, H, N, D // H), "weights": tuple(weights.shape), "heads": (B, H, N, D // H),
                "concat": (B, N, D), "out": tuple(out.shape)}
    assert expected["weights"] == (B, H, N, N)
    assert_expected(d, expected)
    # the heads: what split_heads gives and what merge_heads takes
    q = mha.split_heads(mha.project_qkv(x, x, x)[0])
    assert d.shape("q") == d.shape("k") == d.shape("v") == d.shape("heads") == tuple(q.shape)
    seen = hook_shapes(mha, lambda: mha(x, need_weights=True))
    assert assert_matches_hooks(d, seen) == 4
    assert_drawn(d, expected)


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_seq2seq_diagram(attention):
    model = Seq2Seq(11, 9, emb_dim=6, hidden_dim=10, attention=attention)
    src, lengths, tgt = torch.randint(3, 11, (3, 8)), torch.tensor([8, 5, 2]), torch.randint(3, 9, (3, 4))
    d = diagrams.seq2seq_diagram(model, src, lengths, tgt)
    B, N, T, E, h, V = 3, 8, 4, 6, 10, 9
    expected = {"src": (B, N), "src_embed": (B, N, E), "states": (B, N, h), "tgt": (B, T), "prev": (B,),
                "tgt_embed": (B, E), "cell_in": (B, E + h), "cell": (B, h), "step_logits": (B, V),
                "logits": (B, T, V)}
    if attention:
        expected.update({"attention": (B, h), "attention.weights": (B, N)})
    assert_expected(d, expected)
    seen = hook_shapes(model, lambda: model(src, lengths, tgt))
    assert len(seen["cell"]) == T  # one decoder step per target token
    assert assert_matches_hooks(d, seen) == len(expected)
    assert_drawn(d, expected)


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_captioner_diagram(cell):
    cnn = ShapesCNN(n_classes=5, feature_dim=24, image_size=16, width=4)
    model = ImageCaptioner(None, 24, vocab_size=14, emb_dim=8, hidden_dim=12, cell=cell)
    images, tokens = torch.randn(2, 3, 16, 16), torch.randint(1, 14, (2, 6))
    d = diagrams.captioner_diagram(model, images, tokens, encoder=cnn.truncate())
    B, w, F, h, E, V, T = 2, 4, 24, 12, 8, 14, 6
    expected = {"image": (B, 3, 16, 16), "conv1": (B, w, 8, 8), "conv2": (B, 2 * w, 4, 4),
                "conv3": (B, 4 * w, 2, 2), "code": (B, F), "b_v": (B, h), "tokens": (B, T), "prev": (B,),
                "embed": (B, E), "cell": (B, h), "step_logits": (B, V), "logits": (B, T, V)}
    assert_expected(d, expected)
    encoder = cnn.truncate()
    seen_cnn = hook_shapes(encoder, lambda: encoder(images))
    seen_cap = hook_shapes(model, lambda: model(encoder(images), tokens))
    seen = {**{f"encoder.{k}" if k else "encoder": v for k, v in seen_cnn.items()}, **seen_cap}
    seen[""] = [{"input": [tuple(images.shape), tuple(tokens.shape)], "output": seen_cap[""][0]["output"]}]
    assert assert_matches_hooks(d, seen, prefix="captioner.") == len(expected)
    assert_drawn(d, expected)
    # the pass changes no module's mode: a frozen CNN in eval mode stays so in a training captioner
    encoder.eval()
    model.train()
    diagrams.captioner_diagram(model, images, tokens, encoder=encoder)
    assert model.training and not any(m.training for m in encoder.modules())
    # a captioner that holds its CNN is drawn from itself, with the same shapes
    whole = ImageCaptioner(cnn.truncate(), 24, vocab_size=14, emb_dim=8, hidden_dim=12, cell=cell)
    assert {b.key: b.shape for b in diagrams.captioner_diagram(whole, images, tokens).blocks} == \
        {b.key: b.shape for b in d.blocks}


# --- the checks a diagram makes ------------------------------------------------------------------

def test_a_block_whose_symbolic_shape_is_wrong_is_refused():
    d = diagrams.multihead_diagram(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
    wrong = diagrams.Block("qkv", "QKV", "B, N, 2*D", d.shape("qkv"), d.block("qkv").source)
    with pytest.raises(ValueError, match=r"recorded shape \(1, 3, 24\).*\(1, 3, 16\)"):
        diagrams.Diagram("broken", [wrong], d.sizes)
    with pytest.raises(ValueError, match="size that is not given"):
        diagrams.Diagram("broken", [diagrams.Block("x", "x", "B, M", (1, 3), ())], {"B": 1})


def test_recording_errors_name_what_is_missing():
    rec = diagrams.record(MultiHeadAttention(8, 2), torch.randn(1, 3, 8), need_weights=True)
    assert rec.output("in_proj") == (1, 3, 24) and rec.input("out_proj") == (1, 3, 8)
    with pytest.raises(ValueError, match="'nope' was not called"):
        rec.output("nope")
    with pytest.raises(ValueError, match="no number 5"):
        rec.op("", "softmax", nth=5)
    with pytest.raises(ValueError, match="no call 3"):
        rec.output("in_proj", call=3)


def test_wrong_models_and_missing_encoder_are_refused():
    with pytest.raises(TypeError, match="companion Transformer"):
        diagrams.transformer_diagram(nn.Linear(2, 2), torch.zeros(1, 2), torch.zeros(1, 2))
    with pytest.raises(TypeError, match="companion ViT"):
        diagrams.vit_diagram(nn.Linear(2, 2), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="pass the CNN as encoder="):
        diagrams.captioner_diagram(ImageCaptioner(None, 4, 5), torch.zeros(1, 3, 8, 8), torch.ones(1, 2).long())
    model = Transformer(TransformerConfig(vocab_size=5))
    with pytest.raises(ValueError, match="tgt_in"):  # the model's own message, not torchview's wrapper
        diagrams.transformer_diagram(model, torch.ones(1, 3).long(), torch.full((1, 2), 9))
    with pytest.raises(TypeError, match="input 0 must be a torch.Tensor"):
        diagrams.record(nn.Linear(2, 2), [1.0, 2.0])


def test_pretty_dims():
    assert diagrams.pretty_dims("B, N, 3*D") == "(B, N, 3D)"
    assert diagrams.pretty_dims("B, 2*w, S//4, S//4") == "(B, 2w, S/4, S/4)"
    assert diagrams.pretty_dims("B, H*D_H") == "(B, H·D_H)"
    assert diagrams.pretty_dims("B") == "(B,)"


# --- torchview's graph, with and without Graphviz -----------------------------------------------

def test_without_dot_a_note_instead_of_a_crash(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    assert not diagrams.has_dot()
    assert diagrams.show_torchview(MultiHeadAttention(8, 2), torch.randn(1, 3, 8), depth=1) is None
    out = capsys.readouterr().out
    assert "`dot` program is not installed" in out and "apt-get install graphviz" in out
    # the graph itself (and every diagram) is made without dot
    source = diagrams.torchview_graph(MultiHeadAttention(8, 2), torch.randn(1, 3, 8), depth=1).source
    assert "(1, 3, 24)" in source


@needs_dot
def test_with_dot_torchview_draws_the_recorded_shapes():
    svg = diagrams.show_torchview(MultiHeadAttention(8, 2), torch.randn(1, 3, 8), depth=1, need_weights=True)
    text = svg.data if hasattr(svg, "data") else svg
    assert text.lstrip().startswith("<?xml") or "<svg" in text[:500]
    for shape in ["(1, 3, 24)", "(1, 2, 3, 3)", "(1, 3, 8)"]:
        assert shape in text, f"{shape} is not in torchview's graph"
