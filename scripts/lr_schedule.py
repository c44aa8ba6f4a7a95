"""The learning-rate schedules of engine/train/lr_schedule.cpp in Python, for the two scripts that
need them: the run card (scripts/run_card.py, which plots and judges the schedule) and the PyTorch
twin (bench/torch_nmt_train.py, which trains with it). One copy, so the two cannot drift apart.
"""
import math


def decay_end(schedule, max_steps):
    """Where cosine and linear reach final_lr: decay_steps, else the run's max_steps."""
    return schedule.get("decay_steps") or max_steps


def learning_rate_at(schedule, d_model, step, max_steps=None):
    """engine/train/lr_schedule.cpp, step 1-based (max_steps: the run's, for cosine and linear
    without decay_steps)."""
    s = float(max(step, 1))
    warmup = float(max(schedule.get("warmup_steps", 1), 1))
    lr = schedule["learning_rate"]
    policy = schedule.get("policy", "constant")
    if policy == "transformer_policy":
        return lr / math.sqrt(d_model) * min(s * warmup ** -1.5, 1.0 / math.sqrt(s))
    if policy == "inverse_sqrt":
        if s < warmup:
            init = schedule.get("warmup_init_lr", 0.0)
            return init + (lr - init) * s / warmup
        return lr * math.sqrt(warmup / s)
    if policy in ("cosine", "linear"):
        end = decay_end(schedule, max_steps)
        warmup_steps = schedule.get("warmup_steps", 0)
        if not end or end <= warmup_steps:
            raise ValueError(f"lr_schedule.policy {policy}: the decay ends at step {end}, "
                             f"not after the warmup's {warmup_steps}")
        if s < warmup and warmup_steps > 0:
            init = schedule.get("warmup_init_lr", 0.0)
            return init + (lr - init) * s / warmup
        t = min(1.0, (s - warmup_steps) / (end - warmup_steps))
        final = schedule.get("final_lr", 0.0)
        if policy == "linear":
            return lr + (final - lr) * t
        return final + (lr - final) * 0.5 * (1 + math.cos(math.pi * t))
    if policy == "constant":
        return lr
    raise ValueError(f"lr_schedule.policy {policy}: unknown")
