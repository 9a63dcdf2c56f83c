#!/usr/bin/env python3
"""heed against PyTorch's scaled_dot_product_attention on the CPU, measured in one run.

Runs `heed bench --json` for the suite, then PyTorch's SDPA on the same shapes, dtypes and
thread count, and prints both figures with their ratio (PyTorch time / heed time: above 1,
heed is faster). PyTorch's is_causal is top-left aligned; the suite's causal cases have
Lq == Lk, where it equals heed's bottom-right rule. A sliding window becomes a boolean mask
for PyTorch; sinks have no SDPA equivalent, so such cases are timed without them and marked.

  python3 bench/torch_compare.py --heed build/release/bin/heed [--threads N | --cpus 2,3] [--case NAME]... [--reps N] [--rounds N]
  python3 bench/torch_compare.py --records heed.json ...   (records written by `heed bench`)
  python3 bench/torch_compare.py --heed build/release/bin/heed --interleave 20 ...

--interleave N times both libraries in this one process, call by call (heed through its
Python module, importable as `heed`, on the same PyTorch tensors), alternating which goes
first: each pair of calls is milliseconds apart, so a shared machine's drift weighs on both
alike. A pause (--pause, default 0.05 s) before each call lets the other library's worker
threads go to sleep first (PyTorch's OpenMP workers spin for a while after each call, on the
very cores the next call needs). It prints each library's fastest and median call, the ratio
of the fastest, and the median of the pairs' own ratios. `heed bench` then only supplies the
suite's shapes.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def heed_records(heed, threads, names, reps, records_path=None):
    if records_path:
        with open(records_path) as f:
            records = json.load(f)
        return [r for r in records if not names or r["name"] in names]
    command = [heed, "bench", "--json", "--no-composed", "--device", "cpu", "--reps", str(reps)]
    for name in names:
        command += ["--case", name]
    env = dict(os.environ, HEED_NUM_THREADS=str(threads))
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def torch_inputs(torch, record):
    """The case's q, k, v as PyTorch tensors and SDPA's keyword arguments, or (None, reason)."""
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[record["dtype"]]
    b, hq, hkv = record["batch"], record["q_heads"], record["kv_heads"]
    lq, lk, d, dv = record["q_len"], record["kv_len"], record["head_dim"], record["value_dim"]
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(b, hq, lq, d, generator=generator).to(dtype)
    k = torch.randn(b, hkv, lk, d, generator=generator).to(dtype)
    v = torch.randn(b, hkv, lk, dv, generator=generator).to(dtype)
    kwargs = {"enable_gqa": hq != hkv}
    notes = []
    if record["window"] is not None:
        rows = torch.arange(lq)[:, None] + (lk - lq)
        cols = torch.arange(lk)[None, :]
        kwargs["attn_mask"] = (cols <= rows) & (cols > rows - record["window"])
        notes.append("window as a boolean mask")
    elif record["causal"]:
        if lq != lk:
            return None, "causal with Lq != Lk (PyTorch aligns top-left)"
        kwargs["is_causal"] = True
    if record["sinks"]:
        notes.append("without sinks")
    if record["mask"] != "none":
        return None, "mask kind " + record["mask"]
    return (q, k, v, kwargs), "; ".join(notes)


def torch_time(torch, record, reps):
    inputs, note = torch_inputs(torch, record)
    if inputs is None:
        return None, note
    q, k, v, kwargs = inputs
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad():
        sdpa(q, k, v, **kwargs)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            sdpa(q, k, v, **kwargs)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, note


def interleaved(torch, heed, record, calls, pause):
    """Both libraries on the same tensors, call by call: (heed ms, PyTorch ms) per pair, or
    (None, reason)."""
    inputs, note = torch_inputs(torch, record)
    if inputs is None:
        return None, note
    q, k, v, kwargs = inputs
    heed_kwargs = {"causal": bool(record["causal"]), "window": record["window"]}
    if record["sinks"]:
        heed_kwargs["sinks"] = torch.randn(record["q_heads"], generator=torch.Generator().manual_seed(1))
    out = torch.empty(q.shape[0], q.shape[1], q.shape[2], v.shape[3], dtype=q.dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    runs = {"heed": lambda: heed.attention(q, k, v, out=out, **heed_kwargs), "torch": lambda: sdpa(q, k, v, **kwargs)}
    pairs = []
    with torch.no_grad():
        for run in runs.values():
            run()
        for call in range(calls):
            order = ("heed", "torch") if call % 2 == 0 else ("torch", "heed")
            ms = {}
            for name in order:
                time.sleep(pause)
                start = time.perf_counter()
                runs[name]()
                ms[name] = (time.perf_counter() - start) * 1e3
            pairs.append((ms["heed"], ms["torch"]))
    return pairs, note


def print_interleaved(torch, heed, records, calls, pause):
    print(f"{'case':24s} {'heed min':>9s} {'torch min':>9s} {'min/min':>8s} {'paired':>7s} {'heed med':>9s} "
          f"{'torch med':>9s} {'heed rate':>16s} {'of peak':>8s}  note")
    for record in records:
        if "error" in record:
            print(f"{record['name']:24s} heed failed: {record['error']}")
            continue
        pairs, note = interleaved(torch, heed, record, calls, pause)
        if pairs is None:
            print(f"{record['name']:24s} {'n/a':>9s}  {note}")
            continue
        heed_ms, torch_ms = [p[0] for p in pairs], [p[1] for p in pairs]
        paired = statistics.median(t / h for h, t in pairs)
        unit, work = ("GB/s", record["bytes"]) if record["memory_bound"] else ("GFLOP/s", record["flops"])
        fraction = record.get("roofline_fraction")
        of_peak = f"{fraction * record['median_ms'] / min(heed_ms) * 100:7.0f}%" if fraction is not None else f"{'n/a':>8s}"
        print(f"{record['name']:24s} {min(heed_ms):9.2f} {min(torch_ms):9.2f} {min(torch_ms) / min(heed_ms):7.2f}x "
              f"{paired:6.2f}x {statistics.median(heed_ms):9.2f} {statistics.median(torch_ms):9.2f} "
              f"{work / min(heed_ms) * 1e-6:10.1f} {unit:5s} {of_peak}  {note}", flush=True)


def distinct_cores(count):
    """`count` CPUs of this process's affinity, one per physical core first (hyperthread
    siblings last), so that heed and PyTorch run on the same cores, not on shared ones."""
    cpus = sorted(os.sched_getaffinity(0))
    seen, first, rest = set(), [], []
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id") as f:
                core = f.read().strip()
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id") as f:
                core = f.read().strip() + ":" + core
        except OSError:
            core = str(cpu)
        (rest if core in seen else first).append(cpu)
        seen.add(core)
    return (first + rest)[:count]


def print_ceilings(records):
    """The ceilings heed's benchmark measured at the start of its run, where it reports them."""
    if not records or "peak_gflops" not in records[0]:
        return
    amx = records[0].get("amx_peak_gflops")
    dot = records[0].get("dot_bf16_peak_gflops")
    amx_text = (f"bfloat16 dot-product peak {dot:.1f} GFLOP/s, " if dot else "") + \
               (f"bfloat16 AMX peak {amx:.1f} GFLOP/s, " if amx else "")
    print(f"# heed's ceilings in the same run: float32 FMA peak {records[0]['peak_gflops']:.1f} GFLOP/s, "
          f"{amx_text}copy {records[0]['copy_gbytes_per_s']:.1f} GB/s, read "
          f"{records[0].get('read_gbytes_per_s') or 0:.1f} GB/s ('of peak': of the bfloat16 peak "
          f"of the unit a case runs on, else of the FMA peak or the copy bandwidth)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heed", help="path to the heed binary (runs `heed bench --json`)")
    parser.add_argument("--records", help="heed's records already measured (heed bench writes them)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--cpus", help="comma-separated CPUs to pin both libraries to (instead of --threads)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--interleave", type=int, default=0, metavar="N",
                        help="time both libraries in this process, N calls each, alternating call by call")
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds of sleep before each interleaved call (other library's workers go idle)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds (heed then PyTorch, then PyTorch then heed, ...); each library's "
                             "best round counts, so drift of a shared machine weighs on both alike")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_compare: PyTorch is not importable here; nothing to compare", file=sys.stderr)
        return 2
    # Both run pinned to the same cores: the heed process inherits this affinity.
    cores = [int(c) for c in args.cpus.split(",")] if args.cpus else distinct_cores(args.threads)
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    if not args.heed and not args.records:
        parser.error("give --heed or --records")
    if args.interleave > 0:
        # heed's thread count is read once, when the module first plans a call.
        os.environ["HEED_NUM_THREADS"] = str(len(cores))
        import heed
        records = heed_records(args.heed, len(cores), args.case, 1, args.records)
        print(f"# {len(cores)} threads pinned to CPUs {cores}, PyTorch {torch.__version__}, heed's Python module, "
              f"{args.interleave} calls each, alternating call by call, {args.pause} s pause before each; "
              f"'paired': the median of the pairs' ratios "
              f"(PyTorch ms / heed ms); rates and 'of peak' from heed's fastest call")
        print_ceilings(records)
        print_interleaved(torch, heed, records, args.interleave, args.pause)
        return 0
    rounds = 1 if args.records else max(args.rounds, 1)
    # One case at a time, its rounds alternating (heed then PyTorch, then PyTorch then heed, ...):
    # the two libraries' figures of a round are seconds apart, so a shared machine's drift
    # weighs on both alike, and each round's ratio is a paired measurement.
    names = args.case or [None]
    heed_rounds, torch_rounds = [[] for _ in range(rounds)], [{} for _ in range(rounds)]
    for name in names:
        selected = [name] if name else []
        first = None
        for round_index in range(rounds):
            heed_first = round_index % 2 == 0
            if heed_first:
                heed_rounds[round_index] += heed_records(args.heed, len(cores), selected, args.reps, args.records)
                first = first or heed_rounds[round_index]
            for record in (first if name is None else [r for r in first if r["name"] == name]):
                if "error" not in record:
                    torch_rounds[round_index][record["name"]] = torch_time(torch, record, args.reps)
            if not heed_first:
                heed_rounds[round_index] += heed_records(args.heed, len(cores), selected, args.reps, args.records)
            # Progress as it comes, so a run stopped at a time limit still leaves its rounds behind.
            for record in heed_rounds[round_index]:
                if "median_ms" in record and (name is None or record["name"] == name):
                    torch_ms = torch_rounds[round_index].get(record["name"], (None, ""))[0]
                    print(f"# round {round_index + 1}: {record['name']} heed {record['median_ms']:.2f} ms, torch "
                          f"{'n/a' if torch_ms is None else f'{torch_ms:.2f}'} ms", file=sys.stderr, flush=True)
    records = heed_rounds[0]
    # Each case's per-round ratios (PyTorch ms / heed ms of the same round), before the best
    # rounds replace the records' times below.
    paired = {}
    for record in records:
        ratios = []
        for heed_round, torch_round in zip(heed_rounds, torch_rounds):
            heed_ms = [r["median_ms"] for r in heed_round if r["name"] == record["name"] and "median_ms" in r]
            torch_ms = torch_round.get(record["name"], (None, ""))[0]
            if heed_ms and torch_ms is not None:
                ratios.append(torch_ms / heed_ms[0])
        if ratios:
            paired[record["name"]] = statistics.median(ratios)
    for record in records:  # each library's best round
        times = [r["median_ms"] for rs in heed_rounds for r in rs if r["name"] == record["name"] and "median_ms" in r]
        if times and "median_ms" in record:
            scale = min(times) / record["median_ms"]
            record["median_ms"] = min(times)
            if record.get("roofline_fraction") is not None:
                record["roofline_fraction"] /= scale
    print(f"# {len(cores)} threads pinned to CPUs {cores}, PyTorch {torch.__version__}, median of {args.reps} "
          f"calls per round, best of {rounds} alternating round(s) per library; 'paired': the median of "
          f"the rounds' own ratios")
    print_ceilings(records)
    print(f"{'case':24s} {'heed ms':>10s} {'torch ms':>10s} {'torch/heed':>10s} {'paired':>7s} {'heed rate':>16s} "
          f"{'of peak':>8s} {'torch rate':>16s}  note")
    for record in records:
        if "error" in record:
            print(f"{record['name']:24s} heed failed: {record['error']}")
            continue
        measured = [t[record["name"]] for t in torch_rounds]
        note = measured[0][1]
        torch_ms = None if measured[0][0] is None else min(t[0] for t in measured)
        unit, work = ("GB/s", record["bytes"]) if record["memory_bound"] else ("GFLOP/s", record["flops"])
        heed_rate = work / record["median_ms"] * 1e-6
        fraction = record.get("roofline_fraction")
        of_peak = f"{fraction * 100:7.0f}%" if fraction is not None else f"{'n/a':>8s}"
        if torch_ms is None:
            print(f"{record['name']:24s} {record['median_ms']:10.2f} {'n/a':>10s} {'n/a':>10s} {'n/a':>7s} "
                  f"{heed_rate:10.1f} {unit:5s} {of_peak} {'':>16s}  {note}")
            continue
        torch_rate = work / torch_ms * 1e-6
        print(f"{record['name']:24s} {record['median_ms']:10.2f} {torch_ms:10.2f} "
              f"{torch_ms / record['median_ms']:9.2f}x {paired[record['name']]:6.2f}x {heed_rate:10.1f} {unit:5s} "
              f"{of_peak} "
              f"{torch_rate:10.1f} {unit:5s}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
