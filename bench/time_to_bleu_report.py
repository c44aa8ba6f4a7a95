#!/usr/bin/env python3
"""Summary of a bench/time-to-bleu run: reads every run folder under OUT/runs (run.json written by
the script, metrics.jsonl written by nmt-train or bench/torch_nmt_train.py) and writes
OUT/time-to-bleu.csv (the BLEU-vs-time curve, one row per evaluation, with its dev-line counts:
lines scored, lines in the dev file, sources cut to model.max_positions, pairs in the dev loss),
OUT/summary.json, OUT/time-to-bleu.png (matplotlib, when installed), then prints the table (its
"dev lines" column: lines scored / lines in the dev file at the last evaluation).

Times are wall seconds since each process started (`elapsed_s` in the records; evaluations and
setup included). For nmt-train records without `elapsed_s` (a binary older than that field) the
record's Unix `time` minus the launch time the script recorded is used instead. `train_s` is the
training steps alone: the twin records it; for ours it is summed from the train records
(ms_per_step x steps) up to the evaluated step.

usage: time_to_bleu_report.py OUT
"""
import csv
import json
import os
import sys


def read_jsonl(path):
    records = []
    if not os.path.exists(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a kill
    return records


def curve_of(run, records):
    """One point per evaluation: step, elapsed_s, train_s, bleu, dev loss, tokens/s."""
    launch = run.get("launch_time")
    points, train_s, train_tokens = [], 0.0, 0.0
    trains = sorted((r for r in records if r.get("event") == "train"), key=lambda r: r["step"])
    for e in (r for r in records if r.get("event") == "eval" and r.get("bleu") is not None):
        elapsed = e.get("elapsed_s")
        if elapsed is None and launch is not None and "time" in e:
            elapsed = e["time"] - launch
        if "train_s" in e:  # the twin
            t_s, tok_s = e["train_s"], e.get("tokens_per_s_total", e.get("tokens_per_s"))
        else:  # ours: sum the train intervals up to this step
            done = [r for r in trains if r["step"] <= e["step"]]
            t_s = sum(r["ms_per_step"] * r["steps"] for r in done) / 1000.0
            toks = sum(r["tokens_per_s"] * r["ms_per_step"] * r["steps"] / 1000.0 for r in done)
            tok_s = toks / t_s if t_s > 0 else None
        points.append({"step": e["step"], "elapsed_s": elapsed, "train_s": t_s, "bleu": e["bleu"],
                       "dev_loss": e.get("loss"), "tokens_per_s": tok_s,
                       "lines_scored": e.get("sentences"), "lines_in_file": e.get("lines_in_file"),
                       "truncated_sources": e.get("truncated_sources"),
                       "loss_sentences": e.get("loss_sentences")})
    points.sort(key=lambda p: p["step"])
    return points


def summarise(run, records, points):
    end = next((r for r in reversed(records) if r.get("event") == "end"), None)
    report = end.get("report", {}) if end else {}
    tok_s = report.get("tokens_per_s")
    if not tok_s:
        trains = [r for r in records if r.get("event") == "train" and r.get("tokens_per_s")]
        tok_s = points[-1]["tokens_per_s"] if points else (
            sum(r["tokens_per_s"] for r in trains) / len(trains) if trains else None)
    reached = {}
    for target in run["targets"]:
        hit = next((p for p in points if p["bleu"] >= target), None)
        reached[str(target)] = None if hit is None else {
            "elapsed_s": hit["elapsed_s"], "train_s": hit["train_s"], "step": hit["step"]}
    last_step = report.get("last_step")
    if last_step is None:
        steps = [r["step"] for r in records if "step" in r]
        last_step = max(steps) if steps else None
    return {
        "corpus": run["corpus"], "system": run["system"], "init": run["init"], "rc": run.get("rc"),
        "targets": reached,
        "final_bleu": points[-1]["bleu"] if points else None,
        "final_step": points[-1]["step"] if points else None,
        "best_bleu": max((p["bleu"] for p in points), default=None),
        "tokens_per_s": tok_s, "last_step": last_step,
        "wall_s": run.get("wall_s"),
        "stop_reason": report.get("stop_reason"),
        # The last evaluation's coverage: dev lines decoded and scored / in the dev file, sources
        # cut to model.max_positions, lines in the dev loss (None from a binary without them).
        "dev_lines": None if not points else {
            "scored": points[-1]["lines_scored"], "in_file": points[-1]["lines_in_file"],
            "truncated": points[-1]["truncated_sources"], "loss": points[-1]["loss_sentences"]},
    }


def fmt_lines(d):
    """'879/879' (scored / in the dev file), '+ 2 cut' when sources were cut to max_positions."""
    if not d or d["scored"] is None:
        return "-"
    text = f"{d['scored']}/{'?' if d['in_file'] is None else d['in_file']}"
    return text + (f" ({d['truncated']} cut)" if d.get("truncated") else "")


def fmt_target(hit):
    if hit is None:
        return "not reached"
    e = hit["elapsed_s"]
    return f"{e:.1f} s @ {hit['step']}" if e is not None else f"? s @ {hit['step']}"


def plot(out_dir, runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("time-to-bleu: matplotlib not installed; no plot")
        return None
    corpora = sorted({r["corpus"] for r, _ in runs})
    if not corpora:
        return None
    fig, axes = plt.subplots(1, len(corpora), figsize=(6.5 * len(corpora), 4.5), squeeze=False)
    for ax, corpus in zip(axes[0], corpora):
        targets = set()
        for run, points in runs:
            if run["corpus"] != corpus:
                continue
            targets.update(run["targets"])
            xs = [p["elapsed_s"] for p in points if p["elapsed_s"] is not None]
            ys = [p["bleu"] for p in points if p["elapsed_s"] is not None]
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=f"{run['system']} ({run['init']})")
        for target in sorted(targets):
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{corpus}: dev BLEU (greedy) vs wall time")
        ax.set_xlabel("seconds since process start (evaluations included)")
        ax.set_ylabel("dev BLEU")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, "time-to-bleu.png")
    fig.savefig(path, dpi=110)
    return path


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out_dir = sys.argv[1]
    runs_dir = os.path.join(out_dir, "runs")
    runs, summaries = [], []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        run_file = os.path.join(runs_dir, name, "run.json")
        if not os.path.exists(run_file):
            continue
        with open(run_file) as f:
            run = json.load(f)
        records = read_jsonl(os.path.join(runs_dir, name, "metrics.jsonl"))
        points = curve_of(run, records)
        runs.append((run, points))
        summaries.append(summarise(run, records, points))

    with open(os.path.join(out_dir, "time-to-bleu.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["corpus", "system", "init", "step", "elapsed_s", "train_s", "bleu", "dev_loss",
                    "tokens_per_s", "lines_scored", "lines_in_file", "truncated_sources",
                    "loss_sentences"])
        for run, points in runs:
            for p in points:
                w.writerow([run["corpus"], run["system"], run["init"], p["step"],
                            *("" if p[k] is None else round(p[k], 4)
                              for k in ("elapsed_s", "train_s", "bleu", "dev_loss", "tokens_per_s")),
                            *("" if p[k] is None else p[k]
                              for k in ("lines_scored", "lines_in_file", "truncated_sources",
                                        "loss_sentences"))])
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summaries, f, indent=2)
    png = plot(out_dir, runs)

    print(f"\ntime-to-bleu: curves {os.path.join(out_dir, 'time-to-bleu.csv')}"
          + (f", plot {png}" if png else "") + f", summary {os.path.join(out_dir, 'summary.json')}")
    print("time to each dev BLEU target: wall seconds since process start (evaluations included) @ step;"
          "\ndev lines: lines decoded and scored / lines in the dev file at the last evaluation\n")
    header = ["corpus", "system", "init", "targets reached", "final BLEU (step)", "best",
              "dev lines", "tok/s", "wall s", "end"]
    rows = []
    for s in summaries:
        targets = "; ".join(f"{t}: {fmt_target(h)}" for t, h in s["targets"].items())
        final = "-" if s["final_bleu"] is None else f"{s['final_bleu']:.2f} ({s['final_step']})"
        best = "-" if s["best_bleu"] is None else f"{s['best_bleu']:.2f}"
        tok = "-" if not s["tokens_per_s"] else f"{s['tokens_per_s']:,.0f}"
        wall = "-" if s["wall_s"] is None else f"{s['wall_s']:.0f}"
        end = s["stop_reason"] or ("rc " + str(s["rc"]) if s["rc"] not in (0, None) else "-")
        if s["rc"] not in (0, None) and s["stop_reason"] is None:
            end = f"FAILED rc {s['rc']}"
        rows.append([s["corpus"], s["system"], s["init"], targets, final, best,
                     fmt_lines(s["dev_lines"]), tok, wall, end])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else []
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    if rows:
        print(line(header))
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for r in rows:
            print(line(r))
    else:
        print("(no runs found)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
