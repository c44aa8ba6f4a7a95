#!/usr/bin/env python3
"""Builds the English-Spanish Bible corpus from two SWORD modules exported with mod2imp.

Usage: bible_corpus.py ENGLISH.imp SPANISH.imp OUT_DIR

Verses are paired by reference (book chapter:verse), markup, notes and Strong's numbers removed,
drop capitals normalised ("EN el principio" -> "En el principio"). The Reina-Valera 1909 divides a
few chapters differently from the World English Bible; pairing by reference misaligns those, so
the chapters known to differ are left out and pairs whose length ratio (es+10)/(en+10) falls outside
[0.5, 2] are dropped (a simpler alignment than the one behind ../shared/data, good enough for a
demo corpus). Split: dev = John, test = Acts, train = every other book. Writes OUT_DIR/{train,dev,
test}.{en,es} and prints the counts.
"""
import html
import re
import sys
from pathlib import Path

# Chapters whose verse division differs between the two versions (../shared/data/README.md).
DIVERGENT = {("Numbers", 13), ("Numbers", 30), ("I Samuel", 24), ("1 Samuel", 24), ("Job", 39),
             ("Job", 40), ("Job", 41), ("Jonah", 2)}
NOTE = re.compile(r"<note\b.*?</note>", re.S)
TITLE = re.compile(r"<title\b.*?</title>", re.S)
TAG = re.compile(r"<[^>]+>")
SPACE = re.compile(r"\s+")
KEY = re.compile(r"^\$\$\$(.+?) (\d+):(\d+)$")


def clean(text):
    text = TITLE.sub(" ", NOTE.sub(" ", text))
    text = html.unescape(TAG.sub(" ", text))
    text = SPACE.sub(" ", text).strip()
    text = re.sub(r"\s+([,.;:!?»”’)])", r"\1", text)
    first, _, rest = text.partition(" ")
    if len(first) > 1 and first.isupper() and rest and not rest.split(" ")[0].isupper():
        text = first[0] + first[1:].lower() + " " + rest  # a drop capital, not an acronym
    return text


def read_imp(path):
    verses, key, lines = {}, None, []
    def flush():
        if key and key[2] > 0:
            verse = clean(" ".join(lines))
            if verse:
                verses[key] = verse
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("$$$"):
                flush()
                m = KEY.match(line)
                key = (m.group(1), int(m.group(2)), int(m.group(3))) if m else None
                lines = []
            else:
                lines.append(line)
    flush()
    return verses


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    english, spanish, out = read_imp(sys.argv[1]), read_imp(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": ([], []), "dev": ([], []), "test": ([], [])}
    dropped = {"divergent chapter": 0, "length ratio": 0, "missing on one side": 0}
    for key, en in english.items():
        book, chapter, _ = key
        es = spanish.get(key)
        if es is None:
            dropped["missing on one side"] += 1
            continue
        if (book, chapter) in DIVERGENT:
            dropped["divergent chapter"] += 1
            continue
        ratio = (len(es.split()) + 10) / (len(en.split()) + 10)
        if not 0.5 <= ratio <= 2:
            dropped["length ratio"] += 1
            continue
        split = "dev" if book == "John" else "test" if book == "Acts" else "train"
        splits[split][0].append(en)
        splits[split][1].append(es)
    for name, (en, es) in splits.items():
        (out / f"{name}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (out / f"{name}.es").write_text("\n".join(es) + "\n", encoding="utf-8")
        print(f"{name}: {len(en)} pairs")
    print("dropped: " + ", ".join(f"{k} {v}" for k, v in dropped.items()))


if __name__ == "__main__":
    main()
