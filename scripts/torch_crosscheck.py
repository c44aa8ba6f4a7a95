#!/usr/bin/env python3
"""Cross-checks the engine against an independent PyTorch implementation of the same Transformer:
loads a checkpoint (model.safetensors + state.json's config), runs nmt-score on a batch of
sentence pairs (the engine's summed loss with label smoothing 0 and the logits after each full
target), computes the same in PyTorch (float64 by default) and compares.

usage: torch_crosscheck.py --checkpoint runs/x/ckpt/ckpt-800 [--score build/apps/nmt-score/nmt-score]
         (--src FILE --tgt FILE [--ids] | --random-pairs N) [--device cpu|cuda] [--tolerance 1e-3]

The architecture mirrors engine/model/transformer.cpp: embeddings table[id] * sqrt(d_model) plus the
sinusoid of kernels/embedding.h (sin in the first half of the dimensions, cos in the second,
inv_freq_i = exp(-i ln(10000) / max(d/2 - 1, 1))); post-norm LN(x + f(x)) or pre-norm
x + f(LN(x)) with final encoder/decoder norms; attention with q/k/v/out projections and
1/sqrt(head_dim) scaling; ReLU feed-forward; the output projection without bias, tied to the
shared embedding when model.shared_embeddings. Each sentence is run unpadded here (the engine pads
the batch), so padding masks are checked too. Exit codes: 0 within tolerance; 1 above it or an
error; 2 PyTorch missing.
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_crosscheck.py: PyTorch is not installed for python3 (pip install torch)",
          file=sys.stderr)
    sys.exit(2)

BOS, EOS, FIRST_REGULAR = 2, 3, 4  # data/special_ids.h


def load_safetensors(path, dtype):
    """name -> tensor; the shared embedding's aliases (__metadata__.aliases) resolved."""
    with open(path, "rb") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
        data = f.read()
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise SystemExit(f"torch_crosscheck.py: {path}: {name} is {info['dtype']}, not F32")
        begin, end = info["data_offsets"]
        values = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        tensors[name] = values.reshape(info["shape"]).to(dtype)
    for alias, stored in json.loads(metadata.get("aliases", "{}")).items():
        tensors[alias] = tensors[stored]
    return tensors


class Transformer:
    def __init__(self, weights, model_config):
        self.w = weights
        self.d = model_config["d_model"]
        self.heads = model_config["num_heads"]
        self.pre_norm = model_config["norm"] == "pre"
        self.eps = model_config["layernorm_eps"]
        self.encoder_layers = model_config["encoder_layers"]
        self.decoder_layers = model_config["decoder_layers"]
        shared = model_config["shared_embeddings"]
        self.src_table = weights["encoder.embed_tokens.weight"]
        self.tgt_table = self.src_table if shared else weights["decoder.embed_tokens.weight"]
        self.out_proj = self.tgt_table if shared else weights["decoder.output_projection.weight"]

    def linear(self, x, name, bias=True):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"] if bias else None)

    def norm(self, x, name):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def embed(self, ids, table):
        half = self.d // 2
        i = torch.arange(half, dtype=torch.float64)
        inv_freq = torch.exp(-i * math.log(10000.0) / max(half - 1, 1))
        angle = torch.arange(len(ids), dtype=torch.float64)[:, None] * inv_freq[None, :]
        position = torch.zeros(len(ids), self.d, dtype=torch.float64)
        position[:, :half] = torch.sin(angle)
        position[:, half:2 * half] = torch.cos(angle)
        return table[torch.tensor(ids)] * math.sqrt(self.d) + position.to(table.dtype)

    def attention(self, name, xq, xkv, causal):
        head_dim = self.d // self.heads
        split = lambda x: x.reshape(x.shape[0], self.heads, head_dim).transpose(0, 1)
        q = split(self.linear(xq, name + ".q_proj"))
        k = split(self.linear(xkv, name + ".k_proj"))
        v = split(self.linear(xkv, name + ".v_proj"))
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)  # [heads, q_len, kv_len]
        if causal:
            future = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        context = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(xq.shape[0], self.d)
        return self.linear(context, name + ".out_proj")

    def sublayer(self, x, norm_name, f):
        if self.pre_norm:
            return x + f(self.norm(x, norm_name))
        return self.norm(x + f(x), norm_name)

    def ffn(self, prefix, x):
        return self.linear(torch.relu(self.linear(x, prefix + ".fc1")), prefix + ".fc2")

    def logits(self, src, tgt_in):
        """[len(tgt_in), vocab] logits of every decoder position of one unpadded sentence pair."""
        x = self.embed(src, self.src_table)
        for i in range(self.encoder_layers):
            p = f"encoder.layers.{i}"
            x = self.sublayer(x, p + ".self_attn_layer_norm",
                              lambda h: self.attention(p + ".self_attn", h, h, False))
            x = self.sublayer(x, p + ".final_layer_norm", lambda h: self.ffn(p, h))
        if self.pre_norm:
            x = self.norm(x, "encoder.layer_norm")
        y = self.embed(tgt_in, self.tgt_table)
        for i in range(self.decoder_layers):
            p = f"decoder.layers.{i}"
            y = self.sublayer(y, p + ".self_attn_layer_norm",
                              lambda h: self.attention(p + ".self_attn", h, h, True))
            y = self.sublayer(y, p + ".encoder_attn_layer_norm",
                              lambda h: self.attention(p + ".encoder_attn", h, x, False))
            y = self.sublayer(y, p + ".final_layer_norm", lambda h: self.ffn(p, h))
        if self.pre_norm:
            y = self.norm(y, "decoder.layer_norm")
        return y @ self.out_proj.T


def write_random_pairs(count, vocab, max_positions, directory):
    rng = random.Random(1)
    paths = [os.path.join(directory, name) for name in ("src.ids", "tgt.ids")]
    with open(paths[0], "w") as src, open(paths[1], "w") as tgt:
        for _ in range(count):
            for f in (src, tgt):
                length = rng.randint(1, min(12, max_positions - 1))
                f.write(" ".join(str(rng.randrange(FIRST_REGULAR, vocab)) for _ in range(length)))
                f.write("\n")
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--checkpoint", required=True, help="a ckpt-<step> directory")
    parser.add_argument("--score", default="build/apps/nmt-score/nmt-score", help="nmt-score binary")
    parser.add_argument("--src", help="source lines (text, or ids with --ids)")
    parser.add_argument("--tgt", help="target lines")
    parser.add_argument("--ids", action="store_true", help="lines are space-separated token ids")
    parser.add_argument("--random-pairs", type=int, help="score N random id pairs instead")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="nmt-score's device")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="PyTorch precision (float64: an exact reference)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="relative loss difference and logit difference / max(1, max |logit|)")
    parser.add_argument("--keep", help="also write nmt-score's JSON here")
    args = parser.parse_args()
    with open(os.path.join(args.checkpoint, "state.json")) as f:
        model_config = json.load(f)["config"]["model"]
    dtype = getattr(torch, args.dtype)
    weights = load_safetensors(os.path.join(args.checkpoint, "model.safetensors"), dtype)
    vocab = weights["encoder.embed_tokens.weight"].shape[0]

    with tempfile.TemporaryDirectory() as tmp:
        ids = args.ids
        if args.random_pairs:
            src, tgt = write_random_pairs(args.random_pairs, vocab, model_config["max_positions"], tmp)
            ids = True
        elif args.src and args.tgt:
            src, tgt = args.src, args.tgt
        else:
            parser.error("pass --src and --tgt, or --random-pairs N")
        out = args.keep or os.path.join(tmp, "score.json")
        command = [args.score, "--checkpoint", args.checkpoint, "--src", src, "--tgt", tgt,
                   "--out", out] + (["--ids"] if ids else []) + (
                       ["--device", args.device] if args.device else [])
        if subprocess.run(command).returncode != 0:
            raise SystemExit("torch_crosscheck.py: nmt-score failed: " + " ".join(command))
        with open(out) as f:
            ours = json.load(f)

    model = Transformer(weights, model_config)
    loss, tokens, max_logit_diff, max_logit = 0.0, 0, 0.0, 0.0
    with torch.no_grad():
        for src_ids, tgt_ids, our_last in zip(ours["src_ids"], ours["tgt_ids"], ours["last_logits"]):
            logits = model.logits(src_ids, [BOS] + tgt_ids)
            targets = torch.tensor(tgt_ids + [EOS])
            loss += F.cross_entropy(logits.double(), targets, reduction="sum").item()
            tokens += len(targets)
            last = logits[-1].double()
            max_logit_diff = max(max_logit_diff,
                                 (last - torch.tensor(our_last, dtype=torch.float64)).abs().max().item())
            max_logit = max(max_logit, last.abs().max().item())
    loss_diff = abs(ours["loss"] - loss) / max(abs(loss), 1e-30)
    logit_bound = args.tolerance * max(1.0, max_logit)
    ok = tokens == ours["tokens"] and loss_diff <= args.tolerance and max_logit_diff <= logit_bound
    print(f"torch_crosscheck: {ours['sentences']} sentences, {tokens} target tokens, engine on "
          f"{ours['device']}, PyTorch {args.dtype}\n"
          f"  loss: engine {ours['loss']:.8g}, PyTorch {loss:.8g}, relative difference "
          f"{loss_diff:.3g} (tolerance {args.tolerance:g})\n"
          f"  last-position logits: max abs difference {max_logit_diff:.3g} (max |logit| "
          f"{max_logit:.3g}, bound {logit_bound:.3g})\n"
          f"  {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
