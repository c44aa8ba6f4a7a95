#!/usr/bin/env python3
"""Greedy translation with a CTranslate2 model under nmt-translate's rules, for the round-trip test.

usage: ct2_translate.py --model CT2_DIR --input FILE --output FILE [--max-len-a 1.5]
                        [--max-len-b 10] [--max-positions N]

Each line is encoded to ids with the SentencePiece model the conversion copied (the ids are passed
as their pieces, which the converted vocabulary maps back to the same ids), translated with beam 1
and a maximum length of floor(a * source tokens + b) target tokens (at most max_positions - 1, as
nmt-translate's plan allows), and decoded from ids with <pad>, <s> and </s> dropped, as
nmt-translate's Vocab::decode does. Sentences of equal length share a batch (one length limit per
call). Empty lines stay empty without running the model. Exit 0, or 2 when ctranslate2 or
sentencepiece is missing.
"""
import argparse
import math
import os
import sys

PAD, BOS, EOS = 0, 2, 3  # data/special_ids.h


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--max-len-a", type=float, default=1.5)
    parser.add_argument("--max-len-b", type=float, default=10)
    parser.add_argument("--max-positions", type=int, default=1024)
    args = parser.parse_args()
    try:
        import ctranslate2
        import sentencepiece
    except ImportError as e:
        print(f"ct2_translate.py: {e}", file=sys.stderr)
        return 2

    sp = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(args.model, "sentencepiece.model"))
    translator = ctranslate2.Translator(args.model, device="cpu", inter_threads=1,
                                       intra_threads=2)
    with open(args.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n").rstrip("\r") for line in f]
    sources = [sp.encode(line) for line in lines]
    outputs = [""] * len(lines)
    by_length = {}
    for i, ids in enumerate(sources):
        if ids:
            by_length.setdefault(len(ids), []).append(i)
    for length, indices in sorted(by_length.items()):
        limit = math.floor(args.max_len_a * length + args.max_len_b)
        limit = min(limit, args.max_positions - 1)
        batch = [[sp.id_to_piece(t) for t in sources[i]] for i in indices]
        results = translator.translate_batch(batch, beam_size=1, max_decoding_length=limit,
                                             max_input_length=0)
        for i, result in zip(indices, results):
            ids = [sp.piece_to_id(p) for p in result.hypotheses[0]]
            outputs[i] = sp.decode([t for t in ids if t not in (PAD, BOS, EOS)])
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
