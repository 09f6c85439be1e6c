"""companion.distributed: each split equals the single-device computation, forward and backward.

The process tests run real ranks (gloo on 127.0.0.1, the launcher's forkserver started once
for the file); the simulated-ranks versions are checked against torch in one process. The
counts of what is sent are checked against the formulas, and a rank that fails stops the
others with an error that names it.
"""

from __future__ import annotations

import multiprocessing
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from companion.distributed import data_parallel as dp
from companion.distributed import ring
from companion.distributed import tensor_parallel as tp
from companion.distributed.launch import (RankFailed, choose_backend, fail_on_rank, free_port, launch,
                                         own_tcp_addresses)
from companion.masks import causal_mask
from companion.multihead import MultiHeadAttention

TOL = {"atol": 1e-5, "rtol": 1e-5}


# --- heads across devices ----------------------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_simulated_head_split_equals_multihead_attention(world, causal):
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 6, 16)
    expected, _ = mha(x, causal=causal)
    got = tp.simulated_attention(x, tp.head_shards(mha, world), causal)
    torch.testing.assert_close(got, expected, **TOL)


def test_head_shards_hold_whole_heads():
    mha = MultiHeadAttention(16, 4)
    shards = tp.head_shards(mha, 2)
    assert shards[1]["w_qkv"].shape == (24, 16) and shards[1]["w_o"].shape == (16, 8)
    torch.testing.assert_close(shards[1]["w_qkv"][8:16], mha.in_proj.weight[16 + 8:32])  # rank 1's W^K rows
    with pytest.raises(ValueError, match="world_size=3 must divide num_heads=4"):
        tp.head_shards(mha, 3)


@pytest.fixture(scope="module")
def reference_block():
    layer = tp.make_block(32, 4, 64, seed=0)
    x, w = tp.make_inputs(2, 8, 32, seed=0)
    x.requires_grad_(True)
    out = layer(x, causal_mask(8))
    (out * w).sum().backward()
    return layer, out.detach(), x.grad


@pytest.mark.parametrize("world", [1, 2, 4])
def test_tensor_parallel_block_equals_one_device(world, reference_block):
    layer, out, x_grad = reference_block
    results = tp.tensor_parallel_block(world, seed=0)
    for r in results:  # every rank ends with the whole output and input gradient
        torch.testing.assert_close(r["out"], out, **TOL)
        torch.testing.assert_close(r["x_grad"], x_grad, **TOL)
    grads = tp.gather_block_grads(results)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, **TOL, msg=name)
    for r in results[1:]:  # replicated parameters get the same gradient on every rank
        torch.testing.assert_close(r["grads"]["norm1.weight"], results[0]["grads"]["norm1.weight"])
    # Megatron's count: 2 all-reduces of B·N·D numbers forward, 2 backward
    expected = tp.block_all_reduces(2, 8, 32, world)
    for phase in ("forward", "backward"):
        # counted: calls and payload; the third number (bytes sent) is derived from the payload
        assert results[0]["log"][f"all_reduce/{phase}"][:2] == expected[phase][:2]
    assert expected["forward"][1] == 2 * 2 * 8 * 32 * 4


# --- the sequence across devices ----------------------------------------------------------------

def test_merge_partials_of_two_halves_is_the_softmax():
    q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
    a = ring.block_partial(q, k[..., :2, :], v[..., :2, :])
    b = ring.block_partial(q, k[..., 2:, :], v[..., 2:, :], 0, 2)
    out, lse = ring.finish(ring.merge_partials(a, b))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.transpose(-2, -1) / 8 ** 0.5, -1), **TOL)
    assert ring.merge_partials(None, a) is a
    assert ring.block_partial(q, k, v, q_start=0, k_start=4, causal=True) is None  # keys after every query


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_simulated_ring_equals_attention(world, causal, layout):
    q, k, v, w = (t.requires_grad_() for t in ring.make_qkv(2, 2, 24, 8, seed=1))
    out, work = ring.simulated_ring_attention(q, k, v, world, causal, layout)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal), **TOL)
    got = torch.autograd.grad((out * w).sum(), (q, k, v))
    ref = torch.autograd.grad((F.scaled_dot_product_attention(q, k, v, is_causal=causal) * w).sum(), (q, k, v))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, **TOL)
    assert torch.equal(work, ring.ring_schedule(world, 24, causal, layout))


def test_shard_and_gather_are_inverse_and_zigzag_pairs_chunks():
    x = torch.arange(16.0).reshape(1, 1, 16, 1)
    blocks = ring.shard_sequence(x, 4, "zigzag")
    assert blocks[0].flatten().tolist() == [0, 1, 14, 15]  # chunks 0 and 7 of 8
    assert torch.equal(ring.gather_sequence(blocks, "zigzag"), x)
    with pytest.raises(ValueError, match="length=12 must be a multiple of 8"):
        ring.block_chunks(0, 4, 12, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        ring.block_chunks(0, 4, 16, "striped")


def test_causal_schedule_contiguous_is_unbalanced_zigzag_is_balanced():
    world, n = 4, 32
    contiguous = ring.ring_schedule(world, n, True, "contiguous")
    per_rank = contiguous.sum(1)
    block = (n // world) ** 2
    assert per_rank.tolist() == [block * (r + 1) for r in range(world)]  # rank r: r + 1 blocks
    assert (contiguous[0, 1:] == 0).all()  # rank 0 idle after step 0
    zigzag = ring.ring_schedule(world, n, True, "zigzag")
    assert (zigzag == zigzag[0]).all()  # every rank the same work at every step
    assert zigzag.sum() < contiguous.sum()  # and it skips the blocked halves too


@pytest.fixture(scope="module")
def ring_reference():
    refs = {}
    for causal in (False, True):
        q, k, v, w = (t.requires_grad_() for t in ring.make_qkv(1, 2, 32, 8, seed=0))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        refs[causal] = (out.detach(), *torch.autograd.grad((out * w).sum(), (q, k, v)))
    return refs


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_ring_attention_on_processes_equals_attention(world, causal, layout, ring_reference):
    results = ring.run_ring_attention(world, batch=1, heads=2, length=32, head_dim=8, seed=0, causal=causal,
                                      layout=layout)
    for name, ref in zip(("out", "dq", "dk", "dv"), ring_reference[causal]):
        torch.testing.assert_close(ring.gather_sequence([r[name] for r in results], layout), ref, **TOL, msg=name)
    schedule = ring.ring_schedule(world, 32, causal, layout)
    for rank, r in enumerate(results):
        assert r["work"] == schedule[rank].tolist()
        sent = ring.ring_bytes(1, 2, 32, 8, world)
        assert r["log"].get("send/forward", (0, 0, 0))[2] == sent["forward"]
        assert r["log"].get("send/backward", (0, 0, 0))[2] == sent["backward"]


def test_ring_memory_per_rank_falls_as_one_over_p():
    held = {p: ring.run_ring_attention(p, length=64, causal=True)[0]["held_elements"] for p in (1, 2, 4)}
    assert held[2] <= held[1] / 2 and held[4] <= held[2] / 2, held


def test_ulysses_volume():
    assert ring.ulysses_bytes(1, 2, 8, 2, 1) == 0
    assert ring.ulysses_bytes(1, 2, 8, 2, 2, bytes_per_element=1) == 4 * 8 * 4 * 1 // 4  # 4 B N D (P-1)/P²
    assert ring.ulysses_bytes(1, 4, 8, 1, 4, bytes_per_element=1) == 4 * 8 * 4 * 3 // 16


@pytest.mark.parametrize("heads,world", [(2, 4), (6, 4), (4, 0)])
def test_ulysses_needs_world_size_to_divide_the_heads(heads, world):
    with pytest.raises(ValueError, match=f"world_size={world} must divide heads={heads}"):
        ring.ulysses_bytes(1, heads, 32, 8, world)


# --- the batch across devices --------------------------------------------------------------------

@pytest.fixture(scope="module")
def ddp_setup():
    batches = dp.make_batches(3, 8, 16, 32, seed=0)
    return batches, dp.single_process(batches, seed=0)


@pytest.mark.parametrize("world,accumulate,no_sync", [(2, 1, False), (4, 1, False), (2, 2, False), (2, 2, True)])
def test_ddp_equals_one_process_on_the_global_batch(world, accumulate, no_sync, ddp_setup):
    batches, reference = ddp_setup
    results = dp.data_parallel_training(world, batches, seed=0, accumulate=accumulate, no_sync=no_sync)
    for r in results:
        for name, value in reference.items():
            torch.testing.assert_close(r["state"][name], value, **TOL, msg=name)
    untrained = dp.single_process(batches[:0], seed=0)
    assert any(not torch.equal(untrained[n], reference[n]) for n in reference)  # training moved the weights
    per_step = dp.ddp_bytes(results[0]["parameters"], world, accumulate, no_sync)
    _, payload, _ = results[0]["log"]["all_reduce/backward"]  # the bytes sent are derived
    assert payload == 3 * per_step["payload"]


def test_gradient_accumulation_equals_the_whole_batch(ddp_setup):
    batches, reference = ddp_setup
    accumulated = dp.single_process(batches, seed=0, accumulate=4)
    for name, value in reference.items():
        torch.testing.assert_close(accumulated[name], value, **TOL)


def test_no_sync_saves_all_but_one_all_reduce():
    with_sync, without = dp.ddp_bytes(1000, 2, accumulate=4), dp.ddp_bytes(1000, 2, accumulate=4, no_sync=True)
    assert with_sync["payload"] == 4 * without["payload"] == 4 * 4000


# --- the launcher ----------------------------------------------------------------------------------

@pytest.mark.parametrize("how,words", [("raise", "raised ValueError: rank 1 fails on purpose"),
                                       ("exit", "died (exit code 3)")])
def test_a_failing_rank_stops_the_others_with_an_error_naming_it(how, words):
    start = time.monotonic()
    with pytest.raises(RankFailed, match=r"rank 1 of 3") as caught:
        launch(fail_on_rank, 3, (1, how), timeout=30)
    assert caught.value.rank == 1 and words in str(caught.value) and "ranks [0, 2] were stopped" in str(caught.value)
    assert time.monotonic() - start < 25  # stopped, not left waiting for the timeout
    assert not multiprocessing.active_children()  # every process joined


def test_launch_returns_each_ranks_result_and_refuses_local_functions():
    assert launch(fail_on_rank, 2, (5,)) == [2, 2]  # no rank fails: each returns the all-reduced sum
    with pytest.raises(TypeError, match="defined at the top of a module"):
        launch(lambda rank, world: rank, 2)
    with pytest.raises(ValueError, match="world_size"):
        launch(fail_on_rank, 0)


def test_backend_follows_the_device_policy(monkeypatch):
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    assert choose_backend(2, "gpu") == "gloo" and choose_backend(1, "cpu") == "gloo"
    with pytest.raises(ValueError, match="scale must be one of"):
        choose_backend(2, "tpu")
    assert 0 < free_port() < 65536


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux only)")
def test_the_group_uses_only_the_loopback_interface():
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    for addresses in launch(own_tcp_addresses, 2):
        assert addresses, "gloo connected the ranks through TCP sockets"
        outside = [(a, state) for a, state in addresses if a not in loopback]
        assert not outside, f"sockets outside the loopback interface: {outside}"
