#!/usr/bin/env python3
"""Per-kernel GPU time of a profiled bench-step run, from `ncu --metrics gpu__time_duration.sum
--csv` (bench/run-step.sh): kernels grouped by name (template arguments kept, parameter list
dropped), with launches and ms per step, share of the step's kernel time, and subtotals by kind
(GEMM, attention, elementwise, ...). Where the CSV also holds dram__bytes_read.sum and
dram__bytes_write.sum, each kernel gets its DRAM megabytes per launch and the rate they moved at
(TB/s over its time): how far a memory-bound kernel is from the memory's bandwidth. With
--baseline OTHER_CSV (the same run of another build) it adds the baseline's ms per step and the
change, kernels of either run included.

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

# ncu's byte units (decimal, as ncu prints them), in bytes.
UNIT_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}
DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")

# (kind, substrings of the kernel name), first match wins; names are compared in lower case.
KINDS = [
    ("attention", ("flash", "attention", "softmax")),
    ("GEMM", ("gemm", "nvjet", "xmma", "cutlass", "matmul", "splitk", "sm90_")),
    ("layernorm", ("layernorm",)),
    ("cross-entropy", ("cross_entropy",)),
    ("embedding", ("embedding", "radix", "sort", "segment_sums", "crossing_segments")),
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
    for noise in ("(anonymous namespace)::", "<unnamed>::", "nmt::cuda::flash::", "nmt::cuda::",
                  "nmt::"):
        name = name.replace(noise, "")
    return name


class KernelStats:
    """One kernel name's totals over the profiled window."""

    def __init__(self):
        self.ns = 0.0
        self.launches = 0
        self.dram_bytes = None  # None: the CSV had no DRAM byte metrics for it

    def add_bytes(self, value):
        self.dram_bytes = (self.dram_bytes or 0.0) + value


def metric_value(row, units):
    """The row's value in base units, or None where ncu wrote none ("n/a" and the like)."""
    unit = (row.get("Metric Unit") or "").strip()
    try:
        return float(row["Metric Value"].replace(",", "")) * units.get(unit, 1.0)
    except (KeyError, ValueError):
        return None


def read_kernel_times(path):
    """{kernel: KernelStats} from an ncu CSV; raises ValueError with the reason."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(str(e)) from e
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        raise ValueError(f"{path}: no ncu CSV header (\"ID\",...) found")
    stats = collections.defaultdict(KernelStats)
    for row in csv.DictReader(lines[header:]):
        metric = row.get("Metric Name")
        if metric == "gpu__time_duration.sum":
            value = metric_value(row, UNIT_NS)
            if value is None:
                continue  # a kernel ncu could not measure
            entry = stats[short_name(row.get("Kernel Name", "?"))]
            entry.ns += value
            entry.launches += 1
        elif metric in DRAM_METRICS:
            value = metric_value(row, UNIT_BYTES)
            if value is not None:
                stats[short_name(row.get("Kernel Name", "?"))].add_bytes(value)
    times = {k: v for k, v in stats.items() if v.launches > 0}
    if not times:
        raise ValueError(f"{path}: no gpu__time_duration.sum values")
    return times


def dram_columns(stats):
    """(MB per launch, TB/s) of a kernel's DRAM bytes over its time, or None without bytes."""
    if stats is None or stats.dram_bytes is None or stats.launches == 0 or stats.ns <= 0:
        return None
    return stats.dram_bytes / stats.launches / 1e6, stats.dram_bytes / stats.ns / 1e3


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
    total = sum(k.ns for k in now.values())
    launches = sum(k.launches for k in now.values())
    with_dram = any(k.dram_bytes is not None for k in now.values())
    print(f"GPU kernel time per step: {ms(total, args.steps):.3f} ms in "
          f"{launches / args.steps:.0f} launches (each kernel timed alone by ncu)")
    if with_dram:
        dram = sum(k.dram_bytes or 0.0 for k in now.values())
        print(f"DRAM bytes read and written per step: {dram / args.steps / 1e6:.1f} MB, as ncu "
              f"counted them with the caches as it left them (an L2 hit moves none)")
    if before:
        base_total = sum(k.ns for k in before.values())
        print(f"baseline: {ms(base_total, base_steps):.3f} ms in "
              f"{sum(k.launches for k in before.values()) / base_steps:.0f} launches")
    ns_of = lambda table, k: table[k].ns if k in table else 0.0
    names = sorted(set(now) | set(before or {}),
                   key=lambda k: -max(ns_of(now, k), ns_of(before or {}, k)))
    dram_head = " | MB/launch | TB/s" if with_dram else ""
    extra = " | baseline ms | change ms" if before else ""
    print(f"| kernel | kind | launches/step | ms/step | share{dram_head}{extra} |")
    print("|---|---|---:|---:|---:" + ("|---:|---:" if with_dram else "") +
          ("|---:|---:|" if before else "|"))
    rows = []
    for name in names[:args.top]:
        k = now.get(name) or KernelStats()
        row = {"kernel": name, "kind": kind_of(name), "launches_per_step": k.launches / args.steps,
               "ms_per_step": ms(k.ns, args.steps), "share": k.ns / total}
        line = (f"| `{name[:100]}` | {row['kind']} | {row['launches_per_step']:.1f} | "
                f"{row['ms_per_step']:.3f} | {100 * row['share']:.1f}%")
        if with_dram:
            cols = dram_columns(now.get(name))
            if cols:
                row["dram_mb_per_launch"], row["dram_tb_per_s"] = cols
                line += f" | {cols[0]:.1f} | {cols[1]:.2f}"
            else:
                line += " | | "
        if before:
            row["baseline_ms_per_step"] = ms(ns_of(before, name), base_steps)
            line += f" | {row['baseline_ms_per_step']:.3f} | {row['ms_per_step'] - row['baseline_ms_per_step']:+.3f}"
        print(line + " |")
        rows.append(row)
    if len(names) > args.top:
        print(f"({len(names) - args.top} more kernels in the kind totals below)")
    print()
    kinds = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for name, k in now.items():
        kinds[kind_of(name)][0] += k.ns
        kinds[kind_of(name)][1] += k.launches
    for name, k in (before or {}).items():
        kinds[kind_of(name)][2] += k.ns
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
