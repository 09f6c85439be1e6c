"""An in-memory cache for the dataset generators: within one session (one kernel), the
same call generates its data once.

Every call returns a deep copy of the stored result, so a notebook that edits its data
cannot change what the next caller gets.
"""

from __future__ import annotations

import copy
import functools


def cached_dataset(fn):
    """Memoise the generator ``fn`` on its arguments. Calls with unhashable arguments
    (e.g. a list) are not cached. ``fn.cache_clear()`` empties the cache; ``fn.hits`` and
    ``fn.misses`` count how often it was used."""
    memo: dict = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return fn(*args, **kwargs)
        if key in memo:
            wrapper.hits += 1
        else:
            memo[key] = fn(*args, **kwargs)
            wrapper.misses += 1
        return copy.deepcopy(memo[key])

    wrapper.hits = wrapper.misses = 0
    wrapper.cache_clear = memo.clear
    return wrapper
