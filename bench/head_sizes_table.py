#!/usr/bin/env python3
"""The head-size sweep's table: heed_cuda_bench --head-sizes's JSON lines, one row per head size.

Each size is timed at its own D and at the compiled size its plan rounds it up to; "ratio" is the
compiled size's time over this size's (at least 0.8 is the target: rounding up costs no more than
the padded columns, plus 25%). --json writes the rows for scripts/perf-doc.
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("jsonl")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows, ceilings = {}, {}
    with open(args.jsonl) as f:
        for line in f:
            record = json.loads(line)
            if "head_size" in record:
                rows.setdefault(record["head_size"], {})[record["mode"]] = record
            elif "copy_tbytes" in record:
                ceilings = record
    if ceilings:
        print(f"ceilings: copy {ceilings['copy_tbytes']:.2f} TB/s, bf16 GEMM {ceilings['bf16_gemm_tflops']:.0f} TFLOP/s")
    print("head sizes, bfloat16: prefill B 2 x 16 heads x 2k causal; decode B 16 x 32/8 heads x 8k keys")
    print(f"{'D':>4} | {'compiled':>8} {'prefill kernel':24} {'TFLOP/s':>8} {'ratio':>6} | "
          f"{'compiled':>8} {'decode kernel':24} {'TB/s':>6} {'ratio':>6}")
    worst = {}
    for d in sorted(rows):
        cells = []
        for mode, rate in (("prefill", "tflops"), ("decode", "tbytes")):
            r = rows[d].get(mode)
            if r is None:
                cells.append(f"{'-':>8} {'-':24} {'-':>8} {'-':>6}" if mode == "prefill" else f"{'-':>8} {'-':24} {'-':>6} {'-':>6}")
                continue
            width = 8 if mode == "prefill" else 6
            cell = f"{r['compiled']:>8} {r['kernel']:24} {r[rate]:>{width}.2f} {r['ratio']:>6.2f}"
            if r.get("cp_async_ms", -1) > 0:  # decode on TMA: the cp.async kernels' time / the plan's
                cell += f" cp.async {r['cp_async_ms'] / r['ms']:.2f}x"
            cells.append(cell)
            if mode not in worst or r["ratio"] < worst[mode][1]:
                worst[mode] = (d, r["ratio"])
        print(f"{d:>4} | {cells[0]} | {cells[1]}")
    for mode, (d, ratio) in sorted(worst.items()):
        below = sum(1 for r in rows.values() if mode in r and r[mode]["ratio"] < 0.8)
        print(f"{mode}: lowest ratio {ratio:.2f} at D {d}; {below} sizes below 0.8")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ceilings": ceilings, "rows": [r for d in sorted(rows) for r in rows[d].values()]}, f, indent=1)


if __name__ == "__main__":
    main()
