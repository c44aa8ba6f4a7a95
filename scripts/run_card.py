#!/usr/bin/env python3
"""The run card: turns a run directory (nmt-train's log.dir: metrics.jsonl, report.json) into
card.md and card.html with PNG plots, one section per question people ask after a run (how long,
fully trained, overfitting, GPU use, network, learning rate, data, checkpoints, step time), each
with the answer in a sentence, the numbers behind it and the evidence.

usage: run_card.py RUN_DIR [-o OUT_DIR] [--no-plots] [--quiet]

Works on finished, stopped and crashed runs: a missing report.json, end event or telemetry is named
in the card. Records: engine/report/run_report.cpp, engine/train/run_telemetry.h. Verdicts:
scripts/run_card_verdicts.py. Without matplotlib the card is written without plots (one line says
so). Exit codes: 0 written; 1 bad input.
"""
import argparse
import base64
import html
import json
import math
import os
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_card_verdicts as v  # noqa: E402


class CardError(Exception):
    pass


# ---- Reading the run directory ----

@dataclass
class Run:
    directory: str
    start: dict = None          # the last start/resume record (with "config")
    resumes: int = 0
    train: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    checkpoints: list = field(default_factory=list)
    telemetry: list = field(default_factory=list)
    cluster: dict = None
    end: dict = None
    report: dict = None         # report.json (or the end event's)
    prep: dict = None           # nmt-prep's report.json of data.train
    missing: list = field(default_factory=list)
    first_time: float = None
    last_time: float = None

    @property
    def config(self):
        return (self.start or {}).get("config") or {}


def read_metrics(path):
    """Records that survive the resume rule (a "resume" event drops later-stepped records of the
    interrupted run), by event, in step order; plus the start record and the times."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as error:
        raise CardError(f"cannot read {path}: {error.strerror}") from error
    kept, start, resumes, cluster, end, times = {}, None, 0, None, None, []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            event, step = record.get("event"), record.get("step")
        except (json.JSONDecodeError, AttributeError) as error:
            if number == len(lines):  # a crash can cut the last line short
                continue
            raise CardError(f"{path} line {number}: not a JSON object") from error
        if isinstance(record.get("time"), (int, float)):
            times.append(record["time"])
        if event in ("start", "resume"):
            if event == "resume":
                resumes += 1
                kept = {k: r for k, r in kept.items() if k[1] <= step}
            start = record
        elif event == "cluster":
            cluster = record
        elif event == "end":
            end = record
        elif event in ("train", "eval", "checkpoint", "telemetry") and isinstance(step, int):
            kept.pop((event, step), None)
            kept[(event, step)] = record
    records = sorted(kept.values(), key=lambda r: r["step"])
    by_event = {e: [r for r in records if r["event"] == e]
                for e in ("train", "eval", "checkpoint", "telemetry")}
    return by_event, start, resumes, cluster, end, times


def read_run(directory):
    run = Run(directory)
    metrics = os.path.join(directory, "metrics.jsonl")
    if not os.path.exists(metrics):
        raise CardError(f"{directory}: no metrics.jsonl (is it nmt-train's log.dir?)")
    by_event, run.start, run.resumes, run.cluster, run.end, times = read_metrics(metrics)
    run.train, run.evals = by_event["train"], by_event["eval"]
    run.checkpoints, run.telemetry = by_event["checkpoint"], by_event["telemetry"]
    if times:
        run.first_time, run.last_time = min(times), max(times)
    try:
        with open(os.path.join(directory, "report.json"), encoding="utf-8") as f:
            run.report = json.load(f)
    except (OSError, json.JSONDecodeError):
        run.report = (run.end or {}).get("report")
    if run.report is None:
        last = max([r["step"] for r in run.train + run.evals] or [0])
        run.missing.append(f"report.json and the end event: the run did not finish (it crashed, "
                           f"was killed, or is still running); the card uses metrics.jsonl up to "
                           f"step {last:,}")
    if run.start is None or not run.config:
        run.missing.append("the start event's config (a run from before the run card): the "
                           "learning-rate schedule and data sections are incomplete")
    if not run.telemetry:
        run.missing.append("telemetry events (per-rank step split, GPU utilisation over time, "
                           "network counters): written by nmt-train with the run card")
    train_dir = run.config.get("data", {}).get("train", "")
    if train_dir and train_dir != "synthetic":
        for base in (train_dir, os.path.join(directory, train_dir)):
            try:
                with open(os.path.join(base, "report.json"), encoding="utf-8") as f:
                    run.prep = json.load(f)
                break
            except (OSError, json.JSONDecodeError):
                continue
    return run


# ---- Formatting ----

def fmt_seconds(s):
    if s is None:
        return "n/a"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {s % 60:.0f} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def fmt_mb(b):
    if b is None:
        return "n/a"
    return f"{b / 1e3:,.1f} kB" if abs(b) < 1e5 else f"{b / 1e6:,.1f} MB"


def fmt_n(x):
    return "n/a" if x is None else f"{x:,.0f}"


def fmt(x, digits=1, unit=""):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:,.{digits}f}{unit}"


def mean(values):
    values = [x for x in values if x is not None]
    return sum(values) / len(values) if values else None


# ---- The card ----

@dataclass
class Section:
    title: str
    answer: str
    numbers: list = field(default_factory=list)  # (label, value text)
    table: tuple = None                           # (headers, rows)
    plot: str = None                              # PNG file name in the output directory
    notes: list = field(default_factory=list)


class Plots:
    """matplotlib, when installed; every method returns the PNG's name or None."""

    def __init__(self, out_dir, enabled):
        self.out_dir, self.plt, self.reason = out_dir, None, None
        if not enabled:
            self.reason = "plots turned off (--no-plots)"
            return
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError:
            self.reason = "matplotlib is not installed for python3: the card has no plots"

    def figure(self, name, panels, draw):
        if self.plt is None:
            return None
        fig, axes = self.plt.subplots(1, panels, figsize=(6 * panels, 3.6), squeeze=False)
        try:
            draw(*axes[0])
            for ax in axes[0]:
                ax.grid(True, alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=8)
            fig.tight_layout()
            path = os.path.join(self.out_dir, name)
            temp = f"{path}.tmp-{os.getpid()}.png"
            fig.savefig(temp, dpi=90)
            os.replace(temp, path)
            return name
        finally:
            self.plt.close(fig)


def score_series(evals):
    if any(isinstance(e.get("bleu"), (int, float)) for e in evals):
        pts = [(e["step"], e["bleu"]) for e in evals if isinstance(e.get("bleu"), (int, float))]
        return "dev BLEU", [p[0] for p in pts], [p[1] for p in pts]
    pts = [(e["step"], 100 * e["greedy_token_accuracy"]) for e in evals
           if isinstance(e.get("greedy_token_accuracy"), (int, float))]
    return "dev greedy token accuracy (%)", [p[0] for p in pts], [p[1] for p in pts]


def series(records, key):
    pts = [(r["step"], r[key]) for r in records
           if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in pts], [p[1] for p in pts]


def all_step_ms(run):
    return [ms for t in run.telemetry for ms in t.get("step_ms", [])]


def ranks_summary(run):
    """Per-rank whole-run numbers: report.json "ranks", else averaged from telemetry."""
    if run.report and run.report.get("ranks"):
        return run.report["ranks"], "report.json"
    if not run.telemetry:
        return [], None
    by_rank = {}
    for t in run.telemetry:
        for r in t.get("ranks", []):
            by_rank.setdefault(r["rank"], []).append(r)
    out = []
    for rank, rows in sorted(by_rank.items()):
        utils = [r.get("gpu_util_mean_percent") for r in rows]
        utils = [u for u in utils if u is not None]
        out.append({"rank": rank, "mean_step_ms": mean([r["ms_per_step"] for r in rows]),
                    "mean_fwd_bwd_ms": mean([r["fwd_bwd_ms"] for r in rows]),
                    "mean_optimizer_ms": mean([r["optimizer_ms"] for r in rows]),
                    "mean_exposed_comm_ms": mean([r["exposed_comm_ms"] for r in rows]),
                    "mean_comm_ms": mean([r["comm_ms"] for r in rows]),
                    "mean_data_ms": mean([r["data_ms"] for r in rows]),
                    "comm_bytes_per_step": mean([r["comm_bytes_per_step"] for r in rows]),
                    "gpu_util_mean_percent": mean(utils) if utils else None,
                    "gpu_util_p10_percent": v.percentile(utils, 10) if utils else None})
    return out, "telemetry (interval means)"


def hosts_of(run):
    ranks = (run.cluster or {}).get("ranks") or []
    return {r["rank"]: r["host"] for r in ranks}


def section_time(run):
    r = run.report or {}
    steps = r.get("steps")
    wall = r.get("wall_seconds")
    if wall is None and run.first_time is not None:
        wall = run.last_time - run.first_time
    eval_s = sum(e.get("eval_s", 0) for e in run.evals)
    ckpt_s = sum(c.get("seconds", 0) for c in run.checkpoints)
    train_s = r.get("train_seconds")
    if train_s is None and run.telemetry:
        train_s = sum(ms for ms in all_step_ms(run)) / 1000
    last_step = r.get("last_step") or max([x["step"] for x in run.train] or [0])
    status = (f"finished ({r.get('stop_reason')})" if run.report else "did not finish")
    answer = (f"{fmt_seconds(wall)} from start to {'end' if run.report else 'the last record'} "
              f"for {last_step:,} steps ({status}); {fmt_seconds(train_s)} of it in training steps.")
    rows = [["training steps", fmt_seconds(train_s)],
            ["dev evaluations", f"{fmt_seconds(eval_s)} ({len(run.evals)} evaluations)"],
            ["checkpoint writes", f"{fmt_seconds(ckpt_s)} ({len(run.checkpoints)} saves)"]]
    if wall is not None and train_s is not None:
        rows.append(["setup and other", fmt_seconds(max(0.0, wall - train_s - eval_s - ckpt_s))])
    rows.append(["total (wall)", fmt_seconds(wall)])
    numbers = [("steps", f"{(r.get('first_step') or 0) + 1:,}–{last_step:,}"
                + (f" ({run.resumes} resume(s))" if run.resumes else "")),
               ("stop reason", r.get("stop_reason", "none recorded (crashed or running)"))]
    return Section("How long did training take?", answer, numbers, (["part", "time"], rows))


def section_trained(run, plots):
    name, s_steps, scores = score_series(run.evals)
    l_steps, losses = series(run.evals, "loss")
    verdict = v.fully_trained_verdict(s_steps, scores, name, l_steps, losses)
    score, loss = verdict.numbers["score"], verdict.numbers["loss"]
    numbers = [(f"{name} trend", score.sentence), ("dev loss trend", loss.sentence)]
    if s_steps:
        best = max(range(len(scores)), key=lambda i: scores[i])
        numbers.insert(0, (f"best {name}", f"{scores[best]:.2f} at step {s_steps[best]:,} "
                                           f"(last {scores[-1]:.2f} at step {s_steps[-1]:,})"))

    def draw(ax1, ax2):
        for ax, steps, values, title, sub in ((ax1, s_steps, scores, name, score),
                                              (ax2, l_steps, losses, "dev loss", loss)):
            ax.plot(steps, values, marker="o", markersize=3, label=title)
            trend = sub.numbers.get("trend")
            if trend:
                xs = [trend.first_step, trend.last_step]
                ax.plot(xs, [trend.value_at(x) for x in xs], "--", color="tab:red",
                        label=f"trend {trend.text(2)}")
            ax.set_title(f"{title}: {sub.label}")
            ax.set_xlabel("step")
    plot = plots.figure("card-progress.png", 2, draw) if s_steps or l_steps else None
    rows = [[f"{e['step']:,}", fmt(e.get("bleu"), 2), fmt(e.get("loss"), 4),
             fmt(100 * e["greedy_token_accuracy"] if "greedy_token_accuracy" in e else None, 2)]
            for e in run.evals[-8:]]
    return Section("Is the model fully trained?", f"**{verdict.label}** — {verdict.sentence}",
                   numbers, (["step", "BLEU", "dev loss", "greedy token acc %"], rows), plot,
                   ["Trend: least-squares slope over the last half of the evaluations (at least 4 where there are), "
                    "± its 95% confidence interval; a change under 0.3 BLEU (1% of the dev loss) "
                    "over that window counts as flat, and one whose interval allows 5 times that is "
                    "uncertain."])


def section_overfitting(run, plots):
    t_steps, t_losses = series(run.train, "loss")
    d_steps, d_losses = series(run.evals, "loss")
    verdict = v.overfitting_verdict(t_steps, t_losses, d_steps, d_losses)
    n = verdict.numbers
    numbers = []
    if n:
        numbers = [("lowest dev loss", f"{n['best_loss']:.4f} at step {n['best_step']:,}"),
                   ("last dev loss", f"{n['last_loss']:.4f} ({n['rise_since_best']:+.4f} vs best)"),
                   ("gap dev − train at the last evaluation", fmt(n["gap_last"], 4)),
                   ("gap trend", n["gap_trend"].text(4) if n["gap_trend"] else "n/a"),
                   ("train loss trend (same window)",
                    n["train_trend"].text(4) if n["train_trend"] else "n/a")]

    def draw(ax1, ax2):
        ax1.plot(t_steps, t_losses, label="train loss (dropout on)")
        ax1.plot(d_steps, d_losses, marker="o", markersize=3, label="dev loss")
        if n:
            ax1.axvline(n["best_step"], color="gray", linestyle=":", label="lowest dev loss")
        ax1.set_xlabel("step")
        ax1.set_title("train vs dev loss")
        gaps = n.get("gaps") if n else None
        if gaps:
            ax2.plot([g[0] for g in gaps], [g[1] for g in gaps], marker="o", markersize=3,
                     label="dev − train")
        ax2.set_xlabel("step")
        ax2.set_title("generalisation gap")
    plot = plots.figure("card-overfitting.png", 2, draw) if d_steps else None
    return Section("Was it overfitting?", f"**{verdict.label}** — {verdict.sentence}", numbers,
                   plot=plot, notes=["Both losses are label-smoothed cross-entropy per target "
                                     "token; the train loss is the log interval's mean with "
                                     "dropout on, so it can sit above the dev loss."])


def step_profile(run):
    """Per-step means over the run: step, fwd+bwd, optimizer, exposed comm, comm, data, bytes."""
    r = run.report or {}
    ranks, _ = ranks_summary(run)
    if ranks:  # the slowest rank sets the pace
        worst = max(ranks, key=lambda x: x.get("mean_step_ms") or 0)
        return {"step_ms": worst["mean_step_ms"], "fwd_bwd_ms": worst["mean_fwd_bwd_ms"],
                "optimizer_ms": worst["mean_optimizer_ms"],
                "exposed_comm_ms": worst["mean_exposed_comm_ms"], "comm_ms": worst["mean_comm_ms"],
                "data_ms": worst.get("mean_data_ms") or 0.0,
                "bytes_per_step": worst["comm_bytes_per_step"]}
    if r.get("steps"):
        steps = r["steps"]
        return {"step_ms": r["mean_step_ms"], "fwd_bwd_ms": r["mean_fwd_bwd_ms"],
                "optimizer_ms": r["mean_optimizer_ms"],
                "exposed_comm_ms": 1000 * r["exposed_comm_seconds"] / steps,
                "comm_ms": 1000 * r["comm_seconds"] / steps, "data_ms": r.get("mean_data_ms", 0),
                "bytes_per_step": r["comm_bytes"] / steps}
    if run.train:
        return {"step_ms": mean([t["ms_per_step"] for t in run.train]),
                "fwd_bwd_ms": mean([t["fwd_bwd_ms"] for t in run.train]),
                "optimizer_ms": mean([t["optimizer_ms"] for t in run.train]),
                "exposed_comm_ms": mean([t.get("exposed_comm_ms", 0) for t in run.train]),
                "comm_ms": mean([t.get("comm_ms", 0) for t in run.train]),
                "data_ms": mean([t.get("data_ms", 0) for t in run.train]), "bytes_per_step": 0}
    return None


def device_of(run):
    return (run.report or {}).get("device") or (run.start or {}).get("device") or "cpu"


def section_gpu(run, plots):
    profile = step_profile(run)
    device = device_of(run)
    if profile is None:
        return Section("Were the GPUs fully utilised?", "Cannot tell: no step was timed.")
    split = v.step_split(profile["step_ms"], profile["fwd_bwd_ms"], profile["optimizer_ms"],
                         profile["exposed_comm_ms"], profile["data_ms"], device)
    ranks, source = ranks_summary(run)
    hosts = hosts_of(run)
    gpus = []
    if device == "cuda":
        for r in ranks:
            gpus.append({"name": f"rank {r['rank']}", "mean": r.get("gpu_util_mean_percent"),
                         "p10": r.get("gpu_util_p10_percent")})
        if not gpus and run.report and run.report.get("gpu"):
            g = run.report["gpu"]
            gpus = [{"name": "rank 0", "mean": g.get("utilization_mean_percent"),
                     "p10": g.get("utilization_p10_percent")}]
    verdict = v.gpu_verdict(gpus, split)
    fractions = verdict.numbers["fractions"]
    numbers = [("step split (ms)", ", ".join(f"{k} {x:.1f}" for k, x in split.items())),
               ("step split (%)", ", ".join(f"{k} {100 * f:.0f}%" for k, f in fractions.items()))]
    g = (run.report or {}).get("gpu") or {}
    if g.get("peak_device_memory_bytes"):
        numbers.append(("peak device memory (rank 0, whole GPU)",
                        fmt_mb(g["peak_device_memory_bytes"])))
    rows = [[r["rank"], hosts.get(r["rank"], ""), fmt(r.get("gpu_util_mean_percent"), 0, "%"),
             fmt(r.get("gpu_util_p10_percent"), 0, "%"), fmt(r.get("mean_step_ms"), 1),
             fmt(r.get("mean_exposed_comm_ms"), 1), fmt(r.get("mean_data_ms"), 2)]
            for r in ranks]

    def draw(ax1, ax2):
        by_rank = {}
        for t in run.telemetry:
            for r in t.get("ranks", []):
                if r.get("gpu_util_mean_percent") is not None:
                    by_rank.setdefault(r["rank"], []).append((t["step"],
                                                              r["gpu_util_mean_percent"]))
        for rank, pts in sorted(by_rank.items()):
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], label=f"GPU of rank {rank}")
        if not by_rank:
            ax1.text(0.5, 0.5, "no NVML samples (CPU run or NVML missing)", ha="center",
                     va="center", transform=ax1.transAxes)
        ax1.set_ylim(0, 105)
        ax1.set_xlabel("step")
        ax1.set_title("NVML utilisation per log interval (%)")
        left = 0.0
        for name, value in split.items():
            ax2.barh([0], [value], left=left, label=f"{name} {value:.1f} ms")
            left += value
        ax2.set_yticks([])
        ax2.set_xlabel("ms per step (slowest rank)")
        ax2.set_title("where the step goes")
    plot = plots.figure("card-gpu.png", 2, draw)
    return Section("Were the GPUs fully utilised?", f"**{verdict.label}** — {verdict.sentence}",
                   numbers, (["rank", "host", "GPU util mean", "GPU util p10", "step ms",
                              "exposed comm ms", "data ms"], rows) if rows else None, plot,
                   ["NVML utilisation is the share of time at least one kernel ran, not how busy "
                    "the SMs were; MFU (step time section) says how much of the peak the matrix "
                    "products reached. On the GPU, compute is device time (CUDA events) and "
                    "includes gaps where the GPU waited for the host."]
                   + ([f"per-rank numbers from {source}"] if source else []))


def nic_rates(run):
    """Per node: [(step, rx bytes/s, tx bytes/s)] over the telemetry intervals."""
    nodes = {}
    for t in run.telemetry:
        seconds = t.get("interval_s") or 0
        if seconds <= 0:
            continue
        for n in t.get("nodes", []):
            nodes.setdefault(n["host"], []).append(
                (t["step"], n["rx_bytes"] / seconds, n["tx_bytes"] / seconds))
    return nodes


def section_network(run, plots):
    r = run.report or {}
    cluster = run.cluster or {}
    world = r.get("world_size") or cluster.get("world_size") or 1
    hosts = sorted(set(hosts_of(run).values())) or ["(unknown)"]
    profile = step_profile(run) or {}
    probe = cluster.get("probe")
    links = {n["host"]: n.get("link_mbps") for n in cluster.get("nodes", [])}
    rates = nic_rates(run)
    peak_fraction = None
    for host, pts in rates.items():
        link = links.get(host)
        if link and pts:
            peak = max(max(p[1], p[2]) for p in pts) / (link * 1e6 / 8)
            peak_fraction = max(peak_fraction or 0.0, peak)
    steps = r.get("steps") or sum(t.get("steps", 0) for t in run.telemetry)
    verdict = v.network_verdict({
        "world_size": world, "hosts": len(hosts), "step_ms": profile.get("step_ms", 0),
        "comm_ms": profile.get("comm_ms", 0), "exposed_comm_ms": profile.get("exposed_comm_ms", 0),
        "bytes_per_step": profile.get("bytes_per_step", 0),
        "probe_busbw_gb_per_s": probe.get("busbw_gb_per_s") if probe else None,
        "nic_peak_fraction": peak_fraction, "steps": steps})
    n = verdict.numbers
    numbers = [("ranks / nodes", f"{world} rank(s) on {len(hosts)} node(s): {', '.join(hosts)}"),
               ("backend", cluster.get("backend", "n/a"))]
    if world > 1:
        numbers += [
            ("bytes all-reduced per step (per rank)", fmt_mb(profile.get("bytes_per_step"))),
            ("exchange time per step", f"{fmt(profile.get('comm_ms'))} ms, of which "
                                       f"{fmt(profile.get('exposed_comm_ms'))} ms exposed"),
            ("achieved bus bandwidth", fmt(n.get("busbw_gb_per_s"), 2, " GB/s")),
            ("start-up probe", f"{fmt_mb(probe['bytes'])} all-reduce: bus bandwidth "
                               f"{probe['busbw_gb_per_s']:.2f} GB/s (median of "
                               f"{probe['iterations']})" if probe
             else cluster.get("probe_reason") or "not run"),
            ("achieved / probe", fmt(100 * n["fraction_of_probe"], 0, "%")
             if "fraction_of_probe" in n else "n/a"),
            ("time a faster network would save",
             f"2×: {n['saving_2x_ms']:.1f} ms/step ({fmt_seconds(n['saving_2x_run_s'])} over the "
             f"run); infinitely fast: {n['saving_infinite_ms']:.1f} ms/step "
             f"({fmt_seconds(n['saving_infinite_run_s'])})")]
    rows = []
    for host in hosts:
        pts = rates.get(host, [])
        link = links.get(host)
        rows.append([host, fmt(link / 1000, 0, " Gbit/s") if link else "unknown",
                     fmt(mean([p[1] for p in pts]) / 1e6 if pts else None, 2),
                     fmt(mean([p[2] for p in pts]) / 1e6 if pts else None, 2),
                     fmt(max(max(p[1], p[2]) for p in pts) / 1e6 if pts else None, 2)])
    ifaces = (cluster.get("nodes") or [{}])[0].get("interfaces") or []
    notes = ["Interface counters: /sys/class/net/*/statistics (all interfaces but lo, summed), "
             "sampled at every log line on each node's lowest rank; they include any other "
             "traffic of the node."]
    if ifaces:
        notes.append("interfaces of " + hosts[0] + ": " + ", ".join(
            f"{i['name']} ({'up' if i['up'] else 'down'}"
            + (f", {i['speed_mbps'] / 1000:g} Gbit/s" if i.get("speed_mbps") else "") + ")"
            for i in ifaces))

    def draw(ax1, ax2):
        for host, pts in rates.items():
            ax1.plot([p[0] for p in pts], [(p[1] + p[2]) / 1e6 for p in pts], label=host)
            if links.get(host):
                ax1.axhline(links[host] / 8, linestyle=":", color="gray",
                            label=f"{host} link ({links[host] / 1000:g} Gbit/s)")
        ax1.set_xlabel("step")
        ax1.set_title("network interfaces, rx + tx MB/s per node")
        by_rank = {}
        for t in run.telemetry:
            for rr in t.get("ranks", []):
                by_rank.setdefault(rr["rank"], []).append((t["step"], rr["exposed_comm_ms"],
                                                           rr["comm_ms"]))
        for rank, pts in sorted(by_rank.items()):
            ax2.plot([p[0] for p in pts], [p[2] for p in pts], label=f"rank {rank} exchange")
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], "--",
                     label=f"rank {rank} exposed")
        ax2.set_xlabel("step")
        ax2.set_title("gradient exchange, ms per step")
    plot = plots.figure("card-network.png", 2, draw) if run.telemetry and world > 1 else None
    return Section("Was the network the bottleneck?", f"**{verdict.label}** — {verdict.sentence}",
                   numbers, (["node", "link", "rx MB/s mean", "tx MB/s mean", "busiest MB/s"],
                             rows), plot, notes)


def section_lr(run, plots):
    cfg = run.config
    schedule, model = cfg.get("lr_schedule"), cfg.get("model", {})
    logged = series(run.train, "lr")
    if not schedule:
        return Section("What does the learning rate do, and why?",
                       "Cannot explain it: the config is not in metrics.jsonl (older run).")
    d_model = model.get("d_model", 512)
    max_steps = cfg.get("train", {}).get("max_steps", max(logged[0] or [1]))
    sentence, formula, peak, peak_step = v.describe_schedule(schedule, d_model, max_steps)
    numbers = [("policy", schedule.get("policy")), ("formula", formula),
               ("peak", f"{peak:.4g} at step {peak_step:,}"),
               ("warmup steps", fmt_n(schedule.get("warmup_steps"))),
               ("optimizer", ", ".join(f"{k} {x}" for k, x in cfg.get("optimizer", {}).items()))]
    if logged[0]:
        numbers.append(("last logged", f"{logged[1][-1]:.4g} at step {logged[0][-1]:,}"))

    def draw(ax):
        stride = max(1, max_steps // 400)
        xs = list(range(1, max_steps + 1, stride))
        ax.plot(xs, [v.learning_rate_at(schedule, d_model, x, max_steps) for x in xs],
                label="from config")
        ax.plot(*logged, "o", markersize=3, label="logged")
        ax.axvline(peak_step, color="gray", linestyle=":", label="end of warmup")
        ax.set_xlabel("step")
        ax.set_title("learning rate")
    return Section("What does the learning rate do, and why?", sentence, numbers,
                   plot=plots.figure("card-lr.png", 1, draw))


def section_data(run):
    d = (run.report or {}).get("dataset")
    prep = run.prep
    if not d and not prep:
        synthetic = run.config.get("data", {}).get("train") == "synthetic"
        return Section("How big was the training set?",
                       "Synthetic data (the reversal task): no corpus." if synthetic else
                       "Unknown: neither report.json's dataset nor nmt-prep's report.json "
                       "could be read.")
    train = (prep or {}).get("splits", {}).get("train", {})
    pairs = d["pairs"] if d else train.get("pairs_kept")
    src_b = d.get("source_bytes") if d else train.get("source", {}).get("bytes")
    tgt_b = d.get("target_bytes") if d else train.get("target", {}).get("bytes")
    shard = d.get("shard_bytes") if d else None
    tgt_tokens = d["target_tokens"] if d else train.get("target", {}).get("tokens")
    src_tokens = d["source_tokens"] if d else train.get("source", {}).get("tokens")
    text = (src_b or 0) + (tgt_b or 0) if src_b is not None else None
    answer = (f"{fmt_n(pairs)} sentence pairs (lines), {fmt_n(src_tokens)} source and "
              f"{fmt_n(tgt_tokens)} target subword tokens, {fmt_mb(text)} of text "
              f"and {fmt_mb(shard)} of token shards.")
    trained = (run.report or {}).get("target_tokens")
    numbers = [("directory", (d or {}).get("directory") or run.config.get("data", {}).get("train")),
               ("source / target text", f"{fmt_mb(src_b)} / {fmt_mb(tgt_b)}")]
    if trained and tgt_tokens:
        numbers.append(("epochs trained", f"{trained / tgt_tokens:.2f} (target tokens trained "
                                          f"{fmt_n(trained)}; padding not counted)"))
    rows = []
    if train:
        dropped = train.get("dropped", {})
        rows = [["pairs read", fmt_n(train.get("pairs_read"))],
                ["pairs kept", fmt_n(train.get("pairs_kept"))]]
        reasons = {"invalid_utf8": "invalid UTF-8", "empty": "an empty side",
                   "too_long": f"too long (> {prep.get('options', {}).get('max_length')} tokens)",
                   "length_ratio": f"length ratio > {prep.get('options', {}).get('max_ratio')}"}
        for key, why in reasons.items():
            rows.append([f"dropped: {why}", fmt_n(dropped.get(key, 0))])
        dev = prep.get("splits", {}).get("dev")
        if dev:
            rows.append(["dev pairs (none dropped)", fmt_n(dev.get("pairs_kept"))])
        vocab = prep.get("vocab", {})
        numbers.append(("vocabulary", f"{vocab.get('kind')} {fmt_n(vocab.get('size'))} pieces"))
        total = dropped.get("total", 0)
        answer += (f" nmt-prep dropped {total:,} pair(s)" + (
            ": " + ", ".join(f"{dropped[k]:,} for {reasons[k]}" for k in reasons
                             if dropped.get(k)) if total else "") + ".")
    max_len = run.config.get("data", {})
    numbers.append(("training length limits",
                    f"source {max_len.get('max_src_len')}, target {max_len.get('max_tgt_len')} "
                    f"tokens ({max_len.get('length_policy', 'drop')} longer pairs at batching)"))
    return Section("How big was the training set?", answer, numbers,
                   (["", "train"], rows) if rows else None)


FILE_ROLES = {"model.safetensors": "fp32 weights by PyTorch names (what nmt-translate loads)",
              "optimizer.safetensors": "Adam first and second moments, fp32",
              "state.json": "step, data position, seed, loss scale, config, checksums"}


def section_checkpoints(run):
    if not run.checkpoints:
        where = run.config.get("checkpoint", {}).get("dir")
        return Section("Which files make up a checkpoint, and how big is it?",
                       "No checkpoint was written" + (" (checkpoint.dir is empty)." if not where
                                                      else f" to {where}."))
    last = run.checkpoints[-1]
    files = last.get("files")
    notes = []
    if not files:  # an older record: read the directory's state.json
        try:
            with open(os.path.join(last["path"], "state.json"), encoding="utf-8") as f:
                state = json.load(f)
            files = {k: x["bytes"] for k, x in state.get("files", {}).items()}
            files["state.json"] = os.path.getsize(os.path.join(last["path"], "state.json"))
        except (OSError, json.JSONDecodeError, KeyError):
            files = {}
            notes.append("the checkpoint's file list was not recorded and its directory is gone")
    seconds = [c["seconds"] for c in run.checkpoints]
    params = (run.report or {}).get("parameters") or (run.start or {}).get("parameters")
    answer = (f"A checkpoint is the directory {os.path.basename(last['path'])}/ with "
              f"{len(files)} files, {fmt_mb(last['bytes'])} in all; writing one took "
              f"{mean(seconds):.2f} s on average ({max(seconds):.2f} s at most, "
              f"{len(seconds)} saves).")
    rows = [[name, fmt_n(size), fmt_mb(size), FILE_ROLES.get(name, "")]
            for name, size in sorted(files.items())]
    numbers = [("last checkpoint", last["path"]),
               ("write throughput", f"{last['bytes'] / 1e6 / max(last['seconds'], 1e-9):,.0f} "
                                    f"MB/s (last save, fsync included)")]
    if params:
        numbers.append(("parameters", f"{params:,} × 4 bytes = {fmt_mb(4 * params)} per fp32 "
                                      f"copy (weights, and each Adam moment)"))
    best = [c for c in run.checkpoints if c.get("is_best")]
    if best:
        numbers.append(("best checkpoint", f"{best[-1]['path']} (step {best[-1]['step']:,})"))
    return Section("Which files make up a checkpoint, and how big is it?", answer, numbers,
                   (["file", "bytes", "size", "holds"], rows), notes=notes)


def section_step_time(run, plots):
    r = run.report or {}
    ms = all_step_ms(run)
    profile = step_profile(run) or {}
    world = r.get("world_size") or (run.cluster or {}).get("world_size") or 1
    if ms:
        stats = {"mean": mean(ms), "median": v.percentile(ms, 50), "p95": v.percentile(ms, 95)}
        source = f"{len(ms):,} timed steps (rank 0)"
    elif run.train:
        interval = [t["ms_per_step"] for t in run.train]
        stats = {"mean": mean(interval), "median": v.percentile(interval, 50),
                 "p95": v.percentile(interval, 95)}
        source = "log-interval means (no per-step telemetry): median and p95 are of the means"
    else:
        return Section("How long did an average step take?", "No step was timed.")
    tokens_per_s = r.get("tokens_per_s") or mean([t["tokens_per_s"] for t in run.train])
    answer = (f"{stats['mean']:.1f} ms on average (median {stats['median']:.1f}, p95 "
              f"{stats['p95']:.1f}), {fmt_n(tokens_per_s)} target tokens/s in total, "
              f"{fmt_n(tokens_per_s / world if tokens_per_s else None)} per "
              f"{'GPU' if device_of(run) == 'cuda' else 'process'}")
    mfu = r.get("mfu")
    answer += f", MFU {100 * mfu:.1f}%." if mfu is not None else \
        f" (MFU n/a: {r.get('mfu_reason') or 'no report.json'})."
    numbers = [("source", source),
               ("counted FLOP/s", fmt(r.get("flops_per_s", 0) / 1e12, 2, " TFLOP/s")
                + (f" of {r['peak_flops_per_s'] / 1e12:.0f} peak ({r.get('device_name')}, "
                   f"{r.get('matmul_precision')})" if r.get("peak_flops_per_s") else ""))]
    if world > 1 and profile.get("step_ms"):
        b = profile["bytes_per_step"]
        comm, exposed, step = profile["comm_ms"], profile["exposed_comm_ms"], profile["step_ms"]
        numbers.append(("traffic per step", f"each rank all-reduces {fmt_mb(b)} per step "
                        f"({b / 1e6 / (step / 1000):,.0f} MB per second of step time); the "
                        f"exchange takes {comm:.1f} ms, {100 * comm / step:.0f}% of the step, "
                        f"{exposed:.1f} ms of it not hidden behind backward"))
    elif world == 1:
        numbers.append(("traffic per step", "none: a single process"))

    def draw(ax1, ax2):
        if ms:
            ax1.hist(ms, bins=50)
            for name, value in stats.items():
                ax1.axvline(value, linestyle="--", color="gray")
                ax1.text(value, ax1.get_ylim()[1] * 0.9, name, rotation=90, fontsize=8)
        ax1.set_xlabel("ms per step")
        ax1.set_title("step time distribution")
        ax2.plot(*series(run.train, "tokens_per_s"))
        ax2.set_xlabel("step")
        ax2.set_title("target tokens/s (all ranks)")
    return Section("How long did an average step take, and how does it relate to the traffic "
                   "between nodes?", answer, numbers,
                   plot=plots.figure("card-step-time.png", 2, draw))


def build_card(run, plots):
    cfg = run.config
    r = run.report or {}
    model = cfg.get("model", {})
    head = [("run directory", os.path.abspath(run.directory)),
            ("status", f"finished: {r.get('stop_reason')}" if run.report else "did not finish"),
            ("device", f"{device_of(run)}" + (f" ({r['device_name']})" if r.get("device_name")
                                              else "")
             + f", {r.get('world_size') or (run.cluster or {}).get('world_size') or 1} rank(s)"),
            ("model", f"{model.get('encoder_layers')}+{model.get('decoder_layers')} layers, "
                      f"d_model {model.get('d_model')}, {fmt_n(r.get('parameters'))} parameters, "
                      f"{cfg.get('train', {}).get('precision')}" if model else "n/a")]
    sections = [section_time(run), section_trained(run, plots), section_overfitting(run, plots),
                section_gpu(run, plots), section_network(run, plots), section_lr(run, plots),
                section_data(run), section_checkpoints(run), section_step_time(run, plots)]
    return head, sections


def render_markdown(title, head, sections, missing, plot_note):
    out = [f"# {title}", ""]
    out += [f"- **{k}**: {val}" for k, val in head]
    if missing or plot_note:
        out += ["", "**Missing from this run directory:**", ""]
        out += [f"- {m}" for m in missing] + ([f"- {plot_note}"] if plot_note else [])
    for s in sections:
        out += ["", f"## {s.title}", "", s.answer, ""]
        out += [f"- {k}: {val}" for k, val in s.numbers]
        if s.table and s.table[1]:
            headers, rows = s.table
            out += ["", "| " + " | ".join(headers) + " |",
                    "|" + "---|" * len(headers)]
            out += ["| " + " | ".join(str(c) for c in row) + " |" for row in s.table[1]]
        if s.plot:
            out += ["", f"![{s.title}]({s.plot})"]
        if s.notes:
            out += [""] + [f"_{n}_" for n in s.notes]
    return "\n".join(out) + "\n"


def inline_bold(text):
    """html-escaped text with the card's only markup, **bold**."""
    parts = html.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def render_html(title, head, sections, missing, plot_note, out_dir):
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
             "padding:3px 8px;text-align:left}h2{border-bottom:1px solid #ddd;margin-top:1.6em}"
             ".answer{font-size:1.1em}.note{color:#666;font-size:.9em}.missing{color:#a40}"
             "img{max-width:100%}")
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
           f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1><ul>"]
    out += [f"<li><b>{html.escape(k)}</b>: {html.escape(str(val))}</li>" for k, val in head]
    out.append("</ul>")
    for m in missing + ([plot_note] if plot_note else []):
        out.append(f"<p class='missing'>Missing: {html.escape(m)}</p>")
    for s in sections:
        out.append(f"<h2>{html.escape(s.title)}</h2><p class='answer'>{inline_bold(s.answer)}</p>")
        if s.numbers:
            out.append("<ul>" + "".join(f"<li>{html.escape(k)}: {html.escape(str(val))}</li>"
                                        for k, val in s.numbers) + "</ul>")
        if s.table and s.table[1]:
            headers, rows = s.table
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers)
                       + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>"
                                                            for c in row) + "</tr>"
                                           for row in rows) + "</table>")
        if s.plot:
            with open(os.path.join(out_dir, s.plot), "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            out.append(f"<img alt='{html.escape(s.title)}' src='data:image/png;base64,{data}'>")
        out += [f"<p class='note'>{html.escape(n)}</p>" for n in s.notes]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_atomically(path, text):
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("run_dir", help="nmt-train's log.dir (metrics.jsonl, report.json)")
    parser.add_argument("-o", "--output", help="directory for card.md, card.html and the PNGs "
                                               "(default: RUN_DIR)")
    parser.add_argument("--no-plots", action="store_true", help="write the card without plots")
    parser.add_argument("--quiet", action="store_true", help="print only the card's path")
    parser.add_argument("--title", help="the card's title (default: the run directory's name)")
    args = parser.parse_args(argv)
    out_dir = args.output or args.run_dir
    try:
        run = read_run(args.run_dir)
        os.makedirs(out_dir, exist_ok=True)
        plots = Plots(out_dir, not args.no_plots)
        head, sections = build_card(run, plots)
        path = os.path.abspath(args.run_dir)
        name = os.path.basename(path)
        if name in ("log", "logs"):  # log.dir is often <run>/log: name the run
            name = os.path.basename(os.path.dirname(path))
        title = args.title or f"Run card: {name}"
        md = render_markdown(title, head, sections, run.missing, plots.reason)
        page = render_html(title, head, sections, run.missing, plots.reason, out_dir)
        write_atomically(os.path.join(out_dir, "card.md"), md)
        write_atomically(os.path.join(out_dir, "card.html"), page)
    except CardError as error:
        print(f"run_card.py: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"run_card.py: cannot write into {out_dir}: {error}", file=sys.stderr)
        return 1
    if plots.reason and not args.no_plots:
        print(f"run card: {plots.reason}")
    if args.quiet:
        print(f"run card: {os.path.join(out_dir, 'card.md')} (and card.html)")
    else:
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
