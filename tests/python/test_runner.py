"""heed.runner, runner_varlen and runner_paged on the CPU: a run gives the plain call's output
exactly (same plan, same kernels), again after the data and the metadata change in place; errors
at construction are the plain call's; numpy arrays, and torch CPU tensors where PyTorch is
importable."""

from __future__ import annotations

import numpy as np
import pytest

import heed
from conftest import random as random_array, torch_or_skip

I32 = np.int32
RNG = np.random.default_rng(20)


def random(shape) -> np.ndarray:
    return random_array(RNG, tuple(shape), np.dtype(np.float32))


def cu_seqlens(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(I32)


def test_dense_runner_matches_the_plain_call_after_data_changes():
    q, k, v = random((2, 4, 17, 32)), random((2, 2, 33, 32)), random((2, 2, 33, 32))
    out, lse = np.empty((2, 4, 17, 32), np.float32), np.empty((2, 4, 17), np.float32)
    r = heed.runner(q, k, v, out=out, lse=lse, causal=True)
    assert isinstance(r, heed.Runner)
    assert heed.runner(q, k, v, out=out, causal=True).plan == heed.plan(q, k, v, causal=True)
    for _ in range(2):
        out.fill(np.nan)
        r.run()
        expected, expected_lse = heed.attention(q, k, v, causal=True, return_lse=True)
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(lse, expected_lse)
        q[...] = random(q.shape)
        k[...] = random(k.shape)


def test_varlen_runner_follows_metadata_changed_in_place():
    q, k, v = random((40, 4, 32)), random((90, 2, 32)), random((90, 2, 32))
    cu_q, cu_k = cu_seqlens([10, 25, 5]), cu_seqlens([30, 40, 20])
    out = np.empty((40, 4, 32), np.float32)
    bounds = dict(max_seqlen_q=30, max_seqlen_k=50)
    r = heed.runner_varlen(q, k, v, cu_q, cu_k, out=out, causal=True, **bounds)
    for _ in range(2):
        r.run()
        expected = heed.attention_varlen(q, k, v, cu_q, cu_k, causal=True, **bounds)
        np.testing.assert_array_equal(out, expected)
        cu_q[...] = cu_seqlens([28, 12, 0])  # the last sequence unused
        cu_k[...] = cu_seqlens([50, 40, 0])
        r.update_metadata()
        v[...] = random(v.shape)


def test_paged_runner_follows_its_block_table_and_lengths():
    q = random((3, 4, 32))
    k_cache, v_cache = random((12, 8, 2, 32)), random((12, 8, 2, 32))
    table = np.arange(12, dtype=I32).reshape(3, 4)
    lengths = np.array([30, 17, 1], I32)
    out = np.empty((3, 4, 32), np.float32)
    r = heed.runner_paged(q, k_cache, v_cache, table, lengths, out=out, max_seqlen_k=32)
    for _ in range(2):
        r.run()
        expected = heed.attention_paged(q, k_cache, v_cache, table, lengths, max_seqlen_k=32)
        np.testing.assert_array_equal(out, expected)
        table[...] = np.array([[11, 3, 3, 0], [7, 2, 9, 1], [5, 5, 5, 5]], I32)
        lengths[...] = [25, 0, 32]
        r.update_metadata()
        k_cache[...] = random(k_cache.shape)


def test_update_metadata_rejects_lengths_beyond_the_plan():
    q, k_cache, v_cache = random((2, 2, 16)), random((4, 4, 1, 16)), random((4, 4, 1, 16))
    table, lengths = np.arange(4, dtype=I32).reshape(2, 2), np.array([3, 5], I32)
    r = heed.runner_paged(q, k_cache, v_cache, table, lengths, out=np.empty((2, 2, 16), np.float32))
    lengths[0] = 8
    with pytest.raises(ValueError, match=r"max_seqlen_k \(5\)"):
        r.update_metadata()
    r.run()  # clamped to the plan's bound


def test_errors_at_construction_are_the_plain_calls():
    q, k, v = random((1, 3, 4, 16)), random((1, 2, 5, 16)), random((1, 2, 5, 16))
    out = np.full((1, 3, 4, 16), np.nan, np.float32)
    with pytest.raises(ValueError, match=r"Hq \(3\) must be a multiple of Hkv \(2\)"):
        heed.runner(q, k, v, out=out)
    assert np.isnan(out).all()
    with pytest.raises(TypeError, match="out is required"):
        heed.runner(q, k, v, out=None)


def test_the_runner_keeps_its_arrays_alive():
    q, k, v = random((1, 2, 3, 16)), random((1, 2, 5, 16)), random((1, 2, 5, 16))
    expected = heed.attention(q, k, v)
    out = np.empty_like(expected)
    r = heed.runner(q.copy(), k.copy(), v.copy(), out=out)
    del out
    r.run()
    np.testing.assert_array_equal(r._arrays[3], expected)


def test_torch_cpu_tensors():
    torch = torch_or_skip()
    q, k, v = (torch.from_numpy(random(shape)) for shape in ((1, 4, 9, 32), (1, 2, 9, 32), (1, 2, 9, 32)))
    out = torch.empty(1, 4, 9, 32)
    r = heed.runner(q, k, v, out=out, causal=True)
    r.run()
    torch.testing.assert_close(out, torch.from_numpy(heed.attention(q.numpy(), k.numpy(), v.numpy(), causal=True)),
                               rtol=0, atol=0)
