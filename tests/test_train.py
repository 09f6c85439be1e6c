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


# --- found by mutation testing (benchmarks/mutation.py) -----------------------------------


def _linear_run(**kw):
    """A Linear(3, 1) trained by MSE on 100 fixed examples; returns its weights and the History."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(100, 3, generator=g) * 10, torch.randn(100, 1, generator=g) * 10  # ‖g‖ > 1: clipped
    hist = train(model, _mse, [x, y], device="cpu", progress=False, **kw)
    return torch.cat([model.weight.flatten(), model.bias]), hist


def test_train_defaults_are_the_documented_ones():
    w_default, h_default = _linear_run(steps=100)
    w_explicit, _ = _linear_run(steps=100, batch_size=64, lr=3e-3, seed=0, clip=1.0, warmup=0, log_every=50)
    assert torch.equal(w_default, w_explicit)
    assert h_default.steps == [50, 100] and max(h_default.grad_norms) > 1.0  # the clip was active


def test_train_seed_alone_fixes_the_shuffling():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(20, 3), torch.randn(20, 1)
    runs = []
    for global_seed in (1, 2):  # the global generator must not matter
        model.load_state_dict(start)
        torch.manual_seed(global_seed)
        train(model, _mse, [x, y], steps=7, batch_size=3, seed=5, device="cpu", progress=False)
        runs.append(model.weight.detach().clone())
    assert torch.equal(runs[0], runs[1])


def test_every_pass_sees_every_example_once():
    seen = []

    def loss_fn(m, i, x):
        seen.append(i.tolist())
        return m(x).pow(2).mean()

    n, bs = 6, 2
    train(torch.nn.Linear(1, 1), loss_fn, [torch.arange(n), torch.randn(n, 1)], steps=6, batch_size=bs,
          device="cpu", progress=False)
    assert all(len(b) == bs for b in seen)
    first, second = sum(seen[:3], []), sum(seen[3:], [])  # n / bs = 3 steps per pass
    assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))


def test_train_only_updates_params():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    frozen = model[0].weight.detach().clone()
    train(model, _mse, [torch.randn(8, 3), torch.randn(8, 1)], steps=3, batch_size=4, device="cpu",
          progress=False, params=model[1].parameters())
    assert torch.equal(model[0].weight, frozen)


def test_logged_losses_are_the_means_of_each_interval():
    losses = []

    def loss_fn(m, x, y):
        loss = _mse(m, x, y)
        losses.append(loss.item())
        return loss

    before = __import__("time").perf_counter()
    hist = train(torch.nn.Linear(3, 1), loss_fn, [torch.randn(8, 3), torch.randn(8, 1)], steps=5, batch_size=4,
                 log_every=2, device="cpu", progress=False)
    wall = __import__("time").perf_counter() - before
    assert hist.steps == [2, 4, 5]  # the last, shorter interval is step 5 alone
    want = [(losses[0] + losses[1]) / 2, (losses[2] + losses[3]) / 2, losses[4]]
    assert hist.losses == pytest.approx(want, rel=1e-5)
    assert 0 < hist.seconds <= wall


def test_progress_false_prints_nothing(capfd):
    train(torch.nn.Linear(3, 1), _mse, [torch.randn(8, 3), torch.randn(8, 1)], steps=2, batch_size=4,
          device="cpu", progress=False)
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("data, message", [
    ([torch.tensor(1.0)], "all data tensors need the same number of examples"),
    (["x"], r"data\[0\]"),
])
def test_train_checks_a_single_data_tensor(data, message):
    with pytest.raises((TypeError, ValueError), match=message):
        train(torch.nn.Linear(3, 1), lambda m, x: m(x).sum(), data, steps=1, device="cpu", progress=False)


def test_train_on_a_single_data_tensor():
    hist = train(torch.nn.Linear(3, 1), lambda m, x: m(x).pow(2).mean(), [torch.randn(8, 3)], steps=2,
                 batch_size=4, device="cpu", progress=False)
    assert hist.steps == [2]


@pytest.mark.parametrize("kw, name", [({"steps": 0}, "steps"), ({"batch_size": 0}, "batch_size"),
                                      ({"log_every": 0}, "log_every")])
def test_train_errors_name_the_argument(kw, name):
    args = {"steps": 1, "device": "cpu", "progress": False, **kw}
    with pytest.raises(ValueError, match=f"^{name} must be positive, got 0"):
        train(torch.nn.Linear(3, 1), _mse, [torch.randn(8, 3), torch.randn(8, 1)], **args)


def test_train_warmup_must_be_an_int():
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        train(torch.nn.Linear(3, 1), _mse, [torch.randn(8, 3), torch.randn(8, 1)], steps=1, device="cpu",
              progress=False, warmup="2")


def test_sequence_loss_by_hand():
    # uniform logits over V=4: every real target costs log 4
    logits = torch.zeros(1, 3, 4)
    assert sequence_loss(logits, torch.tensor([[1, 0, 0]])).item() == pytest.approx(torch.log(torch.tensor(4.0)))
    # two real targets of three: (log 4 + (log(e^2 + 3) - 2)) / 2, the padding counted nowhere
    logits[0, 1, 3] = 2.0
    want = (torch.log(torch.tensor(4.0)) + torch.log(torch.tensor(2.0).exp() + 3) - 2) / 2
    assert sequence_loss(logits, torch.tensor([[1, 3, 0]])).item() == pytest.approx(want.item())
    # token 0 is a real target when the padding id is another one
    assert sequence_loss(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]), pad_id=3).item() == pytest.approx(
        torch.log(torch.tensor(4.0)).item())


def test_sequence_loss_names_its_mistakes():
    logits = torch.zeros(2, 3, 4)
    with pytest.raises(TypeError, match="^targets must be"):
        sequence_loss(logits, [[1, 2, 3]] * 2)
    with pytest.raises(TypeError, match="targets must hold integer token ids, got dtype torch.bool"):
        sequence_loss(logits, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="^pad_id must be"):
        sequence_loss(logits, torch.ones(2, 3, dtype=torch.long), pad_id="0")
    with pytest.raises(ValueError, match=r"logits must be \(B, T, V\) and targets \(B, T\)"):
        sequence_loss(logits, torch.ones(2, 4, dtype=torch.long))


def test_predict_chunks_of_1024_by_default_and_names_its_mistakes():
    sizes = []
    out = predict(lambda x: (sizes.append(x.shape[0]), x.argmax(-1))[1], torch.randn(2000, 3))
    assert sizes == [1024, 976] and out.shape == (2000,)  # 1-D outputs: concatenated, no padding
    out = predict(lambda x: x * 2, torch.ones(3, 2))  # one chunk of 2-D outputs
    assert torch.equal(out, torch.full((3, 2), 2.0))
    with pytest.raises(ValueError, match="^batch_size must be positive"):
        predict(lambda x: x, torch.ones(3, 2), batch_size=0)
    with pytest.raises(TypeError, match=r"^tensors\[0\] must be"):
        predict(lambda x: x, [1, 2])
    with pytest.raises(ValueError, match="the inputs hold no rows"):
        predict(lambda x: x, torch.tensor(1.0))


def test_sequence_accuracy_by_hand_and_its_mistakes():
    assert sequence_accuracy(torch.tensor([[7]]), torch.tensor([[7, 9]]), pad_id=9) == (1.0, 1.0)
    # a missing token is padded with pad_id (9), not 0, so it cannot match a real 0
    assert sequence_accuracy(torch.tensor([[1]]), torch.tensor([[1, 0]]), pad_id=9) == (0.0, 0.5)
    with pytest.raises(TypeError, match="^pred must be"):
        sequence_accuracy([[1]], torch.tensor([[1]]))
    with pytest.raises(TypeError, match="^target must be"):
        sequence_accuracy(torch.tensor([[1]]), [[1]])
    with pytest.raises(ValueError, match=r"pred and target must be \(B, T\) with the same B"):
        sequence_accuracy(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"pred and target must be \(B, T\) with the same B"):
        sequence_accuracy(torch.ones(2, dtype=torch.long), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="pred must hold token ids"):
        sequence_accuracy(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.long))


def test_bfloat16_from_compute_capability_8(monkeypatch):
    from companion.train import mixed_precision

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # A100
    assert mixed_precision(torch.device("cuda")) == torch.bfloat16


@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_compile_model_accepts_every_torch_compile_mode(monkeypatch, mode):
    import companion.train as train_module

    compiled = []
    monkeypatch.setattr(train_module.torch, "compile", lambda model, mode=None: compiled.append(mode) or model)
    train(torch.nn.Linear(3, 1), _mse, [torch.randn(8, 3), torch.randn(8, 1)], steps=1, batch_size=4,
          device="cpu", progress=False, compile_model=mode)
    assert compiled == [mode]


def test_progress_bar_is_on_by_default_with_its_label(capfd, monkeypatch):
    import companion.progress

    monkeypatch.setattr(companion.progress, "bar_class", lambda: __import__("tqdm").tqdm)  # plain text
    data = [torch.randn(8, 3), torch.randn(8, 1)]
    train(torch.nn.Linear(3, 1), _mse, data, steps=2, batch_size=4, device="cpu")
    assert "training" in capfd.readouterr().err
    train(torch.nn.Linear(3, 1), _mse, data, steps=2, batch_size=4, device="cpu", desc="fitting")
    assert "fitting" in capfd.readouterr().err


def test_empty_or_all_padding_batches_are_refused_or_defined():
    """A batch with no real target: its loss is the documented 0 (nothing to learn, zero
    gradient); an empty batch is refused, and so is an accuracy over nothing."""
    logits = torch.randn(2, 3, 5, requires_grad=True)
    loss = sequence_loss(logits, torch.zeros(2, 3, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0.0 and logits.grad.abs().max() == 0
    for shape in ((0, 3, 5), (2, 0, 5), (2, 3, 0)):
        with pytest.raises(ValueError, match=r"hold no batch, no position or no vocabulary"):
            sequence_loss(torch.randn(*shape), torch.zeros(shape[:2], dtype=torch.long))
    with pytest.raises(ValueError, match=r"every position of target \(2, 3\) is padding \(pad_id=0\)"):
        sequence_accuracy(torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="is padding"):
        sequence_accuracy(torch.ones(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long))


def test_sequence_accuracy_refuses_float_targets():
    with pytest.raises(TypeError, match="target must hold token ids, got dtype torch.float32"):
        sequence_accuracy(torch.tensor([[1, 2]]), torch.tensor([[1.0, 2.0]]))
