"""Captioning and seq2seq models: the injection, teacher forcing vs free running, attention."""

import pytest
import torch

from companion.data import make_dates, make_sequence_task, make_shapes
from companion.decoding import generate
from companion.models import DotProductAttention, ImageCaptioner, Seq2Seq, ShapesCNN, VanillaRNNCell


def captioner(cell="rnn", V=14):
    cnn = ShapesCNN(n_classes=12, feature_dim=24, width=4)
    return ImageCaptioner(cnn.truncate(), 24, V, emb_dim=8, hidden_dim=16, cell=cell)


def test_truncated_cnn_gives_features():
    cnn = ShapesCNN(n_classes=12, feature_dim=24, width=4)
    x = torch.rand(5, 3, 32, 32)
    assert cnn(x).shape == (5, 12)
    assert cnn.truncate()(x).shape == (5, 24)
    with pytest.raises(ValueError, match="image_size must be a multiple of 8"):
        ShapesCNN(3, image_size=30)


def test_vanilla_cell_formula():
    cell = VanillaRNNCell(3, 4)
    x, h, b_v = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    want = torch.tanh(x @ cell.W_hx.weight.T + h @ cell.W_hh.weight.T + cell.b_h + b_v)
    torch.testing.assert_close(cell(x, h, b_v), want)


def test_image_enters_at_first_step_only():
    m = captioner().eval()
    imgs = torch.rand(3, 3, 32, 32)
    tokens = torch.randint(3, 14, (3, 5))
    s1 = m.start(imgs)
    s2 = {**s1, "b_v": s1["b_v"] + 5.0}  # a different image code
    _, a = m.step(tokens[:, 0], s1)
    _, b = m.step(tokens[:, 0], s2)
    assert not torch.allclose(a["h"], b["h"])  # h_1 depends on b_v
    # From t = 2 on, with the same h_{t-1}, b_v has no direct effect:
    _, a2 = m.step(tokens[:, 1], a)
    _, b2 = m.step(tokens[:, 1], {**a, "b_v": b["b_v"]})
    torch.testing.assert_close(a2["h"], b2["h"])
    # Gradient view: with h_1 held fixed, h_2 does not depend on b_v (the model's own step
    # decides whether to add b_v; at t = 1 it must, at t = 2 it must not).
    b_v = s1["b_v"].detach().requires_grad_()
    _, st = m.step(tokens[:, 0], {**s1, "b_v": b_v})
    g1 = torch.autograd.grad(st["h"].sum(), b_v)[0]
    assert g1.abs().sum() > 0  # h_1 depends on b_v
    _, st2 = m.step(tokens[:, 1], {**st, "h": st["h"].detach()})
    direct = torch.autograd.grad(st2["h"].sum(), b_v, allow_unused=True)[0]
    assert direct is None or direct.abs().sum() == 0


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_teacher_forcing_and_free_running_shapes(cell):
    m = captioner(cell).eval()
    b = make_shapes(6, seed=0)
    logits = m(b.images, b.tokens[:, :-1])
    assert logits.shape == (6, b.tokens.shape[1] - 1, 14)
    with torch.inference_mode():
        out = generate(m, b.images, bos_id=1, eos_id=2, max_len=7)
    assert out.shape[0] == 6 and 1 <= out.shape[1] <= 7 and out.dtype == torch.long
    # Greedy step t with the true prefix equals the teacher-forced logits at t.
    with torch.inference_mode():
        state = m.start(b.images)
        first, _ = m.step(b.tokens[:, 0], state)
    torch.testing.assert_close(first, logits[:, 0].detach())


def test_captioner_messages():
    with pytest.raises(ValueError, match="cell must be 'rnn', 'gru' or 'lstm', got 'transformer'"):
        captioner("transformer")
    m = captioner()
    with pytest.raises(ValueError, match="images must have 4 dimensions \\(B, 3, S, S\\), got shape \\(3, 32, 32\\)"):
        m.start(torch.rand(3, 32, 32))
    with pytest.raises(ValueError, match="same batch size"):
        m(torch.rand(2, 3, 32, 32), torch.zeros(3, 4, dtype=torch.long))


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_seq2seq_shapes_and_attention_rows(attention):
    b = make_sequence_task(5, 2, 7, seed=0)
    m = Seq2Seq(len(b.vocab), len(b.vocab), 8, 16, attention)
    logits, w = m(b.src, b.src_lengths, b.tgt[:, :-1])
    assert logits.shape == (5, b.tgt.shape[1] - 1, len(b.vocab))
    if attention is None:
        assert w is None
        return
    assert w.shape == (5, b.tgt.shape[1] - 1, b.src.shape[1])
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]))
    pad = b.src == 0  # (B, N)
    assert (w.masked_select(pad[:, None, :].expand_as(w)) == 0).all()


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_padding_content_does_not_matter(attention):
    b = make_sequence_task(4, 2, 6, seed=1)
    m = Seq2Seq(len(b.vocab), len(b.vocab), 8, 16, attention).eval()
    noisy = b.src.clone()
    noisy[b.src == 0] = 5  # garbage where the padding is
    a, _ = m(b.src, b.src_lengths, b.tgt[:, :-1])
    c, _ = m(noisy, b.src_lengths, b.tgt[:, :-1])
    torch.testing.assert_close(a, c)


def test_dot_attention_matches_formula():
    att = DotProductAttention(6, 5, 4)
    s, H = torch.randn(2, 6), torch.randn(2, 3, 5)
    c, a = att(s, H)
    q, k, v = att.W_Q(s), att.W_K(H), att.W_V(H)
    e = torch.einsum("bd,bnd->bn", q, k) / 2.0  # sqrt(4)
    torch.testing.assert_close(a, e.softmax(-1))
    torch.testing.assert_close(c, torch.einsum("bn,bnd->bd", a, v))


def test_seq2seq_messages():
    with pytest.raises(ValueError, match="attention must be None, 'additive' or 'dot', got 'luong'"):
        Seq2Seq(5, 5, attention="luong")
    m = Seq2Seq(10, 10, 4, 8)
    with pytest.raises(ValueError, match="src_lengths must have shape \\(2,\\) for src \\(2, 4\\), got \\(3,\\)"):
        m(torch.ones(2, 4, dtype=torch.long), torch.tensor([4, 4, 4]), torch.ones(2, 3, dtype=torch.long))


def test_dates_fit_the_model_vocabularies():
    b = make_dates(8, seed=0)
    m = Seq2Seq(len(b.src_vocab), len(b.tgt_vocab), 8, 16, "additive")
    logits, w = m(b.src, b.src_lengths, b.tgt[:, :-1])
    assert logits.shape == (8, 11, len(b.tgt_vocab)) and w.shape == (8, 11, b.src.shape[1])


# --- no silent wrong answer --------------------------------------------------------------

@pytest.mark.parametrize("b_v_shape", [(2, 1), (1, 4), (4,)])
def test_vanilla_cell_refuses_a_b_v_that_would_broadcast(b_v_shape):
    cell = VanillaRNNCell(3, 4)
    with pytest.raises(ValueError, match=r"b_v must have shape \(B, hidden_dim\) = \(2, 4\)"):
        cell(torch.randn(2, 3), torch.randn(2, 4), torch.randn(*b_v_shape))


def test_vanilla_cell_names_its_inputs():
    cell = VanillaRNNCell(3, 4)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got NoneType"):
        cell(None, torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"x must have shape \(B, 3\), got \(2, 5\)"):
        cell(torch.randn(2, 5), torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"h must have shape \(B, hidden_dim\) = \(2, 4\), got \(3, 4\)"):
        cell(torch.randn(2, 3), torch.randn(3, 4))
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        cell(torch.randn(2, 3).double(), torch.randn(2, 4).double())


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_seq2seq_source_length_zero_is_refused(attention):
    # length 0 used to read the encoder state at index -1: the last padding position
    m = Seq2Seq(10, 10, 4, 8, attention)
    src = torch.tensor([[3, 4, 0], [5, 6, 7]])
    with pytest.raises(ValueError, match=r"every source length must be in \[1, N=3\], got src_lengths \[0, 3\]"):
        m(src, torch.tensor([0, 3]), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got src_lengths \[4, 3\]"):
        m(src, torch.tensor([4, 3]), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="src_lengths must hold integers, got dtype torch.float32"):
        m(src, torch.tensor([2.0, 3.0]), torch.ones(2, 2, dtype=torch.long))


def test_token_ids_out_of_range_are_named_in_every_rnn_model():
    m = Seq2Seq(10, 12, 4, 8, "dot")
    src, lengths, tgt = torch.tensor([[3, 4, 10]]), torch.tensor([3]), torch.tensor([[1, 3]])
    with pytest.raises(ValueError, match=r"src ids must be in \[0, 10\), got range \[3, 10\]"):
        m(src, lengths, tgt)
    with pytest.raises(ValueError, match=r"tgt_in ids must be in \[0, 12\), got range \[-1, 1\]"):
        m(src.clamp(max=9), lengths, torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match="src must hold integer token ids, got dtype torch.float32"):
        m(src.float(), lengths, tgt)
    with pytest.raises(ValueError, match="pad_id=10 must be a token of both vocabularies"):
        Seq2Seq(10, 12, pad_id=10)
    cap = captioner()
    with pytest.raises(ValueError, match=r"tokens_in ids must be in \[0, 14\), got range \[1, 14\]"):
        cap(torch.rand(1, 3, 32, 32), torch.tensor([[1, 14]]))
    with pytest.raises(ValueError, match=r"prev ids must be in \[0, 14\)"):
        cap.step(torch.tensor([20]), cap.start(torch.rand(1, 3, 32, 32)))
    with pytest.raises(ValueError, match=r"images must have shape \(B, 3, 32, 32\), got \(1, 1, 32, 32\)"):
        ShapesCNN(n_classes=3)(torch.rand(1, 1, 32, 32))
