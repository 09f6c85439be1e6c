"""Datasets: determinism, vocabulary round trip, the captions and targets they promise."""

import datetime

import pytest
import torch

from companion.data import Vocab, make_dates, make_sequence_task, make_shapes
from companion.data.dates import FORMATS, ISO_FIELDS, OUTPUT_VOCAB
from companion.data.shapes import CAPTION_VOCAB


def test_vocab_round_trip_and_specials():
    v = Vocab(["a", "red", "circle"])
    assert (v.pad_id, v.start_id, v.end_id) == (0, 1, 2) and len(v) == 6
    ids = v.encode(["a", "red", "circle"], start=True, end=True)
    assert ids == [1, 3, 4, 5, 2]
    assert v.decode(ids) == ["a", "red", "circle"]
    assert v.decode(ids + [0, 0], strip=False)[-1] == "<pad>"
    batch, lengths = v.encode_batch([["a"], ["a", "red", "circle"]], start=True, end=True)
    assert batch.tolist() == [[1, 3, 2, 0, 0], [1, 3, 4, 5, 2]] and lengths.tolist() == [3, 5]
    assert v.decode_batch(batch) == [["a"], ["a", "red", "circle"]]


def test_vocab_messages():
    with pytest.raises(ValueError, match="tokens must be unique, got duplicates \\['a'\\]"):
        Vocab(["a", "a"])
    with pytest.raises(ValueError, match="must not contain the special tokens"):
        Vocab(["<pad>"])
    with pytest.raises(ValueError, match="tokens not in the vocabulary: \\['blue'\\]"):
        Vocab(["a"]).encode(["blue"])
    with pytest.raises(ValueError, match="id 9 is outside the vocabulary \\(0..3\\)"):
        Vocab(["a"]).decode([9])
    with pytest.raises(ValueError, match="ids must have shape \\(B, T\\), got \\(3,\\)"):
        Vocab(["a"]).decode_batch(torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("make, args", [
    (make_shapes, (64,)),
    (make_dates, (64,)),
    (make_sequence_task, (64, 3, 9, "reverse")),
])
def test_same_seed_same_data_other_seed_other_data(make, args):
    # generate each time (make.__wrapped__ bypasses the session cache), so "same seed, same
    # data" compares two generations, not a generation with its cached copy
    a, b, c = make.__wrapped__(*args, seed=5), make.__wrapped__(*args, seed=5), make.__wrapped__(*args, seed=6)
    fields = ["images", "tokens"] if hasattr(a, "images") else ["src", "tgt"]
    for f in fields:
        assert torch.equal(getattr(a, f), getattr(b, f))
        assert not torch.equal(getattr(a, f), getattr(c, f))
    cached = make(*args, seed=5)  # and the cache serves what the generator makes
    for f in fields:
        assert torch.equal(getattr(cached, f), getattr(a, f))


def test_shapes_captions_match_labels():
    b = make_shapes(500, seed=1)
    for i in range(500):
        words = b.captions[i].split()
        assert words[1] == ["red", "green", "blue", "yellow"][int(b.color_ids[i, 0])]
        assert words[2] == ["circle", "square", "triangle"][int(b.shape_ids[i, 0])]
        if b.n_shapes[i] == 1:
            assert len(words) == 3 and int(b.shape_ids[i, 1]) == -1
        else:
            rel = "above" if b.relation[i] == 0 else "left of"
            assert " ".join(words[3:-3]) == rel
    assert b.lengths.tolist() == [len(c.split()) + 2 for c in b.captions]
    assert CAPTION_VOCAB.decode_batch(b.tokens) == [c.split() for c in b.captions]


def test_shapes_relation_is_visible():
    # The shape named first is above (smaller mean row) or left of (smaller mean column) the
    # second: find each shape's pixels by its colour (no noise, so colours are exact).
    from companion.data.shapes import RGB

    b = make_shapes(300, seed=2, noise=0.0)
    idx = torch.nonzero(b.n_shapes == 2).squeeze(1)
    checked = 0
    for i in idx.tolist():
        c0, c1 = int(b.color_ids[i, 0]), int(b.color_ids[i, 1])
        if c0 == c1:
            continue  # same colour: the pixels cannot be told apart
        img = b.images[i]  # (3, S, S)
        first = torch.isclose(img, RGB[c0][:, None, None]).all(0)  # (S, S)
        second = torch.isclose(img, RGB[c1][:, None, None]).all(0)
        rows, cols = torch.arange(32.0)[:, None].expand(32, 32), torch.arange(32.0)[None, :].expand(32, 32)
        coord = rows if b.relation[i] == 0 else cols
        assert coord[first].mean() < coord[second].mean(), (i, b.captions[i])
        checked += 1
    assert checked > len(idx) // 2


def test_shapes_messages():
    with pytest.raises(ValueError, match="p_two must be a probability in \\[0, 1\\], got 1.5"):
        make_shapes(4, p_two=1.5)
    with pytest.raises(ValueError, match="image_size must be >= 16"):
        make_shapes(4, image_size=8)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        make_shapes(4.0)


def test_dates_are_correct_dates_and_spans_hold_the_fields():
    b = make_dates(300, seed=3)
    for text, iso, spans in zip(b.texts, b.isos, b.spans, strict=True):
        d = datetime.date.fromisoformat(iso)
        assert 1950 <= d.year <= 2049
        day = text[slice(*spans["day"])]
        assert int(day.rstrip("stndrh")) == d.day
        year = text[slice(*spans["year"])]
        assert year == (str(d.year) if len(year) == 4 else f"{d.year % 100:02d}")
        if text[0].isalpha() and "," in text and text.split(",")[0] in (
                "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"):
            assert text.split(",")[0] == d.strftime("%A").lower()
    assert OUTPUT_VOCAB.decode_batch(b.tgt) == [list(s) for s in b.isos]
    assert len(ISO_FIELDS) == 10 and FORMATS[2] == "wednesday, march 3, 2021"


def test_dates_messages():
    with pytest.raises(ValueError, match="formats must be a non-empty list of format numbers 0..6, got \\[9\\]"):
        make_dates(4, formats=[9])


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_sequence_task_targets(task):
    b = make_sequence_task(50, 2, 8, task, seed=4)
    for i in range(50):
        n = int(b.src_lengths[i])
        src = b.src[i, :n].tolist()
        assert (b.src[i, n:] == 0).all()
        want = src if task == "copy" else src[::-1]
        assert b.tgt[i].tolist()[: n + 2] == [1, *want, 2]
    assert b.src_lengths.min() >= 2 and b.src_lengths.max() <= 8


def test_sequence_task_messages():
    with pytest.raises(ValueError, match="min_len must be <= max_len, got min_len=5 and max_len=3"):
        make_sequence_task(4, 5, 3)
    with pytest.raises(ValueError, match="task must be 'copy' or 'reverse', got 'sort'"):
        make_sequence_task(4, 2, 3, "sort")


def test_pinned_values_guard_cross_machine_determinism():
    # Literal values: a change of generator, draw order or platform shows up here.
    assert make_sequence_task(3, 2, 5, "copy", seed=0).src.tolist() == [[3, 6, 0, 0, 0], [20, 6, 4, 9, 19],
                                                                          [22, 21, 19, 0, 0]]
    assert make_dates(3, seed=0).texts == ["jan 24, 35", "thursday, september 12, 2013", "11 february 2001"]
    b = make_shapes(3, seed=0)
    assert b.captions == ["a red square above a yellow square", "a blue square",
                          "a red triangle left of a red triangle"]
    assert float(b.images.mean()) == pytest.approx(0.0547, abs=1e-4)


def test_generators_are_cached_per_session_and_return_independent_copies():
    from companion.data import make_dates, make_sequence_task
    from companion.data.digits import load_digits_tensors

    make_sequence_task.cache_clear()
    misses = make_sequence_task.misses
    a = make_sequence_task(50, 3, 6, "reverse", seed=11)
    b = make_sequence_task(50, 3, 6, "reverse", seed=11)
    assert make_sequence_task.misses == misses + 1  # generated once
    assert torch.equal(a.src, b.src) and a.src is not b.src
    a.src.zero_()  # editing one copy ...
    assert torch.equal(make_sequence_task(50, 3, 6, "reverse", seed=11).src, b.src)  # ... leaves the cache intact
    assert not torch.equal(make_sequence_task(50, 3, 6, "reverse", seed=12).src, b.src)
    d1, d2 = make_dates(20, seed=3), make_dates(20, seed=3)
    assert d1.texts == d2.texts
    x1, _ = load_digits_tensors()
    x1 += 1
    x2, _ = load_digits_tensors()
    assert float(x2.max()) <= 1.0


# --- no silent wrong answer --------------------------------------------------------------

@pytest.mark.parametrize("seed, error, message", [
    (None, TypeError, "seed must be an int, got NoneType"),  # make_dates(seed=None) was unseeded
    (1.5, TypeError, "seed must be an int, got float"),
    ("0", TypeError, "seed must be an int, got str"),
    (True, TypeError, "seed must be an int, got bool"),
    (-1, ValueError, "seed must be >= 0, got -1"),
])
@pytest.mark.parametrize("make", [
    lambda seed: make_dates(4, seed=seed),
    lambda seed: make_sequence_task(4, 2, 3, seed=seed),
    lambda seed: make_shapes(4, seed=seed),
    lambda seed: __import__("companion.data", fromlist=["digits_split"]).digits_split(10, 5, seed=seed),
])
def test_every_generator_refuses_a_seed_that_is_no_int(make, seed, error, message):
    with pytest.raises(error, match=message):
        make(seed)


@pytest.mark.parametrize("kw, error, message", [
    ({"noise": float("nan")}, ValueError, "noise must be a finite number"),  # NaN noise made every image NaN
    ({"noise": "0.1"}, TypeError, "noise must be a number"),
    ({"p_two": float("nan")}, ValueError, "p_two must be a finite number"),
    ({"p_two": "0.5"}, TypeError, "p_two must be a number"),
])
def test_shapes_numbers_must_be_finite(kw, error, message):
    with pytest.raises(error, match=message):
        make_shapes(4, **kw)


def test_shift_images_and_vocab_decode_name_their_arguments():
    from companion.data.transforms import shift_images

    with pytest.raises(TypeError, match="dx must be an int, got float"):
        shift_images(torch.zeros(1, 1, 4, 4), 1.5, 0)
    with pytest.raises(TypeError, match="images must be a torch.Tensor, got NoneType"):
        shift_images(None, 1, 0)
    with pytest.raises(TypeError, match="ids must be integers"):
        Vocab(["a"]).decode([1.5])
    with pytest.raises(ValueError, match="formats must be a non-empty list"):
        make_dates(4, formats=[1.0])


def test_shipped_digits_are_scikit_learns():
    """The package ships the digits itself; where scikit-learn is installed, they are its load_digits."""
    import hashlib

    from companion.data.digits import DIGITS_FILE, load_digits_tensors

    assert hashlib.sha256(DIGITS_FILE.read_bytes()).hexdigest() == \
        "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"  # scikit-learn 1.x's digits.csv.gz
    x, y = load_digits_tensors.__wrapped__()
    assert x.shape == (1797, 1, 8, 8) and y.shape == (1797,) and x.min() == 0 and x.max() == 1
    assert torch.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    sklearn = pytest.importorskip("sklearn.datasets",
                                  reason="scikit-learn, the digits' reference, is not installed (pip install scikit-learn)")
    d = sklearn.load_digits()
    assert torch.equal(x, torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0)
    assert torch.equal(y, torch.tensor(d.target))
