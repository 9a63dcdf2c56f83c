"""What heed holds on a device: active, peak and cached bytes, the caches' limit and their
release (heed.memory_stats, heed.empty_cache, heed.cache_limit / set_cache_limit)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import heed


def _call() -> heed.Plan:
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 4, 256, 64), dtype=np.float32)
    k = rng.standard_normal((1, 2, 1024, 64), dtype=np.float32)
    plan = heed.plan(q, k, k)
    heed.attention(q, k, k)
    return plan


def test_cached_rises_after_a_call_and_empty_cache_releases_it():
    heed.empty_cache()
    assert heed.memory_stats().cached == 0
    plan = _call()
    assert plan.scratch_bytes > 0
    stats = heed.memory_stats()
    assert stats.cached >= plan.scratch_bytes, stats
    assert stats.active == 0, "a finished call holds nothing active"
    assert "cached=" in repr(stats)
    released = heed.empty_cache("cpu")
    assert released >= plan.scratch_bytes
    assert heed.memory_stats().cached == 0
    assert heed.empty_cache() == 0


def test_empty_cache_from_another_thread():
    _call()
    assert heed.memory_stats().cached > 0
    released = []
    worker = threading.Thread(target=lambda: released.append(heed.empty_cache()))
    worker.start()
    worker.join()
    assert released[0] > 0
    assert heed.memory_stats().cached == 0


def test_the_cache_limit_bounds_what_is_kept():
    default = heed.cache_limit()
    if "HEED_CACHE_BYTES" in os.environ:
        assert default == int(os.environ["HEED_CACHE_BYTES"])
    else:
        assert 0 < default <= 1 << 30
    try:
        heed.set_cache_limit(0)
        assert heed.cache_limit() == 0
        _call()
        assert heed.memory_stats().cached == 0, "a limit of 0 keeps nothing"
    finally:
        heed.set_cache_limit(default)
    assert heed.cache_limit() == default


@pytest.mark.parametrize("value, kind", [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("1", TypeError)])
def test_set_cache_limit_rejects_what_is_no_byte_count(value, kind):
    with pytest.raises(kind, match="set_cache_limit"):
        heed.set_cache_limit(value)
