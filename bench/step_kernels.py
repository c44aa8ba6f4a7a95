#!/usr/bin/env python3
"""Sums the per-kernel GPU times of an `ncu --metrics gpu__time_duration.sum --csv` run of
bench-step by kernel name and prints the top kernels as a markdown table (ms per step, share).

usage: step_kernels.py NCU_CSV [--steps N] [--top 15]
  --steps: the training steps the profiled run made (warmup + timed), to report per-step times.
"""
import argparse
import collections
import csv
import sys


def short_name(name):
    """The function name without template arguments' parameter list or return type."""
    name = name.split("(")[0].strip()
    return name[5:] if name.startswith("void ") else name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    try:
        lines = open(args.csv_path, errors="replace").read().splitlines()
    except OSError as e:
        print(f"step_kernels.py: {e}", file=sys.stderr)
        return 1
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        print(f"step_kernels.py: {args.csv_path}: no ncu CSV header (\"ID\",...) found", file=sys.stderr)
        return 1
    ns = collections.Counter()
    launches = collections.Counter()
    for row in csv.DictReader(lines[header:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = 1e3 if row.get("Metric Unit") == "usecond" else 1.0  # base units are ns
        name = short_name(row["Kernel Name"])
        ns[name] += value * scale
        launches[name] += 1
    total = sum(ns.values())
    if not total:
        print(f"step_kernels.py: {args.csv_path}: no kernel times", file=sys.stderr)
        return 1
    print(f"GPU kernel time per step: {total / args.steps / 1e6:.2f} ms over "
          f"{sum(launches.values()) // args.steps} launches (each kernel timed alone by ncu)")
    print("| kernel | ms/step | share | launches/step |")
    print("|---|---:|---:|---:|")
    for name, t in ns.most_common(args.top):
        print(f"| `{name[:90]}` | {t / args.steps / 1e6:.3f} | {100 * t / total:.1f}% | "
              f"{launches[name] / args.steps:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
