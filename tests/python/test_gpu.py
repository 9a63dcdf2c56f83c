"""CUDA tensors from PyTorch: heed runs on their device, on the caller's current stream.
Runs where torch.cuda.is_available() (the H200 through scripts/gpu-check); skipped, with
the reason, elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

import heed
import reference
from test_grid import CASES, make_inputs

torch = pytest.importorskip("torch", reason="PyTorch is not importable here")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to PyTorch"),
]

GPU_CASES = ["odd_127x129", "gqa_decode_bf16", "gqa_prefill_causal", "bool2d", "additive", "key_padding",
             "window16", "sinks", "sinks_decode_bf16", "cap_blocks", "blhd", "strided_last", "no_keys"]


@pytest.mark.parametrize("name", GPU_CASES)
def test_cuda_tensors_against_oracle(name):
    case = next(c for c in CASES if c.name == name)
    (q, k, v), mask, sinks, expected = make_inputs(case)
    dtype = getattr(torch, case.dtype)

    def to_cuda(array):
        if array is None:
            return None
        if array.dtype == np.bool_:
            return torch.from_numpy(np.ascontiguousarray(array)).cuda()
        return torch.from_numpy(np.ascontiguousarray(array.astype(np.float32))).to("cuda", dtype)

    tq, tk, tv = (to_cuda(x) for x in (q, k, v))
    if case.layout == "blhd":
        tk = tk.transpose(1, 2).contiguous().transpose(1, 2)
    result = heed.attention(tq, tk, tv, scale=case.scale, causal=case.causal, mask=to_cuda(mask),
                            window=case.window, sinks=to_cuda(sinks), max_score_bytes=case.cap)
    assert isinstance(result, torch.Tensor) and result.device == tq.device and result.dtype == dtype
    assert heed._heed.last_call()["device"] == "cuda:0"
    reference.assert_close(result.float().cpu().numpy(), expected, case.dtype)


def test_runs_on_the_current_stream():
    q = torch.randn(2, 8, 64, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 300, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 2, 300, 128, device="cuda", dtype=torch.bfloat16)
    expected = heed.attention(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        result = heed.attention(q, k, v, causal=True)
        assert heed._heed.last_call()["stream"] == stream.cuda_stream
        assert heed._heed.last_call()["q"] == q.data_ptr()
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(result, expected, rtol=1.6e-2, atol=1.6e-2)  # bfloat16


def test_plan_and_profile_name_the_cuda_kernel():
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.float16)
    plan = heed.plan(q, k, k)
    assert plan.device == "cuda:0"
    heed.profile.set_mode("shapes")
    try:
        heed.profile.reset()
        heed.attention(q, k, k)
        torch.cuda.synchronize()
        assert plan.kernel_name in [key.split(" ")[0] for key, _ in heed.profile.entries()]
    finally:
        heed.profile.set_mode("off")
        heed.profile.reset()
    assert heed.memory_stats("cuda").peak >= 0


def test_custom_op_compiles_on_cuda():
    import heed.torch as heed_torch

    q = torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 80, 64, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(lambda q, k: heed_torch.attention(q, k, k, causal=True), fullgraph=True)
    torch.testing.assert_close(compiled(q, k), heed.attention(q, k, k, causal=True), rtol=1.6e-2, atol=1.6e-2)


def _decode_inputs():
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, 32768, 128, device="cuda", dtype=torch.bfloat16)
    return q, k


def test_the_pools_cached_blocks_are_reported_and_released():
    q, k = _decode_inputs()
    plan = heed.plan(q, k, k)
    assert plan.scratch_bytes > 0, plan.explain()
    torch.cuda.synchronize()
    heed.empty_cache("cuda")
    assert heed.memory_stats("cuda").cached == 0
    heed.attention(q, k, k)
    torch.cuda.synchronize()
    stats = heed.memory_stats("cuda")
    assert stats.cached >= plan.scratch_bytes, stats
    assert stats.active == 0, stats
    assert heed.empty_cache("cuda") >= plan.scratch_bytes
    assert heed.memory_stats("cuda").cached == 0


def test_a_cuda_workspace_makes_heed_allocate_nothing():
    q, k = _decode_inputs()
    plan = heed.plan(q, k, k)
    expected = heed.attention(q, k, k)
    workspace = torch.empty(plan.scratch_bytes, device="cuda", dtype=torch.uint8)
    torch.cuda.synchronize()
    heed.empty_cache("cuda")
    heed.reset_peak("cuda")
    before = heed.memory_stats("cuda")
    got = heed.attention(q, k, k, workspace=workspace)
    torch.cuda.synchronize()
    after = heed.memory_stats("cuda")
    assert after.peak == before.active and after.cached == 0, (before, after)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="workspace"):
        heed.attention(q, k, k, workspace=workspace[: plan.scratch_bytes // 2])
    with pytest.raises(ValueError, match="workspace"):
        heed.attention(q, k, k, workspace=np.empty(plan.scratch_bytes, dtype=np.uint8))  # not on q's device


def test_max_scratch_bytes_on_cuda_takes_fewer_partitions():
    q, k = _decode_inputs()
    whole = heed.plan(q, k, k)
    bounded = heed.plan(q, k, k, max_scratch_bytes=whole.scratch_bytes // 3)
    assert bounded.scratch_bytes <= whole.scratch_bytes // 3, bounded.explain()
    assert "scratch bound by max_scratch_bytes" in bounded.explain()
    torch.testing.assert_close(heed.attention(q, k, k, max_scratch_bytes=whole.scratch_bytes // 3),
                               heed.attention(q, k, k), rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("route, q_len", [("vector", 2), ("tiled", 200), ("composed", 200)])
def test_route_on_cuda(route, q_len):
    q = torch.randn(1, 8, q_len, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 300, 64, device="cuda", dtype=torch.bfloat16)
    plan = heed.plan(q, k, k, route=route)
    assert plan.route.startswith(route), plan.explain()
    torch.testing.assert_close(heed.attention(q, k, k, route=route), heed.attention(q, k, k), rtol=1.6e-2,
                               atol=1.6e-2)
