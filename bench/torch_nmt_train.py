#!/usr/bin/env python3
"""The PyTorch training twin of nmt-train, for time-to-BLEU comparisons (bench/time-to-bleu).

It reads the same JSON config as nmt-train (// comments allowed, `--set section.key=value`
overrides) and the same nmt-prep directory (data.train / data.dev), and trains the same recipe
with the modules a PyTorch user would pick:

- Model: nn.TransformerEncoder / nn.TransformerDecoder of nn.TransformerEncoderLayer /
  DecoderLayer (batch_first, activation relu, norm_first for model.norm = pre, layer_norm_eps =
  model.layernorm_eps) with final LayerNorms when pre-norm; one shared embedding table
  N(0, d^-1/2), scaled by sqrt(d) plus engine/model/transformer.cpp's sinusoid (sin in dims [0, d/2),
  cos in [d/2, d), inv_freq_i = exp(-i ln(10000) / (d/2 - 1))), dropout model.dropout on the
  embeddings; the output projection is the embedding table (tied, no bias). Dropout as ours:
  model.dropout on every residual branch (dropout1/2/3), model.attention_dropout on the attention
  probabilities (MultiheadAttention.dropout), model.relu_dropout inside the FFN (layer.dropout);
  PyTorch's layer takes one value, the attributes are set after construction.
- Loss: label-smoothed cross-entropy (train.label_smoothing, spread over the whole vocabulary as
  kernels/cross_entropy.h does) summed over the target tokens, padding ignored, divided by the
  batch's target tokens (eos included), as ours.
- Optimiser: Adam(beta1, beta2, epsilon, fused=True) (AdamW when optimizer.weight_decay > 0: ours
  decays decoupled). Ours is TensorFlow's Adam, eps added to sqrt(v) before the bias correction;
  PyTorch adds it after; with eps 1e-9 the difference is below bf16 resolution.
- Learning rate: engine/train/lr_schedule.cpp's policies, step 1-based (inverse_sqrt: linear warmup from
  warmup_init_lr, then learning_rate * sqrt(warmup / step)).
- Precision: train.precision bf16 = torch.autocast bf16 (fp32 master weights), fp16 = autocast +
  GradScaler, fp32 = none.
- Batches: exactly data/batcher.cpp's (TokenBatcher, one rank): the shards written by nmt-prep are
  read directly (not re-encoded), pairs over data.max_src_len / max_tgt_len dropped (or truncated),
  an epoch is a splitmix64 Fisher-Yates shuffle, windows of bucket_window * batch_tokens / 16
  pairs sorted by (max(src, tgt + 1), src, tgt, index), cut greedily while
  sentences * max(padded src, padded tgt + 1) <= batch_tokens (padding to multiples of 8), batch
  order shuffled with the same generator. With the same train.seed the twin sees the same batches
  in the same order as nmt-train (only dropout masks differ).
- Evaluation (every eval.every_steps and at train.max_steps), as engine/train/evaluator.cpp
  (docs/decoding.md "Dev evaluation during training"): every line of the dev file is scored, in
  file order (the first eval.max_sentences lines when set). Dev loss (label-smoothed, per target
  token) over the scored pairs within the training model's plan (padded source and padded target
  + 1 <= padded(max(data.max_src_len, data.max_tgt_len + 1))), in data/batcher_eval.cpp's batches
  of max(batch_tokens, max_len) tokens. Greedy decoding with a key/value cache (argmax, ties to the
  lower id) of every scored line: sources longer than model.max_positions cut to it (counted), an
  empty source gives an empty hypothesis, up to floor(1.5 * n + 10) tokens for an n-token (cut)
  source with bos + tokens within model.max_positions; lines batched shortest first by tokens,
  hypotheses put back in file order. Detokenised with the prep directory's spm.model, sacreBLEU
  (13a) over all scored lines against the same lines of the raw reference file nmt-prep read
  (report.json splits.dev.target.text_file; the decoded target shard when that file is gone).
  Eval records carry sentences, lines_in_file, truncated_sources and loss_sentences as ours.

Initialisation (--init, else model.init from the config, else `torch`); definitions in
init_specs(), one table for all schemes:
- torch: PyTorch's own initialisation left as it is. nn.TransformerEncoder/Decoder deep-copy one
  layer, so with `torch` ALL LAYERS OF A STACK START IDENTICAL (same weights in every layer).
  (nn.Transformer, the whole-model class, would then Xavier-initialise every matrix: `nn-transformer`.)
- torch-independent: PyTorch's per-matrix defaults drawn independently per layer: q/k/v as one
  [3d, d] Xavier-uniform, their biases 0; attention out_proj U(+-1/sqrt(d)), bias 0; linear1
  weight and bias U(+-1/sqrt(d)); linear2 weight and bias U(+-1/sqrt(ffn)).
- xavier: every matrix Xavier-uniform, q, k, v separately; all biases 0.
- fairseq: q/k/v Xavier-uniform per projection with gain 1/sqrt(2); out_proj, fc1, fc2
  Xavier-uniform; biases 0.
- scaled: torch-independent, then attention out_proj and fc2 weights times 1/sqrt(2 L_enc) in the
  encoder, 1/sqrt(3 L_dec) in the decoder (GPT-2's rule).
- small: every matrix N(0, std sqrt(2/(5d))) (SmallInit) except out_proj and fc2:
  N(0, std 2/(L sqrt(d))), L the layers of that stack (Wang); biases 0.
- deepnet: Xavier-normal; v, out_proj, fc1, fc2 with gain beta (encoder 0.87 (N^4 M)^(-1/16),
  decoder and its cross-attention (12 M)^(-1/4)), q and k gain 1; biases 0.
- nn-transformer: what nn.Transformer._reset_parameters leaves: every matrix Xavier-uniform (q/k/v
  as one [3d, d]), in_proj and out_proj biases 0, linear1/linear2 biases PyTorch's U(+-1/sqrt(fan_in)).
Every scheme: embedding table N(0, d^-1/2), layer norms 1 / 0.

Times: `elapsed_s` is wall time since this script started (taken before importing torch, so the
import, data loading, model setup, torch.compile and evaluations are all included); `train_s` is
the training steps alone (synchronised around each evaluation). Records go to log.dir/metrics.jsonl
(`--set log.dir=DIR`) in nmt-train's format: {"event": "train"|"eval"|"end", ...}.

usage: torch_nmt_train.py --config configs/bible-en-es.json --set data.train=PREP
         --set data.dev=PREP --set log.dir=L [--init NAME] [--compile] [--budget-s S]
         [--stop-at-bleu B] [--device cuda|cpu]
       torch_nmt_train.py --config ... --set data.train=PREP --set data.dev=PREP
         --checkpoint CKPT [--hypotheses FILE] --device cpu   (evaluates one of our checkpoints)
       torch_nmt_train.py --self-test      (CPU checks: cached decoding, dev evaluation, init
                                            statistics, batcher)
"""
import time

T_START = time.monotonic()  # before the heavy imports: they count as part of the run

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from lr_schedule import learning_rate_at as shared_learning_rate_at  # noqa: E402

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # data/special_ids.h
PAD_MULTIPLE = 8  # engine/train/training_data.cpp kPadMultiple
MASK64 = (1 << 64) - 1
INIT_SCHEMES = ("torch", "torch-independent", "xavier", "fairseq", "scaled", "small", "deepnet",
                "nn-transformer")


def elapsed():
    return time.monotonic() - T_START


# ---------------------------------------------------------------------------------------------
# Config: nmt-train's JSON (with comments) and --set overrides; defaults as engine/config/config.h.

DEFAULTS = {
    "model": {"encoder_layers": 6, "decoder_layers": 6, "d_model": 512, "num_heads": 8,
              "ffn_dim": 2048, "dropout": 0.1, "attention_dropout": 0.1, "relu_dropout": 0.1,
              "norm": "post", "shared_embeddings": True, "layernorm_eps": 1e-6,
              "max_positions": 1024, "init": None},
    "data": {"train": "", "dev": "", "max_src_len": 256, "max_tgt_len": 256,
             "length_policy": "drop"},
    "train": {"max_steps": 100000, "batch_tokens": 4096, "max_sentences": 0,
              "bucket_window": 100, "update_freq": 1, "seed": 1, "precision": "bf16",
              "label_smoothing": 0.1, "clip_norm": 0.0},
    "optimizer": {"name": "adam", "beta1": 0.9, "beta2": 0.997, "epsilon": 1e-9,
                  "weight_decay": 0.0},
    "lr_schedule": {"policy": "transformer_policy", "learning_rate": 2.0, "warmup_steps": 8000,
                    "warmup_init_lr": 0.0, "decay_steps": 0, "final_lr": 0.0},
    "eval": {"every_steps": 0, "max_sentences": 0},
    "log": {"every_steps": 10, "dir": ""},
}
# Keys of nmt-train's config that do not change what the twin computes.
IGNORED = {"train.device", "train.threads", "train.loss_scale", "train.loss_scale_window",
           "eval.beam", "eval.alpha", "eval.early_stop_patience", "eval.samples", "log.tensorboard",
           "checkpoint.dir", "checkpoint.every_steps", "checkpoint.keep"}


def strip_comments(text):
    """Removes // and /* */ comments outside strings."""
    out, i, n, in_string = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def load_config(path, overrides):
    cfg = json.loads(json.dumps(DEFAULTS))
    sources = []
    if path:
        with open(path, encoding="utf-8") as f:
            data = json.loads(strip_comments(f.read()))
        for section, values in data.items():
            if not isinstance(values, dict):
                raise SystemExit(f"{path}: section {section} is not an object")
            for key, value in values.items():
                sources.append((f"{section}.{key}", value, False))
    for item in overrides:
        if "=" not in item:
            raise SystemExit(f"--set {item}: expected section.key=value")
        key, value = item.split("=", 1)
        sources.append((key, parse_value(value), True))
    for key, value, explicit in sources:
        section, _, name = key.partition(".")
        if section in cfg and name in cfg[section]:
            cfg[section][name] = value
        elif key in IGNORED or section in ("dist", "checkpoint") or not explicit:
            continue  # nmt-train settings with no counterpart here
        else:
            raise SystemExit(f"--set {key}: not a key the twin knows")
    m, t = cfg["model"], cfg["train"]
    if not m["shared_embeddings"]:
        raise SystemExit("the twin supports model.shared_embeddings = true only")
    if m["d_model"] % m["num_heads"]:
        raise SystemExit("model.d_model must be a multiple of model.num_heads")
    if cfg["optimizer"]["name"] != "adam":
        raise SystemExit("the twin supports optimizer.name = adam only")
    if t["precision"] not in ("bf16", "fp16", "fp32"):
        raise SystemExit(f"train.precision {t['precision']}: expected bf16, fp16 or fp32")
    if not cfg["data"]["train"] or cfg["data"]["train"].startswith("synthetic:"):
        raise SystemExit("data.train must be a directory written by nmt-prep")
    return cfg


def learning_rate_at(s, d_model, step, max_steps):
    """engine/train/lr_schedule.cpp, step 1-based (scripts/lr_schedule.py, shared with the run
    card); a schedule that cannot run ends the program with its message."""
    try:
        return shared_learning_rate_at(s, d_model, step, max_steps)
    except ValueError as e:
        raise SystemExit(str(e))


# ---------------------------------------------------------------------------------------------
# Data: nmt-prep shards (data/shard.h) and the batchers (data/batcher.cpp, data/batcher_eval.cpp).

class Shard:
    """A token shard: 64-byte header, ids (uint16 or uint32), 8-aligned uint64 offsets [N + 1]."""

    def __init__(self, path):
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size < 64 or bytes(raw[:8]) != b"NMTSHARD":
            raise SystemExit(f"{path}: not an nmt token shard")
        version, id_bytes = np.frombuffer(raw[8:16], dtype="<u4")
        vocab, n, tokens, _fingerprint, offsets_at = np.frombuffer(raw[16:56], dtype="<u8")
        if version != 1 or id_bytes not in (2, 4):
            raise SystemExit(f"{path}: shard version {version} / id width {id_bytes} not supported")
        dtype = "<u2" if id_bytes == 2 else "<u4"
        self.vocab_size = int(vocab)
        self.ids = np.frombuffer(raw, dtype=dtype, count=int(tokens), offset=64).astype(np.int64)
        self.offsets = np.frombuffer(raw, dtype="<u8", count=int(n) + 1,
                                     offset=int(offsets_at)).astype(np.int64)
        self.lengths = np.diff(self.offsets)

    def __len__(self):
        return len(self.lengths)

    def sentence(self, i):
        return self.ids[self.offsets[i]:self.offsets[i + 1]]


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def first_epoch_key(seed):
    return splitmix64((seed ^ 0x6E6D742D62617463) & MASK64)[1]


def next_epoch_key(key):
    return splitmix64(key)[1]


def shuffle_in_place(items, rng):
    """data/batcher.cpp's Fisher-Yates; returns the generator state after it."""
    for i in range(len(items), 1, -1):
        rng, r = splitmix64(rng)
        j = r % i
        items[i - 1], items[j] = items[j], items[i - 1]
    return rng


def round_up(n, multiple=PAD_MULTIPLE):
    n = max(n, 1)
    return (n + multiple - 1) // multiple * multiple


class TokenBatcher:
    """data/batcher.cpp's TokenBatcher for one rank (world_size 1)."""

    def __init__(self, src, tgt, max_tokens, max_sentences, window, seed, max_src_len,
                 max_tgt_len, truncate):
        self.src, self.tgt = src, tgt
        self.max_tokens, self.max_sentences, self.window = max_tokens, max_sentences, window
        widest = max(round_up(max_src_len), round_up(max_tgt_len + 1))
        if widest > max_tokens:
            raise SystemExit(f"batch_tokens {max_tokens} cannot hold one pair of the maximum lengths")
        s_len, t_len = src.lengths.copy(), tgt.lengths.copy()
        keep = (s_len > 0) & (t_len > 0)
        too_long = (s_len > max_src_len) | (t_len > max_tgt_len)
        if truncate:
            s_len, t_len = np.minimum(s_len, max_src_len), np.minimum(t_len, max_tgt_len)
        else:
            keep &= ~too_long
        self.src_len, self.tgt_len = s_len.tolist(), t_len.tolist()
        self.usable = np.nonzero(keep)[0].tolist()
        self.dropped = len(src) - len(self.usable)
        self.epoch, self.key = 0, first_epoch_key(seed)
        self._build_epoch()

    def _build_epoch(self):
        rng = self.key
        shuffled = list(self.usable)
        rng = shuffle_in_place(shuffled, rng)
        s_len, t_len = self.src_len, self.tgt_len
        key = lambda i: (max(s_len[i], t_len[i] + 1), s_len[i], t_len[i], i)  # noqa: E731
        batches, window, nxt = [], [], 0
        while nxt < len(shuffled):
            take = min(self.window, len(shuffled) - nxt)
            window.extend(shuffled[nxt:nxt + take])
            nxt += take
            window.sort(key=key)
            begin = 0
            while begin < len(window):
                max_src = max_tgt = 0
                end = begin
                while end < len(window):
                    i = window[end]
                    s, t = max(max_src, s_len[i]), max(max_tgt, t_len[i] + 1)
                    count = end - begin + 1
                    if count * max(round_up(s), round_up(t)) > self.max_tokens:
                        break
                    if self.max_sentences > 0 and count > self.max_sentences:
                        break
                    max_src, max_tgt, end = s, t, end + 1
                if end == len(window) and nxt < len(shuffled):
                    break  # waits for the next window
                if end == begin:
                    break
                batches.append(window[begin:end])
                begin = end
            window = window[begin:]
        self.remainder = len(window)
        rng = shuffle_in_place(batches, rng)
        self.batches, self.next_index = batches, 0

    def next(self):
        pairs = self.batches[self.next_index]
        self.next_index += 1
        if self.next_index == len(self.batches):
            self.epoch += 1
            self.key = next_epoch_key(self.key)
            self._build_epoch()
        return make_batch(self.src, self.tgt, pairs, self.src_len, self.tgt_len)


def make_batch(src, tgt, pairs, src_len, tgt_len):
    """data/batch.cpp: src [B, S]; tgt_in = bos y_1..y_n, tgt_out = y_1..y_n eos; pad 0."""
    b = len(pairs)
    s_lens = [src_len[p] for p in pairs]
    t_lens = [tgt_len[p] for p in pairs]
    S, T = round_up(max(s_lens)), round_up(max(t_lens) + 1)
    src_ids = np.zeros((b, S), dtype=np.int64)
    tgt_in = np.zeros((b, T), dtype=np.int64)
    tgt_out = np.zeros((b, T), dtype=np.int64)
    tgt_in[:, 0] = BOS
    for row, p in enumerate(pairs):
        s, t = s_lens[row], t_lens[row]
        src_ids[row, :s] = src.sentence(p)[:s]
        y = tgt.sentence(p)[:t]
        tgt_in[row, 1:t + 1] = y
        tgt_out[row, :t] = y
        tgt_out[row, t] = EOS
    return {"src": src_ids, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "src_lengths": np.array(s_lens), "tokens": int(sum(t_lens)) + b, "ids": list(pairs)}


def eval_batches(src, tgt, pairs, max_tokens):
    """data/batcher_eval.cpp over `pairs` (dev line indices, file order): sorted by
    max(src, tgt + 1), then position; cut greedily while sentences * max(padded src, padded
    tgt + 1) <= max_tokens (a wider pair alone)."""
    s_len, t_len = src.lengths.tolist(), tgt.lengths.tolist()
    order = sorted(pairs, key=lambda i: (max(s_len[i], t_len[i] + 1), i))
    groups, current, max_s, max_t = [], [], 0, 0
    for i in order:
        s, t = max(max_s, s_len[i]), max(max_t, t_len[i] + 1)
        width = max(round_up(s), round_up(t))
        if current and (len(current) + 1) * width > max_tokens:
            groups.append(current)
            current, max_s, max_t = [i], s_len[i], t_len[i] + 1
        else:
            current.append(i)
            max_s, max_t = s, t
    if current:
        groups.append(current)
    return [make_batch(src, tgt, g, s_len, t_len) for g in groups]


def target_limit(length, max_positions, a=1.5, b=10):
    """engine/train/evaluator.cpp target_limit (greedy: BeamOptions a = 1.5, b = 10): floor(a·n + b)
    target tokens (eos excluded) for an n-token source, the prefix (bos + tokens) within
    model.max_positions."""
    return max(0, min(int(math.floor(a * length + b)), max_positions - 1))


def decode_batches(sources, lines, max_positions, max_tokens):
    """Groups the (already cut) non-empty sources of `lines` for decoding: shortest first, cut
    while sentences * max(padded source, longest prefix) <= max_tokens (a wider line alone).
    Returns [(lines, src [B, S] int64 array, per-line token limits)]; batching changes nothing
    but numerics (greedy decoding of each line is independent)."""
    order = sorted(lines, key=lambda i: (len(sources[i]), i))
    groups, current, width = [], [], 0
    for i in order:
        need = max(round_up(len(sources[i])), target_limit(len(sources[i]), max_positions) + 1)
        if current and (len(current) + 1) * max(width, need) > max_tokens:
            groups.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, need)
    if current:
        groups.append(current)
    out = []
    for g in groups:
        # Padded to the longest source only (a cut source fills the max_positions table).
        ids = np.zeros((len(g), max(len(sources[i]) for i in g)), dtype=np.int64)
        for row, i in enumerate(g):
            ids[row, :len(sources[i])] = sources[i]
        out.append((g, ids, [target_limit(len(sources[i]), max_positions) for i in g]))
    return out


def read_lines(path):
    """std::getline: split at \\n only, no final empty line."""
    with open(path, encoding="utf-8", newline="", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# ---------------------------------------------------------------------------------------------
# Model

def sinusoid(length, d):
    """kernels/embedding.h: sin in dims [0, d/2), cos in [d/2, 2*(d/2)), an odd last dim 0."""
    import torch
    half = d // 2
    inv_freq = torch.exp(-torch.arange(half, dtype=torch.float64) * math.log(10000.0) / max(half - 1, 1))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, :half] = torch.sin(angles)
    table[:, half:2 * half] = torch.cos(angles)
    return table.float()


def build_model(m, vocab):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            d = m["d_model"]
            self.d, self.pre_norm = d, m["norm"] == "pre"
            self.heads = m["num_heads"]
            eps = m["layernorm_eps"]
            self.embed = nn.Embedding(vocab, d)
            nn.init.normal_(self.embed.weight, std=d ** -0.5)
            self.register_buffer("positions", sinusoid(m["max_positions"], d), persistent=False)
            self.embed_dropout = nn.Dropout(m["dropout"])
            common = dict(d_model=d, nhead=m["num_heads"], dim_feedforward=m["ffn_dim"],
                          dropout=m["dropout"], activation="relu", layer_norm_eps=eps,
                          batch_first=True, norm_first=self.pre_norm)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(**common), m["encoder_layers"],
                norm=nn.LayerNorm(d, eps=eps) if self.pre_norm else None,
                enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(
                nn.TransformerDecoderLayer(**common), m["decoder_layers"],
                norm=nn.LayerNorm(d, eps=eps) if self.pre_norm else None)
            for layer in list(self.encoder.layers) + list(self.decoder.layers):
                layer.self_attn.dropout = m["attention_dropout"]
                if hasattr(layer, "multihead_attn"):
                    layer.multihead_attn.dropout = m["attention_dropout"]
                layer.dropout.p = m["relu_dropout"]

        def embed_tokens(self, ids, offset=0):
            x = self.embed(ids) * math.sqrt(self.d)
            return self.embed_dropout(x + self.positions[offset:offset + ids.shape[1]])

        def encode(self, src):
            pad = src.eq(PAD)
            return self.encoder(self.embed_tokens(src), src_key_padding_mask=pad), pad

        def forward(self, src, tgt_in, tgt_out, label_smoothing):
            """Label-smoothed loss summed over the target tokens (pads ignored)."""
            memory, pad = self.encode(src)
            t = tgt_in.shape[1]
            causal = nn.Transformer.generate_square_subsequent_mask(t, device=src.device)
            y = self.decoder(self.embed_tokens(tgt_in), memory, tgt_mask=causal,
                             tgt_is_causal=True, memory_key_padding_mask=pad)
            logits = F.linear(y, self.embed.weight)
            return F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(),
                                   ignore_index=PAD, label_smoothing=label_smoothing,
                                   reduction="sum")

    return Twin()


# ---------------------------------------------------------------------------------------------
# Initialisation: one table (init_specs) of what each scheme draws for each role.
#
# Roles per layer: q, k, v (the three [d, d] row blocks of in_proj_weight) or qkv (the whole
# [3d, d] block as one matrix), out (attention out_proj), fc1 (linear1 [ffn, d]), fc2 (linear2
# [d, ffn]), and the biases qkv_bias, out_bias, fc1_bias, fc2_bias. A spec is
# ("xavier_uniform", gain) | ("xavier_normal", gain) | ("uniform", bound) | ("normal", std) |
# ("zeros",). Cross-attention uses its stack's (the decoder's) values.

def init_specs(scheme, stack, d, ffn, enc_layers, dec_layers):
    L = enc_layers if stack == "encoder" else dec_layers
    zero = ("zeros",)
    xu = lambda gain=1.0: ("xavier_uniform", gain)  # noqa: E731
    xn = lambda gain=1.0: ("xavier_normal", gain)  # noqa: E731
    zero_biases = dict(qkv_bias=zero, out_bias=zero, fc1_bias=zero, fc2_bias=zero)
    if scheme in ("torch-independent", "scaled"):
        # GPT-2's rule: residual-branch outputs / sqrt(branches in the stack).
        s = 1.0 if scheme == "torch-independent" else 1.0 / math.sqrt((2 if stack == "encoder" else 3) * L)
        return dict(qkv=xu(), out=("uniform", s / math.sqrt(d)), fc1=("uniform", 1 / math.sqrt(d)),
                    fc2=("uniform", s / math.sqrt(ffn)), qkv_bias=zero, out_bias=zero,
                    fc1_bias=("uniform", 1 / math.sqrt(d)), fc2_bias=("uniform", 1 / math.sqrt(ffn)))
    if scheme == "xavier":
        return dict(q=xu(), k=xu(), v=xu(), out=xu(), fc1=xu(), fc2=xu(), **zero_biases)
    if scheme == "fairseq":
        g = 1 / math.sqrt(2)
        return dict(q=xu(g), k=xu(g), v=xu(g), out=xu(), fc1=xu(), fc2=xu(), **zero_biases)
    if scheme == "small":
        small, wang = ("normal", math.sqrt(2 / (5 * d))), ("normal", 2 / (L * math.sqrt(d)))
        return dict(q=small, k=small, v=small, fc1=small, out=wang, fc2=wang, **zero_biases)
    if scheme == "deepnet":
        n, m = enc_layers, dec_layers
        beta = 0.87 * (n ** 4 * m) ** (-1 / 16) if stack == "encoder" else (12 * m) ** (-1 / 4)
        return dict(q=xn(), k=xn(), v=xn(beta), out=xn(beta), fc1=xn(beta), fc2=xn(beta),
                    **zero_biases)
    if scheme == "nn-transformer":
        return dict(qkv=xu(), out=xu(), fc1=xu(), fc2=xu(), qkv_bias=zero, out_bias=zero,
                    fc1_bias=("uniform", 1 / math.sqrt(d)), fc2_bias=("uniform", 1 / math.sqrt(ffn)))
    raise SystemExit(f"--init {scheme}: expected one of {', '.join(INIT_SCHEMES)}")


def apply_spec(tensor, spec):
    import torch.nn as nn
    kind = spec[0]
    if kind == "xavier_uniform":
        nn.init.xavier_uniform_(tensor, gain=spec[1])
    elif kind == "xavier_normal":
        nn.init.xavier_normal_(tensor, gain=spec[1])
    elif kind == "uniform":
        nn.init.uniform_(tensor, -spec[1], spec[1])
    elif kind == "normal":
        nn.init.normal_(tensor, 0.0, spec[1])
    elif kind == "zeros":
        nn.init.zeros_(tensor)
    else:
        raise ValueError(spec)


def initialize(model, scheme, m):
    """Re-initialises every parameter after construction (scheme `torch`: nothing)."""
    import torch
    import torch.nn as nn
    if scheme == "torch":
        return
    d, ffn = m["d_model"], m["ffn_dim"]
    with torch.no_grad():
        for stack, layers in (("encoder", model.encoder.layers), ("decoder", model.decoder.layers)):
            spec = init_specs(scheme, stack, d, ffn, m["encoder_layers"], m["decoder_layers"])
            for layer in layers:
                attns = [layer.self_attn] + ([layer.multihead_attn] if stack == "decoder" else [])
                for attn in attns:
                    w = attn.in_proj_weight
                    if "qkv" in spec:
                        apply_spec(w, spec["qkv"])
                    else:
                        for i, role in enumerate(("q", "k", "v")):
                            apply_spec(w[i * d:(i + 1) * d], spec[role])
                    apply_spec(attn.in_proj_bias, spec["qkv_bias"])
                    apply_spec(attn.out_proj.weight, spec["out"])
                    apply_spec(attn.out_proj.bias, spec["out_bias"])
                apply_spec(layer.linear1.weight, spec["fc1"])
                apply_spec(layer.linear1.bias, spec["fc1_bias"])
                apply_spec(layer.linear2.weight, spec["fc2"])
                apply_spec(layer.linear2.bias, spec["fc2_bias"])
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.normal_(model.embed.weight, std=d ** -0.5)


def load_engine_checkpoint(model, path):
    """Copies nmt-train's weights (CHECKPOINT/model.safetensors, fairseq-style names, fp32) into
    the twin: q/k/v_proj stacked into in_proj, self_attn_layer_norm -> norm1, encoder_attn ->
    multihead_attn, encoder_attn_layer_norm -> norm2 (decoder), final_layer_norm -> the last norm."""
    import torch
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    meta = header.pop("__metadata__", None) or {}
    w = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        w[name] = torch.from_numpy(np.frombuffer(data[begin:end], dtype="<f4").copy()).view(info["shape"])
    for alias, stored in json.loads(meta.get("aliases", "{}")).items():
        w[alias] = w[stored]
    used = set()

    def take(name):
        used.add(name)
        return w[name]

    with torch.no_grad():
        model.embed.weight.copy_(take("encoder.embed_tokens.weight"))
        for stack in ("encoder", "decoder"):
            for i, layer in enumerate(getattr(model, stack).layers):
                p = f"{stack}.layers.{i}"
                attns = [("self_attn", layer.self_attn)]
                norms = ["self_attn_layer_norm"]
                if stack == "decoder":
                    attns.append(("encoder_attn", layer.multihead_attn))
                    norms.append("encoder_attn_layer_norm")
                norms.append("final_layer_norm")
                for name, attn in attns:
                    attn.in_proj_weight.copy_(torch.cat([take(f"{p}.{name}.{x}_proj.weight") for x in "qkv"]))
                    attn.in_proj_bias.copy_(torch.cat([take(f"{p}.{name}.{x}_proj.bias") for x in "qkv"]))
                    attn.out_proj.weight.copy_(take(f"{p}.{name}.out_proj.weight"))
                    attn.out_proj.bias.copy_(take(f"{p}.{name}.out_proj.bias"))
                for k, norm in enumerate(norms):
                    ln = getattr(layer, f"norm{k + 1}")
                    ln.weight.copy_(take(f"{p}.{norm}.weight"))
                    ln.bias.copy_(take(f"{p}.{norm}.bias"))
                for fc, lin in (("fc1", layer.linear1), ("fc2", layer.linear2)):
                    lin.weight.copy_(take(f"{p}.{fc}.weight"))
                    lin.bias.copy_(take(f"{p}.{fc}.bias"))
            final = getattr(model, stack).norm
            if final is not None:
                final.weight.copy_(take(f"{stack}.layer_norm.weight"))
                final.bias.copy_(take(f"{stack}.layer_norm.bias"))
    unused = sorted(set(w) - used - {"decoder.embed_tokens.weight", "decoder.output_projection.weight"})
    if unused:
        raise SystemExit(f"{path}: weights the twin has no place for: {', '.join(unused[:5])}")


# ---------------------------------------------------------------------------------------------
# Greedy decoding with a key/value cache, over nn.TransformerDecoderLayer's own weights.

def greedy_decode(model, src, max_new):
    """src [B, S] on the device; max_new: list of per-sentence token limits. Returns token lists
    (eos not included). Eval mode, no grad; the caller sets autocast."""
    import torch
    import torch.nn.functional as F
    d, heads = model.d, model.heads
    dh = d // heads
    b = src.shape[0]
    memory, pad = model.encode(src)
    keep = (~pad)[:, None, None, :]  # [B, 1, 1, S]: True where a key takes part
    split = lambda x: x.view(b, -1, heads, dh).transpose(1, 2)  # noqa: E731
    steps = max(max_new) if max_new else 0
    cross, caches = [], []
    for layer in model.decoder.layers:
        w, bias = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
        k = F.linear(memory, w[d:2 * d], bias[d:2 * d])
        v = F.linear(memory, w[2 * d:], bias[2 * d:])
        cross.append((split(k), split(v)))
        caches.append(None)
    limit = torch.tensor(max_new, device=src.device)
    tokens = torch.full((b, 1), BOS, dtype=torch.long, device=src.device)
    finished = limit.eq(0)
    out = torch.zeros((b, max(steps, 1)), dtype=torch.long, device=src.device)
    lengths = torch.zeros(b, dtype=torch.long, device=src.device)

    def self_attention(layer, i, h, t):
        attn = layer.self_attn
        q, k, v = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        k, v = split(k), split(v)
        if caches[i] is None:
            shape = (b, heads, steps + 1, dh)
            caches[i] = (torch.empty(shape, dtype=k.dtype, device=k.device),
                         torch.empty(shape, dtype=v.dtype, device=v.device))
        kc, vc = caches[i]
        kc[:, :, t:t + 1] = k
        vc[:, :, t:t + 1] = v
        ctx = F.scaled_dot_product_attention(split(q), kc[:, :, :t + 1], vc[:, :, :t + 1])
        return attn.out_proj(ctx.transpose(1, 2).reshape(b, 1, d))

    def cross_attention(layer, i, h):
        attn = layer.multihead_attn
        q = F.linear(h, attn.in_proj_weight[:d], attn.in_proj_bias[:d])
        ctx = F.scaled_dot_product_attention(split(q), cross[i][0], cross[i][1], attn_mask=keep)
        return attn.out_proj(ctx.transpose(1, 2).reshape(b, 1, d))

    for t in range(steps):
        x = model.embed_tokens(tokens, offset=t)
        for i, layer in enumerate(model.decoder.layers):
            ff = lambda h: layer.linear2(F.relu(layer.linear1(h)))  # noqa: E731
            if model.pre_norm:
                x = x + self_attention(layer, i, layer.norm1(x), t)
                x = x + cross_attention(layer, i, layer.norm2(x))
                x = x + ff(layer.norm3(x))
            else:
                x = layer.norm1(x + self_attention(layer, i, x, t))
                x = layer.norm2(x + cross_attention(layer, i, x))
                x = layer.norm3(x + ff(x))
        if model.decoder.norm is not None:
            x = model.decoder.norm(x)
        logits = F.linear(x[:, 0], model.embed.weight)
        nxt = logits.float().argmax(dim=-1)  # ties: the lowest id, as ours
        live = ~finished
        emit = live & nxt.ne(EOS)
        out[:, t] = torch.where(emit, nxt, out[:, t])
        lengths += emit.long()
        finished = finished | nxt.eq(EOS) | (lengths >= limit)
        tokens = nxt[:, None]
        if t % 4 == 3 and bool(finished.all()):
            break
    out, lengths = out.cpu().tolist(), lengths.cpu().tolist()
    return [row[:n] for row, n in zip(out, lengths)]


# ---------------------------------------------------------------------------------------------
# Evaluation and training

class DevSet:
    """engine/train/evaluator.cpp evaluate_dev's plan for one dev split: the first eval.max_sentences
    lines (0 = every line) of the dev file, in file order. The dev loss covers the pairs within the
    training model's plan (padded source and padded target + 1 <= max_len, max_len =
    padded(max(data.max_src_len, data.max_tgt_len + 1))); decoding covers every scored line, the
    source cut to model.max_positions (counted), an empty source giving an empty hypothesis."""

    def __init__(self, prep_dir, sp, batch_tokens, max_len, max_positions, max_sentences, device):
        import torch
        report = json.load(open(os.path.join(prep_dir, "report.json")))
        if "dev" not in report.get("splits", {}):
            raise SystemExit(f"data.dev: {prep_dir} has no dev split")
        src = Shard(os.path.join(prep_dir, "dev.src.shard"))
        tgt = Shard(os.path.join(prep_dir, "dev.tgt.shard"))
        ref_file = report["splits"]["dev"]["target"].get("text_file", "")
        refs = read_lines(ref_file) if ref_file and os.path.exists(ref_file) else []
        if len(refs) != len(tgt):
            refs = [sp.decode(tgt.sentence(i).tolist()) for i in range(len(tgt))]
        self.lines_in_file = len(tgt)
        n = len(tgt) if max_sentences <= 0 else min(max_sentences, len(tgt))
        self.sentences, self.refs = n, refs[:n]
        self.max_positions = max(int(max_positions), 1)
        s_len, t_len = src.lengths.tolist(), tgt.lengths.tolist()
        # Dev loss: the pairs that fit the training plan, in batches of data/batcher_eval.cpp of
        # the model's max_rows = max(train.batch_tokens, max_len) tokens.
        fitting = [i for i in range(n)
                   if round_up(s_len[i]) <= max_len and round_up(t_len[i] + 1) <= max_len]
        self.loss_sentences = len(fitting)
        self.loss_batches = []
        for b in eval_batches(src, tgt, fitting, max(batch_tokens, max_len)):
            tensors = {k: torch.from_numpy(b[k]).to(device) for k in ("src", "tgt_in", "tgt_out")}
            self.loss_batches.append((tensors, b["tokens"]))
        # Decoding: every line, its source cut to max_positions; empty sources are not decoded.
        sources = [src.sentence(i)[:self.max_positions] for i in range(n)]
        self.truncated = sum(1 for i in range(n) if s_len[i] > self.max_positions)
        self.decode_batches = [
            (g, torch.from_numpy(ids).to(device), max_new)
            for g, ids, max_new in decode_batches(sources, [i for i in range(n) if len(sources[i])],
                                                  self.max_positions, max(batch_tokens, max_len))]

    def describe(self):
        return (f"{self.sentences} of {self.lines_in_file} lines scored, "
                f"{self.loss_sentences} within the training length limits (dev loss), "
                f"{self.truncated} sources cut to model.max_positions = {self.max_positions}")


def evaluate(model, dev, sp, label_smoothing, autocast):
    """Dev loss (label-smoothed, per target token) over the pairs within the training limits,
    greedy decoding of every scored line, BLEU over them in file order against the same lines of
    the reference file. The record's counts are engine/report/run_report.cpp's eval_record_json's."""
    import sacrebleu
    import torch
    model.eval()
    # PyTorch's fused encoder fast path (eval, no grad, no autocast) returns NaN for a sentence
    # whose every key is masked (an empty source); the regular path gives attention output 0, as
    # kernels/attention.h does.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    loss = tokens = 0.0
    hyps = [""] * dev.sentences  # empty sources keep ""
    try:
        with torch.no_grad(), autocast():
            for tensors, ntok in dev.loss_batches:
                loss += model(tensors["src"], tensors["tgt_in"], tensors["tgt_out"], label_smoothing).item()
                tokens += ntok
            for lines, src, max_new in dev.decode_batches:
                for i, hyp in zip(lines, greedy_decode(model, src, max_new)):
                    hyps[i] = sp.decode(hyp)  # ids only: no pad, bos or eos in them
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        model.train()
    bleu = sacrebleu.corpus_bleu(hyps, [dev.refs])
    return {"loss": loss / max(tokens, 1.0), "bleu": bleu.score, "sentences": dev.sentences,
            "lines_in_file": dev.lines_in_file, "truncated_sources": dev.truncated,
            "loss_sentences": dev.loss_sentences, "bleu_line": str(bleu), "hypotheses": hyps}


def eval_lines(e, dev, prefix="", digits=4):
    """The eval lines of engine/train/evaluator.cpp format_eval (loss, counts, the warning for cut
    sources, the BLEU line), without its accuracies."""
    out = [f"{prefix}dev loss {e['loss']:.{digits}f} ({e['loss_sentences']} of {e['sentences']} lines "
           f"within the training length limits) | {e['sentences']} of {e['lines_in_file']} lines scored"]
    if e["truncated_sources"]:
        out.append(f"{prefix}warning: {e['truncated_sources']} dev sources longer than "
                   f"model.max_positions = {dev.max_positions} tokens were cut to it before decoding")
    out.append(f"{prefix}{e['bleu_line']} | {e['sentences']} of {e['lines_in_file']} lines")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="nmt-train JSON config (the recipe)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--init", choices=INIT_SCHEMES, help="default: model.init, else torch")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model, dynamic=True)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="stop after the step that passes this many seconds since start (no eval)")
    ap.add_argument("--stop-at-bleu", type=float, default=0,
                    help="stop after the first evaluation reaching this dev BLEU")
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--checkpoint", help="evaluate nmt-train's checkpoint folder on the dev set and exit "
                    "(a cross-check of architecture and evaluation; config and --set must match it)")
    ap.add_argument("--hypotheses", metavar="FILE",
                    help="with --checkpoint: write the detokenised hypotheses, one per scored line")
    ap.add_argument("--self-test", action="store_true", help="run the CPU self-checks and exit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    cfg = load_config(args.config, args.set)

    import sentencepiece as spm
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    m, t, d_cfg = cfg["model"], cfg["train"], cfg["data"]
    init = args.init or m["init"] or "torch"
    if init not in INIT_SCHEMES:
        raise SystemExit(f"model.init {init}: the twin knows {', '.join(INIT_SCHEMES)}")

    prep = d_cfg["train"]
    report = json.load(open(os.path.join(prep, "report.json")))
    if report["vocab"].get("kind", "sentencepiece") != "sentencepiece":
        raise SystemExit("the twin reads SentencePiece vocabularies only")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(prep, report["vocab"]["file"]))
    src, tgt = Shard(os.path.join(prep, "train.src.shard")), Shard(os.path.join(prep, "train.tgt.shard"))
    vocab = src.vocab_size
    window = max(t["bucket_window"], 1) * max(t["batch_tokens"] // 16, 1)
    batcher = TokenBatcher(src, tgt, t["batch_tokens"], t["max_sentences"], window, t["seed"],
                           d_cfg["max_src_len"], d_cfg["max_tgt_len"],
                           d_cfg["length_policy"] == "truncate")
    max_len = round_up(max(d_cfg["max_src_len"], d_cfg["max_tgt_len"] + 1))
    dev = DevSet(d_cfg["dev"], sp, t["batch_tokens"], max_len, m["max_positions"],
                 cfg["eval"]["max_sentences"], device) if d_cfg["dev"] else None

    torch.manual_seed(t["seed"])
    model = build_model(m, vocab)
    initialize(model, init, m)
    if args.checkpoint:
        load_engine_checkpoint(model, args.checkpoint)
    model.to(device).train()
    params = sum(p.numel() for p in model.parameters())
    opt_cfg = cfg["optimizer"]
    adam = torch.optim.AdamW if opt_cfg["weight_decay"] > 0 else torch.optim.Adam
    extra = {"weight_decay": opt_cfg["weight_decay"]} if opt_cfg["weight_decay"] > 0 else {}
    optimizer = adam(model.parameters(), lr=0.0, betas=(opt_cfg["beta1"], opt_cfg["beta2"]),
                     eps=opt_cfg["epsilon"], fused=device.type == "cuda", **extra)
    step_fn = torch.compile(model, dynamic=True) if args.compile else model
    precision = t["precision"]
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = lambda: torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None)  # noqa: E731
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    ls = float(t["label_smoothing"])

    log_dir = cfg["log"]["dir"]
    log_file = None
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        log_file = open(os.path.join(log_dir, "metrics.jsonl"), "w")

    def record(obj):
        obj["time"] = time.time()
        if log_file:
            log_file.write(json.dumps(obj) + "\n")
            log_file.flush()

    if args.checkpoint:
        if dev is None:
            raise SystemExit("--checkpoint needs data.dev")
        e = evaluate(model, dev, sp, ls, autocast)
        print(eval_lines(e, dev, f"checkpoint {args.checkpoint} | ", digits=6))
        if args.hypotheses:
            with open(args.hypotheses, "w", encoding="utf-8") as f:
                f.writelines(h + "\n" for h in e["hypotheses"])
        return 0
    name = "torch-compile" if args.compile else "torch-eager"
    print(f"twin: {name}, init {init}, {params} parameters, {precision}, device {device}"
          f" ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}")
    print(f"data: {prep}: {len(src)} train pairs ({len(batcher.usable)} usable), vocabulary {vocab}, "
          f"{len(batcher.batches)} batches per epoch; dev "
          f"{dev.describe() if dev else 'none'}")
    record({"event": "start", "step": 0, "parameters": params, "system": name, "init": init,
            "device": str(device), "torch": torch.__version__, "elapsed_s": elapsed()})
    sys.stdout.flush()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def to_device(array):
        tensor = torch.from_numpy(array)
        if device.type == "cuda":
            return tensor.pin_memory().to(device, non_blocking=True)
        return tensor

    max_steps, eval_every, log_every = t["max_steps"], cfg["eval"]["every_steps"], cfg["log"]["every_steps"]
    train_s = 0.0           # pure training time, up to the last synchronisation point
    seg_start = time.monotonic()
    total_tokens = seg_tokens = 0
    interval_tokens, interval_start = 0, time.monotonic()
    loss_acc = torch.zeros((), device=device)
    interval_loss_tokens = 0
    stop_reason, step, last_bleu = "max_steps", 0, None
    evals = []
    for step in range(1, max_steps + 1):
        micro = [batcher.next() for _ in range(max(t["update_freq"], 1))]
        step_tokens = sum(b["tokens"] for b in micro)
        lr = learning_rate_at(cfg["lr_schedule"], m["d_model"], step, max_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        for b in micro:
            # Pinned host memory: the copies queue behind the previous step instead of waiting
            # for it, so Python prepares step n+1 while the GPU runs step n.
            s_ids, t_in, t_out = (to_device(b[k]) for k in ("src", "tgt_in", "tgt_out"))
            with autocast():
                loss_sum = step_fn(s_ids, t_in, t_out, ls)
            scaler.scale(loss_sum / step_tokens).backward()
            loss_acc += loss_sum.detach()
        if t["clip_norm"] > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["clip_norm"])
        scaler.step(optimizer)
        scaler.update()
        total_tokens += step_tokens
        seg_tokens += step_tokens
        interval_tokens += step_tokens
        interval_loss_tokens += step_tokens
        budget_hit = args.budget_s > 0 and elapsed() >= args.budget_s
        last = step == max_steps or budget_hit
        if step % log_every == 0 or last:
            loss_value = loss_acc.item() / max(interval_loss_tokens, 1)  # synchronises
            now = time.monotonic()
            tok_s = interval_tokens / max(now - interval_start, 1e-9)
            print(f"step {step} | epoch {batcher.epoch} | loss {loss_value:.4f} | lr {lr:.3e} | "
                  f"{tok_s:.0f} tok/s | {elapsed():.1f} s", flush=True)
            record({"event": "train", "step": step, "epoch": batcher.epoch, "loss": loss_value,
                    "lr": lr, "tokens_per_s": tok_s, "elapsed_s": elapsed(),
                    "train_s": train_s + (now - seg_start)})
            loss_acc.zero_()
            interval_loss_tokens, interval_tokens, interval_start = 0, 0, time.monotonic()
        if budget_hit:
            stop_reason = "budget"
            break
        if dev and eval_every > 0 and (step % eval_every == 0 or step == max_steps):
            sync()
            now = time.monotonic()
            seg_s = now - seg_start
            train_s += seg_s
            e = evaluate(model, dev, sp, ls, autocast)
            e.pop("hypotheses")
            eval_s = time.monotonic() - now
            e.update({"event": "eval", "step": step, "elapsed_s": elapsed(), "train_s": train_s,
                      "eval_s": eval_s, "tokens_per_s": seg_tokens / max(seg_s, 1e-9),
                      "tokens_per_s_total": total_tokens / max(train_s, 1e-9)})
            lines = eval_lines(e, dev, f"eval step {step} | ")
            e.pop("bleu_line")
            record(dict(e))
            evals.append(e)
            last_bleu = e["bleu"]
            print(f"{lines}\neval step {step} | elapsed {e['elapsed_s']:.1f} s | train {train_s:.1f} s "
                  f"| eval {eval_s:.1f} s | {e['tokens_per_s']:.0f} tok/s", flush=True)
            seg_start, seg_tokens = time.monotonic(), 0
            interval_start = seg_start
            if args.stop_at_bleu > 0 and e["bleu"] >= args.stop_at_bleu:
                stop_reason = "bleu_target"
                break
    sync()
    train_s += time.monotonic() - seg_start  # ~0 when the loop ended with an evaluation
    end = {"event": "end", "step": step, "report": {
        "system": name, "init": init, "last_step": step, "stop_reason": stop_reason,
        "wall_seconds": elapsed(), "train_seconds": train_s, "target_tokens": total_tokens,
        "tokens_per_s": total_tokens / max(train_s, 1e-9), "parameters": params,
        "last_bleu": last_bleu, "best_bleu": max((e["bleu"] for e in evals), default=None),
        "dev_lines": None if dev is None or not evals else {
            "scored": dev.sentences, "in_file": dev.lines_in_file, "truncated": dev.truncated}}}
    record(end)
    r = end["report"]
    print(f"done: {step} steps in {r['wall_seconds']:.1f} s ({stop_reason}); training {train_s:.1f} s, "
          f"{r['tokens_per_s']:.0f} target tok/s; last BLEU {last_bleu}, best {r['best_bleu']}", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test (CPU, small shapes): cached decoding equals the full decoder, dev evaluation's
# coverage, init statistics, batcher invariants.

def write_test_shard(path, sentences, vocab):
    """A token shard as data/shard.h writes it (uint16 ids, fingerprint 0)."""
    ids = np.array([t for x in sentences for t in x], dtype="<u2")
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in sentences])]).astype("<u8")
    offsets_at = (64 + ids.nbytes + 7) // 8 * 8
    header = b"NMTSHARD" + np.array([1, 2], dtype="<u4").tobytes() + np.array(
        [vocab, len(sentences), ids.size, 0, offsets_at], dtype="<u8").tobytes()
    with open(path, "wb") as f:
        f.write(header.ljust(64, b"\0") + ids.tobytes())
        f.write(b"\0" * (offsets_at - 64 - ids.nbytes) + offsets.tobytes())


def self_test_evaluation(check):
    """Checks DevSet and evaluate() on a dev split written to a temporary folder."""
    import tempfile
    import torch
    import sacrebleu

    class Pieces:  # stands in for SentencePiece: ids as text
        def decode(self, ids):
            return " ".join(str(i) for i in ids)

    # max_positions not a multiple of 8: a cut source fills the position table exactly.
    vocab, max_src_len, max_tgt_len, max_positions = 60, 16, 15, 42
    max_len = round_up(max(max_src_len, max_tgt_len + 1))  # engine/train/training_data.cpp: 16
    rng = np.random.default_rng(3)
    src_lens = [5, 12, 20, 30, 55, 0, 7, 16, 3, 44, 9]  # within, over the plan, over max_positions
    tgt_lens = [6, 10, 18, 25, 50, 4, 20, 14, 2, 40, 8]
    srcs = [rng.integers(4, vocab, n).tolist() for n in src_lens]
    tgts = [rng.integers(4, vocab, n).tolist() for n in tgt_lens]
    refs = [" ".join(str(i) for i in t) for t in tgts]
    m = dict(DEFAULTS["model"], encoder_layers=1, decoder_layers=2, d_model=32, num_heads=4,
             ffn_dim=64, norm="pre", max_positions=max_positions)
    model = build_model(m, vocab)
    initialize(model, "xavier", m)
    with torch.no_grad():
        model.embed.weight[EOS].zero_()  # logit 0: the hypotheses run to their length limits
    with tempfile.TemporaryDirectory() as prep:
        write_test_shard(os.path.join(prep, "dev.src.shard"), srcs, vocab)
        write_test_shard(os.path.join(prep, "dev.tgt.shard"), tgts, vocab)
        with open(os.path.join(prep, "dev.tgt"), "w") as f:
            f.writelines(r + "\n" for r in refs)
        with open(os.path.join(prep, "report.json"), "w") as f:
            json.dump({"splits": {"dev": {"target": {"text_file": os.path.join(prep, "dev.tgt")}}}}, f)
        no_autocast = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
        cpu = torch.device("cpu")
        dev = DevSet(prep, Pieces(), 96, max_len, max_positions, 0, cpu)  # several decode batches
        e = evaluate(model, dev, Pieces(), 0.1, no_autocast)
        wide = DevSet(prep, Pieces(), 4096, max_len, max_positions, 0, cpu)  # one batch
        e_wide = evaluate(model, wide, Pieces(), 0.1, no_autocast)
        first = DevSet(prep, Pieces(), 96, max_len, max_positions, 4, cpu)
        e_first = evaluate(model, first, Pieces(), 0.1, no_autocast)
    lines = len(srcs)
    fitting = [i for i in range(lines)
               if round_up(src_lens[i]) <= max_len and round_up(tgt_lens[i] + 1) <= max_len]
    check(e["sentences"] == lines and e["lines_in_file"] == lines and len(dev.decode_batches) > 1
          and e["truncated_sources"] == sum(n > max_positions for n in src_lens)
          and e["loss_sentences"] == len(fitting) and 0 < len(fitting) < lines and math.isfinite(e["loss"]),
          f"dev evaluation: {e['sentences']} of {e['lines_in_file']} lines scored "
          f"({len(dev.decode_batches)} decode batches), {e['truncated_sources']} cut, "
          f"loss over {e['loss_sentences']} (an empty source among them), loss {e['loss']:.4f}")
    # Line i's hypothesis is line i's translation decoded alone from its cut source.
    model.eval()
    ok, lengths = True, []
    with torch.no_grad():
        for i, src_ids in enumerate(srcs):
            cut = src_ids[:max_positions]
            limit = target_limit(len(cut), max_positions)
            alone = greedy_decode(model, torch.tensor([cut]), [limit])[0] if cut else []
            ok &= e["hypotheses"][i] == Pieces().decode(alone) == e_wide["hypotheses"][i]
            ok &= len(alone) <= min(math.floor(1.5 * len(cut) + 10), max_positions - 1)
            lengths.append(len(alone))
    model.train()
    ok &= e["hypotheses"][src_lens.index(0)] == ""
    ok &= max(lengths) == max_positions - 1 > max_len - 1  # the cut line runs to max_positions
    check(ok, f"dev evaluation: every hypothesis = its line decoded alone, in file order, batching "
          f"aside; lengths {lengths} within floor(1.5 n + 10) and max_positions - 1 = {max_positions - 1}")
    bleu = sacrebleu.corpus_bleu(e["hypotheses"], [refs])
    bleu4 = sacrebleu.corpus_bleu(e["hypotheses"][:4], [refs[:4]])
    check(e["bleu"] == bleu.score and e_first["sentences"] == 4 and e_first["lines_in_file"] == lines
          and e_first["hypotheses"] == e["hypotheses"][:4] and e_first["bleu"] == bleu4.score,
          "dev evaluation: BLEU over every line against the reference file; eval.max_sentences 4 "
          "scores the first 4 lines")


def self_test():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED: torch is not installed for python3")
        return 77
    torch.manual_seed(0)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    # 1. Key/value-cached greedy decoding against the full decoder (fp32, eval), both norms.
    for norm in ("pre", "post"):
        m = dict(DEFAULTS["model"], encoder_layers=2, decoder_layers=2, d_model=32, num_heads=4,
                 ffn_dim=64, norm=norm, max_positions=64)
        model = build_model(m, 50)
        initialize(model, "xavier", m)
        model.eval()
        src = torch.randint(4, 50, (3, 9))
        src[1, 6:] = PAD
        src[2, 3:] = PAD
        with torch.no_grad():
            hyps = greedy_decode(model, src, [12, 12, 5])
            ok = True
            for i, hyp in enumerate(hyps):
                # Re-run the full decoder on bos + hyp: its argmax at every position must match.
                tgt = torch.tensor([[BOS] + hyp])
                memory, pad = model.encode(src[i:i + 1])
                causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
                y = model.decoder(model.embed_tokens(tgt), memory, tgt_mask=causal, tgt_is_causal=True,
                                  memory_key_padding_mask=pad)
                pred = F.linear(y, model.embed.weight).argmax(-1)[0].tolist()
                limit = [12, 12, 5][i]
                expect = []
                for p in pred:
                    if p == EOS or len(expect) >= limit:
                        break
                    expect.append(p)
                ok &= expect == hyp
        check(ok, f"cached greedy decoding = full decoder argmax ({norm}-norm)")

    # 2. Dev evaluation (engine/train/evaluator.cpp's rule; test/engine/eval_coverage_test.cpp): every
    # line scored in file order, whatever the batching; sources over max_positions cut (counted);
    # an empty source gives ""; the loss over the pairs within the training plan only.
    try:
        import sacrebleu
    except ImportError:
        sacrebleu = None
        print("skip dev evaluation checks: sacrebleu is not installed")
    if sacrebleu is not None:
        self_test_evaluation(check)

    # 2. Initialisation statistics (d 256, ffn 1024, 3 + 2 layers).
    d, ffn, ne, nd = 256, 1024, 3, 2
    m = dict(DEFAULTS["model"], encoder_layers=ne, decoder_layers=nd, d_model=d, num_heads=4,
             ffn_dim=ffn, norm="pre", max_positions=64)
    xavier_std = lambda fi, fo, g=1.0: g * math.sqrt(2.0 / (fi + fo))  # noqa: E731
    uniform_std = lambda bound: bound / math.sqrt(3)  # noqa: E731
    beta_e, beta_d = 0.87 * (ne ** 4 * nd) ** (-1 / 16), (12 * nd) ** (-1 / 4)
    expected = {  # scheme -> (encoder layer 0 q std, v std, out std, fc2 std, decoder cross out std)
        "torch-independent": (xavier_std(d, 3 * d), xavier_std(d, 3 * d), uniform_std(d ** -0.5),
                              uniform_std(ffn ** -0.5), uniform_std(d ** -0.5)),
        "xavier": (xavier_std(d, d), xavier_std(d, d), xavier_std(d, d), xavier_std(ffn, d),
                   xavier_std(d, d)),
        "fairseq": (xavier_std(d, d, 2 ** -0.5), xavier_std(d, d, 2 ** -0.5), xavier_std(d, d),
                    xavier_std(ffn, d), xavier_std(d, d)),
        "scaled": (xavier_std(d, 3 * d), xavier_std(d, 3 * d), uniform_std(d ** -0.5) / math.sqrt(2 * ne),
                   uniform_std(ffn ** -0.5) / math.sqrt(2 * ne), uniform_std(d ** -0.5) / math.sqrt(3 * nd)),
        "small": (math.sqrt(2 / (5 * d)), math.sqrt(2 / (5 * d)), 2 / (ne * math.sqrt(d)),
                  2 / (ne * math.sqrt(d)), 2 / (nd * math.sqrt(d))),
        "deepnet": (xavier_std(d, d), beta_e * xavier_std(d, d), beta_e * xavier_std(d, d),
                    beta_e * xavier_std(ffn, d), beta_d * xavier_std(d, d)),
        "nn-transformer": (xavier_std(d, 3 * d), xavier_std(d, 3 * d), xavier_std(d, d),
                           xavier_std(ffn, d), xavier_std(d, d)),
    }
    for scheme, want in expected.items():
        model = build_model(m, 100)
        initialize(model, scheme, m)
        e0, dl = model.encoder.layers[0], model.decoder.layers[1]
        got = (e0.self_attn.in_proj_weight[:d].std().item(), e0.self_attn.in_proj_weight[2 * d:].std().item(),
               e0.self_attn.out_proj.weight.std().item(), e0.linear2.weight.std().item(),
               dl.multihead_attn.out_proj.weight.std().item())
        close = all(abs(g / w - 1) < 0.03 for g, w in zip(got, want))
        biases_zero = e0.self_attn.in_proj_bias.abs().max().item() == 0 and \
            e0.self_attn.out_proj.bias.abs().max().item() == 0
        differ = not torch.equal(model.encoder.layers[0].linear1.weight, model.encoder.layers[1].linear1.weight)
        emb = model.embed.weight.std().item() * math.sqrt(d)
        check(close and biases_zero and differ and abs(emb - 1) < 0.03,
              f"init {scheme}: stds {['%.4f' % g for g in got]} vs {['%.4f' % w for w in want]}")
    model = build_model(m, 100)
    initialize(model, "torch", m)
    check(torch.equal(model.encoder.layers[0].linear1.weight, model.encoder.layers[1].linear1.weight),
          "init torch: nn.TransformerEncoder's deep copies start identical")

    # 3. Batcher: every usable pair once per epoch, within the token budget, reproducible.
    class Fake:
        def __init__(self, lengths):
            self.lengths = np.array(lengths)
            self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
            self.ids = np.arange(self.offsets[-1]) % 90 + 4

        def __len__(self):
            return len(self.lengths)

        def sentence(self, i):
            return self.ids[self.offsets[i]:self.offsets[i + 1]]

    rng = np.random.default_rng(1)
    s_l, t_l = rng.integers(0, 70, 3000), rng.integers(1, 70, 3000)
    fake_src, fake_tgt = Fake(s_l), Fake(t_l)
    for window in (100000, 500):
        batcher = TokenBatcher(fake_src, fake_tgt, 2048, 0, window, 7, 64, 64, False)
        usable = {i for i in range(3000) if 0 < s_l[i] <= 64 and 0 < t_l[i] <= 64}
        first_epoch = [list(b) for b in batcher.batches]
        seen, ok = [], True
        for _ in range(len(first_epoch)):
            b = batcher.next()
            seen.extend(b["ids"])
            ok &= b["src"].shape[0] * max(b["src"].shape[1], b["tgt_in"].shape[1]) <= 2048
        n_seen = len(seen)
        ok &= len(set(seen)) == n_seen and set(seen) <= usable and n_seen + batcher.remainder == len(usable)
        again = TokenBatcher(fake_src, fake_tgt, 2048, 0, window, 7, 64, 64, False)
        ok &= [again.next()["ids"] for _ in range(3)] == first_epoch[:3]
        ok &= batcher.batches != first_epoch  # the next epoch is shuffled anew
        check(ok and batcher.epoch == 1, f"batcher (window {window}): {n_seen} pairs once per epoch, "
              f"budget kept, {len(usable) - n_seen} left for the epoch's end")
    print("self-test: " + ("all passed" if not failures else f"{len(failures)} FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
