"""heed.runner_paged on PyTorch CUDA tensors: run() captured by torch.cuda.graph replays after
the data, the block table and the lengths change in place, matching the plain call exactly;
host metadata reaches a CUDA runner through update_metadata; run() follows the current stream.
Runs where torch.cuda.is_available(); skipped, with the reason, elsewhere."""

from __future__ import annotations

import time

import pytest

import heed

torch = pytest.importorskip("torch", reason="PyTorch is not importable here")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to PyTorch"),
]

B, HQ, HKV, D, PAGES, PAGE_SIZE, MAX_PAGES = 4, 8, 2, 128, 40, 16, 8


def decode_inputs(generator):
    def randn(*shape):
        return torch.randn(*shape, generator=generator, device="cuda").to(torch.bfloat16)

    q, k_cache, v_cache = randn(B, HQ, D), randn(PAGES, PAGE_SIZE, HKV, D), randn(PAGES, PAGE_SIZE, HKV, D)
    table = (torch.arange(B * MAX_PAGES, device="cuda", dtype=torch.int32) * 7 % PAGES).reshape(B, MAX_PAGES)
    lengths = torch.tensor([100, 1, 128, 37], device="cuda", dtype=torch.int32)
    return q, k_cache, v_cache, table, lengths


def test_a_captured_decode_replays_after_in_place_changes():
    generator = torch.Generator(device="cuda").manual_seed(3)
    q, k_cache, v_cache, table, lengths = decode_inputs(generator)
    out = torch.empty_like(q)
    bound = dict(max_seqlen_k=PAGE_SIZE * MAX_PAGES)
    r = heed.runner_paged(q, k_cache, v_cache, table, lengths, out=out, **bound)
    r.run()  # a warm-up before capture, as PyTorch advises (the C++ test captures a cold runner)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        r.run()
    for _ in range(2):
        graph.replay()
        expected = heed.attention_paged(q, k_cache, v_cache, table, lengths, **bound)
        torch.cuda.synchronize()
        assert torch.equal(out, expected)
        q.copy_(torch.randn(q.shape, generator=generator, device="cuda"))
        k_cache.copy_(torch.randn(k_cache.shape, generator=generator, device="cuda"))
        table.copy_((torch.arange(B * MAX_PAGES, device="cuda", dtype=torch.int32) * 13 + 5).reshape(B, -1) % PAGES)
        lengths.copy_(torch.tensor([0, 128, 17, 64], device="cuda", dtype=torch.int32))


def test_host_metadata_reaches_a_cuda_runner_through_update_metadata():
    generator = torch.Generator(device="cuda").manual_seed(4)
    q, k_cache, v_cache, table, lengths = decode_inputs(generator)
    table_host, lengths_host = table.cpu(), lengths.cpu()
    out = torch.empty_like(q)
    r = heed.runner_paged(q, k_cache, v_cache, table_host, lengths_host, out=out, max_seqlen_k=128)
    assert any(b["name"] == "metadata" for b in r.plan.buffers)
    r.run()
    torch.cuda.synchronize()
    assert torch.equal(out, heed.attention_paged(q, k_cache, v_cache, table, lengths, max_seqlen_k=128))
    lengths_host[...] = torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    r.update_metadata()
    r.run()
    torch.cuda.synchronize()
    assert torch.equal(out, heed.attention_paged(q, k_cache, v_cache, table, lengths_host.cuda(), max_seqlen_k=128))


def test_run_follows_the_current_stream_and_costs_little_host_time():
    generator = torch.Generator(device="cuda").manual_seed(5)
    q, k_cache, v_cache, table, lengths = decode_inputs(generator)
    out = torch.empty_like(q)
    r = heed.runner_paged(q, k_cache, v_cache, table, lengths, out=out, max_seqlen_k=128)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        r.run()
    stream.synchronize()
    assert torch.equal(out, heed.attention_paged(q, k_cache, v_cache, table, lengths, max_seqlen_k=128))
    # Printed, not asserted (a test asserts no time): the bound is 15 us per run.
    runs = 2000
    start = time.perf_counter()
    for _ in range(runs):
        r.run()
    host_us = (time.perf_counter() - start) / runs * 1e6
    torch.cuda.synchronize()
    print(f"heed.Runner.run host time: {host_us:.1f} us per run")
