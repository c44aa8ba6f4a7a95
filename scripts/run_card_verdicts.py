"""The judgements of the run card (scripts/run_card.py), as pure functions over numbers: trends with
their uncertainty, and the verdicts on training progress, overfitting, GPU utilisation and the
network. No file access and no plotting here, so test/reporting/test_run_card_verdicts.py can check
every verdict on synthetic curves.

Conventions: steps are optimizer steps; slopes are given per 1,000 steps; an uncertainty is the
half-width of a 95% confidence interval (Student's t with n - 2 degrees of freedom).
"""
import math
from dataclasses import dataclass, field

from lr_schedule import decay_end, learning_rate_at  # noqa: F401 (the run card's names)

# Two-sided 95% quantiles of Student's t by degrees of freedom (larger df: the normal's 1.96).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}


def t95(df):
    """The 95% two-sided t quantile for df degrees of freedom (the next smaller tabulated df)."""
    if df < 1:
        return math.inf
    known = [d for d in sorted(_T95) if d <= df]
    return _T95[known[-1]] if df <= 60 else 1.96


@dataclass
class Trend:
    """A least-squares line through (step, value) points."""
    slope_per_1k: float  # change of the value per 1,000 steps
    ci95_per_1k: float   # half-width of its 95% confidence interval (inf with 2 points)
    n: int
    first_step: int
    last_step: int
    intercept: float     # value at step 0 of the line

    def value_at(self, step):
        return self.intercept + self.slope_per_1k * step / 1000.0

    def change_over_window(self):
        return self.slope_per_1k * (self.last_step - self.first_step) / 1000.0

    def significant(self):
        """True when the 95% interval excludes zero."""
        return abs(self.slope_per_1k) > self.ci95_per_1k

    def text(self, digits=3):
        ci = "±∞" if math.isinf(self.ci95_per_1k) else f"±{self.ci95_per_1k:.{digits}f}"
        return f"{self.slope_per_1k:+.{digits}f} {ci} per 1,000 steps"


def linear_trend(steps, values):
    """The least-squares trend of values against steps, or None for fewer than 2 distinct steps."""
    points = [(float(s), float(v)) for s, v in zip(steps, values)
              if v is not None and math.isfinite(v)]
    n = len(points)
    if n < 2:
        return None
    xs = [s / 1000.0 for s, _ in points]
    ys = [v for _, v in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    if n > 2:
        residual = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
        stderr = math.sqrt(residual / (n - 2) / sxx)
        ci = t95(n - 2) * stderr
    else:
        ci = math.inf
    return Trend(slope, ci, n, int(points[0][0]), int(points[-1][0]), intercept)


def last_window(steps, values, fraction=0.5, minimum=4):
    """The last `fraction` of the points (at least `minimum`, at most all): the recent trend."""
    count = max(minimum, int(math.ceil(len(steps) * fraction)))
    return list(steps[-count:]), list(values[-count:])


def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; None if empty."""
    data = sorted(v for v in values if v is not None and math.isfinite(v))
    if not data:
        return None
    position = (len(data) - 1) * q / 100.0
    low = int(math.floor(position))
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


@dataclass
class Verdict:
    label: str     # a few words: "still improving", "plateaued", ...
    sentence: str  # the answer, one sentence
    numbers: dict = field(default_factory=dict)  # what the sentence rests on


# ---- Is the model fully trained? ----

def progress_verdict(steps, values, name, higher_is_better, min_change):
    """Still improving / plateaued / getting worse / uncertain, from the trend over the last half of
    the evaluations (at least 4 where there are). A trend counts when its 95% interval excludes
    zero and the change it implies over that window is at least `min_change` (in the value's
    units): a significant but negligible drift is a plateau. A flat-looking trend whose interval
    still allows a change of 5 x min_change over the window is uncertain, not a plateau."""
    if len(steps) < 3:
        return Verdict("too few evaluations",
                       f"{len(steps)} evaluation(s) of {name}: at least 3 are needed for a trend.",
                       {"evaluations": len(steps)})
    window_steps, window_values = last_window(steps, values)
    trend = linear_trend(window_steps, window_values)
    if trend is None:
        return Verdict("too few evaluations", f"{name}: no usable values.", {})
    change = trend.change_over_window()
    better = change > 0 if higher_is_better else change < 0
    meaningful = abs(change) >= min_change
    numbers = {"trend": trend, "window": (trend.first_step, trend.last_step),
               "change_over_window": change}
    where = f"over steps {trend.first_step:,}–{trend.last_step:,} ({trend.n} evaluations)"
    if trend.significant() and meaningful and better:
        return Verdict("still improving",
                       f"{name} is still improving: {trend.text()} {where}.", numbers)
    if trend.significant() and meaningful:
        return Verdict("getting worse",
                       f"{name} is getting worse: {trend.text()} {where}.", numbers)
    span = (trend.last_step - trend.first_step) / 1000.0
    if not trend.significant() and trend.ci95_per_1k * span > 5 * min_change:
        return Verdict("uncertain", f"{name}: cannot tell, {trend.text()} {where} is too uncertain "
                       f"(more evaluations, or a longer run, would tell).", numbers)
    why = ("the trend is within its uncertainty" if not trend.significant()
           else f"the change over the window ({change:+.3g}) is below {min_change:g}")
    return Verdict("plateaued", f"{name} has plateaued: {trend.text()} {where}; {why}.", numbers)


def fully_trained_verdict(score_steps, scores, score_name, loss_steps, losses):
    """The combined verdict from the dev score (BLEU, higher is better) and the dev loss."""
    score = progress_verdict(score_steps, scores, score_name, True, min_change=0.3)
    mean_loss = sum(losses) / len(losses) if losses else 1.0
    loss = progress_verdict(loss_steps, losses, "dev loss", False,
                            min_change=max(0.01 * abs(mean_loss), 1e-6))
    if "still improving" in (score.label, loss.label):
        names = [x.sentence.split(" is ")[0] for x in (score, loss) if x.label == "still improving"]
        verb = "are" if len(names) > 1 else "is"
        answer = f"No: {' and '.join(names)} {verb} still improving; more steps should help."
        label = "still improving"
    elif score.label == "too few evaluations" and loss.label == "too few evaluations":
        answer = "Cannot tell: fewer than 3 evaluations."
        label = "too few evaluations"
    elif score.label == "getting worse":
        answer = ("Past its best: the dev score is falling; use the best checkpoint rather than "
                  "training longer.")
        label = "getting worse"
    elif "uncertain" in (score.label, loss.label) or score.label == "too few evaluations":
        answer = ("Cannot tell yet: the recent trends are within their uncertainty (too few or "
                  "too noisy evaluations).")
        label = "uncertain"
    else:
        answer = "Yes, for this recipe: the dev score has plateaued."
        label = "plateaued"
        if loss.label == "still improving":
            answer += " (The dev loss still falls slowly; the score no longer follows it.)"
        if loss.label == "getting worse":
            answer += " (The dev loss is rising again: see overfitting.)"
    return Verdict(label, answer, {"score": score, "loss": loss})


# ---- Overfitting ----

def value_at_or_before(steps, values, step):
    """The last value logged at or before `step` (train losses are logged every log interval)."""
    best = None
    for s, v in zip(steps, values):
        if s <= step and v is not None and math.isfinite(v):
            best = v
    return best


def overfitting_verdict(train_steps, train_losses, dev_steps, dev_losses):
    """Overfitting / starting to overfit / not overfitting, from the dev loss since its minimum,
    its recent trend, and the trend of the gap dev - train loss at the evaluations. A dev loss at
    its lowest at the last evaluation is never overfitting, however the gap moves."""
    dev = [(s, v) for s, v in zip(dev_steps, dev_losses) if v is not None and math.isfinite(v)]
    if len(dev) < 3:
        return Verdict("too few evaluations",
                       f"{len(dev)} dev loss value(s): at least 3 are needed.", {})
    best_step, best_loss = min(dev, key=lambda p: p[1])
    last_step, last_loss = dev[-1]
    gaps = []
    for s, v in dev:
        t = value_at_or_before(train_steps, train_losses, s)
        if t is not None:
            gaps.append((s, v - t))
    gap_trend = linear_trend(*last_window([g[0] for g in gaps], [g[1] for g in gaps])) \
        if len(gaps) >= 3 else None
    window = last_window([p[0] for p in dev], [p[1] for p in dev])
    dev_trend = linear_trend(*window)
    train_window = [(s, v) for s, v in zip(train_steps, train_losses)
                    if window[0][0] <= s <= window[0][-1] and v is not None and math.isfinite(v)]
    train_trend = linear_trend([p[0] for p in train_window], [p[1] for p in train_window])
    rise = last_loss - best_loss
    tolerance = 0.01 * abs(best_loss)
    numbers = {"best_step": best_step, "best_loss": best_loss, "last_loss": last_loss,
               "rise_since_best": rise, "gap_last": gaps[-1][1] if gaps else None,
               "gap_trend": gap_trend, "dev_trend": dev_trend, "train_trend": train_trend,
               "gaps": gaps}
    dev_falling = dev_trend is not None and dev_trend.significant() and dev_trend.slope_per_1k < 0
    dev_rising = dev_trend is not None and dev_trend.significant() and dev_trend.slope_per_1k > 0
    train_falling = train_trend is not None and train_trend.slope_per_1k < 0
    if best_step < last_step and rise > tolerance and not dev_falling:
        return Verdict(
            "overfitting",
            f"Yes: the dev loss was lowest at step {best_step:,} ({best_loss:.4f}) and has risen "
            f"by {rise:.4f} since" + (", while the train loss kept falling." if train_falling
                                     else "."), numbers)
    gap_widening = (gap_trend is not None and gap_trend.significant()
                    and gap_trend.slope_per_1k > 0
                    and gap_trend.change_over_window() > tolerance)
    if (dev_rising or gap_widening) and not dev_falling and best_step < last_step:
        return Verdict(
            "starting to overfit",
            f"Starting to: the dev loss no longer falls while the gap to the train loss widens "
            f"({gap_trend.text(4) if gap_trend else 'n/a'}); lowest dev loss at step "
            f"{best_step:,}.", numbers)
    return Verdict(
        "not overfitting",
        f"No: the dev loss is {'still falling' if dev_falling else 'not rising'} and at or near its "
        f"minimum ({best_loss:.4f} at step {best_step:,}); the gap to the train loss is not "
        f"widening.", numbers)


# ---- GPU utilisation ----

def step_split(step_ms, fwd_bwd_ms, optimizer_ms, exposed_comm_ms, data_ms, device):
    """Milliseconds per step in compute, exposed communication, data and host work. The trainer
    times forward+backward (with the batch reading, on the host clock on the CPU and with CUDA
    events on the GPU) and the optimizer; the exposed exchange and the batch reading on their own;
    host work is what the step's wall time holds beyond those."""
    compute = fwd_bwd_ms + optimizer_ms
    if device == "cpu":
        compute -= data_ms  # the host clock's fwd+bwd includes taking the batches
    compute = max(0.0, compute)
    host = max(0.0, step_ms - compute - exposed_comm_ms - data_ms)
    return {"compute": compute, "exposed communication": exposed_comm_ms, "data": data_ms,
            "host and other": host}


def gpu_verdict(gpus, split):
    """gpus: [{"name", "mean", "p10"}] (NVML percent; None unknown); split: step_split(...).
    Fully utilised: every GPU's mean >= 90% and 10th percentile >= 75%."""
    total = sum(split.values()) or 1.0
    fractions = {k: v / total for k, v in split.items()}
    idle = max((k for k in fractions if k != "compute"), key=lambda k: fractions[k])
    numbers = {"fractions": fractions, "largest_other": idle}
    known = [g for g in gpus if g.get("mean") is not None]
    if not gpus:
        return Verdict("no GPU", f"No GPU in this run (CPU); the step is "
                       f"{100 * fractions['compute']:.0f}% compute, "
                       f"{100 * fractions[idle]:.0f}% {idle}.", numbers)
    if not known:
        return Verdict("unknown", "GPU utilisation was not measured (NVML unavailable); the step "
                       f"is {100 * fractions['compute']:.0f}% compute.", numbers)
    low_mean = min(g["mean"] for g in known)
    low_p10 = min(g["p10"] if g.get("p10") is not None else g["mean"] for g in known)
    numbers.update({"lowest_mean": low_mean, "lowest_p10": low_p10})
    where = (f"the step is {100 * fractions['compute']:.0f}% compute; the largest other share is "
             f"{idle} ({100 * fractions[idle]:.0f}%)")
    if low_mean >= 90 and low_p10 >= 75:
        return Verdict("fully utilised",
                       f"Yes: every GPU ran kernels ≥ {low_mean:.0f}% of the time on average "
                       f"(10th percentile ≥ {low_p10:.0f}%); {where}.", numbers)
    if low_mean >= 70:
        return Verdict("mostly utilised",
                       f"Mostly: the least busy GPU ran kernels {low_mean:.0f}% of the time "
                       f"(10th percentile {low_p10:.0f}%); {where}.", numbers)
    return Verdict("under-utilised",
                   f"No: the least busy GPU ran kernels only {low_mean:.0f}% of the time "
                   f"(10th percentile {low_p10:.0f}%); {where}.", numbers)


# ---- The network ----

def faster_network_saving_ms(comm_ms, exposed_ms, speedup):
    """Step milliseconds saved if the exchange ran `speedup` times faster (inf: instantly), with
    the part backward hides (comm - exposed) unchanged."""
    if exposed_ms <= 0:
        return 0.0
    hidden = max(0.0, comm_ms - exposed_ms)
    faster = 0.0 if math.isinf(speedup) else comm_ms / speedup
    return exposed_ms - max(0.0, faster - hidden)


def bus_bandwidth_gb_per_s(bytes_per_step, comm_ms, ranks):
    """nccl-tests' bus bandwidth of the exchange: bytes/time * 2(n-1)/n."""
    if comm_ms <= 0 or ranks < 2:
        return None
    return bytes_per_step / (comm_ms / 1000.0) / 1e9 * 2.0 * (ranks - 1) / ranks


def network_verdict(p):
    """p: {"world_size", "hosts", "step_ms", "comm_ms", "exposed_comm_ms", "bytes_per_step",
    "probe_busbw_gb_per_s" (None), "nic_peak_fraction" (None: the busiest node's busiest interval
    of max(rx, tx) / link capacity), "steps"}. Network-bound: the exposed exchange is at least 15%
    of the step; partly: at least 5%."""
    ranks = p.get("world_size", 1)
    if ranks < 2:
        return Verdict("single process", "No network: a single process exchanges nothing.", {})
    step_ms, comm_ms, exposed = p["step_ms"], p["comm_ms"], p["exposed_comm_ms"]
    fraction = exposed / step_ms if step_ms > 0 else 0.0
    busbw = bus_bandwidth_gb_per_s(p["bytes_per_step"], comm_ms, ranks)
    save2 = faster_network_saving_ms(comm_ms, exposed, 2.0)
    save_all = faster_network_saving_ms(comm_ms, exposed, math.inf)
    numbers = {"exposed_fraction": fraction, "busbw_gb_per_s": busbw,
               "saving_2x_ms": save2, "saving_infinite_ms": save_all,
               "saving_2x_run_s": save2 * p.get("steps", 0) / 1000.0,
               "saving_infinite_run_s": save_all * p.get("steps", 0) / 1000.0}
    probe = p.get("probe_busbw_gb_per_s")
    if busbw is not None and probe:
        numbers["fraction_of_probe"] = busbw / probe
    path = ("over the network interfaces between nodes" if p.get("hosts", 1) > 1 else
            "inside one node (NVLink/PCIe or shared memory, not the network interface)")
    saving = (f"a 2× faster exchange would save {save2:.1f} ms per step "
              f"({100 * save2 / step_ms:.0f}%), an infinitely fast one {save_all:.1f} ms")
    nic = p.get("nic_peak_fraction")
    nic_text = (f"; the busiest interface reached {100 * nic:.0f}% of its link speed"
                if nic is not None else "")
    if fraction >= 0.15:
        label, answer = "network-bound", "Yes"
    elif fraction >= 0.05:
        label, answer = "partly network-bound", "Partly"
    else:
        label, answer = "not network-bound", "No"
    return Verdict(label, f"{answer}: the exchange {path} left {exposed:.1f} ms of each "
                   f"{step_ms:.1f} ms step exposed ({100 * fraction:.0f}%); {saving}{nic_text}.",
                   numbers)


# ---- The learning rate ----

def describe_schedule(schedule, d_model, max_steps):
    """(sentence, formula, peak_lr, peak_step): the schedule in words, from the config."""
    policy = schedule.get("policy", "constant")
    lr = schedule["learning_rate"]
    warmup = max(int(schedule.get("warmup_steps", 1)), 1)
    end = learning_rate_at(schedule, d_model, max_steps, max_steps)
    if policy == "constant":
        return (f"Constant at {lr:.3g} for all {max_steps:,} steps.", "lr = learning_rate",
                lr, 1)
    peak_step = min(warmup, max_steps)
    peak = learning_rate_at(schedule, d_model, peak_step, max_steps)
    why = ("Warmup keeps the first updates small while Adam's second-moment estimates are still "
           "poor (large early steps destabilise a Transformer); the 1/√step decay then shrinks the "
           "steps as the loss surface flattens, as in Vaswani et al. (2017).")
    if policy == "inverse_sqrt":
        init = schedule.get("warmup_init_lr", 0.0)
        formula = (f"lr(step) = {init:g} + ({lr:g} − {init:g})·step/{warmup} for step < {warmup}, "
                   f"then {lr:g}·√({warmup}/step)")
        sentence = (f"Inverse square root (fairseq's): linear warmup from {init:g} to the peak "
                    f"{peak:.3g} at step {peak_step:,}, then decay ∝ 1/√step (half the peak at "
                    f"step {4 * warmup:,}), ending at {end:.3g} at step {max_steps:,}. {why}")
        return sentence, formula, peak, peak_step
    if policy in ("cosine", "linear"):
        init = schedule.get("warmup_init_lr", 0.0)
        final = schedule.get("final_lr", 0.0)
        stop = decay_end(schedule, max_steps)
        shape = ("half a cosine" if policy == "cosine" else "a straight line")
        formula = (f"lr(step) = {init:g} + ({lr:g} − {init:g})·step/{warmup} for step < {warmup}, "
                   + (f"then {final:g} + ({lr:g} − {final:g})·(1 + cos(π·t))/2"
                      if policy == "cosine" else f"then {lr:g} + ({final:g} − {lr:g})·t")
                   + f", t = (step − {warmup})/({stop} − {warmup})")
        sentence = (f"Warmup to the peak {peak:.3g} at step {peak_step:,}, then down to {final:g} "
                    f"at step {stop:,} along {shape} (fairseq's {policy} schedule), ending at "
                    f"{end:.3g} at step {max_steps:,}. The decay to the planned end takes the "
                    f"noise of large steps out of the last part of the run, which is where a short "
                    f"run gains most of its BLEU.")
        return sentence, formula, peak, peak_step
    formula = (f"lr(step) = {lr:g}·{d_model}^−0.5·min(step·{warmup}^−1.5, step^−0.5)")
    sentence = (f"OpenSeq2Seq's transformer_policy (the paper's): linear warmup to the peak "
                f"{peak:.3g} at step {peak_step:,} ({lr:g}/√(d_model·warmup) with d_model "
                f"{d_model}), then decay ∝ 1/√step, ending at {end:.3g} at step {max_steps:,}. "
                f"{why}")
    return sentence, formula, peak, peak_step
