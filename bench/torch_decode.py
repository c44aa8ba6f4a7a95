#!/usr/bin/env python3
"""The PyTorch decoding baseline for bench-decode's real-data mode (issue 18): one of OUR
checkpoints (nmt-train's ckpt-<step>) loaded into the PyTorch twin (bench/torch_nmt_train.py:
nn.TransformerEncoder/Decoder, load_engine_checkpoint), a dev file translated the way a PyTorch
user would write it, timed at the same beam and batch sizes, and the same table and JSON as
bench-decode prints (bench/bench-decode/decode_rows.h).

- Greedy (beam 1): the twin's greedy_decode, incremental with a key/value cache, argmax.
- Beam search (beam > 1), incremental with a key/value cache grown per step and reordered by
  index_select, finished sentences dropped from the batch; the rules of ours (docs/decoding.md):
  candidates ranked by total log-probability, an eos among the best `beam` finishes its parent,
  the best `beam` others stay live, only eos at the length limit, GNMT length penalty
  ((5 + |Y|) / 6)^alpha with |Y| counting eos, a sentence settled once it has `beam` finished
  hypotheses or no live one can beat the best finished (log_prob / lp(limit + 1)). One small
  host copy per step (the top candidates), the log-softmax and top-k on the device.
- Length limit: floor(a * n + b) target tokens (a = 1.5, b = 10) for an n-token source, within
  model.max_positions (sources cut to it).
- bf16 weights and activations on CUDA (model.to(bfloat16)), fp32 on the CPU; inference_mode.
- Batches: sources sorted longest first; batch N = N sentences per call; "all" = the groups ours
  forms for --all-rows rows (sentences * beam * max(source, longest prefix) <= all_rows).
- Target tokens/s counts the best hypotheses' tokens, eos excluded; times cover the decode calls
  only (synchronised), not loading, tokenising or detokenising. BLEU: sacreBLEU over the decoded
  lines. Batch 1: per-sentence latency p50/p90 and the median over sources of 30 +- 2 tokens.

usage: torch_decode.py --checkpoint CKPT --source dev.en [--reference dev.es] [--json OUT.json]
                       [--beams 1,4] [--batches 1,32,all] [--device cuda|cpu] [--dtype bf16|f32]
       torch_decode.py --compare OURS.json TORCH.json     (both tables side by side)
       torch_decode_selftest.py                           (CPU checks on a tiny random model)
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_nmt_train import (BOS, DEFAULTS, EOS, PAD, build_model, greedy_decode,  # noqa: E402
                             load_engine_checkpoint, read_lines, target_limit)

LATENCY_TOKENS, LATENCY_SLACK = 30, 2  # bench/bench-decode/decode_rows.h


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


# ---------------------------------------------------------------------------------------------
# Beam search

class CachedDecoder:
    """The decoder one position per row per step over nn.TransformerDecoderLayer's own weights:
    cross-attention keys/values computed once per source (each source repeated `repeat` times,
    one row per hypothesis), self-attention keys/values grown by one position per step."""

    def __init__(self, model, memory, pad, repeat):
        import torch.nn.functional as F
        self.model, self.d, self.heads = model, model.d, model.heads
        d = self.d
        memory = memory.repeat_interleave(repeat, 0)  # [rows, S, d]
        self.keep = (~pad).repeat_interleave(repeat, 0)[:, None, None, :]  # [rows, 1, 1, S]
        self.cross, self.cache = [], [None] * len(model.decoder.layers)
        for layer in model.decoder.layers:
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            self.cross.append((self.split(F.linear(memory, w[d:2 * d], b[d:2 * d])),
                               self.split(F.linear(memory, w[2 * d:], b[2 * d:]))))

    def split(self, x):  # [rows, T, d] -> [rows, heads, T, d / heads]
        return x.view(x.shape[0], -1, self.heads, self.d // self.heads).transpose(1, 2)

    def merge(self, x):  # [rows, heads, 1, dh] -> [rows, 1, d]
        return x.transpose(1, 2).reshape(x.shape[0], 1, self.d)

    def self_attention(self, layer, i, h):
        import torch
        import torch.nn.functional as F
        attn = layer.self_attn
        q, k, v = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        k, v = self.split(k), self.split(v)
        if self.cache[i] is not None:
            k = torch.cat([self.cache[i][0], k], dim=2)
            v = torch.cat([self.cache[i][1], v], dim=2)
        self.cache[i] = (k, v)
        return attn.out_proj(self.merge(F.scaled_dot_product_attention(self.split(q), k, v)))

    def cross_attention(self, layer, i, h):
        import torch.nn.functional as F
        attn, d = layer.multihead_attn, self.d
        q = F.linear(h, attn.in_proj_weight[:d], attn.in_proj_bias[:d])
        k, v = self.cross[i]
        return attn.out_proj(self.merge(F.scaled_dot_product_attention(self.split(q), k, v,
                                                                       attn_mask=self.keep)))

    def step(self, tokens, t):
        """tokens [rows] at position t -> logits [rows, vocab]."""
        import torch.nn.functional as F
        model = self.model
        x = model.embed_tokens(tokens[:, None], offset=t)
        for i, layer in enumerate(model.decoder.layers):
            ff = lambda h: layer.linear2(F.relu(layer.linear1(h)))  # noqa: E731
            if model.pre_norm:
                x = x + self.self_attention(layer, i, layer.norm1(x))
                x = x + self.cross_attention(layer, i, layer.norm2(x))
                x = x + ff(layer.norm3(x))
            else:
                x = layer.norm1(x + self.self_attention(layer, i, x))
                x = layer.norm2(x + self.cross_attention(layer, i, x))
                x = layer.norm3(x + ff(x))
        if model.decoder.norm is not None:
            x = model.decoder.norm(x)
        return F.linear(x[:, 0], model.embed.weight)

    def reorder(self, rows, sentence_rows=None):
        """Row r continues old row rows[r]; sentence_rows (when sentences left) selects the
        cross-attention rows of the sentences that stay."""
        self.cache = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cache]
        if sentence_rows is not None:
            self.keep = self.keep.index_select(0, sentence_rows)
            self.cross = [(k.index_select(0, sentence_rows), v.index_select(0, sentence_rows))
                          for k, v in self.cross]


def beam_search(model, src, max_new, beam, alpha=0.6):
    """src [B, S] (PAD-padded) on the device; max_new: per-sentence token limits. Returns, per
    sentence, (tokens without eos, log_prob with eos, score) of the best finished hypothesis.
    Eval mode, no grad; the model's dtype is the compute dtype."""
    import torch
    device, K = src.device, beam
    n = src.shape[0]
    memory, pad = model.encode(src)
    dec = CachedDecoder(model, memory, pad, K)
    vocab = model.embed.weight.shape[0]
    ids = np.arange(n)                      # [b] the original index of each active sentence
    limits = np.asarray(max_new, dtype=np.int64)
    scores = torch.full((n, K), -math.inf, device=device)  # [b, K] live log-probabilities
    scores[:, 0] = 0  # bos alone: the other slots start empty
    tokens = torch.full((n * K,), BOS, dtype=torch.long, device=device)
    history = np.zeros((n * K, 0), dtype=np.int64)  # [b * K, t] tokens of every live row
    best = [None] * n
    fin_best = np.full(n, -math.inf)  # best finished score per sentence
    fin_count = np.zeros(n, dtype=np.int64)
    rank = torch.arange(2 * K, device=device)
    for t in range(int(limits.max()) + 1):
        b = len(ids)
        lp = torch.log_softmax(dec.step(tokens, t).float(), dim=-1).view(b, K, vocab)
        cand = scores[:, :, None] + lp
        forced = t >= limits[ids]  # at the length limit only eos may follow
        if forced.any():
            f = torch.from_numpy(np.nonzero(forced)[0]).to(device)
            eos = cand[f, :, EOS]
            cand[f] = -math.inf
            cand[f, :, EOS] = eos
        top_lp, top = cand.view(b, K * vocab).topk(min(2 * K, K * vocab))
        parent, token = top // vocab, top % vocab
        is_eos = token.eq(EOS)
        # The first K candidates that are not eos (at most K of the 2K are eos: one per parent).
        keep = (rank[:top.shape[1]] + is_eos * (2 * K)).topk(K, largest=False).indices
        next_lp, next_parent, next_token = (x.gather(1, keep) for x in (top_lp, parent, token))
        host = torch.cat([top_lp[:, :K].double(), is_eos[:, :K].double(), parent[:, :K].double(),
                          next_lp.double(), next_parent.double(), next_token.double()], 1).cpu().numpy()
        h_lp, h_eos, h_parent = host[:, :K], host[:, K:2 * K] > 0, host[:, 2 * K:3 * K].astype(np.int64)
        h_next_lp = host[:, 3 * K:4 * K]
        h_next_rows = np.arange(b)[:, None] * K + host[:, 4 * K:5 * K].astype(np.int64)
        for a, r in zip(*np.nonzero(h_eos & np.isfinite(h_lp))):
            score = h_lp[a, r] / length_penalty(t + 1, alpha)
            s = ids[a]
            fin_count[s] += 1
            if score > fin_best[s]:  # a later equal score does not replace the earlier one
                fin_best[s] = score
                best[s] = (history[a * K + h_parent[a, r]].tolist(), float(h_lp[a, r]), score)
        live_bound = h_next_lp.max(axis=1) / length_penalty(limits[ids] + 1, alpha)
        done = forced | (fin_count[ids] >= K) | ((fin_count[ids] > 0) & (live_bound <= fin_best[ids]))
        history = np.concatenate([history[h_next_rows.reshape(-1)],
                                  host[:, 5 * K:].astype(np.int64).reshape(-1, 1)], axis=1)
        stay = np.nonzero(~done)[0]
        if len(stay) == 0:
            break
        rows = (torch.arange(b, device=device)[:, None] * K + next_parent).view(-1)
        sentence_rows = None
        if len(stay) < b:
            stay_t = torch.from_numpy(stay).to(device)
            rows = rows.view(b, K).index_select(0, stay_t).view(-1)
            sentence_rows = (stay_t[:, None] * K + torch.arange(K, device=device)).view(-1)
            next_lp, next_token = next_lp.index_select(0, stay_t), next_token.index_select(0, stay_t)
            history = history.reshape(b, K, -1)[stay].reshape(len(stay) * K, -1)
            ids = ids[stay]
        dec.reorder(rows, sentence_rows)
        scores, tokens = next_lp, next_token.reshape(-1)
    return best


# ---------------------------------------------------------------------------------------------
# Batching, timing, the table

def group_all(order, lengths, limit_of, beam, all_rows):
    """BeamSearch::search's grouping (engine/decode/decode.cpp): in order (longest first), a group
    grows while sentences * beam * max(longest source, its longest prefix) <= all_rows."""
    groups, current, longest = [], [], 0
    for i in order:
        wide = max(longest, lengths[i])
        if current and (len(current) + 1) * beam * max(wide, limit_of(wide) + 1) > all_rows:
            groups.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    if current:
        groups.append(current)
    return groups


def planned_rows(lengths, beams, batches, all_rows, max_positions):
    """The rows bench-decode plans its one model for (real_data.cpp): all_rows, and at least the
    largest fixed batch of the longest sentences at the largest beam."""
    longest = max(lengths + [1])
    max_len = min(max_positions, max(longest, math.floor(1.5 * longest + 10) + 1))
    largest = max([int(b) for b in batches if b != "all"] + [1])
    return max(all_rows, largest * max(beams) * max_len, max(beams) * max_len)


def percentile(values, p):
    """Nearest rank, as decode_rows.cpp."""
    if not values:
        return None
    v = sorted(values)
    return v[min(max(math.ceil(p / 100 * len(v)), 1), len(v)) - 1]


def row_json(beam, batch, sentences, seconds, target_tokens, bleu, latencies, latency_lengths):
    near = [s for s, n in zip(latencies, latency_lengths) if abs(n - LATENCY_TOKENS) <= LATENCY_SLACK]
    ms = lambda x: None if x is None else x * 1e3  # noqa: E731
    seconds_or_tiny = max(seconds, 1e-12)
    return {"beam": beam, "batch": batch, "sentences": sentences, "seconds": seconds,
            "target_tokens": target_tokens, "target_tokens_per_s": target_tokens / seconds_or_tiny,
            "sentences_per_s": sentences / seconds_or_tiny, "bleu": bleu,
            "latency_p50_ms": ms(percentile(latencies, 50)), "latency_p90_ms": ms(percentile(latencies, 90)),
            "latency_30_ms": ms(percentile(near, 50)), "latency_30_sentences": len(near)}


def format_table(title, rows, systems=None):
    """The table of bench-decode (decode_rows.cpp print_table); with `systems`, a first column."""
    cell = lambda v, f="%.2f": "-" if v is None else f % v  # noqa: E731
    head = ("%-7s " % "system" if systems else "") + "%5s %6s %9s %8s %11s %9s %7s %8s %8s %13s" % (
        "beam", "batch", "sentences", "seconds", "tgt tok/s", "sent/s", "BLEU", "p50 ms", "p90 ms",
        "30-tok ms (n)")
    lines = [title, head]
    for k, r in enumerate(rows):
        at30 = cell(r["latency_30_ms"])
        if r["latency_30_ms"] is not None:
            at30 += " (%d)" % r["latency_30_sentences"]
        lines.append(("%-7s " % systems[k] if systems else "") + "%5d %6s %9d %8.3f %11.0f %9.1f %7s %8s %8s %13s" % (
            r["beam"], r["batch"], r["sentences"], r["seconds"], r["target_tokens_per_s"],
            r["sentences_per_s"], cell(r["bleu"]), cell(r["latency_p50_ms"]), cell(r["latency_p90_ms"]), at30))
    return "\n".join(lines)


def compare(paths):
    """Both systems' rows interleaved per (beam, batch), and ours' speed over the other's."""
    docs = [json.load(open(p)) for p in paths]
    rows, systems, ratios = [], [], []
    for r in docs[0]["rows"]:
        for doc in docs:
            match = [x for x in doc["rows"] if (x["beam"], x["batch"]) == (r["beam"], r["batch"])]
            if match:
                rows.append(match[0])
                systems.append(doc["system"])
        other = [x for x in docs[1]["rows"] if (x["beam"], x["batch"]) == (r["beam"], r["batch"])]
        if other and other[0]["target_tokens_per_s"] > 0:
            ratios.append("beam %d batch %s: %.2fx" % (r["beam"], r["batch"], r["target_tokens_per_s"]
                                                        / other[0]["target_tokens_per_s"]))
    title = " vs ".join(d.get("title", d["system"]) for d in docs)
    print(format_table(title, rows, systems))
    print(f"target tokens/s, {docs[0]['system']} / {docs[1]['system']}: " + ", ".join(ratios))


def load_checkpoint_model(path, vocab_override, device, dtype):
    """The twin built from the checkpoint's config (state.json) and loaded with its weights;
    returns (model, sentencepiece processor, max_positions)."""
    import sentencepiece as spm
    import torch
    try:
        state = json.load(open(os.path.join(path, "state.json")))
    except (OSError, ValueError) as e:
        raise SystemExit(f"--checkpoint {path}: cannot read state.json ({e})")
    vocab_path = vocab_override or (state.get("vocab") or {}).get("path")
    if not vocab_path or not os.path.isfile(vocab_path):
        raise SystemExit(f"--checkpoint {path}: vocabulary {vocab_path!r} not found; pass --vocab-file")
    sp = spm.SentencePieceProcessor(model_file=vocab_path)
    m = dict(DEFAULTS["model"])
    m.update({k: v for k, v in state["config"]["model"].items() if k in m})
    if not m["shared_embeddings"]:
        raise SystemExit(f"--checkpoint {path}: the twin ties its embeddings; model.shared_embeddings is false")
    model = build_model(m, sp.get_piece_size())
    load_engine_checkpoint(model, path)
    return model.to(device=device, dtype=dtype).eval(), sp, m["max_positions"]


def run_rows(model, sp, sources, refs, beams, batches, all_rows, latency_sentences, warmup, sync):
    """Every (beam, batch) run: a list of row_json dicts, printing a line per run."""
    import sacrebleu
    import torch
    device = model.embed.weight.device
    max_positions = model.positions.shape[0]
    lengths = [len(s) for s in sources]
    limits = [target_limit(n, max_positions) for n in lengths]
    everything = sorted(range(len(sources)), key=lambda i: -lengths[i])  # stable: longest first
    rows_per_step = planned_rows(lengths, beams, batches, all_rows, max_positions)

    def decode(group, beam):
        if not group:
            return []
        src = torch.full((len(group), max(lengths[i] for i in group)), PAD, dtype=torch.long)
        for row, i in enumerate(group):
            src[row, :lengths[i]] = torch.tensor(sources[i])
        src = src.to(device)
        lim = [limits[i] for i in group]
        if beam == 1:
            return greedy_decode(model, src, lim)
        return [b[0] for b in beam_search(model, src, lim, beam)]

    rows = []
    with torch.inference_mode():
        for beam in beams:
            decode([i for i in range(len(sources)) if lengths[i]][:warmup], beam)
            for batch in batches:
                order = everything
                if batch == "1" and 0 < latency_sentences < len(sources):
                    n = len(sources)
                    picked = [k * n // latency_sentences for k in range(latency_sentences)]
                    order = sorted(picked, key=lambda i: -lengths[i])
                work = [i for i in order if lengths[i]]
                if batch == "all":
                    groups = group_all(work, lengths, lambda n: target_limit(n, max_positions), beam,
                                       rows_per_step)
                else:
                    size = int(batch)
                    groups = [work[k:k + size] for k in range(0, len(work), size)]
                best, seconds, latencies, latency_lengths = {}, 0.0, [], []
                for g in groups:
                    sync()
                    start = time.perf_counter()
                    found = decode(g, beam)
                    sync()
                    took = time.perf_counter() - start
                    seconds += took
                    if batch == "1":
                        latencies.append(took)
                        latency_lengths.append(lengths[g[0]])
                    best.update(zip(g, found))
                hyps = [best.get(i, []) for i in order]
                bleu = None
                if refs is not None:
                    bleu = sacrebleu.corpus_bleu([sp.decode(h) for h in hyps], [[refs[i] for i in order]]).score
                r = row_json(beam, batch, len(order), seconds, sum(len(h) for h in hyps), bleu,
                             latencies, latency_lengths)
                print("  beam %d batch %s: %d sentences in %.3f s, %.0f target tokens/s" % (
                    beam, batch, r["sentences"], seconds, r["target_tokens_per_s"]), flush=True)
                rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="nmt-train's ckpt-<step> folder")
    ap.add_argument("--vocab-file", dest="vocab", help="SentencePiece model (default: the one state.json records)")
    ap.add_argument("--source", help="dev source file, one sentence a line")
    ap.add_argument("--reference", help="its references: BLEU per run (sacreBLEU)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--batches", default="1,32,all")
    ap.add_argument("--all-rows", type=int, default=32768, help="rows per step of the 'all' groups")
    ap.add_argument("--max-sentences", type=int, default=0, help="the first N lines only (0 = all)")
    ap.add_argument("--latency-sentences", type=int, default=0,
                    help="batch-1 runs decode N lines spread over the file (0 = all)")
    ap.add_argument("--warmup-sentences", type=int, default=8)
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--dtype", choices=("bf16", "f32"), help="default: bf16 on cuda, f32 on cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--compare", nargs=2, metavar=("OURS_JSON", "TORCH_JSON"),
                    help="print two JSON files' rows side by side and exit")
    args = ap.parse_args()
    if args.compare:
        return compare(args.compare)
    if not args.checkpoint or not args.source:
        ap.error("--checkpoint and --source are required (or --compare)")
    beams = [int(b) for b in args.beams.split(",")]
    batches = args.batches.split(",")
    for b in batches:
        if b != "all" and not (b.isdigit() and int(b) > 0):
            ap.error(f"--batches: '{b}' is not a batch size (a positive number or 'all')")
    if any(b < 1 for b in beams):
        ap.error("--beams: every beam size must be at least 1")

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype_name = args.dtype or ("bf16" if device.type == "cuda" else "f32")
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model, sp, max_positions = load_checkpoint_model(args.checkpoint, args.vocab, device, dtype)
    if not os.path.isfile(args.source):
        raise SystemExit(f"--source {args.source}: no such file")
    lines = read_lines(args.source)
    if args.max_sentences:
        lines = lines[:args.max_sentences]
    lines = [x[:-1] if x.endswith("\r") else x for x in lines]  # as data/corpus_text.h's TextLines
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    sources = [sp.encode(x)[:max_positions] for x in lines]
    refs = None
    if args.reference:
        refs = [x.rstrip() for x in read_lines(args.reference)]
        if len(refs) < len(sources):
            raise SystemExit(f"--reference {args.reference}: {len(refs)} lines for {len(sources)} source lines")
    print(f"torch_decode: checkpoint {args.checkpoint}, {device.type} {dtype_name}, torch {torch.__version__}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {len(sources)} lines of {args.source}",
          flush=True)
    rows = run_rows(model, sp, sources, refs, beams, batches, args.all_rows, args.latency_sentences,
                    args.warmup_sentences, sync)
    title = f"PyTorch {torch.__version__} (torch_decode.py, KV cache) on {device.type}, {dtype_name}"
    print(format_table(title, rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"system": "torch", "title": title, "device": device.type, "dtype": dtype_name,
                       "checkpoint": args.checkpoint, "source": args.source, "reference": args.reference,
                       "lines": len(sources), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
