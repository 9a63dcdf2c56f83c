#!/usr/bin/env python3
"""The host time of one attention call from Python on PyTorch CUDA tensors: heed.attention,
heed.torch.attention, heed.attention_paged and PyTorch's SDPA (cuDNN and flash backends), on a
decode shape whose kernel is short (B1, 32/8 heads, D 128, bf16). For each call it prints:
  host_us  the time to issue N calls with the GPU idle at the start, per call: what the host
           spends, as long as the queue of launches is not full (N is far below its depth);
  loop_us  N calls and a synchronisation, per call: what a decode loop of these calls runs at;
  event_us one call between CUDA events (median): the device's view of one call.
When host_us exceeds the kernel's time, a loop runs at host speed.

usage: host_time.py [--keys 4096] [--calls 200] [--reps 5] [--json OUT]
"""
import argparse
import json
import statistics
import time


def issue_time_us(fn, calls, torch):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    looped = time.perf_counter() - start
    return issued / calls * 1e6, looped / calls * 1e6


def event_us(fn, reps, torch):
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def measure(name, fn, args, torch):
    for _ in range(20):
        fn()
    rounds = [issue_time_us(fn, args.calls, torch) for _ in range(args.reps)]
    row = {"call": name, "keys": args.keys, "calls": args.calls,
           "host_us": min(r[0] for r in rounds), "host_us_median": statistics.median(r[0] for r in rounds),
           "loop_us": statistics.median(r[1] for r in rounds), "event_us": event_us(fn, 50, torch)}
    print(f"{name:<34} host {row['host_us']:7.1f} us (median {row['host_us_median']:7.1f})"
          f"   loop {row['loop_us']:7.1f} us   one call {row['event_us']:7.1f} us", flush=True)
    return row


def calls(args, torch, heed):
    import heed.torch  # noqa: F401  registers torch.ops.heed
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    dev, bf16, keys = "cuda", torch.bfloat16, args.keys
    q = torch.randn(1, 32, 1, 128, device=dev, dtype=bf16)
    k = torch.randn(1, 8, keys, 128, device=dev, dtype=bf16)
    v = torch.randn(1, 8, keys, 128, device=dev, dtype=bf16)
    out = torch.empty_like(q)
    page = 16
    pages = (keys + page - 1) // page
    k_cache = torch.randn(pages, page, 8, 128, device=dev, dtype=bf16)
    v_cache = torch.randn(pages, page, 8, 128, device=dev, dtype=bf16)
    table = torch.randperm(pages, device=dev, dtype=torch.int32).reshape(1, pages)
    seqlens = torch.full((1,), keys, device=dev, dtype=torch.int32)
    q_rows = q.reshape(1, 32, 128)
    out_rows = torch.empty_like(q_rows)
    kg, vg = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)  # SDPA's cuDNN path wants Hq heads

    def sdpa(backend, kk, vv, gqa):
        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=gqa)
        return run

    found = [("heed.attention(out=)", lambda: heed.attention(q, k, v, out=out)),
             ("heed.attention", lambda: heed.attention(q, k, v)),
             ("heed.torch.attention", lambda: heed.torch.attention(q, k, v)),
             ("heed.attention_paged(out=) page 16",
              lambda: heed.attention_paged(q_rows, k_cache, v_cache, table, seqlens, max_seqlen_k=keys, out=out_rows)),
             ("torch sdpa cudnn", sdpa(SDPBackend.CUDNN_ATTENTION, kg, vg, False)),
             ("torch sdpa flash (gqa)", sdpa(SDPBackend.FLASH_ATTENTION, k, v, True))]
    if hasattr(heed, "runner_paged"):
        r = heed.runner_paged(q_rows, k_cache, v_cache, table, seqlens, max_seqlen_k=keys, out=out_rows)
        found.append(("heed.runner_paged(...).run()", r.run))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch
    import heed
    rows = []
    for name, fn in calls(args, torch, heed):
        try:
            rows.append(measure(name, fn, args, torch))
        except Exception as error:  # a backend this build or card lacks: say so, time the rest
            print(f"{name:<34} not timed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
