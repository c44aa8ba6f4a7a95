"""CPU self-checks of bench/torch_decode.py on tiny random models (python3 bench/torch_decode_selftest.py;
ctest test_bench_torch_decode): beam 1 equals the twin's greedy decode, beam 4 finds hypotheses
scoring at least as well as greedy, every reported score equals a full-decoder rescoring of its
tokens, a sentence decodes the same alone and in a batch, and the grouping and table helpers."""
import json
import math
import os
import sys
import tempfile

from torch_decode import (beam_search, compare, format_table, group_all, length_penalty,
                          percentile, row_json)
from torch_nmt_train import BOS, DEFAULTS, EOS, PAD, build_model, greedy_decode, initialize


def rescore(model, src_row, tokens, alpha):
    """(log_prob, score) of bos + tokens + eos under the full (uncached) decoder."""
    import torch
    import torch.nn.functional as F
    src = src_row[src_row.ne(PAD)][None]
    memory, pad = model.encode(src)
    tgt = torch.tensor([[BOS] + tokens])
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    y = model.decoder(model.embed_tokens(tgt), memory, tgt_mask=causal, tgt_is_causal=True,
                      memory_key_padding_mask=pad)
    lp = torch.log_softmax(F.linear(y, model.embed.weight)[0].double(), -1)
    log_prob = sum(lp[j, t].item() for j, t in enumerate(tokens + [EOS]))
    return log_prob, log_prob / length_penalty(len(tokens) + 1, alpha)


def tiny_model(norm, vocab, seed, eos_boost):
    import torch
    torch.manual_seed(seed)
    m = dict(DEFAULTS["model"], encoder_layers=2, decoder_layers=2, d_model=32, num_heads=4,
             ffn_dim=64, norm=norm, max_positions=64)
    model = build_model(m, vocab)
    initialize(model, "xavier", m)
    with torch.no_grad():  # a larger eos row: more hypotheses end before their limit
        model.embed.weight[EOS] *= eos_boost
    return model.eval()


def decoding_checks(check):
    import torch
    for norm, vocab, seed, boost in (("pre", 24, 1, 2.5), ("post", 40, 2, 4.0), ("pre", 300, 3, 3.0)):
        model = tiny_model(norm, vocab, seed, boost)
        lengths = [9, 7, 7, 5, 3, 1, 8, 4]
        src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
        for i, n in enumerate(lengths):
            src[i, :n] = torch.randint(4, vocab, (n,))
        limits = [12, 10, 0, 8, 6, 1, 14, 9]
        name = f"{norm}-norm, vocab {vocab}"
        with torch.inference_mode():
            greedy = greedy_decode(model, src, limits)
            beam1 = beam_search(model, src, limits, 1)
            beam4 = beam_search(model, src, limits, 4)
            alone = [beam_search(model, src[i:i + 1, :lengths[i]], [limits[i]], 4)[0]
                     for i in range(len(lengths))]
        ended = sum(len(g) < lim for g, lim in zip(greedy, limits))
        check([b[0] for b in beam1] == greedy,
              f"{name}: beam 1 = greedy_decode token for token ({ended} of {len(limits)} end on eos)")
        ok, worst, beam_scores, greedy_scores = True, 0.0, [], []
        for i, (tokens, log_prob, score) in enumerate(beam4):
            lp, sc = rescore(model, src[i], tokens, 0.6)
            ok &= len(tokens) <= limits[i] and abs(lp - log_prob) < 1e-4 and abs(sc - score) < 1e-4
            worst = max(worst, abs(lp - log_prob))
            beam_scores.append(score)
            greedy_scores.append(rescore(model, src[i], greedy[i], 0.6)[1])
        check(ok, f"{name}: beam 4 scores = full-decoder rescoring of its tokens (max diff "
              f"{worst:.1e}), within the limits")
        # Beam search may prune greedy's path (a search error, not a bug): it must do at least as
        # well on all but one sentence, and in total.
        worse = sum(b < g - 1e-5 for b, g in zip(beam_scores, greedy_scores))
        better = sum(b > g + 1e-5 for b, g in zip(beam_scores, greedy_scores))
        check(worse <= 1 and sum(beam_scores) >= sum(greedy_scores),
              f"{name}: beam 4 scores >= greedy's: {better} better, {worse} worse of {len(limits)}, "
              f"total {sum(beam_scores):.3f} vs {sum(greedy_scores):.3f}")
        same = all(a[0] == b[0] and abs(a[2] - b[2]) < 1e-4 for a, b in zip(alone, beam4))
        check(same, f"{name}: beam 4 in a batch (sentences leaving as they finish) = each alone")


def helper_checks(check):
    lengths = {0: 30, 1: 20, 2: 20, 3: 10, 4: 5}
    limit_of = lambda n: math.floor(1.5 * n + 10)  # noqa: E731
    groups = group_all([0, 1, 2, 3, 4], lengths, limit_of, 4, 600)
    fits = all(len(g) * 4 * max(lengths[g[0]], limit_of(lengths[g[0]]) + 1) <= 600 or len(g) == 1
               for g in groups)
    check(sum(groups, []) == [0, 1, 2, 3, 4] and fits and len(groups) > 1,
          f"'all' groups keep sentences * beam * widest <= rows, in order: {groups}")
    check(percentile([], 50) is None and percentile([3, 1, 2], 50) == 2 and
          percentile(list(range(1, 11)), 90) == 9, "nearest-rank percentiles")
    r = row_json(4, "1", 3, 2.0, 100, 12.5, [0.01, 0.02, 0.04], [30, 31, 12])
    check(r["target_tokens_per_s"] == 50 and r["sentences_per_s"] == 1.5 and
          abs(r["latency_30_ms"] - 10) < 1e-9 and r["latency_30_sentences"] == 2 and
          abs(r["latency_p90_ms"] - 40) < 1e-9, "row: rates, p90, the 30 +- 2 token latency")
    other = dict(r, target_tokens_per_s=25.0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"{s}.json") for s in ("ours", "torch")]
        for path, system, row in zip(paths, ("ours", "torch"), (r, other)):
            with open(path, "w") as f:
                json.dump({"system": system, "rows": [row]}, f)
        compare(paths)  # prints; must not fail
    check("12.50" in format_table("t", [r]), "table")


def self_test():
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed for python3")
        return 77
    torch.set_num_threads(1)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    decoding_checks(check)
    helper_checks(check)
    print("self-test: " + ("all passed" if not failures else f"{len(failures)} FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test())
