"""The training loop and evaluation helpers."""

import pytest
import torch

from companion.data import make_sequence_task
from companion.decoding import generate
from companion.models import Seq2Seq
from companion.train import predict, sequence_accuracy, sequence_loss, train


def loss_fn(m, src, lengths, tgt):
    logits, _ = m(src, lengths, tgt[:, :-1])
    return sequence_loss(logits, tgt[:, 1:])


@pytest.mark.parametrize("attention", [None, "dot"])
def test_tiny_run_overfits_a_handful_of_examples(attention):
    b = make_sequence_task(8, 3, 5, "copy", n_symbols=6, seed=0)
    torch.manual_seed(0)
    m = Seq2Seq(len(b.vocab), len(b.vocab), 16, 32, attention)
    with torch.no_grad():
        before = loss_fn(m, b.src, b.src_lengths, b.tgt).item()
    h = train(m, loss_fn, (b.src, b.src_lengths, b.tgt), steps=150, batch_size=8, lr=1e-2, device="cpu",
              progress=False, log_every=25)
    assert before > 1.5 and h.losses[-1] < 0.05  # from about log(V) to near 0
    assert h.steps == [25, 50, 75, 100, 125, 150] and h.seconds > 0
    with torch.inference_mode():
        pred = generate(m, b.src, b.src_lengths, bos_id=1, eos_id=2, max_len=7)
    assert sequence_accuracy(pred, b.tgt[:, 1:]) == (1.0, 1.0)
    assert not m.training


def test_same_seed_same_training():
    b = make_sequence_task(16, 2, 4, seed=0)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = Seq2Seq(len(b.vocab), len(b.vocab), 8, 8)
        runs.append(train(m, loss_fn, (b.src, b.src_lengths, b.tgt), steps=10, batch_size=4, seed=3,
                          device="cpu", progress=False, log_every=5).losses)
    assert runs[0] == runs[1]


def test_sequence_accuracy_counts():
    target = torch.tensor([[5, 6, 2, 0], [5, 5, 5, 2]])
    pred = torch.tensor([[5, 6, 2, 9, 9], [5, 4, 5, 2, 0]])  # after <end> anything goes; row 2 one wrong
    exact, token = sequence_accuracy(pred, target)
    assert exact == 0.5 and token == pytest.approx(6 / 7)
    assert sequence_accuracy(torch.tensor([[5]]), torch.tensor([[5, 2]])) == (0.0, 0.5)  # too short


def test_predict_batches_and_pads():
    x = torch.arange(10)[:, None]
    out = predict(lambda t: t.repeat(1, 1 + int(t[0, 0] > 4)), x, batch_size=5)
    assert out.shape == (10, 2) and out[:5, 1].eq(0).all()


def test_train_messages():
    m = Seq2Seq(5, 5, 4, 4)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        train("m", loss_fn, (torch.zeros(2),), steps=1)
    with pytest.raises(ValueError, match="all data tensors need the same number of examples"):
        train(m, loss_fn, (torch.zeros(2), torch.zeros(3)), steps=1)
    with pytest.raises(ValueError, match="logits must be \\(B, T, V\\) and targets \\(B, T\\)"):
        sequence_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))


def test_compile_model_trains_through_torch_compile(monkeypatch):
    import companion.train as train_module

    compiled = []

    def fake_compile(model, mode=None):  # stands in for torch.compile: records the call, returns the model
        compiled.append((model, mode))
        return model

    monkeypatch.setattr(train_module.torch, "compile", fake_compile)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    train_module.train(model, lambda m, a, b: ((m(a) - b) ** 2).mean(), (x, y), steps=5, batch_size=16,
                       device="cpu", progress=False, compile_model=True)
    assert compiled == [(model, None)]
    compiled.clear()
    train_module.train(model, lambda m, a, b: ((m(a) - b) ** 2).mean(), (x, y), steps=1, batch_size=16,
                       device="cpu", progress=False, compile_model="reduce-overhead")
    assert compiled == [(model, "reduce-overhead")]  # CUDA graphs on a GPU
    compiled.clear()
    train_module.train(model, lambda m, a, b: ((m(a) - b) ** 2).mean(), (x, y), steps=2, batch_size=16,
                       device="cpu", progress=False)
    assert compiled == []


# --- no silent wrong answer --------------------------------------------------------------

def _mse(m, x, y):
    return ((m(x) - y) ** 2).mean()


@pytest.mark.parametrize("kw, error, message", [
    ({"clip": -1.0}, ValueError, "clip must be > 0.0, got -1.0"),  # a negative clip was gradient ascent
    ({"clip": 0.0}, ValueError, "clip must be > 0.0, got 0.0"),
    ({"clip": float("nan")}, ValueError, "clip must be a finite number, got nan"),
    ({"lr": -1.0}, ValueError, "lr must be > 0.0"),
    ({"lr": float("nan")}, ValueError, "lr must be a finite number"),
    ({"seed": None}, TypeError, "seed must be an int, got NoneType"),
    ({"seed": "a"}, TypeError, "seed must be an int, got str"),
    ({"device": "nope"}, ValueError, "device must name a device"),
    ({"loss_fn": None}, TypeError, "loss_fn must be callable"),
    ({"loss_fn": lambda m, x, y: (m(x) - y) ** 2}, ValueError, "loss_fn must return a scalar tensor"),
])
def test_train_refuses_settings_that_would_train_wrongly(kw, error, message):
    args = {"loss_fn": _mse, "steps": 2, "batch_size": 4, "device": "cpu", "progress": False}
    args.update(kw)
    loss = args.pop("loss_fn")
    with pytest.raises(error, match=message):
        train(torch.nn.Linear(3, 1), loss, [torch.randn(8, 3), torch.randn(8, 1)], **args)


def test_train_on_no_examples_is_an_error_not_nan():
    with pytest.raises(ValueError, match=r"data holds no examples \(first dimension 0\)"):
        train(torch.nn.Linear(3, 1), _mse, [torch.randn(0, 3), torch.randn(0, 1)], steps=2, device="cpu",
              progress=False)


def test_train_clips_the_gradient_norm(monkeypatch):
    # with clip=c the update of plain SGD-like Adam is unchanged, so look at the gradient itself
    seen = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **kw):
        params = list(params)
        out = real_clip(params, max_norm, *a, **kw)
        seen.append((max_norm, torch.sqrt(sum((p.grad ** 2).sum() for p in params)).item()))
        return out

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    x, y = torch.randn(16, 3) * 100, torch.randn(16, 1) * 100  # huge gradients
    train(torch.nn.Linear(3, 1), _mse, [x, y], steps=3, batch_size=8, clip=0.5, device="cpu", progress=False)
    assert len(seen) == 3 and all(c == 0.5 and norm <= 0.5 + 1e-4 for c, norm in seen)
    seen.clear()
    train(torch.nn.Linear(3, 1), _mse, [x, y], steps=3, batch_size=8, clip=None, device="cpu", progress=False)
    assert seen == []


def test_sequence_loss_all_padding_is_zero_not_nan():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    loss = sequence_loss(logits, torch.zeros(2, 3, dtype=torch.long))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_sequence_loss_is_the_mean_over_real_targets_and_checks_them():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
    want = torch.nn.functional.cross_entropy(torch.stack([logits[0, 0], logits[0, 1], logits[1, 0]]),
                                             torch.tensor([1, 2, 3]))
    torch.testing.assert_close(sequence_loss(logits, targets), want)
    with pytest.raises(ValueError, match=r"targets must be token ids in \[0, V=5\)"):
        sequence_loss(logits, torch.full((2, 3), 5))
    with pytest.raises(TypeError, match="targets must hold integer token ids"):
        sequence_loss(logits, targets.float())
    with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
        sequence_loss(logits.long(), targets)


def test_evaluation_helpers_refuse_empty_input():
    with pytest.raises(ValueError, match=r"no sequences \(B = 0\)"):
        sequence_accuracy(torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"the inputs hold no rows"):
        predict(lambda x: x, torch.zeros(0, 3))
    with pytest.raises(TypeError, match="predict needs at least one input tensor"):
        predict(lambda x: x)


def test_mixed_precision_follows_the_gpu(monkeypatch):
    """bfloat16 from compute capability 8.0 (A100, H100), float16 with a scaler on a T4 (7.5), none on the CPU."""
    from companion.train import mixed_precision

    assert mixed_precision(torch.device("cpu")) is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert mixed_precision(torch.device("cuda")) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert mixed_precision(torch.device("cuda")) == torch.float16


def test_compile_model_takes_a_mode_and_refuses_others():
    model = torch.nn.Linear(2, 1)
    data = [torch.randn(8, 2), torch.randn(8, 1)]
    with pytest.raises(ValueError, match="compile_model"):
        train(model, lambda m, x, y: (m(x) - y).pow(2).mean(), data, steps=1, device="cpu", progress=False,
              compile_model="fastest")
