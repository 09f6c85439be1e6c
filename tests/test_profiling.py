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
