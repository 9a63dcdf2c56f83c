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


def _inputs():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 256, 64), dtype=np.float32)
    k = rng.standard_normal((1, 2, 1024, 64), dtype=np.float32)
    return q, k


def test_a_workspace_makes_heed_allocate_nothing():
    q, k = _inputs()
    plan = heed.plan(q, k, k)
    assert plan.scratch_bytes > 0
    expected = heed.attention(q, k, k)
    heed.empty_cache()
    heed.reset_peak()
    before = heed.memory_stats()
    workspace = np.empty(plan.scratch_bytes, dtype=np.uint8)
    got = heed.attention(q, k, k, workspace=workspace)
    after = heed.memory_stats()
    assert after.peak == before.active, "with a workspace heed allocates nothing"
    assert after.cached == 0, "nor keeps anything"
    np.testing.assert_array_equal(got, expected)
    # Any element type will do, as long as it holds the bytes.
    got = heed.attention(q, k, k, workspace=np.empty(plan.scratch_bytes // 4 + 1, dtype=np.float32))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("make, kind, text", [
    (lambda n: np.empty(n // 2, dtype=np.uint8), ValueError, "workspace"),
    (lambda n: np.empty((n, 2), dtype=np.uint8)[:, 0], ValueError, "contiguous"),
    (lambda n: np.frombuffer(bytes(n), dtype=np.uint8), ValueError, "read-only"),
    (lambda n: bytearray(n), TypeError, "workspace"),
])
def test_a_workspace_that_does_not_serve_is_rejected(make, kind, text):
    q, k = _inputs()
    plan = heed.plan(q, k, k)
    out = np.full((1, 4, 256, 64), 7.0, dtype=np.float32)
    with pytest.raises(kind, match=text):
        heed.attention(q, k, k, out=out, workspace=make(plan.scratch_bytes))
    assert (out == 7.0).all(), "out written on error"


@pytest.mark.parametrize("route", ["tiled", "composed"])
def test_route_forces_a_route_in_plan_and_attention(route):
    q, k = _inputs()
    plan = heed.plan(q, k, k, route=route)
    assert plan.route.startswith(route), plan.explain()
    shapes = heed.plan(q.shape, k.shape, k.shape, route=route, device="cpu")
    assert shapes.route == plan.route
    np.testing.assert_allclose(heed.attention(q, k, k, route=route), heed.attention(q, k, k), rtol=2e-5, atol=2e-6)


def test_an_unknown_route_is_rejected():
    q, k = _inputs()
    with pytest.raises(ValueError, match="route must be"):
        heed.attention(q, k, k, route="fast")
    with pytest.raises(ValueError, match="route must be"):
        heed.plan(q, k, k, route="fast")
    with pytest.raises(TypeError, match="route must be a str"):
        heed.plan(q, k, k, route=None)


def test_max_scratch_bytes_bounds_the_plan_or_names_the_smallest_budget():
    q, k = _inputs()
    plan = heed.plan(q, k, k, route="tiled")
    assert plan.scratch_bytes > 0
    if plan.workers < 2:
        pytest.skip("one worker: the float32 tiled route has no smaller form here")
    budget = plan.scratch_bytes - 1
    bounded = heed.plan(q, k, k, route="tiled", max_scratch_bytes=budget)
    assert bounded.scratch_bytes <= budget
    assert "max_scratch_bytes" in bounded.explain()
    shapes = heed.plan(q.shape, k.shape, k.shape, route="tiled", max_scratch_bytes=budget, device="cpu")
    assert shapes.scratch_bytes == bounded.scratch_bytes
    np.testing.assert_allclose(heed.attention(q, k, k, route="tiled", max_scratch_bytes=budget),
                               heed.attention(q, k, k), rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="the smallest budget that fits is"):
        heed.attention(q, k, k, route="tiled", max_scratch_bytes=64)
    with pytest.raises(ValueError, match="max_scratch_bytes must be > 0"):
        heed.plan(q, k, k, max_scratch_bytes=0)
