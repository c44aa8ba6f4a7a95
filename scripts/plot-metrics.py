#!/usr/bin/env python3
"""Plots a training run's curves from its metrics.jsonl (written by nmt-train, log.dir) into one
PNG of 2x2 panels: dev BLEU (greedy token accuracy for synthetic data, which has no BLEU), train
loss, dev loss and learning rate, each against the step.

usage: plot-metrics.py runs/x/metrics.jsonl [-o plot.png] [--title TEXT] [--print-series]

Record format: engine/report/run_report.cpp (train_record_json, eval_record_json). A resumed run appends
to the file after a "resume" event; lines above its step came from the interrupted run after its
last checkpoint and are dropped (engine/report/run_report.h), and the last record per (event, step) wins.
Exit codes: 0 written; 1 bad input; 2 matplotlib missing.
"""
import argparse
import json
import math
import os
import sys

MATPLOTLIB_HINT = ("plot-metrics.py: matplotlib is not installed for python3: "
                   "pip install matplotlib (or apt-get install python3-matplotlib)")


def read_records(path):
    """The train and eval records that survive the resume rule, in step order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as error:
        raise SystemExit(f"plot-metrics.py: cannot read {path}: {error.strerror}") from error
    kept = {}  # (event, step) -> record; dict order = order of first appearance
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            event, step = record.get("event"), record.get("step")
        except (json.JSONDecodeError, AttributeError) as error:
            if number == len(lines):  # a crash can cut the last line short
                print(f"plot-metrics.py: warning: {path} line {number} is incomplete, ignored",
                      file=sys.stderr)
                continue
            raise SystemExit(f"plot-metrics.py: {path} line {number}: not a JSON object") from error
        if event == "resume" and isinstance(step, int):
            kept = {key: r for key, r in kept.items() if key[1] <= step}
        elif event in ("train", "eval") and isinstance(step, int):
            kept.pop((event, step), None)
            kept[(event, step)] = record
    records = sorted(kept.values(), key=lambda r: r["step"])
    return [r for r in records if r["event"] == "train"], [r for r in records if r["event"] == "eval"]


def series(records, key, scale=1.0):
    """(steps, values) of the records holding a finite number under key (NaN is written as null)."""
    points = [(r["step"], r[key] * scale) for r in records
              if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in points], [p[1] for p in points]


def build_panels(train, evals):
    """Title, y label and (steps, values) of the four panels."""
    if any("bleu" in r for r in evals):
        score = ("dev BLEU", "BLEU", series(evals, "bleu"))
    else:
        score = ("dev greedy token accuracy (no BLEU: synthetic data)", "accuracy %",
                 series(evals, "greedy_token_accuracy", 100.0))
    return [score,
            ("train loss (label-smoothed, per target token)", "loss", series(train, "loss")),
            ("dev loss", "loss", series(evals, "loss")),
            ("learning rate", "lr", series(train, "lr"))]


def plot(panels, output, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(MATPLOTLIB_HINT, file=sys.stderr)
        sys.exit(2)
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (name, ylabel, (steps, values)) in zip(axes.flat, panels):
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if steps:
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    figure.suptitle(title)
    figure.tight_layout()
    # Temporary file + rename: a failure never leaves a half-written PNG.
    temp = f"{output}.tmp-{os.getpid()}.png"
    try:
        figure.savefig(temp, dpi=100)
        os.replace(temp, output)
    except OSError as error:
        if os.path.exists(temp):
            os.remove(temp)
        raise SystemExit(f"plot-metrics.py: cannot write {output}: {error.strerror}") from error
    finally:
        plt.close(figure)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("metrics", help="metrics.jsonl of a run (log.dir)")
    parser.add_argument("-o", "--output", help="PNG to write (default: plot.png beside metrics)")
    parser.add_argument("--title", help="figure title (default: the metrics file)")
    parser.add_argument("--print-series", action="store_true",
                        help="also print the plotted points as JSON on stdout")
    args = parser.parse_args()
    train, evals = read_records(args.metrics)
    if not train and not evals:
        raise SystemExit(f"plot-metrics.py: {args.metrics} holds no train or eval records")
    panels = build_panels(train, evals)
    if args.print_series:
        print(json.dumps({name: {"steps": s, "values": v} for name, _, (s, v) in panels}))
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.metrics)), "plot.png")
    plot(panels, output, args.title or args.metrics)
    print(f"plot-metrics.py: wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
