"""The coreference task: seeded, decidable by its rule, balanced, clear errors."""

import pytest
import torch

from companion.data import make_coreference
from companion.data.coreference import COREF_VOCAB, FRAMES, NOUNS, PROPERTY_ROLE, resolve


def test_same_seed_same_sentences_other_seed_other_sentences():
    a, b = make_coreference(200, seed=3), make_coreference(200, seed=3)
    c = make_coreference(200, seed=4)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.label, b.label)
    assert not torch.equal(a.tokens, c.tokens)


def test_pinned_sentence_guards_cross_machine_determinism():
    batch = make_coreference(3, seed=0)
    assert [" ".join(batch.words(i)) for i in range(3)] == [
        "the street was not crossed by the child because it was too long",
        "the man did not cross the river because it was too busy",
        "the dog did not cross the road because it was too weak",
    ]


def test_referent_is_decidable_and_the_positions_point_at_the_right_words():
    batch = make_coreference(500, seed=1)
    for i in range(len(batch)):
        words = batch.words(i)
        answer = COREF_VOCAB.itos[int(batch.label[i])]
        assert resolve(words) == answer  # the rule, applied to the words alone
        assert words[batch.pronoun[i]] == "it"
        assert words[batch.referent[i]] == answer
        assert words[batch.other[i]] in NOUNS and words[batch.other[i]] != answer
        assert words[batch.prop[i]] in PROPERTY_ROLE and int(batch.prop[i]) == len(words) - 1
        assert batch.pronoun[i] > max(batch.referent[i], batch.other[i])  # nouns come first


def test_neither_word_order_nor_position_gives_the_referent_away():
    batch = make_coreference(4000, seed=2)
    first = batch.referent < batch.other  # the referent is the first noun
    passive = batch.passive
    for share in (first.float().mean(), passive.float().mean(), first[passive].float().mean(),
                  first[~passive].float().mean()):
        assert 0.45 < share < 0.55
    # every property word occurs, and every noun as the referent
    assert set(COREF_VOCAB.decode(batch.tokens[torch.arange(len(batch)), batch.prop])) == set(PROPERTY_ROLE)
    assert set(COREF_VOCAB.decode(batch.label)) == set(NOUNS)
    assert make_coreference(500, seed=0, passive_share=0.0).passive.sum() == 0
    assert make_coreference(500, seed=0, passive_share=1.0).passive.all()


def test_each_property_word_and_noun_has_one_role():
    props = [p for f in FRAMES.values() for p in (*f.x_props, *f.y_props)]
    assert len(props) == len(set(props)) == len(PROPERTY_ROLE)
    assert len(NOUNS) == len(set(NOUNS))
    for f in FRAMES.values():
        assert not set(f.x_nouns) & set(f.y_nouns)


def test_padding_and_lengths():
    batch = make_coreference(300, seed=5)
    real = torch.arange(batch.tokens.shape[1])[None] < batch.lengths[:, None]
    assert (batch.tokens[~real] == COREF_VOCAB.pad_id).all() and (batch.tokens[real] >= 3).all()
    assert set(batch.lengths.tolist()) == {12, 13}


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(n=0), ValueError, "n must be positive, got 0"),
    (dict(n=2.5), TypeError, "n must be an int"),
    (dict(n=5, seed=-1), ValueError, "seed must be >= 0"),
    (dict(n=5, seed=None), TypeError, "seed must be an int"),
    (dict(n=5, passive_share=1.5), ValueError, r"passive_share must be in \[0, 1\], got 1.5"),
    (dict(n=5, passive_share=-0.1), ValueError, "passive_share must be >= 0"),
    (dict(n=5, passive_share=float("nan")), ValueError, "passive_share must be a finite number"),
])
def test_messages(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_coreference(**kwargs)


def test_resolve_refuses_sentences_outside_the_task():
    with pytest.raises(ValueError, match="must end with a property word"):
        resolve("the dog did not cross the road".split())
    with pytest.raises(ValueError, match="fits no word order of the frame 'cross'"):
        resolve("the dog crossed the road because it was too tired".split())
