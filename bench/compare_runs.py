#!/usr/bin/env python3
"""Before / after from one device call: heed_cuda_bench's JSON lines of two builds, each run
one or more times (alternating, so that the card's clocks drift alike on both), one row per
case: the fastest of each side's runs and after / before (below 1: faster now), for one call
between CUDA events (ms) and for 10 calls back to back (batched_ms).

  bench/compare_runs.py --before prev1.jsonl prev2.jsonl --after cur1.jsonl cur2.jsonl
"""
import argparse
import json


def cases(paths):
    found = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                if "name" in record and "variant_of" not in record:
                    found.setdefault(record["name"], []).append(record)
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", nargs="+", required=True)
    parser.add_argument("--after", nargs="+", required=True)
    args = parser.parse_args()
    before, after = cases(args.before), cases(args.after)
    # ms: one call between CUDA events; b2b: 10 calls back to back / 10 (less launch latency).
    print(f"{'case':34} {'kernel after':28} {'before ms':>10} {'after ms':>10} {'after/before':>12} "
          f"{'b2b before':>10} {'b2b after':>10} {'b2b a/b':>8}")
    ratios, b2b_ratios = [], []
    for name, rows in before.items():
        if name not in after:
            continue
        b = min(r["ms"] for r in rows)
        a = min(r["ms"] for r in after[name])
        ratios.append(a / b)
        line = f"{name:34} {after[name][0]['kernel']:28} {b:10.4f} {a:10.4f} {a / b:11.3f}x"
        bb = [r["batched_ms"] for r in rows if r.get("batched_ms", -1) > 0]
        ab = [r["batched_ms"] for r in after[name] if r.get("batched_ms", -1) > 0]
        if bb and ab:
            b2b_ratios.append(min(ab) / min(bb))
            line += f" {min(bb):10.4f} {min(ab):10.4f} {min(ab) / min(bb):7.3f}x"
        print(line)
    if ratios:
        print(f"after / before: {min(ratios):.3f}x to {max(ratios):.3f}x over {len(ratios)} cases")
    if b2b_ratios:
        print(f"b2b after / before: {min(b2b_ratios):.3f}x to {max(b2b_ratios):.3f}x over {len(b2b_ratios)} cases")

if __name__ == "__main__":
    main()
