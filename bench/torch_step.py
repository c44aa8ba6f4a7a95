#!/usr/bin/env python3
"""The PyTorch peer of bench-step: the same Transformer (engine/model/transformer.cpp's architecture:
embeddings * sqrt(d) + sinusoid, post-norm by default, ReLU FFN, shared embedding tied to the
output projection without bias, dropout 0.1 on embeddings, residual branches, attention
probabilities and inside the FFN), label-smoothed cross-entropy summed over target tokens and
divided by their count, fused Adam (betas 0.9/0.98, eps 1e-9), bf16 autocast, SDPA, eager or
torch.compile. Same fixed batch of random full-length sentences, same timing (CUDA events around
zero_grad + forward + backward + optimizer step, synchronised every step, median after warmup),
same JSON fields as bench-step.

usage: torch_step.py [--model base|big] [--mode eager|compile] [--impl ours|nn] [--precision bf16|fp32]
         [--batch 128] [--src-len 64] [--tgt-len 64] [--vocab 32768] [--warmup 10] [--steps 50]
         [--norm post|pre] [--profile N] [--json out.json]
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # d_model, heads, ffn, layers per side
    "base": (512, 8, 2048, 6),
    "big": (1024, 16, 4096, 6),
    "tiny": (64, 4, 256, 2),
}
PAD, BOS, EOS, FIRST_REGULAR = 0, 2, 3, 4  # data/special_ids.h


def sinusoid(length, d):
    """kernels/embedding.h: sin in dims [0, d/2), cos in [d/2, d)."""
    half = d // 2
    inv_freq = torch.exp(-torch.arange(half, dtype=torch.float64) * math.log(10000.0) / max(half - 1, 1))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, :half] = torch.sin(angles)
    table[:, half:2 * half] = torch.cos(angles)
    return table.float()


class Attention(nn.Module):
    """q/k/v/out projections with bias; self-attention projects q, k, v in one product."""

    def __init__(self, d, heads, dropout, cross):
        super().__init__()
        self.heads, self.dropout, self.cross = heads, dropout, cross
        if cross:
            self.q_proj = nn.Linear(d, d)
            self.kv_proj = nn.Linear(d, 2 * d)
        else:
            self.qkv_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)

    def split(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, memory=None, causal=False):
        if self.cross:
            q = self.q_proj(x)
            k, v = self.kv_proj(memory).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        p = self.dropout if self.training else 0.0
        ctx = F.scaled_dot_product_attention(self.split(q), self.split(k), self.split(v),
                                             dropout_p=p, is_causal=causal)
        return self.out_proj(ctx.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self, d, heads, ffn, dropout, decoder, pre_norm):
        super().__init__()
        self.pre_norm, self.decoder = pre_norm, decoder
        self.self_attn = Attention(d, heads, dropout, cross=False)
        self.cross_attn = Attention(d, heads, dropout, cross=True) if decoder else None
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.norms = nn.ModuleList(nn.LayerNorm(d, eps=1e-6) for _ in range(3 if decoder else 2))
        self.drop = nn.Dropout(dropout)

    def sublayer(self, x, norm, f):
        if self.pre_norm:
            return x + self.drop(f(norm(x)))
        return norm(x + self.drop(f(x)))

    def forward(self, x, memory=None):
        x = self.sublayer(x, self.norms[0], lambda h: self.self_attn(h, causal=self.decoder))
        if self.decoder:
            x = self.sublayer(x, self.norms[1], lambda h: self.cross_attn(h, memory))
        ffn = lambda h: self.fc2(self.drop(F.relu(self.fc1(h))))
        return self.sublayer(x, self.norms[-1], ffn)


class Seq2Seq(nn.Module):
    """Returns the label-smoothed loss summed over target tokens, divided by their count."""

    def __init__(self, vocab, d, heads, ffn, layers, dropout, pre_norm, max_len):
        super().__init__()
        self.d, self.pre_norm = d, pre_norm
        self.embed = nn.Embedding(vocab, d)
        nn.init.normal_(self.embed.weight, std=d ** -0.5)
        self.register_buffer("positions", sinusoid(max_len, d), persistent=False)
        self.encoder = nn.ModuleList(Layer(d, heads, ffn, dropout, False, pre_norm) for _ in range(layers))
        self.decoder = nn.ModuleList(Layer(d, heads, ffn, dropout, True, pre_norm) for _ in range(layers))
        self.enc_norm = nn.LayerNorm(d, eps=1e-6) if pre_norm else nn.Identity()
        self.dec_norm = nn.LayerNorm(d, eps=1e-6) if pre_norm else nn.Identity()
        self.drop = nn.Dropout(dropout)

    def embed_tokens(self, ids):
        return self.drop(self.embed(ids) * math.sqrt(self.d) + self.positions[: ids.shape[1]])

    def forward(self, src, tgt_in, tgt_out, tokens):
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x)
        memory = self.enc_norm(x)
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory)
        logits = F.linear(self.dec_norm(y), self.embed.weight)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=PAD,
                               label_smoothing=0.1, reduction="sum")
        return loss / tokens


class NNTransformerSeq2Seq(Seq2Seq):
    """The same model as PyTorch's own nn.Transformer builds it (the setup a user would pick, faster
    under torch.compile than the hand-written layers above): nn.TransformerEncoder/DecoderLayer with
    SDPA inside, a causal mask flagged as such, the same embeddings, tied output and loss."""

    def __init__(self, vocab, d, heads, ffn, layers, dropout, pre_norm, max_len):
        super().__init__(vocab, d, heads, ffn, 0, dropout, pre_norm, max_len)
        self.transformer = nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=layers,
                                          num_decoder_layers=layers, dim_feedforward=ffn,
                                          dropout=dropout, batch_first=True, norm_first=pre_norm,
                                          layer_norm_eps=1e-6)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(max_len),
                             persistent=False)

    def forward(self, src, tgt_in, tgt_out, tokens):
        length = tgt_in.shape[1]
        y = self.transformer(self.embed_tokens(src), self.embed_tokens(tgt_in),
                             tgt_mask=self.causal[:length, :length], tgt_is_causal=True)
        logits = F.linear(y, self.embed.weight)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=PAD,
                               label_smoothing=0.1, reduction="sum")
        return loss / tokens


def forward_matmul_flops(d, ffn, layers, vocab, batch, src_len, tgt_len):
    """engine/model/flop_count.cpp: the forward pass's matrix products on the padded shapes."""
    src_rows, tgt_rows = batch * src_len, batch * tgt_len
    linear = lambda rows, n_in, n_out: 2 * rows * n_in * n_out
    core = lambda q_len, kv_len: 4 * batch * q_len * kv_len * d
    feed_forward = lambda rows: linear(rows, d, ffn) + linear(rows, ffn, d)
    encoder = 4 * linear(src_rows, d, d) + core(src_len, src_len) + feed_forward(src_rows)
    decoder = (4 * linear(tgt_rows, d, d) + core(tgt_len, tgt_len) + 2 * linear(tgt_rows, d, d) +
               2 * linear(src_rows, d, d) + core(tgt_len, src_len) + feed_forward(tgt_rows))
    return layers * (encoder + decoder) + linear(tgt_rows, d, vocab)


def peak_flops(name, precision):
    """Dense tensor-core peak of the Hopper SXM cards (engine/report/device_peak.cpp), else 0."""
    if any(card in name for card in ("H100 PCIe", "H100 NVL", "H200 NVL")):
        return 0.0
    if "H100" in name or "H200" in name:
        return 989.4e12 if precision != "fp32" else 66.9e12
    return 0.0


def random_batch(args, device):
    """Every sentence full length: src_len source ids; bos + tgt_len-1 ids in, those + eos out."""
    g = torch.Generator().manual_seed(args.seed)
    src = torch.randint(FIRST_REGULAR, args.vocab, (args.batch, args.src_len), generator=g)
    body = torch.randint(FIRST_REGULAR, args.vocab, (args.batch, args.tgt_len - 1), generator=g)
    tgt_in = torch.cat([torch.full((args.batch, 1), BOS), body], dim=1)
    tgt_out = torch.cat([body, torch.full((args.batch, 1), EOS)], dim=1)
    return [t.to(device) for t in (src, tgt_in, tgt_out)]


def sort_key_for_profile():
    """PyTorch renamed cuda_* columns to device_* in 2.4; take whichever this build has."""
    major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return "self_device_time_total" if (major, minor) >= (2, 4) else "self_cuda_time_total"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=SHAPES, default="base")
    ap.add_argument("--mode", choices=["eager", "compile"], default="compile")
    ap.add_argument("--impl", choices=["ours", "nn"], default="ours",
                    help="ours: the hand-written layers (our architecture op for op); nn: "
                         "nn.Transformer's own layers")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--norm", choices=["post", "pre"], default="post")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--src-len", type=int, default=64)
    ap.add_argument("--tgt-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, help="then profile N steps, print the top ops")
    ap.add_argument("--json", help="also write the result as JSON to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_step.py: no CUDA device; skipped")
        return 77

    torch.manual_seed(args.seed)
    d, heads, ffn, layers = SHAPES[args.model]
    model_class = NNTransformerSeq2Seq if args.impl == "nn" else Seq2Seq
    model = model_class(args.vocab, d, heads, ffn, layers, 0.1, args.norm == "pre",
                        max(args.src_len, args.tgt_len)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9,
                                 fused=True)
    step_fn = torch.compile(model) if args.mode == "compile" else model
    src, tgt_in, tgt_out = random_batch(args, "cuda")
    tokens = tgt_out.ne(PAD).sum().item()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def step(forward_backward_done):  # a CUDA event recorded between backward and the optimizer
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = step_fn(src, tgt_in, tgt_out, tokens)
        loss.backward()
        forward_backward_done.record()
        optimizer.step()
        return loss

    step_ms, fb_ms, opt_ms, losses = [], [], [], []
    torch.cuda.reset_peak_memory_stats()
    for i in range(args.warmup + args.steps):
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        loss = step(mid)
        end.record()
        end.synchronize()
        losses.append(loss.item())
        if i >= args.warmup:
            step_ms.append(start.elapsed_time(end))
            fb_ms.append(start.elapsed_time(mid))
            opt_ms.append(mid.elapsed_time(end))

    median = statistics.median(step_ms)
    name = torch.cuda.get_device_name()
    flops = 3 * forward_matmul_flops(d, ffn, layers, args.vocab, args.batch, args.src_len, args.tgt_len)
    peak = peak_flops(name, args.precision)
    config = f"torch{' nn.Transformer' if args.impl == 'nn' else ''} {args.mode} {args.precision} {args.model}"
    if args.batch != 128:
        config += f" {args.batch}x{args.tgt_len}"
    result = {
        "config": config, "impl": f"torch-{args.impl}-{args.mode}", "model": args.model,
        "precision": args.precision, "norm": args.norm, "device": name, "batch": args.batch,
        "src_len": args.src_len, "tgt_len": args.tgt_len, "vocab": args.vocab,
        "params": sum(p.numel() for p in model.parameters()), "warmup": args.warmup,
        "steps": args.steps, "step_ms_median": median, "step_ms_mean": statistics.mean(step_ms),
        "step_ms_min": min(step_ms), "fwd_bwd_ms_median": statistics.median(fb_ms),
        "optimizer_ms_median": statistics.median(opt_ms), "tgt_tokens_per_step": tokens,
        "tgt_tokens_per_s": tokens / (median * 1e-3), "tflops_per_s": flops / (median * 1e-3) / 1e12,
        "mfu": flops / (median * 1e-3) / peak if peak else 0.0,
        "device_mem_mib": torch.cuda.max_memory_reserved() / 2**20, "arena_mib": None,
        "loss_first": losses[0], "loss_last": losses[-1], "skipped_steps": 0,
        "torch": torch.__version__,
    }
    print(f"{config} ({args.norm}-norm, {result['params']} params) on {name}: "
          f"{args.batch} x {args.src_len}/{args.tgt_len} tokens, {args.steps} steps after {args.warmup} warmup\n"
          f"  step ms: median {median:.2f}, mean {result['step_ms_mean']:.2f}, min {min(step_ms):.2f} "
          f"(forward+backward {result['fwd_bwd_ms_median']:.2f}, optimizer {result['optimizer_ms_median']:.2f})\n"
          f"  target tokens/s {result['tgt_tokens_per_s']:.0f}, {result['tflops_per_s']:.1f} TFLOP/s "
          f"(MFU {100 * result['mfu']:.1f}%)\n"
          f"  memory: peak reserved {result['device_mem_mib']:.0f} MiB; loss {losses[0]:.3f} -> {losses[-1]:.3f}",
          flush=True)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(args.json + ".tmp", args.json)

    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile):
                step(torch.cuda.Event())
            torch.cuda.synchronize()
        print(f"top ops by self device time over {args.profile} steps:")
        print(prof.key_averages().table(sort_by=sort_key_for_profile(), row_limit=20, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
