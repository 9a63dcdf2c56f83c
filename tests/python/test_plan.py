"""heed.plan, heed.memory_stats and heed.profile: the C++ features, seen from Python."""

from __future__ import annotations

import json

import numpy as np
import pytest

import heed
from conftest import BFLOAT16, random, torch_or_skip


def test_plan_from_shapes_equals_plan_from_arrays():
    rng = np.random.default_rng(0)
    q, k, v = (random(rng, shape, np.float16) for shape in ((2, 8, 1, 128), (2, 2, 500, 128), (2, 2, 500, 128)))
    from_arrays = heed.plan(q, k, v, causal=True, window=64)
    # Shapes plan for the default device (cuda:0 where heed has a GPU): name the arrays' device.
    from_shapes = heed.plan(q.shape, k.shape, v.shape, dtype=np.float16, causal=True, window=64, device="cpu")
    assert from_arrays == from_shapes
    assert heed.plan(q.shape, k.shape, v.shape, dtype="f16", causal=True, window=64, device="cpu") == from_shapes
    assert from_shapes.route == "vector" and from_shapes.kernel["route"] == "vector"
    assert from_shapes.kernel_name == "heed_cpu_vector_f16"
    assert from_shapes.dtype == "float16" and from_shapes.device == "cpu"
    assert from_shapes.reasons and from_shapes.explain() == "".join(line + "\n" for line in from_shapes.reasons)
    parsed = json.loads(from_shapes.to_json())
    assert parsed["scratch_bytes"] == from_shapes.scratch_bytes
    assert sum(buffer["bytes"] for buffer in from_shapes.buffers) <= from_shapes.scratch_bytes
    assert "heed.Plan(kernel_name='heed_cpu_vector_f16'" in repr(from_shapes)


def test_plan_reads_strides_and_cap():
    rng = np.random.default_rng(1)
    q, k, v = (random(rng, shape, np.float32) for shape in ((1, 4, 300, 64), (1, 4, 300, 64), (1, 4, 300, 64)))
    tiled = heed.plan(q, k, v)
    assert tiled.kernel["route"] == "tiled" and {"block_q", "block_k"} <= tiled.kernel.keys()
    capped = heed.plan(q, k, v, max_score_bytes=4096)
    assert capped.max_intermediate_bytes <= 4096 and capped.capped
    assert heed.plan(q, k, v, scale=0.5) == tiled  # no plan depends on the scale


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not importable")
def test_plan_dtype_spellings():
    shapes = ((1, 2, 40, 64), (1, 2, 40, 64), (1, 2, 40, 64))
    names = {heed.plan(*shapes, dtype=dtype).dtype for dtype in ("bfloat16", "bf16", BFLOAT16)}
    assert names == {"bfloat16"}


def test_torch_dtype_and_device_spellings():
    torch = torch_or_skip()
    shapes = ((1, 2, 40, 64), (1, 2, 40, 64), (1, 2, 40, 64))
    assert heed.plan(*shapes, dtype=torch.bfloat16, device=torch.device("cpu")).dtype == "bfloat16"
    q = torch.zeros(shapes[0], dtype=torch.float16)
    assert heed.plan(q, q, q).kernel_name == heed.plan(*shapes, dtype=torch.float16, device="cpu").kernel_name


def test_memory_stats_keep_the_plans_promise():
    """peak - active during a call is at most the plan's scratch_bytes (allocator rounding aside)."""
    rng = np.random.default_rng(2)
    q, k, v = (random(rng, shape, np.float32) for shape in ((1, 8, 200, 64), (1, 2, 700, 64), (1, 2, 700, 64)))
    plan = heed.plan(q, k, v, causal=True)
    before = heed.memory_stats()
    heed.reset_peak()
    heed.attention(q, k, v, causal=True)
    after = heed.memory_stats("cpu")
    assert after.active == before.active
    assert plan.scratch_bytes * 0.8 <= after.peak - after.active <= plan.scratch_bytes + 64 * len(plan.buffers) * 2
    assert "heed.MemoryStats(active=" in repr(after)


def test_profile_records_dispatches():
    rng = np.random.default_rng(3)
    q, k, v = (random(rng, shape, np.float32) for shape in ((1, 4, 1, 64), (1, 1, 900, 64), (1, 1, 900, 64)))
    heed.profile.set_mode("time")
    try:
        assert heed.profile.mode() == "time"
        heed.profile.reset()
        heed.attention(q, k, v)
        heed.attention(q, k, v)
        records = heed.profile.records()
        key, count, seconds = records[0]
        assert key.startswith(heed.plan(q, k, v).kernel_name + " [") and count == 2 and seconds > 0
        assert [(key, count) for key, count, _ in records] == heed.profile.entries()
        assert heed.profile.report().splitlines()[0].startswith(key)
    finally:
        heed.profile.set_mode("off")
        heed.profile.reset()
    heed.attention(q, k, v)
    assert heed.profile.entries() == []
