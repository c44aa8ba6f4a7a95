#!/usr/bin/env python3
"""sacreBLEU oracle for test_bleu_metrics: builds hypothesis variants of the dev sets in
../shared/data (fixed seed), scores them with sacreBLEU and writes everything the C++ test needs
to compare against into OUT_DIR: the variant files and expected.json.

Usage: python3 test/bleu/sacrebleu_oracle.py --data ../shared/data --out OUT_DIR
Exit code 3 with a message when sacrebleu is missing.
"""

import argparse
import json
import os
import random
import string
import sys

try:
    import sacrebleu
    from sacrebleu.metrics import BLEU, CHRF
except ImportError:
    print("sacrebleu is not installed for python3: run scripts/install-deps.sh "
          "(or python3 -m pip install 'sacrebleu==2.*')", file=sys.stderr)
    sys.exit(3)

# One side of each dev set, and how many of its first lines are scored (test time).
CORPORA = [("bible-en-es", "dev.es"), ("lohelp-en-de", "dev.de"), ("l10n-en-de", "dev.en")]
LINES_PER_CORPUS = 120
TOKENIZERS = ["13a", "intl", "none", "char"]

UNICODE_QUOTES = [("«", "»"), ("„", "“"), ("»", "«"), ("“", "”"), ("‘", "’"), ("‹", "›")]
ACCENTS = {"a": "á", "e": "é", "i": "í", "o": "ö", "u": "ü", "n": "ñ", "c": "ç", "A": "Á",
           "E": "É", "O": "Ø", "s": "ß"}
EXOTIC_WORDS = ["ΟΔΟΣ", "ΣΑΣ.", "Σ", "İstanbul", "ǅemal", "ﬁne", "ΌΣΟΣ'", "straße", "ÆØÅ",
                "Ⅻ", "½", "²", "٣٫١٤", "①", "東京、日本！", "我爱北京。", "😀👍🏽", "e\u0301",
                "zero\u200bwidth", "\ufeffbom", "№5", "§12", "©", "™", "€20", "£", "°C",
                "x\u00b7y", "ʰa", "Ａｂｃ", "ﾊﾝｶｸ"]
SPACES = ["\t", "\u00a0", "\u2009", "\u3000", "\x1c", "\x85", "\u2028", "  ", "\u202f", "\x0b"]
ENTITIES = ["&amp;", "&quot;", "&lt;b&gt;", "<skipped>", "&amp;lt;", "a-\nb", "&nbsp;", "&"]
NUMBERS = ["1,000.50", "1990.", "3-4", "12:30", "$5", "-7", "2.5,", "0.5.", "10-", "1.2.3",
           "3,14", "(42)", "#1", "50%", "1e-3"]


def read_lines(path):
    # As sacreBLEU's command line reads files: split at "\n" only, then rstrip().
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            assert "\n" not in line
            f.write(line + "\n")


def perturb(words, rng):
    words = list(words)
    for _ in range(max(1, len(words) // 6)):
        if not words:
            break
        op = rng.randrange(3)
        i = rng.randrange(len(words))
        if op == 0:
            del words[i]
        elif op == 1 and len(words) > 1:
            j = rng.randrange(len(words))
            words[i], words[j] = words[j], words[i]
        else:
            words.insert(i, words[i])
    return words


def make_variants(refs, vocabulary, rng):
    """name -> hypothesis lines (same count as refs, no newlines inside)."""
    variants = {"identity": list(refs)}
    variants["perturbed"] = [" ".join(perturb(r.split(), rng)) for r in refs]
    variants["lowercased"] = [r.lower() for r in refs]
    variants["uppercased"] = [r.upper() if i % 3 == 0 else r for i, r in enumerate(refs)]
    strip = str.maketrans("", "", string.punctuation + "«»„“”‘’¿¡—…")
    variants["no_punctuation"] = [r.translate(strip) for r in refs]
    variants["empty_lines"] = ["" if i % 5 == 0 else " ".join(perturb(r.split(), rng))
                               for i, r in enumerate(refs)]
    quoted = []
    for r in refs:
        words = r.split()
        if len(words) >= 2:
            left, right = rng.choice(UNICODE_QUOTES)
            words[0] = left + words[0]
            words[-1] = words[-1] + right
            words.insert(rng.randrange(len(words)), rng.choice(["—", "…", "–", "¿", "¡", "·"]))
        quoted.append(" ".join(words) + rng.choice(["", "…", " —", "?!", "»."]))
    variants["unicode_punctuation"] = quoted
    variants["accented"] = ["".join(ACCENTS.get(c, c) if rng.random() < 0.3 else c for c in r) +
                            " " + rng.choice(EXOTIC_WORDS) for r in refs]
    numbered = []
    for r in refs:
        words = r.split()
        for _ in range(2):
            words.insert(rng.randrange(len(words) + 1), rng.choice(NUMBERS))
        numbered.append(" ".join(words))
    variants["numbers"] = numbered
    variants["token_soup"] = [" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(0, 25)))
                              for _ in refs]
    messy = []
    for r in refs:
        words = r.split()
        messy.append("".join(w + rng.choice(SPACES) for w in words) + rng.choice(["", " ", "\r"]))
    variants["whitespace"] = [m.replace("\n", " ") for m in messy]
    variants["entities"] = [(r + " " + rng.choice(ENTITIES)).replace("\n", " ") for r in refs]
    variants["truncated"] = [" ".join(r.split()[: max(0, len(r.split()) // 2)]) for r in refs]
    variants["shuffled"] = rng.sample(list(refs), len(refs))
    variants["short_words"] = [" ".join(r.split()[:3]) for r in refs]
    return variants


def expectation(metric, hyps, ref_streams):
    """What sacreBLEU says for one corpus and metric (references cached in the metric if None)."""
    score = metric.corpus_score(hyps, ref_streams)
    result = {"score": score.score, "signature": str(metric.get_signature()),
              "format": score.format(width=2), "lowercase": metric.lowercase}
    if isinstance(metric, BLEU):
        result.update({"metric": "bleu", "tokenize": metric.tokenizer.signature(),
                       "counts": list(score.counts), "totals": list(score.totals),
                       "precisions": list(score.precisions), "bp": score.bp,
                       "sys_len": score.sys_len, "ref_len": score.ref_len})
    else:
        result.update({"metric": "chrf", "word_order": metric.word_order})
    return result


TRICKY_LINES = [
    "Hello, world! It's 1990. Costs $5.50 (approx.) & more...",
    "He said «bonjour» — „Hallo“ … ok? ‹x› ‚low‘ “double” ‘single’",
    "Ünïcödé façade naïve ΟΔΟΣ ΣΑΣ Σ İstanbul ǅemal ﬁne ß ὈΔΥΣΣΕΎΣ ΑΣ'Α 'ΑΣ Α.Σ ΑΣ.Β",
    "a-b 1-2 3--4 x-\ny <skipped> &amp;lt; &quot;q&quot; &gt; <skip<skipped>ped>",
    "tabs\tand\u00a0nbsp\u2009thin\u3000ideo\x1cfs\x85nel\u2028ls\u2029ps  end   ",
    "1,000.50 and 3.14, 2.5. ok.,. .5 ,5 a.b,c 1.a a.1",
    "math: x+y=z; a<b>c | ~tilde `back` ^caret {brace} [sq] @at #hash %pc *star _u_ \\bs",
    "emoji 😀👍🏽 and ¿qué? ¡sí! «»‹› ٣٫١٤ ½ ² Ⅻ ① 東京、日本！ 我爱北京天安门。",
    "", "   ", ".", "a", "Σ", "ΑΣ", "I.B.M. U.S.A. e.g. etc.", "l'homme d'État aujourd'hui",
    "e\u0301 a\u0308 zero\u200bwidth \ufeffbom", "a..b ..x x.. -- 1990.. $$ 5$ $5.",
]


def code_point_sweep():
    """Lines covering every code point below U+20000 and the tag block, in contexts that exercise
    the intl tokenizer's classes and the lowercase tables."""
    points = [cp for cp in range(0x20000) if not 0xD800 <= cp < 0xE000 and cp != 0x0A]
    points += list(range(0xE0000, 0xE0080))
    lines = []
    for start in range(0, len(points), 4000):
        lines.append("".join("a" + chr(cp) + "1" + chr(cp) + " " for cp in points[start:start + 4000]))
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(20240611)
    expected = {"sacrebleu_version": sacrebleu.__version__, "corpus": [], "sentence": [],
                "tokenize": [], "lower": []}

    sentence_pool = []
    for corpus, filename in CORPORA:
        ref_path = os.path.join(args.data, corpus, filename)
        refs = read_lines(ref_path)[:LINES_PER_CORPUS]
        short_ref_path = os.path.join(args.out, f"{corpus}.ref.txt")
        write_lines(short_ref_path, refs)
        vocabulary = sorted({w for r in refs for w in r.split()}) + list("!?.,;:-()") + ["„", "»"]
        variants = {}
        for name, hyps in make_variants(refs, vocabulary, rng).items():
            hyp_path = os.path.join(args.out, f"{corpus}.{name}.txt")
            write_lines(hyp_path, hyps)
            variants[name] = (hyp_path, read_lines(hyp_path))  # what the C++ reader will see
            sentence_pool += [(h, r) for h, r in zip(variants[name][1][:20], refs[:20])]
        # One metric object per setting, with the references cached (sacreBLEU's fast path).
        metrics = [BLEU(tokenize=t, lowercase=lc, references=[refs])
                   for t in TOKENIZERS for lc in (False, True)]
        metrics += [CHRF(lowercase=False, references=[refs]), CHRF(lowercase=True, references=[refs]),
                    CHRF(word_order=2, references=[refs])]
        for name, (hyp_path, hyps) in variants.items():
            base = {"name": f"{corpus}/{name}", "hyp_file": hyp_path, "ref_files": [short_ref_path]}
            for metric in metrics:
                expected["corpus"].append({**base, **expectation(metric, hyps, None)})
        # Several references: the identity plus a perturbed and an accented copy, scored against
        # the hypotheses with numbers inserted.
        second, third = variants["perturbed"], variants["accented"]
        hyp_path, hyps = variants["numbers"]
        streams = [refs, second[1], third[1]]
        base = {"name": f"{corpus}/multi-ref", "hyp_file": hyp_path,
                "ref_files": [short_ref_path, second[0], third[0]]}
        metrics = [BLEU(tokenize=t) for t in TOKENIZERS] + [CHRF(lowercase=True), CHRF(word_order=2)]
        for metric in metrics:
            expected["corpus"].append({**base, **expectation(metric, hyps, streams)})

    rng.shuffle(sentence_pool)
    sentence_pool = sentence_pool[:300] + [(line, TRICKY_LINES[0]) for line in TRICKY_LINES]
    for i, (hyp, ref) in enumerate(sentence_pool):
        tokenize = TOKENIZERS[i % len(TOKENIZERS)] if i % 2 else "13a"
        metric = BLEU(tokenize=tokenize, effective_order=True)
        score = metric.sentence_score(hyp, [ref])
        expected["sentence"].append({"metric": "bleu", "hyp": hyp, "refs": [ref], "tokenize": tokenize,
                                     "score": score.score, "counts": list(score.counts),
                                     "totals": list(score.totals), "sys_len": score.sys_len,
                                     "ref_len": score.ref_len, "signature": str(metric.get_signature())})
        chrf = CHRF()
        expected["sentence"].append({"metric": "chrf", "hyp": hyp, "refs": [ref],
                                     "score": chrf.sentence_score(hyp, [ref]).score,
                                     "signature": str(chrf.get_signature())})

    for line in TRICKY_LINES:
        for tokenize in TOKENIZERS:
            for lowercase in (False, True):
                tokenizer = BLEU(tokenize=tokenize, lowercase=lowercase)
                expected["tokenize"].append({"line": line, "tokenize": tokenize, "lowercase": lowercase,
                                             "expected": tokenizer._preprocess_segment(line)})
        expected["lower"].append({"line": line, "expected": line.lower()})
    intl = BLEU(tokenize="intl")
    for line in code_point_sweep():
        expected["tokenize"].append({"line": line, "tokenize": "intl", "lowercase": False,
                                     "expected": intl._preprocess_segment(line)})
        expected["lower"].append({"line": line, "expected": line.lower()})

    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
