import time

import pytest

from companion.profiling import cuda_peak_memory, time_call


def test_time_call_measures_sleep():
    t = time_call(lambda: time.sleep(0.02), repeats=3, warmup=0)
    assert 0.015 < t < 0.2


def test_time_call_counts_runs():
    calls = []
    time_call(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        time_call(lambda: None, repeats=0)


def test_cuda_peak_memory_is_none_on_cpu():
    assert cuda_peak_memory(lambda: None, "cpu") is None


def test_cpu_time_ignores_sleeping():
    # sleeping takes wall time but no processor time
    assert time_call(lambda: time.sleep(0.05), repeats=2, warmup=0, cpu_time=True) < 0.02
    busy = time_call(lambda: sum(range(300_000)), repeats=2, warmup=0, cpu_time=True)
    assert busy > 0
    with pytest.raises(ValueError, match="cannot time a cuda device"):
        time_call(lambda: None, device="cuda", cpu_time=True)
    with pytest.raises(ValueError, match="stat must be 'median' or 'min'"):
        time_call(lambda: None, stat="mean")
