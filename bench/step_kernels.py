#!/usr/bin/env python3
"""Per-kernel GPU time of a profiled bench-step run, from `ncu --metrics gpu__time_duration.sum
--csv` (bench/run-step.sh): kernels grouped by name (template arguments kept, parameter list
dropped), with launches and ms per step, share of the step's kernel time, and subtotals by kind
(GEMM, attention, elementwise, ...). With --baseline OTHER_CSV (the same run of another build) it
adds the baseline's ms per step and the change, kernels of either run included.

usage: step_kernels.py NCU_CSV [--steps N] [--top 25] [--baseline CSV] [--baseline-steps N]
                       [--json FILE]
  --steps: the training steps the profiled window held (bench-step's timed steps).
Exit status: 0, or 1 with one message on stderr when the file is missing or holds no kernel times.
"""
import argparse
import collections
import csv
import json
import sys

# ncu's time units, in nanoseconds.
UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
           "second": 1e9, "s": 1e9}

# (kind, substrings of the kernel name), first match wins; names are compared in lower case.
KINDS = [
    ("attention", ("flash", "attention", "softmax")),
    ("GEMM", ("gemm", "nvjet", "xmma", "cutlass", "matmul", "splitk", "sm90_")),
    ("layernorm", ("layernorm",)),
    ("cross-entropy", ("cross_entropy",)),
    ("embedding", ("embedding", "radix", "sort")),
    ("bias/column sums", ("partial_sum", "column")),
    ("dropout + elementwise", ("dropout", "map_kernel", "relu", "residual", "convert")),
    ("optimizer", ("adam", "squares", "norm_")),
]


def kind_of(name):
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def short_name(name):
    """`void nmt::cuda::(anonymous namespace)::map_kernel<T, 8, (anonymous namespace)::AddOp>(
    const T *, ...)` -> `map_kernel<T, 8, AddOp>`: drops the return type, the final parenthesised
    parameter list (parentheses inside the template arguments kept) and our namespaces."""
    name = name.strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i].rstrip()
                break
    for prefix in ("void ", "static "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    for noise in ("(anonymous namespace)::", "nmt::cuda::flash::", "nmt::cuda::"):
        name = name.replace(noise, "")
    return name


def read_kernel_times(path):
    """{kernel: [total ns, launches]} from an ncu CSV; raises ValueError with the reason."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(str(e)) from e
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        raise ValueError(f"{path}: no ncu CSV header (\"ID\",...) found")
    times = collections.defaultdict(lambda: [0.0, 0])
    for row in csv.DictReader(lines[header:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = (row.get("Metric Unit") or "nsecond").strip()
        try:
            value = float(row["Metric Value"].replace(",", "")) * UNIT_NS.get(unit, 1.0)
        except (KeyError, ValueError):
            continue  # "n/a" and the like: a kernel ncu could not measure
        entry = times[short_name(row.get("Kernel Name", "?"))]
        entry[0] += value
        entry[1] += 1
    if not times:
        raise ValueError(f"{path}: no gpu__time_duration.sum values")
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv_path")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--baseline")
    ap.add_argument("--baseline-steps", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.steps < 1:
        print("step_kernels.py: --steps must be at least 1", file=sys.stderr)
        return 1
    try:
        now = read_kernel_times(args.csv_path)
        before = read_kernel_times(args.baseline) if args.baseline else None
    except ValueError as e:
        print(f"step_kernels.py: {e}", file=sys.stderr)
        return 1
    base_steps = args.baseline_steps or args.steps
    ms = lambda t, steps: t / steps / 1e6
    total = sum(t for t, _ in now.values())
    launches = sum(n for _, n in now.values())
    print(f"GPU kernel time per step: {ms(total, args.steps):.3f} ms in "
          f"{launches / args.steps:.0f} launches (each kernel timed alone by ncu)")
    if before:
        base_total = sum(t for t, _ in before.values())
        print(f"baseline: {ms(base_total, base_steps):.3f} ms in "
              f"{sum(n for _, n in before.values()) / base_steps:.0f} launches")
    names = sorted(set(now) | set(before or {}),
                   key=lambda k: -max(now.get(k, [0])[0], (before or {}).get(k, [0])[0]))
    extra = " | baseline ms | change ms" if before else ""
    print(f"| kernel | kind | launches/step | ms/step | share{extra} |")
    print("|---|---|---:|---:|---:" + ("|---:|---:|" if before else "|"))
    rows = []
    for name in names[:args.top]:
        t, n = now.get(name, [0.0, 0])
        row = {"kernel": name, "kind": kind_of(name), "launches_per_step": n / args.steps,
               "ms_per_step": ms(t, args.steps), "share": t / total}
        line = (f"| `{name[:100]}` | {row['kind']} | {row['launches_per_step']:.1f} | "
                f"{row['ms_per_step']:.3f} | {100 * row['share']:.1f}%")
        if before:
            b = before.get(name, [0.0, 0])[0]
            row["baseline_ms_per_step"] = ms(b, base_steps)
            line += f" | {row['baseline_ms_per_step']:.3f} | {row['ms_per_step'] - row['baseline_ms_per_step']:+.3f}"
        print(line + " |")
        rows.append(row)
    if len(names) > args.top:
        print(f"({len(names) - args.top} more kernels in the kind totals below)")
    print()
    kinds = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for name, (t, n) in now.items():
        kinds[kind_of(name)][0] += t
        kinds[kind_of(name)][1] += n
    for name, (t, _) in (before or {}).items():
        kinds[kind_of(name)][2] += t
    print(f"| kind | launches/step | ms/step | share{extra} |")
    print("|---|---:|---:|---:" + ("|---:|---:|" if before else "|"))
    for kind, (t, n, b) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        line = f"| {kind} | {n / args.steps:.1f} | {ms(t, args.steps):.3f} | {100 * t / total:.1f}%"
        if before:
            line += f" | {ms(b, base_steps):.3f} | {ms(t, args.steps) - ms(b, base_steps):+.3f}"
        print(line + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ms_per_step": ms(total, args.steps), "launches_per_step": launches / args.steps,
                       "kernels": rows,
                       "kinds": {k: ms(v[0], args.steps) for k, v in kinds.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
