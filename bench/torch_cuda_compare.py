#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on the shapes of heed_cuda_bench (bfloat16,
GQA through enable_gqa=True) with CUDA events, each backend separately (cuDNN, flash,
efficient; the math backend on small shapes only): one call, 10 back to back, and as a CUDA
graph of up to 20 calls replayed (the device's time without host work, as heed_cuda_bench's
graph_ms times heed), and prints the combined table: heed's figure, PyTorch's best backend,
the card's copy and read bandwidth and both graph figures; then the prefill table: TFLOP/s
of heed, of its composed route and of each PyTorch backend, heed's fraction of the bfloat16
matrix peak (a cuBLAS GEMM timed by heed_cuda_bench in the same run) and the ratio to the best.
PyTorch's is_causal is top-left aligned; every causal case here has Lq = Lk, where it equals
heed's bottom-right causal mask.

usage: torch_cuda_compare.py HEED_JSON_LINES [--reps N] [--json OUT]
"""
import json
import statistics
import sys


BUDGET_MS = 600  # device time per figure: long calls take fewer repetitions (at least 3)
# Figures of torch_backends_ms that are not one call's (left out when picking the best backend).
MULTI_CALL = ("_batched", "_graph")


def median_ms(fn, warmup, reps):
    import torch
    for _ in range(warmup):
        fn()
    if reps > 3:  # within the budget, from one timed call
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        reps = int(min(reps, max(3, BUDGET_MS / max(start.elapsed_time(stop), 1e-3))))
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def graph_calls(call_ms):
    """Calls captured into one graph: 20, fewer for calls over 2.5 ms (at least 2), as heed_cuda_bench."""
    return int(min(20.0, max(2.0, 50.0 / max(call_ms, 1e-3))))


def graph_ms(fn, calls, reps):
    """fn captured `calls` times into one CUDA graph, warmed up on a side stream before the capture
    (as PyTorch's CUDA graph notes require), replayed once, then its replays timed as median_ms
    times calls (on the current stream, where replay launches), over `calls`."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    ms = median_ms(graph.replay, 0, reps) / calls
    del graph
    return ms


def backends():
    from torch.nn.attention import SDPBackend
    return [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]


def torch_best(case, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    candidates = backends()

    gen = torch.Generator(device="cuda").manual_seed(0)
    shape_q = (case["batch"], case["q_heads"], case["q_len"], case["head_dim"])
    shape_k = (case["batch"], case["kv_heads"], case["kv_len"], case["head_dim"])
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(shape_k, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(shape_k, device="cuda", dtype=torch.bfloat16, generator=gen)
    results = {}
    for name, backend in candidates:
        if name == "math" and case["kv_len"] * case["q_len"] * case["q_heads"] * case["batch"] > 2**26:
            continue
        try:
            with sdpa_kernel([backend]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], enable_gqa=True)
                fn()
                torch.cuda.synchronize()
                results[name] = median_ms(fn, 3, reps)
                batched = median_ms(lambda: [fn() for _ in range(10)], 1, max(reps // 3, 3)) / 10
                results[name + "_batched"] = batched
        except Exception as error:  # a backend that cannot serve the shape
            results[name] = None
            continue
        try:
            with sdpa_kernel([backend]):
                results[name + "_graph"] = graph_ms(fn, graph_calls(results[name]), max(reps // 3, 3))
        except Exception as error:  # capture failed: no graph figure for this backend
            results[name + "_graph"] = None
            print(f"torch_cuda_compare: {case['name']}, {name}: CUDA graph failed: {error}", file=sys.stderr)
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
    del q, k, v
    torch.cuda.empty_cache()
    return results


def main():
    args = sys.argv[1:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 30
    out_json = args[args.index("--json") + 1] if "--json" in args else None
    cases, variants = [], []
    with open(args[0]) as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "variant_of" in record:
                variants.append(record)
            elif "name" in record:
                cases.append(record)
    try:
        import torch
        have_torch = torch.cuda.is_available()
        version = torch.__version__
    except ImportError:
        have_torch, version = False, None
    rows = []
    for case in cases:
        row = dict(case)
        if have_torch:
            backends = torch_best(case, reps)
            valid = {n: ms for n, ms in backends.items() if ms is not None and not n.endswith(MULTI_CALL)}
            best = min(valid, key=valid.get) if valid else None
            row["torch_backends_ms"] = backends
            row["torch_best"] = best
            row["torch_ms"] = valid[best] if best else None
            batched = [ms for n, ms in backends.items() if n.endswith("_batched") and ms is not None]
            row["torch_batched_ms"] = min(batched) if batched else None
            graphs = {n[:-len("_graph")]: ms for n, ms in backends.items() if n.endswith("_graph") and ms is not None}
            row["torch_graph_best"] = min(graphs, key=graphs.get) if graphs else None
            row["torch_graph_ms"] = graphs[row["torch_graph_best"]] if graphs else None
        rows.append(row)
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"torch": version, "cases": rows, "variants": variants}, f, indent=1)

    print(f"\nheed vs PyTorch {version} SDPA (bfloat16; bytes = q + k + v + out; copy = measured D2D copy, read + write;"
          " read = measured read-only kernel)")
    header = (f"{'case':31} {'heed kernel':26} {'heed ms':>8} {'heed':>12} {'%copy':>5} {'torch ms':>8} {'torch':>12} "
              f"{'backend':>9} {'copy TB/s':>9} {'read TB/s':>9} {'vs torch':>8} | {'b2b heed':>9} {'b2b torch':>9} | "
              f"{'graph heed':>10} {'graph torch':>11} {'graph vs torch':>14}")
    print(header)
    print("-" * len(header))
    for r in rows:
        decode = r["decode"]
        unit = "TB/s" if decode else "TFLOP/s"
        heed_rate = r["tbytes"] if decode else r["tflops"]
        torch_ms = r.get("torch_ms")
        torch_rate = None
        if torch_ms:
            torch_rate = (r["bytes"] / (torch_ms * 1e-3) / 1e12) if decode else (r["flops"] / (torch_ms * 1e-3) / 1e12)
        frac = f"{100 * r['tbytes'] / r['copy_tbytes']:.0f}%" if decode else "-"
        ratio = f"{torch_ms / r['ms']:7.2f}x" if torch_ms else "     n/a"
        tb = r.get("torch_batched_ms")
        if decode:
            b2b_heed = f"{r['batched_tbytes']:5.2f} TB/s"
            b2b_torch = f"{r['bytes'] / (tb * 1e-3) / 1e12:5.2f} TB/s" if tb else "n/a"
        else:
            b2b_heed = f"{r['flops'] / (r['batched_ms'] * 1e-3) / 1e12:6.1f} TF/s"
            b2b_torch = f"{r['flops'] / (tb * 1e-3) / 1e12:6.1f} TF/s" if tb else "n/a"
        torch_text = f"{torch_rate:7.2f} {unit:4}" if torch_rate else "n/a"
        torch_ms_text = f"{torch_ms:8.4f}" if torch_ms else "n/a"
        read = f"{r['read_tbytes']:9.2f}" if positive(r.get("read_tbytes")) else "n/a"
        heed_graph, torch_graph = positive(r.get("graph_ms")), positive(r.get("torch_graph_ms"))
        graph_ratio = f"{torch_graph / heed_graph:7.2f}x" if heed_graph and torch_graph else "n/a"
        print(f"{r['name']:31} {r['kernel']:26} {r['ms']:8.4f} {heed_rate:7.2f} {unit:4} {frac:>5} {torch_ms_text:>8} "
              f"{torch_text:>12} {str(r.get('torch_best')):>9} {r['copy_tbytes']:9.2f} {read:>9} {ratio:>8} | "
              f"{b2b_heed:>9} {b2b_torch:>9} | {rate_text(r, heed_graph):>10} {rate_text(r, torch_graph):>11} "
              f"{graph_ratio:>14}")
    print("rates: one call between CUDA events (median); b2b: 10 calls back to back / 10 (host work overlapped);"
          " vs torch = torch ms / heed ms")
    print("graph: the call captured up to 20 times into a CUDA graph (heed: as the user calls it, on a stream;"
          " torch: its fastest backend so captured), the replays timed / the calls: device time without host work;"
          " graph vs torch = torch graph ms / heed graph ms")
    print_prefill(rows, version)
    print_variants(variants)


def print_variants(variants):
    """The decode cases' variants of the planned vector route, against the plan (same entry, same run)."""
    prefill = [v for v in variants if v.get("prefill")]
    variants = [v for v in variants if not v.get("prefill")]
    if prefill:
        print("\nheed prefill on each tiled kernel (same run, same entry point; HEED_CUDA_TILED=mma / wgmma)")
        header = f"{'case':33} {'variant':18} {'kernel':28} {'ms':>9} {'TFLOP/s':>8}"
        print(header)
        print("-" * len(header))
        for v in prefill:
            print(f"{v['variant_of']:33} {v['variant']:18} {v['kernel']:28} {v['ms']:9.3f} {v['tflops']:8.1f}")
    if not variants:
        return
    print("\nheed decode variants (same run, same entry point; vs planned = planned b2b ms / variant b2b ms)")
    header = (f"{'case':27} {'variant':19} {'kernel':26} {'parts':>5} {'ring':>4} {'blk':>3} {'wrp':>3} {'ms':>8} "
              f"{'TB/s':>6} {'b2b TB/s':>8} {'vs planned':>10}")
    print(header)
    print("-" * len(header))
    planned = {v["variant_of"]: v for v in variants if v["variant"] == "planned"}
    for v in variants:
        base = planned.get(v["variant_of"])
        ratio = f"{base['batched_ms'] / v['batched_ms']:9.2f}x" if base else "n/a"
        ring = str(v["ring_items"]) if v["ring_items"] else "-"
        blocks = str(v.get("blocks_per_sm") or "-")
        warps = str(v.get("warps") or "-") if v["ring_items"] else "-"
        print(f"{v['variant_of']:27} {v['variant']:19} {v['kernel']:26} {v['partitions']:5d} {ring:>4} {blocks:>3} "
              f"{warps:>3} {v['ms']:8.4f} {v['tbytes']:6.2f} {v['batched_tbytes']:8.2f} {ratio:>10}")


def positive(value):
    """A figure the bench measured: None where missing, null or -1 (not measured, or it failed)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def rate_text(row, ms):
    """The rate of the case's work in `ms`, as the b2b columns print it (TB/s decode, TF/s prefill)."""
    if not ms:
        return "n/a"
    if row["decode"]:
        return f"{row['bytes'] / (ms * 1e-3) / 1e12:5.2f} TB/s"
    return f"{row['flops'] / (ms * 1e-3) / 1e12:6.1f} TF/s"


def tflops(row, ms):
    return row["flops"] / (ms * 1e-3) / 1e12 if ms else None


def print_prefill(rows, version):
    prefill = [r for r in rows if not r["decode"]]
    if not prefill:
        return
    peak = prefill[0].get("peak_tflops")
    print(f"\nprefill, bfloat16: TFLOP/s (FLOPs = 4*B*Hq*Lq*Lk*D, halved for causal); % peak = of the cuBLAS"
          f" bfloat16 GEMM measured in this run ({peak} TFLOP/s); "
          + (f"PyTorch {version} SDPA per backend" if version else "PyTorch not importable here"))
    names = ["cudnn", "flash", "efficient"]
    header = (f"{'case':33} {'heed kernel':24} {'heed ms':>9} {'heed':>7} {'%peak':>6} {'composed':>8} "
              + " ".join(f"{n:>9}" for n in names) + f" {'best':>9} {'vs best':>8}")
    print(header)
    print("-" * len(header))
    for r in prefill:
        heed = tflops(r, r["ms"])
        composed = tflops(r, r["composed_ms"]) if r.get("composed_ms", -1) > 0 else None
        per = r.get("torch_backends_ms", {})
        cells = []
        for n in names:
            rate = tflops(r, per.get(n))
            cells.append(f"{rate:9.1f}" if rate else f"{'n/a':>9}")
        best = r.get("torch_best")
        ratio = f"{r['torch_ms'] / r['ms']:7.2f}x" if r.get("torch_ms") else "     n/a"
        frac = f"{100 * heed / peak:5.1f}%" if peak else "   n/a"
        composed_text = f"{composed:8.1f}" if composed else f"{'n/a':>8}"
        print(f"{r['name']:33} {r['kernel']:24} {r['ms']:9.3f} {heed:7.1f} {frac:>6} {composed_text} "
              + " ".join(cells) + f" {str(best):>9} {ratio:>8}")
    print("vs best = best PyTorch backend's ms / heed ms (above 1: heed is faster); composed = heed's cuBLAS route")


if __name__ == "__main__":
    main()
