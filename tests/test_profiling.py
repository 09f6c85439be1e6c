import time
import timeit

import pytest
import torch

from companion import profiling
from companion.profiling import cuda_peak_memory, measure, median_ratio, time_call, time_in_rounds


def test_time_call_measures_sleep():
    t = time_call(lambda: time.sleep(0.02), min_run_time=0.1)
    assert 0.015 < t < 0.2


def test_fast_calls_are_timed_per_call_in_blocks():
    """A fast function runs many times per block, and the time is per call, not per block."""
    data = list(range(2000))

    def fn():
        return sum(data)

    m = measure(fn, min_run_time=0.1)
    assert m.number_per_run >= 10 and len(m.times) >= 2  # adaptive: blocks of many calls
    direct = timeit.timeit(fn, number=2000) / 2000  # seconds per call, read independently
    assert direct / 3 < time_call(fn, min_run_time=0.1) < 3 * direct


def test_slow_calls_warm_up_then_run_once_per_block():
    calls = []

    def fn():
        calls.append(time.perf_counter())
        time.sleep(0.03)

    m = measure(fn, min_run_time=0.05)
    assert m.number_per_run == 1
    # one warm-up call picks the block size (its time is not in m.times), then blocks until
    # min_run_time seconds are measured
    assert len(calls) == 1 + len(m.times) and len(m.times) >= 2
    assert sum(m.times) >= 0.05


def test_stat_picks_the_median_or_the_fastest_block(monkeypatch):
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    fixed = Measurement(number_per_run=10, raw_times=[0.5, 0.2, 0.9, 0.3], task_spec=TaskSpec("fn()", "pass"))
    monkeypatch.setattr(profiling, "measure", lambda *a, **k: fixed)
    assert time_call(lambda: None) == pytest.approx(0.04)  # median of 0.05, 0.02, 0.09, 0.03 s per call
    assert time_call(lambda: None, stat="min") == pytest.approx(0.02)


def test_runs_with_the_callers_threads():
    # torch's Timer alone would run fn with one thread
    seen = set()
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            time_call(lambda: seen.add(torch.get_num_threads()), min_run_time=0.01)
            assert seen == {threads} and torch.get_num_threads() == threads
            seen.clear()
    finally:
        torch.set_num_threads(before)


def test_device_is_synchronised_before_every_clock_reading(monkeypatch):
    """The clock is read only after the device finished its queued work: every block of
    calls is followed by a synchronisation before its end time is read."""
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    real_clock = time.perf_counter

    def clock():
        events.append("clock")
        return real_clock()

    monkeypatch.setattr(profiling.time, "perf_counter", clock)
    time_call(lambda: events.append("call"), device="cuda", min_run_time=0.01)
    clock_at = [i for i, e in enumerate(events) if e == "clock"]
    assert len(clock_at) >= 4 and all(events[i - 1] == "sync" for i in clock_at)
    last_call = max(i for i, e in enumerate(events) if e == "call")
    assert events[last_call + 1:] == ["sync", "clock"]  # the last call is waited for


def test_cuda_peak_memory_is_none_on_cpu():
    assert cuda_peak_memory(lambda: None, "cpu") is None


def test_cpu_time_ignores_sleeping():
    # sleeping takes wall time but no processor time
    # (the timer sizes its blocks by processor time: a waiting function runs many times)
    assert time_call(lambda: time.sleep(0.0005), cpu_time=True, min_run_time=0.01) < 0.0002
    busy = time_call(lambda: sum(range(300_000)), cpu_time=True, min_run_time=0.05)
    assert busy > 1e-4  # a few ms of arithmetic


@pytest.mark.parametrize("call, error, message", [
    (lambda: time_call(lambda: None, device="cuda", cpu_time=True), ValueError, "cannot time a cuda device"),
    (lambda: time_call(lambda: None, stat="mean"), ValueError, "stat must be 'median' or 'min'"),
    (lambda: time_call(lambda: None, min_run_time=0), ValueError, "min_run_time must be > 0"),
    (lambda: time_call(lambda: None, min_run_time=float("nan")), ValueError, "min_run_time must be a finite"),
    (lambda: time_call(None), TypeError, "fn must be a callable"),
    (lambda: measure(3.0), TypeError, "fn must be a callable taking no arguments, got float"),
])
def test_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_peak_memory_counts_tensors_alive_at_once():
    from companion.profiling import peak_memory

    def two_in_turn():
        a = torch.empty(1000)  # 4000 bytes
        del a
        b = torch.empty(500, dtype=torch.float64)  # 4000 bytes, after a is freed
        return b

    assert peak_memory(lambda: torch.empty(1000)) == 4000
    assert peak_memory(two_in_turn) == 4000
    keep = []
    assert peak_memory(lambda: keep.extend([torch.empty(1000), torch.empty(1000)])) == 8000
    x = torch.randn(100, 100)
    assert peak_memory(lambda: (x.T, x[:10], x.view(-1))) == 0  # views of an input: no new memory
    assert peak_memory(lambda: x.mul_(2)) == 0  # in place
    assert peak_memory(lambda: x @ x) == 40000


def test_peak_memory_sees_the_backward_pass():
    from companion.profiling import peak_memory
    w = torch.randn(64, 64, requires_grad=True)
    # forward (64, 64) result, then w.grad (64, 64) and the (64, 64) ones of sum's backward
    assert peak_memory(lambda: (w @ w).sum().backward()) >= 2 * 64 * 64 * 4


def test_growth_exponent():
    from companion.profiling import growth_exponent
    ns = [16, 32, 64, 128]
    assert growth_exponent(ns, [3 * n**2 for n in ns]) == pytest.approx(2)
    assert growth_exponent(ns, [7 * n for n in ns]) == pytest.approx(1)
    with pytest.raises(ValueError, match="at least 2 sizes"):
        growth_exponent([1], [1])
    with pytest.raises(ValueError, match="positive"):
        growth_exponent([1, 2], [0, 1])
    with pytest.raises(TypeError, match="callable"):
        profiling.peak_memory(3)


def test_explicit_attention_memory_grows_as_n_squared_tiled_as_n():
    from companion.profiling import attention_memory, growth_exponent
    ns = [64, 128, 256, 512]
    peaks = attention_memory(ns, heads=1, head_dim=64, block=32, backward=True)
    assert 1.8 < growth_exponent(ns, peaks["explicit"]) < 2.2
    assert 0.8 < growth_exponent(ns, peaks["tiled"]) < 1.2
    n = ns[-1]
    assert peaks["explicit"][-1] >= 2 * n * n * 4  # scores and weights of float32
    assert peaks["tiled"][-1] < peaks["explicit"][-1] / 4


def test_time_in_rounds_turns_the_order_from_round_to_round():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    times = time_in_rounds(calls, rounds=4, min_block_time=1e-9)
    assert {name: len(t) for name, t in times.items()} == {"a": 4, "b": 4, "c": 4}
    measured = order[6:]  # two warm-up calls each, then one call per block
    assert measured == list("abc" "bca" "cab" "abc")


class FakeClock:
    """A processor-time clock that only the timed functions advance, by exact amounts."""

    def __init__(self):
        self.now = 0.0
        self.calls = {}

    def __call__(self):
        return self.now

    def work(self, name, seconds):
        def fn():
            self.calls[name] = self.calls.get(name, 0) + 1
            self.now += seconds
        return fn


def test_time_in_rounds_files_each_time_under_its_function_and_sizes_its_blocks(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(profiling.time, "process_time", clock)
    unit = 1 / 1024  # exact in binary: the sums below are exact
    calls = {"a": clock.work("a", unit), "b": clock.work("b", 3 * unit)}
    times = time_in_rounds(calls, rounds=5, min_block_time=8 * unit, cpu_time=True)
    assert times == {"a": [unit] * 5, "b": [3 * unit] * 5}  # per call, whatever the order
    # warm-up 1, sizing blocks 1 then 8 (a) or 1 then 3 (b: 3 calls last 9 units), then 5 blocks
    assert clock.calls == {"a": 1 + 1 + 8 + 5 * 8, "b": 1 + 1 + 3 + 5 * 3}


def test_a_call_that_reads_as_no_time_does_not_make_a_huge_block(monkeypatch):
    monkeypatch.setattr(profiling.time, "process_time", lambda: 0.0)  # a wait: no CPU time
    count = [0]

    def wait():
        count[0] += 1
        time.sleep(0.001)

    times = time_in_rounds({"wait": wait}, rounds=2, min_block_time=0.02, cpu_time=True)
    assert times == {"wait": [0.0, 0.0]}
    assert count[0] < 200  # the wall clock ends the sizing: blocks of at most ~20 calls


def test_time_in_rounds_synchronises_the_device_around_each_block(monkeypatch):
    synced = []
    monkeypatch.setattr(profiling, "_sync", lambda device: synced.append(device.type))
    time_in_rounds({"a": lambda: None, "b": lambda: None}, rounds=3, number=2, device="cuda")
    assert synced == ["cuda"] * 2 * 3 * 2  # before and after each of 3 rounds' 2 blocks


def test_time_in_rounds_takes_a_fixed_block():
    counts = {"a": 0}
    times = time_in_rounds({"a": lambda: counts.__setitem__("a", counts["a"] + 1)}, rounds=3, number=4)
    assert len(times["a"]) == 3 and counts["a"] == 1 + 3 * 4  # one warm-up call, no sizing call


def test_median_ratio_compares_round_by_round():
    times = {"a": [2.0, 6.0, 3.0], "b": [1.0, 3.0, 6.0]}
    assert median_ratio(times, "a", "b") == 2.0  # ratios 2, 2, 0.5
    # the ratio of the medians (3 / 3) and ratios of sorted lists (2, 1, 1) would both give 1
    assert median_ratio(times, "b", "a") == 0.5


def test_rounds_refuse_bad_input():
    with pytest.raises(TypeError, match="must be a mapping"):
        time_in_rounds([lambda: None])
    with pytest.raises(ValueError, match="at least one function"):
        time_in_rounds({})
    with pytest.raises(TypeError, match=r"calls\['x'\] must be a callable"):
        time_in_rounds({"x": 3})
    with pytest.raises(ValueError, match="rounds"):
        time_in_rounds({"x": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="number"):
        time_in_rounds({"x": lambda: None}, number=0)
    with pytest.raises(ValueError, match="cannot time a cuda device"):
        time_in_rounds({"x": lambda: None}, device="cuda", cpu_time=True)
    with pytest.raises(KeyError, match="no times for 'c'"):
        median_ratio({"a": [1.0], "b": [1.0]}, "c", "a")
    with pytest.raises(ValueError, match="as many rounds"):
        median_ratio({"a": [1.0, 2.0], "b": [1.0]}, "a", "b")
    with pytest.raises(ValueError, match="'b' must be positive"):
        median_ratio({"a": [1.0], "b": [0.0]}, "a", "b")
    with pytest.raises(ValueError, match="'a' must be positive and finite"):
        median_ratio({"a": [float("nan")], "b": [1.0]}, "a", "b")
