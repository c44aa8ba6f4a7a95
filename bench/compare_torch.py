#!/usr/bin/env python3
"""Times in PyTorch the ops that bench-kernels times, measured the same way (CUDA events, the L2
cache flushed by a 256 MB write before every run, median of N runs), and prints the same table.

Usage: python3 bench/compare_torch.py [--runs N] [--only attention-fused]   (needs a GPU and PyTorch)
"""
import argparse
import math
import statistics
import sys

import torch
import torch.nn.functional as F


class Timer:
    def __init__(self, runs, warmups=3):
        self.runs = runs
        self.warmups = warmups
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def median_ms(self, fn):
        for _ in range(self.warmups):
            fn()
        times = []
        for i in range(self.runs):
            self.flush.fill_(i & 0xFF)
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return statistics.median(times)


def report(op, shape, ms, rate, unit):
    print(f"{op:<26} {shape:<24} {ms:10.4f} ms {rate:10.1f} {unit}", flush=True)


def gb_per_s(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def tflop_per_s(flops, ms):
    return flops / (ms * 1e-3) / 1e12


def bench_layernorm(timer):
    rows, d = 16384, 512
    bf16 = torch.bfloat16
    x = (torch.rand(rows, d, device="cuda") * 4 - 2).to(bf16).requires_grad_()
    w = (torch.rand(d, device="cuda") + 0.5).to(bf16).requires_grad_()
    b = (torch.rand(d, device="cuda") - 0.5).to(bf16).requires_grad_()
    dy = (torch.rand(rows, d, device="cuda") * 2 - 1).to(bf16)
    n = rows * d
    with torch.no_grad():
        ms = timer.median_ms(lambda: F.layer_norm(x, (d,), w, b, 1e-5))
    report("layernorm_forward bf16", "16384x512", ms, gb_per_s(2 * n * 2 + 2 * d * 2 + rows * 8, ms), "GB/s")
    y = F.layer_norm(x, (d,), w, b, 1e-5)
    ms = timer.median_ms(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
    report("layernorm_backward bf16", "16384x512", ms, gb_per_s(3 * n * 2 + d * 2 + rows * 8 + 4 * d * 4, ms), "GB/s")


def bench_cross_entropy(timer):
    rows, vocab = 8192, 32768
    logits = (torch.rand(rows, vocab, device="cuda") * 16 - 8).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), device="cuda")

    def step():
        loss = F.cross_entropy(logits, targets, label_smoothing=0.1, reduction="sum")
        (grad,) = torch.autograd.grad(loss, logits)
        return loss.item()  # the host sync our op does to return its sums

    ms = timer.median_ms(step)
    report("cross_entropy fwd+bwd bf16", "8192x32768", ms, gb_per_s(2 * rows * vocab * 2, ms), "GB/s")


def bench_adam(timer):
    n = 61_000_000
    p = torch.nn.Parameter((torch.rand(n, device="cuda") - 0.5) * 0.2)
    p.grad = (torch.rand(n, device="cuda") - 0.5) * 0.02
    opt = torch.optim.Adam([p], lr=1e-3, fused=True)
    ms = timer.median_ms(opt.step)
    report("adam_update f32 (fused)", "61M params", ms, gb_per_s(28 * n, ms), "GB/s")
    ms = timer.median_ms(lambda: torch.linalg.vector_norm(p.grad).square().item())
    report("sum_of_squares f32", "61M", ms, gb_per_s(4 * n, ms), "GB/s")


def bench_linear(timer, rows, inp, out, backward):
    x = (torch.rand(rows, inp, device="cuda") * 2 - 1).to(torch.bfloat16).requires_grad_()
    w = ((torch.rand(out, inp, device="cuda") - 0.5) * 0.1).to(torch.bfloat16).requires_grad_()
    shape = f"{rows}x{out}x{inp}"
    flops = 2 * rows * inp * out
    with torch.no_grad():
        ms = timer.median_ms(lambda: F.linear(x, w))
    report("linear_forward bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s")
    if not backward:
        return
    y = F.linear(x, w)
    dy = torch.rand_like(y)
    ms = timer.median_ms(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True))
    report("linear_backward bf16", shape, ms, tflop_per_s(2 * flops, ms), "TFLOP/s")


def bench_attention(timer, causal):
    b, h, t, dh = 128, 8, 64, 64
    q, k, v = ((torch.rand(b, h, t, dh, device="cuda") * 2 - 1).to(torch.bfloat16).requires_grad_()
               for _ in range(3))
    flops = 4 * b * h * t * t * dh
    name = "attention causal" if causal else "attention"
    with torch.no_grad():
        ms = timer.median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    report(name + " fwd bf16", "128x8x64x64 d64", ms, tflop_per_s(flops, ms), "TFLOP/s")
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    d_out = torch.rand_like(out)
    ms = timer.median_ms(lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True))
    report(name + " bwd bf16", "128x8x64x64 d64", ms, tflop_per_s(2 * flops, ms), "TFLOP/s")


SDPA_BACKENDS = ("flash", "cudnn", "efficient")


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]


def bench_attention_fused(timer, b, t, dh, causal):
    """attention-fused: PyTorch SDPA with each fused backend forced in turn (flash, cuDNN,
    memory-efficient), one row each, then a row named like bench-kernels' (attn-fused ...) with the
    best backend's time, and a line naming that backend. FLOPs as bench-kernels counts them."""
    from torch.nn.attention import sdpa_kernel
    h = 8
    q, k, v = ((torch.rand(b, h, t, dh, device="cuda") * 2 - 1).to(torch.bfloat16).requires_grad_()
               for _ in range(3))
    d_out = (torch.rand(b, h, t, dh, device="cuda") * 2 - 1).to(torch.bfloat16)
    flops = 4 * b * h * t * t * dh
    name = "attn-fused causal" if causal else "attn-fused"
    shape = f"{b}x{h}x{t}x{t} d{dh}"
    best = {}
    for backend in SDPA_BACKENDS:
        try:
            with sdpa_kernel(sdpa_backend(backend)):
                with torch.no_grad():
                    fwd = timer.median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                bwd = timer.median_ms(lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True))
        except RuntimeError as e:  # backend not available for this shape / build
            print(f"sdpa-{backend} {shape}: unavailable ({str(e).splitlines()[0][:80]})", flush=True)
            continue
        label = f"sdpa {backend[:5]}" + (" causal" if causal else "")
        report(label + " fwd bf16", shape, fwd, tflop_per_s(flops, fwd), "TFLOP/s")
        report(label + " bwd bf16", shape, bwd, tflop_per_s(2 * flops, bwd), "TFLOP/s")
        for kind, ms in (("fwd", fwd), ("bwd", bwd)):
            if kind not in best or ms < best[kind][0]:
                best[kind] = (ms, backend)
    for kind in ("fwd", "bwd"):
        if kind in best:
            ms, backend = best[kind]
            rate = tflop_per_s(flops if kind == "fwd" else 2 * flops, ms)
            report(f"{name} {kind} bf16", shape, ms, rate, "TFLOP/s")
            print(f"  best SDPA backend for {name} {kind} {shape}: {backend}", flush=True)


def bench_attention_fused_section(timer):
    for causal in (False, True):
        bench_attention_fused(timer, 128, 64, 64, causal)
    for causal in (False, True):
        bench_attention_fused(timer, 32, 512, 64, causal)
    bench_attention_fused(timer, 32, 512, 128, False)


def bench_embedding_and_dropout(timer):
    rows, d, vocab, seq = 16384, 512, 32768, 64
    ids = torch.randint(0, vocab, (rows // seq, seq), device="cuda")
    table = ((torch.rand(vocab, d, device="cuda") - 0.5) * 0.2).to(torch.bfloat16).requires_grad_()
    pos = torch.arange(seq, device="cuda", dtype=torch.float32)[:, None]
    inv = torch.exp(-torch.arange(d // 2, device="cuda") * math.log(10000.0) / (d // 2 - 1))
    pe = torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], dim=1).to(torch.bfloat16)
    n = rows * d
    with torch.no_grad():
        ms = timer.median_ms(lambda: F.embedding(ids, table, padding_idx=1) * 22.6 + pe)
    report("embedding_forward bf16", "16384x512", ms, gb_per_s(2 * n * 2, ms), "GB/s")
    out = F.embedding(ids, table, padding_idx=1) * 22.6 + pe
    d_out = torch.rand_like(out)
    ms = timer.median_ms(lambda: torch.autograd.grad(out, (table,), d_out, retain_graph=True))
    report("embedding_backward bf16", "16384x512", ms, gb_per_s(n * 2 + 2 * n * 4, ms), "GB/s")
    x = out.detach().reshape(rows, d).contiguous()
    with torch.no_grad():
        ms = timer.median_ms(lambda: F.dropout(x, 0.1, training=True))
        report("dropout_forward bf16", "16384x512", ms, gb_per_s(2 * n * 2, ms), "GB/s")
        y = torch.empty_like(x)
        ms = timer.median_ms(lambda: torch.add(x, x, out=y))
        report("residual_add bf16", "16384x512", ms, gb_per_s(3 * n * 2, ms), "GB/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", choices=["attention-fused"], help="run one section only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("compare_torch: no CUDA device", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    print(f"PyTorch {torch.__version__} on {props.name} ({props.multi_processor_count} SMs), "
          f"median of {args.runs} runs, L2 flushed", flush=True)
    timer = Timer(args.runs)
    if args.only == "attention-fused":
        bench_attention_fused_section(timer)
        return 0
    bench_layernorm(timer)
    bench_cross_entropy(timer)
    bench_adam(timer)
    bench_linear(timer, 8192, 512, 512, True)
    bench_linear(timer, 8192, 512, 32768, False)
    bench_linear(timer, 8192, 512, 2048, True)
    bench_attention(timer, False)
    bench_attention(timer, True)
    bench_embedding_and_dropout(timer)
    bench_attention_fused_section(timer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
