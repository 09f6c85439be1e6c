"""Induction heads grown on purpose: the task, the model, the scores (companion.induction)."""

import pytest
import torch

from companion.induction import (
    AttentionOnly,
    copy_batch,
    copying_scores,
    induction_test,
    steepest_rise,
    train_induction,
)


def test_copy_batch_repeats_are_what_an_induction_rule_predicts():
    ids, repeat = copy_batch(64, 32, 32, torch.Generator().manual_seed(0))
    assert ids.shape == repeat.shape == (64, 32) and repeat.any()

    def seen_before(b, t):  # did the pair (token t-1, token t) occur earlier in the row?
        return any(ids[b, s] == ids[b, t - 1] and ids[b, s + 1] == ids[b, t] for s in range(t - 1))

    assert all(seen_before(b, t) for b, t in repeat.nonzero().tolist())
    others = [seen_before(b, t + 1) for b, t in (~repeat[:, 1:]).nonzero().tolist()]
    assert sum(others) / len(others) < 0.2  # elsewhere the next token is mostly new
    lengths = {int((~row).sum()) for row in repeat}  # where the repeats start differs by row
    assert len(lengths) > 5


def test_attention_only_is_causal_and_its_maps_are_distributions():
    torch.manual_seed(0)
    m = AttentionOnly(10, 12, d_model=16)
    ids = torch.randint(0, 10, (2, 12))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 10
    torch.testing.assert_close(m(ids)[:, :6], m(changed)[:, :6])
    maps = m.attention_maps(ids)
    assert maps.shape == (2, 2, 2, 12, 12)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 2, 12))
    assert float(maps.triu(1).abs().max()) == 0.0
    with pytest.raises(ValueError, match="T <= 12"):
        m(torch.zeros(1, 13, dtype=torch.long))


def _identity_model(sign):
    m = AttentionOnly(4, 8, d_model=4, num_heads=1, num_layers=1)
    with torch.no_grad():
        m.token_embed.weight.copy_(torch.eye(4))
        m.unembed.weight.copy_(torch.eye(4))
        m.layers[0].in_proj.weight[8:].copy_(torch.eye(4))  # W_V
        m.layers[0].out_proj.weight.copy_(sign * torch.eye(4))  # W_O
    return m


def test_copying_score_of_a_copying_and_an_anti_copying_head():
    assert copying_scores(_identity_model(1.0)).tolist() == [[1.0]]
    assert copying_scores(_identity_model(-1.0)).tolist() == [[-1.0]]


def test_steepest_rise():
    steps = [0, 10, 20, 30, 40, 50]
    assert steepest_rise(steps, [0.0, 0.1, 0.2, 2.0, 2.1, 2.2], 1) == (20, 30, pytest.approx(1.8))
    with pytest.raises(ValueError, match="window"):
        steepest_rise(steps, [0.0] * 6, 6)


def test_a_two_layer_attention_only_model_grows_induction_heads():
    run = train_induction(3)
    test = induction_test(run.model, 16, 32, seed=3)
    assert test["second_copy"] < test["first_copy"] - 1.0  # nats: the repeat is predicted
    pm = test["prefix_matching"]
    assert float(pm[1].max()) > 0.3  # an even head would put about 0.04 there
    best = int(pm[1].argmax())
    assert copying_scores(run.model)[1, best] > 0.5  # and it copies what it attends to
    untrained = AttentionOnly(32, 32, d_model=64)
    base = induction_test(untrained, 16, 32, seed=3)
    assert base["second_copy"] > base["first_copy"] - 0.2  # before training: no gain
